"""Every SQL statement of Identity. Callers pass the database time (`now_ms`) they read once
per use case, so one use case sees one instant."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, case, func, insert, select, update
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncSession

from nexus.identity import models as m


def _json(values: Sequence[str]) -> str:
    return json.dumps(sorted(set(values)))


class IdentityRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    # ------------------------------------------------------------------ orgs
    async def insert_org(self, *, org_id: str, name: str, now_ms: int) -> None:
        await self.session.execute(
            insert(m.org).values(org_id=org_id, name=name, security_epoch=1, created_at_ms=now_ms)
        )

    async def first_org(self) -> RowMapping | None:
        result = await self.session.execute(select(m.org).order_by(m.org.c.created_at_ms).limit(1))
        return result.mappings().first()

    async def org(self, org_id: str) -> RowMapping | None:
        result = await self.session.execute(select(m.org).where(m.org.c.org_id == org_id))
        return result.mappings().first()

    async def security_epochs(self) -> dict[str, int]:
        result = await self.session.execute(select(m.org.c.org_id, m.org.c.security_epoch))
        return {row.org_id: int(row.security_epoch) for row in result}

    async def advance_security_epoch(self, org_id: str) -> int:
        """Atomically advance the org's SecurityEpoch; returns the new value."""
        await self.session.execute(
            update(m.org)
            .where(m.org.c.org_id == org_id)
            .values(security_epoch=m.org.c.security_epoch + 1)
        )
        result = await self.session.execute(
            select(m.org.c.security_epoch).where(m.org.c.org_id == org_id)
        )
        return int(result.scalar_one())

    async def advance_security_epoch_if_org(self, org_id: str) -> int | None:
        if await self.org(org_id) is None:
            return None
        return await self.advance_security_epoch(org_id)

    # ------------------------------------------------------------------ users
    async def count_users(self) -> int:
        return int(
            (await self.session.execute(select(func.count()).select_from(m.user))).scalar_one()
        )

    async def insert_user(self, **values: Any) -> None:
        await self.session.execute(insert(m.user).values(**values))

    async def user_by_username(self, username: str) -> RowMapping | None:
        result = await self.session.execute(
            select(m.user).where(m.user.c.username == username.strip().lower())
        )
        return result.mappings().first()

    async def user(self, org_id: str, user_id: str) -> RowMapping | None:
        result = await self.session.execute(
            select(m.user).where(m.user.c.org_id == org_id, m.user.c.user_id == user_id)
        )
        return result.mappings().first()

    async def record_login_failure(
        self, *, org_id: str, user_id: str, max_failures: int, lock_until_ms: int, now_ms: int
    ) -> None:
        """Count a failure; the failure that reaches the limit also locks the account.

        The lock is assigned before the count: MySQL and MariaDB evaluate a single-table
        UPDATE's assignments left to right, each seeing the columns already assigned, so a
        count assigned first would lock one failure early there (SQLite: the old values)."""
        failures = m.user.c.failed_logins + 1
        await self.session.execute(
            update(m.user)
            .where(m.user.c.org_id == org_id, m.user.c.user_id == user_id)
            .ordered_values(
                (m.user.c.locked_until_ms, _case_lock(failures, max_failures, lock_until_ms)),
                (m.user.c.failed_logins, failures),
                (m.user.c.updated_at_ms, now_ms),
            )
        )

    async def record_login_success(self, *, org_id: str, user_id: str, now_ms: int) -> None:
        await self.session.execute(
            update(m.user)
            .where(m.user.c.org_id == org_id, m.user.c.user_id == user_id)
            .values(failed_logins=0, locked_until_ms=None, last_login_ms=now_ms)
        )

    async def set_user_active(self, *, org_id: str, user_id: str, active: bool, now_ms: int) -> int:
        result = await self.session.execute(
            update(m.user)
            .where(m.user.c.org_id == org_id, m.user.c.user_id == user_id)
            .values(is_active=active, updated_at_ms=now_ms)
        )
        return int(result.rowcount)  # type: ignore[attr-defined]  # CursorResult

    async def users(self, org_id: str) -> list[RowMapping]:
        """The org's users (what an administrator lists; never a password hash), by username."""
        u = m.user.c
        result = await self.session.execute(
            select(
                u.user_id, u.username, u.email, u.display_name, u.is_active, u.is_admin, u.role_id
            )
            .where(u.org_id == org_id)
            .order_by(u.username)
        )
        return list(result.mappings())

    async def set_password(
        self, *, org_id: str, user_id: str, password_hash: str, now_ms: int
    ) -> int:
        """A new password hash; failed sign-ins and any lockout are forgotten."""
        result = await self.session.execute(
            update(m.user)
            .where(m.user.c.org_id == org_id, m.user.c.user_id == user_id)
            .values(
                password_hash=password_hash,
                failed_logins=0,
                locked_until_ms=None,
                updated_at_ms=now_ms,
            )
        )
        return int(result.rowcount)  # type: ignore[attr-defined]  # CursorResult

    async def set_user_role(
        self, *, org_id: str, user_id: str, role_id: str | None, now_ms: int
    ) -> int:
        result = await self.session.execute(
            update(m.user)
            .where(m.user.c.org_id == org_id, m.user.c.user_id == user_id)
            .values(role_id=role_id, updated_at_ms=now_ms)
        )
        return int(result.rowcount)  # type: ignore[attr-defined]  # CursorResult

    async def users_in_roles(self, org_id: str, role_ids: Sequence[str]) -> set[str]:
        result = await self.session.execute(
            select(m.user.c.user_id).where(
                m.user.c.org_id == org_id, m.user.c.role_id.in_(role_ids)
            )
        )
        return {str(user_id) for user_id in result.scalars()}

    # ------------------------------------------------------------------ clients
    async def insert_client(
        self,
        *,
        org_id: str,
        client_id: str,
        name: str,
        secret_hash: str | None,
        redirect_uris: Sequence[str],
        grant_types: Sequence[str],
        scopes: Sequence[str],
        run_as_user_id: str | None,
        now_ms: int,
    ) -> None:
        await self.session.execute(
            insert(m.client).values(
                org_id=org_id,
                client_id=client_id,
                name=name,
                secret_hash=secret_hash,
                redirect_uris=json.dumps(list(redirect_uris)),
                grant_types=_json(grant_types),
                scopes=_json(scopes),
                run_as_user_id=run_as_user_id,
                is_enabled=True,
                created_at_ms=now_ms,
            )
        )

    async def set_client_redirect_uris(
        self, *, client_id: str, redirect_uris: Sequence[str]
    ) -> int:
        result = await self.session.execute(
            update(m.client)
            .where(m.client.c.client_id == client_id)
            .values(redirect_uris=json.dumps(list(redirect_uris)))
        )
        return int(result.rowcount)  # type: ignore[attr-defined]  # CursorResult

    async def set_client_scopes(self, *, client_id: str, scopes: Sequence[str]) -> int:
        result = await self.session.execute(
            update(m.client)
            .where(m.client.c.client_id == client_id)
            .values(scopes=json.dumps(list(scopes)))
        )
        return int(result.rowcount)  # type: ignore[attr-defined]  # CursorResult

    async def client(self, client_id: str) -> RowMapping | None:
        result = await self.session.execute(
            select(m.client).where(m.client.c.client_id == client_id)
        )
        return result.mappings().first()

    async def clients(self, org_id: str) -> list[RowMapping]:
        result = await self.session.execute(
            select(m.client).where(m.client.c.org_id == org_id).order_by(m.client.c.created_at_ms)
        )
        return list(result.mappings())

    async def disable_client(self, *, org_id: str, client_id: str, now_ms: int) -> int:
        result = await self.session.execute(
            update(m.client)
            .where(m.client.c.org_id == org_id, m.client.c.client_id == client_id)
            .values(is_enabled=False, disabled_at_ms=now_ms)
        )
        return int(result.rowcount)  # type: ignore[attr-defined]  # CursorResult

    # ------------------------------------------------------------------ sessions
    async def insert_session(self, **values: Any) -> None:
        await self.session.execute(insert(m.session).values(**values))

    async def session_state(self, org_id: str, session_id: str) -> RowMapping | None:
        """A session joined to what can invalidate it: its user and its client."""
        stmt = (
            select(
                m.session.c.session_id,
                m.session.c.user_id,
                m.session.c.client_id,
                m.session.c.scopes,
                m.session.c.expires_at_ms,
                m.session.c.revoked_at_ms,
                m.user.c.is_active.label("user_active"),
                m.client.c.is_enabled.label("client_enabled"),
                m.org.c.security_epoch,
            )
            .select_from(
                m.session.join(
                    m.user,
                    and_(
                        m.user.c.org_id == m.session.c.org_id,
                        m.user.c.user_id == m.session.c.user_id,
                    ),
                )
                .join(m.org, m.org.c.org_id == m.session.c.org_id)
                .outerjoin(
                    m.client,
                    and_(
                        m.client.c.org_id == m.session.c.org_id,
                        m.client.c.client_id == m.session.c.client_id,
                    ),
                )
            )
            .where(m.session.c.org_id == org_id, m.session.c.session_id == session_id)
        )
        return (await self.session.execute(stmt)).mappings().first()

    async def revoke_sessions(
        self,
        *,
        org_id: str,
        reason: str,
        now_ms: int,
        session_id: str | None = None,
        user_id: str | None = None,
        client_id: str | None = None,
    ) -> int:
        scope = [m.session.c.org_id == org_id]
        for column, value in (
            ("session_id", session_id),
            ("user_id", user_id),
            ("client_id", client_id),
        ):
            if value is not None:
                scope.append(m.session.c[column] == value)
        result = await self.session.execute(
            update(m.session)
            .where(*scope, m.session.c.revoked_at_ms.is_(None))
            .values(revoked_at_ms=now_ms, revoke_reason=reason)
        )
        await self.session.execute(
            update(m.refresh_token)
            .where(
                m.refresh_token.c.org_id == org_id,
                m.refresh_token.c.status == "active",
                m.refresh_token.c.session_id.in_(select(m.session.c.session_id).where(*scope)),
            )
            .values(status="revoked")
        )
        return int(result.rowcount)  # type: ignore[attr-defined]  # CursorResult

    # ------------------------------------------------------------------ refresh tokens
    async def live_sessions(
        self, org_id: str, user_id: str, *, now_ms: int, limit: int
    ) -> list[RowMapping]:
        """A user's sessions that are neither revoked nor expired, newest first (no tokens)."""
        s = m.session.c
        result = await self.session.execute(
            select(s.session_id, s.client_id, s.auth_method, s.created_at_ms, s.expires_at_ms)
            .where(
                s.org_id == org_id,
                s.user_id == user_id,
                s.revoked_at_ms.is_(None),
                s.expires_at_ms > now_ms,
            )
            .order_by(s.created_at_ms.desc())
            .limit(limit)
        )
        return list(result.mappings())

    async def insert_refresh_token(
        self, *, org_id: str, token_hash: str, session_id: str, now_ms: int, expires_at_ms: int
    ) -> None:
        await self.session.execute(
            insert(m.refresh_token).values(
                org_id=org_id,
                token_hash=token_hash,
                session_id=session_id,
                status="active",
                created_at_ms=now_ms,
                expires_at_ms=expires_at_ms,
            )
        )

    async def refresh_token(self, token_hash: str) -> RowMapping | None:
        result = await self.session.execute(
            select(m.refresh_token).where(m.refresh_token.c.token_hash == token_hash)
        )
        return result.mappings().first()

    async def rotate_refresh_token(self, *, org_id: str, token_hash: str, now_ms: int) -> bool:
        """CAS active -> rotated; False when another request rotated it first."""
        result = await self.session.execute(
            update(m.refresh_token)
            .where(
                m.refresh_token.c.org_id == org_id,
                m.refresh_token.c.token_hash == token_hash,
                m.refresh_token.c.status == "active",
            )
            .values(status="rotated", rotated_at_ms=now_ms)
        )
        return int(result.rowcount) == 1  # type: ignore[attr-defined]  # CursorResult

    # ------------------------------------------------------------------ authorization codes
    async def insert_authorization_code(self, **values: Any) -> None:
        await self.session.execute(insert(m.authorization_code).values(**values))

    async def authorization_code(self, code_hash: str) -> RowMapping | None:
        result = await self.session.execute(
            select(m.authorization_code).where(m.authorization_code.c.code_hash == code_hash)
        )
        return result.mappings().first()

    async def nonce_used(self, client_id: str, nonce: str) -> bool:
        result = await self.session.execute(
            select(m.authorization_code.c.code_hash)
            .where(
                m.authorization_code.c.client_id == client_id,
                m.authorization_code.c.nonce == nonce,
            )
            .limit(1)
        )
        return result.first() is not None

    async def use_authorization_code(
        self, *, org_id: str, code_hash: str, now_ms: int, session_id: str | None
    ) -> bool:
        """CAS unused -> used: a code is redeemed at most once; it remembers the session its
        redemption opened."""
        result = await self.session.execute(
            update(m.authorization_code)
            .where(
                m.authorization_code.c.org_id == org_id,
                m.authorization_code.c.code_hash == code_hash,
                m.authorization_code.c.used_at_ms.is_(None),
            )
            .values(used_at_ms=now_ms, session_id=session_id)
        )
        return int(result.rowcount) == 1  # type: ignore[attr-defined]  # CursorResult

    # ------------------------------------------------------------------ roles
    async def insert_role(self, **values: Any) -> None:
        await self.session.execute(insert(m.role).values(**values))

    async def role_names(self, org_id: str) -> set[str]:
        result = await self.session.execute(select(m.role.c.name).where(m.role.c.org_id == org_id))
        return {str(name) for name in result.scalars()}

    async def roles(self, org_id: str) -> list[RowMapping]:
        """The org's role hierarchy: role_id, name, parent_role_id."""
        r = m.role.c
        result = await self.session.execute(
            select(r.role_id, r.name, r.parent_role_id).where(r.org_id == org_id)
        )
        return list(result.mappings())

    async def role_by_name(self, org_id: str, name: str) -> RowMapping | None:
        result = await self.session.execute(
            select(m.role).where(m.role.c.org_id == org_id, m.role.c.name == name)
        )
        return result.mappings().first()


def _case_lock(failures: Any, max_failures: int, lock_until_ms: int) -> Any:
    return case((failures >= max_failures, lock_until_ms), else_=m.user.c.locked_until_ms)

"""runtime: identity tables (orgs, roles, users, OAuth clients, sessions, refresh tokens,
authorization codes).

Revision ID: runtime_0002
Revises: runtime_0001
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "runtime_0002"
down_revision: str | None = "runtime_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _id(name: str, **kw: object) -> sa.Column:
    return sa.Column(name, sa.String(18), **kw)


def _org_fk(name: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(["org_id"], ["identity_org.org_id"], name=name)


def upgrade() -> None:
    op.create_table(
        "identity_org",
        _id("org_id", primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("security_epoch", sa.BigInteger, nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "identity_role",
        _id("org_id", primary_key=True),
        _id("role_id", primary_key=True),
        sa.Column("name", sa.String(80), nullable=False),
        _id("parent_role_id", nullable=True),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        _org_fk("fk_role_org"),
        sa.UniqueConstraint("org_id", "name", name="uq_role_name"),
    )
    op.create_table(
        "identity_user",
        _id("org_id", primary_key=True),
        _id("user_id", primary_key=True),
        sa.Column("username", sa.String(255), nullable=False),
        sa.Column("email", sa.String(255), nullable=False),
        sa.Column("display_name", sa.String(255), nullable=False),
        sa.Column("is_active", sa.Boolean, nullable=False),
        sa.Column("is_admin", sa.Boolean, nullable=False),
        sa.Column("locale", sa.String(20), nullable=False),
        sa.Column("time_zone", sa.String(64), nullable=False),
        _id("role_id", nullable=True),
        sa.Column("password_hash", sa.String(255), nullable=True),
        sa.Column("failed_logins", sa.Integer, nullable=False),
        sa.Column("locked_until_ms", sa.BigInteger, nullable=True),
        sa.Column("last_login_ms", sa.BigInteger, nullable=True),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
        _org_fk("fk_user_org"),
        sa.UniqueConstraint("username", name="uq_user_username"),
    )
    op.create_table(
        "identity_client",
        _id("org_id", primary_key=True),
        sa.Column("client_id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=True),
        sa.Column("redirect_uris", sa.Text, nullable=False),
        sa.Column("grant_types", sa.Text, nullable=False),
        sa.Column("scopes", sa.Text, nullable=False),
        _id("run_as_user_id", nullable=True),
        sa.Column("is_enabled", sa.Boolean, nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("disabled_at_ms", sa.BigInteger, nullable=True),
        _org_fk("fk_client_org"),
        sa.UniqueConstraint("client_id", name="uq_client_id"),
    )
    op.create_table(
        "identity_session",
        _id("org_id", primary_key=True),
        _id("session_id", primary_key=True),
        _id("user_id", nullable=False),
        sa.Column("client_id", sa.String(64), nullable=True),
        sa.Column("scopes", sa.String(255), nullable=False),
        sa.Column("auth_method", sa.String(32), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger, nullable=False),
        sa.Column("revoked_at_ms", sa.BigInteger, nullable=True),
        sa.Column("revoke_reason", sa.String(64), nullable=True),
        _org_fk("fk_session_org"),
    )
    op.create_index("ix_session_user", "identity_session", ["org_id", "user_id"])
    op.create_index("ix_session_client", "identity_session", ["org_id", "client_id"])
    op.create_table(
        "identity_refresh_token",
        _id("org_id", primary_key=True),
        sa.Column("token_hash", sa.String(64), primary_key=True),
        _id("session_id", nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger, nullable=False),
        sa.Column("rotated_at_ms", sa.BigInteger, nullable=True),
        _org_fk("fk_refresh_org"),
        sa.UniqueConstraint("token_hash", name="uq_refresh_token_hash"),
    )
    op.create_index("ix_refresh_session", "identity_refresh_token", ["org_id", "session_id"])
    op.create_table(
        "identity_authorization_code",
        _id("org_id", primary_key=True),
        sa.Column("code_hash", sa.String(64), primary_key=True),
        sa.Column("client_id", sa.String(64), nullable=False),
        _id("user_id", nullable=False),
        sa.Column("redirect_uri", sa.Text, nullable=False),
        sa.Column("scope", sa.String(255), nullable=False),
        sa.Column("code_challenge", sa.String(128), nullable=True),
        sa.Column("code_challenge_method", sa.String(16), nullable=True),
        sa.Column("nonce", sa.String(255), nullable=True),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger, nullable=False),
        sa.Column("used_at_ms", sa.BigInteger, nullable=True),
        _org_fk("fk_code_org"),
        sa.UniqueConstraint("code_hash", name="uq_authorization_code_hash"),
    )


def downgrade() -> None:
    for table in (
        "identity_authorization_code",
        "identity_refresh_token",
        "identity_session",
        "identity_client",
        "identity_user",
        "identity_role",
        "identity_org",
    ):
        op.drop_table(table)

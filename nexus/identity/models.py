"""Identity tables (in the Runtime database). Every key starts with `org_id`.

Times are integer epoch milliseconds written from the database clock (`db_now_ms`).
Secrets are never stored: passwords as argon2 hashes, client secrets, refresh tokens and
authorization codes as SHA-256 digests.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

ID = 18  # Salesforce-style ids


def _id(name: str, **kw: object) -> Column[str]:
    return Column(name, String(ID), **kw)  # type: ignore[arg-type]


org = Table(
    "identity_org",
    metadata,
    _id("org_id", primary_key=True),
    Column("name", String(255), nullable=False),
    Column("security_epoch", BigInteger, nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
)

role = Table(
    "identity_role",
    metadata,
    _id("org_id", primary_key=True),
    _id("role_id", primary_key=True),
    Column("name", String(80), nullable=False),
    _id("parent_role_id", nullable=True),
    Column("created_at_ms", BigInteger, nullable=False),
    ForeignKeyConstraint(["org_id"], ["identity_org.org_id"], name="fk_role_org"),
    UniqueConstraint("org_id", "name", name="uq_role_name"),
)

user = Table(
    "identity_user",
    metadata,
    _id("org_id", primary_key=True),
    _id("user_id", primary_key=True),
    Column("username", String(255), nullable=False),
    Column("email", String(255), nullable=False),
    Column("display_name", String(255), nullable=False),
    Column("is_active", Boolean, nullable=False),
    Column("is_admin", Boolean, nullable=False),
    Column("locale", String(20), nullable=False),
    Column("time_zone", String(64), nullable=False),
    _id("role_id", nullable=True),
    Column("password_hash", String(255), nullable=True),
    Column("failed_logins", Integer, nullable=False),
    Column("locked_until_ms", BigInteger, nullable=True),
    Column("last_login_ms", BigInteger, nullable=True),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    ForeignKeyConstraint(["org_id"], ["identity_org.org_id"], name="fk_user_org"),
    UniqueConstraint("username", name="uq_user_username"),
)

client = Table(
    "identity_client",
    metadata,
    _id("org_id", primary_key=True),
    Column("client_id", String(64), primary_key=True),
    Column("name", String(255), nullable=False),
    Column("secret_hash", String(64), nullable=True),  # None: a public client (PKCE required)
    Column("redirect_uris", Text, nullable=False),  # JSON list, exact match
    Column("grant_types", Text, nullable=False),  # JSON list
    Column("scopes", Text, nullable=False),  # JSON list
    _id("run_as_user_id", nullable=True),
    Column("is_enabled", Boolean, nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("disabled_at_ms", BigInteger, nullable=True),
    ForeignKeyConstraint(["org_id"], ["identity_org.org_id"], name="fk_client_org"),
    UniqueConstraint("client_id", name="uq_client_id"),
)

session = Table(
    "identity_session",
    metadata,
    _id("org_id", primary_key=True),
    _id("session_id", primary_key=True),
    _id("user_id", nullable=False),
    Column("client_id", String(64), nullable=True),
    Column("scopes", String(255), nullable=False),
    Column("auth_method", String(32), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("expires_at_ms", BigInteger, nullable=False),
    Column("revoked_at_ms", BigInteger, nullable=True),
    Column("revoke_reason", String(64), nullable=True),
    ForeignKeyConstraint(["org_id"], ["identity_org.org_id"], name="fk_session_org"),
    Index("ix_session_user", "org_id", "user_id"),
    Index("ix_session_client", "org_id", "client_id"),
)

refresh_token = Table(
    "identity_refresh_token",
    metadata,
    _id("org_id", primary_key=True),
    Column("token_hash", String(64), primary_key=True),
    _id("session_id", nullable=False),
    Column("status", String(16), nullable=False),  # active | rotated | revoked
    Column("created_at_ms", BigInteger, nullable=False),
    Column("expires_at_ms", BigInteger, nullable=False),
    Column("rotated_at_ms", BigInteger, nullable=True),
    ForeignKeyConstraint(["org_id"], ["identity_org.org_id"], name="fk_refresh_org"),
    UniqueConstraint("token_hash", name="uq_refresh_token_hash"),
    Index("ix_refresh_session", "org_id", "session_id"),
)

authorization_code = Table(
    "identity_authorization_code",
    metadata,
    _id("org_id", primary_key=True),
    Column("code_hash", String(64), primary_key=True),
    Column("client_id", String(64), nullable=False),
    _id("user_id", nullable=False),
    Column("redirect_uri", Text, nullable=False),
    Column("scope", String(255), nullable=False),
    Column("code_challenge", String(128), nullable=True),
    Column("code_challenge_method", String(16), nullable=True),
    Column("nonce", String(255), nullable=True),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("expires_at_ms", BigInteger, nullable=False),
    Column("used_at_ms", BigInteger, nullable=True),
    _id("session_id", nullable=True),  # the session its redemption opened (replay revokes it)
    ForeignKeyConstraint(["org_id"], ["identity_org.org_id"], name="fk_code_org"),
    UniqueConstraint("code_hash", name="uq_authorization_code_hash"),
)

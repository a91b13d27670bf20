"""Password hashing with argon2id (memory-hard), and a constant-shape check for unknown users.

`verify_password(None, ...)` still runs one argon2 verification against a fixed dummy hash,
so an unknown username costs the same time as a wrong password (no user enumeration).
"""

from __future__ import annotations

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

MIN_PASSWORD_LENGTH = 12
MAX_PASSWORD_LENGTH = 1024

_hasher = PasswordHasher()  # argon2id, RFC 9106 low-memory profile defaults
_DUMMY_HASH = _hasher.hash("nexus-dummy-password-for-timing")


class WeakPassword(ValueError):
    """The password does not meet the policy; the message says why (never the password)."""


def check_policy(password: str) -> None:
    if len(password) < MIN_PASSWORD_LENGTH:
        raise WeakPassword(f"a password needs at least {MIN_PASSWORD_LENGTH} characters")
    if len(password) > MAX_PASSWORD_LENGTH:
        raise WeakPassword(f"a password has at most {MAX_PASSWORD_LENGTH} characters")
    if password.strip() != password or len(set(password)) < 4:
        raise WeakPassword("a password cannot be padded with spaces or repeat one character")


def hash_password(password: str) -> str:
    check_policy(password)
    return _hasher.hash(password)


def verify_password(stored_hash: str | None, password: str) -> bool:
    """True when the password matches; always does one argon2 verification."""
    candidate = password[:MAX_PASSWORD_LENGTH]
    try:
        return _hasher.verify(stored_hash or _DUMMY_HASH, candidate) and stored_hash is not None
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


def needs_rehash(stored_hash: str) -> bool:
    return _hasher.check_needs_rehash(stored_hash)

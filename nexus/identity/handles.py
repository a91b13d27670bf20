"""Salesforce-shaped session ids: `00D<org id>!<opaque>`, what Nexus issues as access tokens.

Salesforce clients treat an access token as an opaque string, but some check its shape: the
`sf` CLI (`sf org login access-token`) refuses anything that does not start with
`00D<12-15 word characters>!`. A handle is that shape. Its opaque part is an AES-256-GCM
sealed box naming the session and when this handle stops being accepted:

    00D<org id, 18>!<base64, alphabet A-Z a-z 0-9 . _, no padding>
        version (1 byte) | nonce (12) | seal(session id (18 ASCII) | expires at (8, epoch s))

The org id is authenticated data of the seal, so a handle whose prefix names another org does
not open. A handle carries no user, client or scopes: those are read from the session row,
which is what makes it revocable (logout, revocation, deactivation and client disabling end
it like any other access token, within the security staleness bound) and bounds it by the
session's own expiry. The key is derived from the deployment's token-signature key (it is
not rotated by `rotate-keys`; see ADR 0075).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
import struct
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

VERSION = 1
_ALTCHARS = b"._"
_NONCE = 12
_TAG = 16
_SESSION_ID = 18
_PLAIN = struct.Struct(f">{_SESSION_ID}sQ")
#: what a handle looks like; anything else is not one (a JWT, a refresh token, garbage)
HANDLE = re.compile(r"^(00D[0-9A-Za-z]{15})!([0-9A-Za-z._]{40,120})$")


@dataclass(frozen=True)
class HandleClaims:
    org_id: str
    session_id: str
    expires_at: int  # epoch seconds


def looks_like_handle(token: str) -> bool:
    return HANDLE.fullmatch(token) is not None


class SessionHandles:
    def __init__(self, signature_key: bytes) -> None:
        key = hmac.new(signature_key, b"nexus-session-handle\0v1", hashlib.sha256).digest()
        self._aead = AESGCM(key)

    def issue(self, *, org_id: str, session_id: str, expires_at: int) -> str:
        if len(org_id) != 18 or not org_id.startswith("00D") or len(session_id) != _SESSION_ID:
            raise ValueError("a handle names an 18-character org id and session id")
        nonce = secrets.token_bytes(_NONCE)
        plain = _PLAIN.pack(session_id.encode("ascii"), expires_at)
        sealed = self._aead.encrypt(nonce, plain, _aad(org_id))
        raw = bytes([VERSION]) + nonce + sealed
        return f"{org_id}!{_encode(raw)}"

    def read(self, token: str) -> HandleClaims | None:
        """The handle's claims when it is genuine (its expiry is the caller's to check)."""
        match = HANDLE.fullmatch(token)
        if match is None:
            return None
        org_id, opaque = match.groups()
        try:
            raw = base64.b64decode(
                opaque + "=" * (-len(opaque) % 4), altchars=_ALTCHARS, validate=True
            )
            if (
                len(raw) != 1 + _NONCE + _PLAIN.size + _TAG
                or raw[0] != VERSION
                or _encode(raw) != opaque  # one spelling only (base64's unused trailing bits)
            ):
                return None
            plain = self._aead.decrypt(raw[1 : 1 + _NONCE], raw[1 + _NONCE :], _aad(org_id))
            session_id, expires_at = _PLAIN.unpack(plain)
            return HandleClaims(org_id, session_id.decode("ascii"), int(expires_at))
        except (binascii.Error, ValueError, InvalidTag, struct.error):
            return None  # UnicodeDecodeError is a ValueError


def _encode(raw: bytes) -> str:
    return base64.b64encode(raw, altchars=_ALTCHARS).decode().rstrip("=")


def _aad(org_id: str) -> bytes:
    return b"nexus-session-handle\0" + org_id.encode("ascii")

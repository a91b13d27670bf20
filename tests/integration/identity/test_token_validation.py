"""Forged, expired and misdirected tokens are refused by the one interceptor (HTTP 401)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import RSAKey

from nexus.identity.keys import KeyRing, key_dir
from nexus.identity.setup import load_identity_config
from nexus.platform.secrets import secrets_dir
from tests.integration.identity.conftest import ALICE_PASSWORD, Identity

pytestmark = pytest.mark.asyncio(loop_scope="module")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unsigned(header: dict, claims: dict) -> str:
    return f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"


async def _valid_token(identity: Identity) -> tuple[str, dict, dict]:
    """A genuine RS256 access token (the form Nexus issued before ADR 0075, still accepted):
    the claims of the session the token endpoint just opened, signed with the deployment's key.
    The endpoint itself answers a session handle (`00D...!...`), which carries no claims."""
    async with httpx.AsyncClient(base_url=identity.url) as client:
        reply = await client.post(
            "/services/oauth2/token",
            data={
                "grant_type": "password",
                "username": "alice@example.com",
                "password": ALICE_PASSWORD,
                "client_id": identity.confidential.client_id,
                "client_secret": identity.confidential.client_secret,
            },
        )
    body = reply.json()
    cfg = load_identity_config(identity.settings)
    handle = cfg.handles.read(body["access_token"])
    assert handle is not None, body["access_token"]
    now = int(time.time())
    claims = {
        "iss": cfg.issuer,
        "aud": cfg.audience,
        "sub": body["id"].rsplit("/", 1)[1],
        "org": handle.org_id,
        "sid": handle.session_id,
        "cid": identity.confidential.client_id,
        "scp": body["scope"],
        "sep": 1,
        "iat": now,
        "exp": handle.expires_at,
        "jti": "t" + str(now),
    }
    token = cfg.keys.sign(claims, typ="at+jwt")
    header_part, claims_part, _ = token.split(".")
    pad = lambda s: s + "=" * (-len(s) % 4)  # noqa: E731
    return (
        token,
        json.loads(base64.urlsafe_b64decode(pad(header_part))),
        json.loads(base64.urlsafe_b64decode(pad(claims_part))),
    )


async def _status(identity: Identity, token: str) -> int:
    async with httpx.AsyncClient(base_url=identity.url) as client:
        reply = await client.get(
            "/services/oauth2/userinfo", headers={"Authorization": f"Bearer {token}"}
        )
    if reply.status_code == 401:
        assert reply.json()["code"] == "INVALID_SESSION_ID"
    return reply.status_code


def _ring(identity: Identity) -> KeyRing:
    return KeyRing.load(key_dir(secrets_dir(identity.var_dir)), retire_after_seconds=3600)


async def test_the_genuine_token_is_accepted(identity: Identity) -> None:
    token, _, _ = await _valid_token(identity)
    assert await _status(identity, token) == 200


async def test_alg_none_is_refused(identity: Identity) -> None:
    _, header, claims = await _valid_token(identity)
    forged = _unsigned({**header, "alg": "none"}, claims) + "."
    assert await _status(identity, forged) == 401


async def test_hs256_signed_with_the_public_key_is_refused(identity: Identity) -> None:
    _, header, claims = await _valid_token(identity)
    public_pem = _ring(identity).active.as_pem(private=False)
    signing_input = _unsigned({**header, "alg": "HS256"}, claims)
    mac = hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest()
    assert await _status(identity, f"{signing_input}.{_b64(mac)}") == 401


async def test_a_token_signed_by_an_unknown_key_is_refused(identity: Identity) -> None:
    _, header, claims = await _valid_token(identity)
    stranger = RSAKey.generate_key(2048, private=True)
    same_kid = jwt.encode(header, claims, stranger)
    other_kid = jwt.encode({**header, "kid": "not-a-known-key"}, claims, stranger)
    assert await _status(identity, same_kid) == 401
    assert await _status(identity, other_kid) == 401


async def test_expired_wrong_audience_and_wrong_issuer_are_refused(identity: Identity) -> None:
    _, _header, claims = await _valid_token(identity)
    ring = _ring(identity)
    now = int(time.time())
    for changed in (
        {"exp": now - 1, "iat": now - 901},
        {"aud": "some-other-service"},
        {"iss": "https://evil.example"},
    ):
        assert await _status(identity, ring.sign({**claims, **changed}, typ="at+jwt")) == 401
    assert await _status(identity, ring.sign(claims, typ="JWT")) == 401  # not an access token


async def test_a_token_cannot_be_pointed_at_another_org(identity: Identity) -> None:
    """Claims of org A with org B's id: the session is looked up under B and not found."""
    _, _, claims = await _valid_token(identity)
    other_org = "00D" + "B" * 15
    forged = _ring(identity).sign({**claims, "org": other_org}, typ="at+jwt")
    assert await _status(identity, forged) == 401


async def test_missing_or_malformed_authorization_is_401(identity: Identity) -> None:
    async with httpx.AsyncClient(base_url=identity.url) as client:
        for headers in ({}, {"Authorization": "Bearer"}, {"Authorization": "Basic abc"}):
            reply = await client.get("/services/oauth2/userinfo", headers=headers)
            assert reply.status_code == 401

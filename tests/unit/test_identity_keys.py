"""Signing keys: rotation keeps old tokens valid until they expire, then retires the key."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from nexus.identity import keys as keys_module
from nexus.identity.keys import KeyRing, TokenInvalid, generate_key

HOUR_MS = 3_600_000


def test_rotation_signs_with_the_new_key_and_still_verifies_the_old(tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    first = generate_key(tmp_path, now_ms=now - 10_000)
    old_token = KeyRing.load(tmp_path, retire_after_seconds=3600).sign({"sub": "a"}, typ="at+jwt")
    second = generate_key(tmp_path, now_ms=now)
    ring = KeyRing.load(tmp_path, retire_after_seconds=3600)
    assert ring.active_kid == second != first
    assert ring.verify(old_token, typ="at+jwt") == {"sub": "a"}
    assert {k["kid"] for k in ring.jwks()["keys"]} == {first, second}
    assert all("d" not in k for k in ring.jwks()["keys"])  # never a private part


def test_a_key_retires_once_its_tokens_have_expired(tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    first = generate_key(tmp_path, now_ms=now - 3 * HOUR_MS)
    token = KeyRing.load(tmp_path, retire_after_seconds=3600).sign({"sub": "a"}, typ="at+jwt")
    generate_key(tmp_path, now_ms=now - 2 * HOUR_MS)  # successor appeared 2 h ago
    ring = KeyRing.load(tmp_path, retire_after_seconds=3600)
    assert first not in {k["kid"] for k in ring.jwks()["keys"]}
    with pytest.raises(TokenInvalid):
        ring.verify(token, typ="at+jwt")


def test_a_replica_picks_up_a_key_rotated_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    generate_key(tmp_path, now_ms=int(time.time() * 1000) - 10_000)
    replica = KeyRing.load(tmp_path, retire_after_seconds=3600)
    generate_key(tmp_path)
    rotated = KeyRing.load(tmp_path, retire_after_seconds=3600)
    token = rotated.sign({"sub": "b"}, typ="at+jwt")
    monkeypatch.setattr(keys_module, "RELOAD_INTERVAL_SECONDS", 0.0)
    assert replica.verify(token, typ="at+jwt") == {"sub": "b"}
    assert replica.active_kid == rotated.active_kid


def test_wrong_typ_is_refused(tmp_path: Path) -> None:
    generate_key(tmp_path)
    ring = KeyRing.load(tmp_path, retire_after_seconds=60)
    with pytest.raises(TokenInvalid, match="wrong type"):
        ring.verify(ring.sign({"sub": "c"}, typ="delegation+jwt"), typ="at+jwt")

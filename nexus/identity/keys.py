"""The identity signing key ring: RS256 keys with `kid`, rotation, and retirement.

Keys are PEM files in `<var>/secrets/identity-keys/`, named `<created_ms>-<kid>.pem`, mode
0600; private keys never enter the database. The newest key signs. Older keys keep
verifying until every token they signed has expired (`retire_after_seconds` after their
successor appeared); then they drop out of the key set and out of the JWKS.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet, RSAKey

from nexus.platform.files import write_private

ALGORITHM = "RS256"
KEY_DIR_NAME = "identity-keys"


def _read_keys(directory: Path) -> list[_KeyFile]:
    keys = []
    for path in sorted(directory.glob("*.pem")):
        created, _, kid = path.stem.partition("-")
        key = RSAKey.import_key(path.read_bytes(), {"kid": kid, "use": "sig", "alg": ALGORITHM})
        keys.append(_KeyFile(created_ms=int(created), key=key))
    return keys


class TokenInvalid(Exception):
    """A token failed verification. The message is safe to log (never the token)."""


@dataclass(frozen=True)
class _KeyFile:
    created_ms: int
    key: RSAKey


def key_dir(secrets_dir: Path) -> Path:
    return secrets_dir / KEY_DIR_NAME


def generate_key(directory: Path, *, now_ms: int | None = None) -> str:
    """Write a new signing key (it becomes the active one); returns its kid."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    key = RSAKey.generate_key(2048, private=True)
    kid = key.thumbprint()
    created = now_ms if now_ms is not None else int(time.time() * 1000)
    path = directory / f"{created:013d}-{kid}.pem"
    if not write_private(path, key.as_pem(private=True), replace=False):
        raise FileExistsError(path.name)
    return kid


def ensure_key(directory: Path) -> bool:
    """Create the first key when none exists. True when one was created."""
    if directory.is_dir() and any(directory.glob("*.pem")):
        return False
    generate_key(directory)
    return True


RELOAD_INTERVAL_SECONDS = 5.0


class KeyRing:
    def __init__(
        self, keys: list[_KeyFile], *, retire_after_seconds: int, directory: Path | None = None
    ) -> None:
        self.directory = directory
        self.retire_after_seconds = retire_after_seconds
        self._loaded_at = time.monotonic()
        self._install(keys)

    def _install(self, keys: list[_KeyFile]) -> None:
        retire_after_seconds = self.retire_after_seconds
        if not keys:
            raise RuntimeError(
                "no identity signing key (run `nexus up` or `nexus admin rotate-keys`)"
            )
        ordered = sorted(keys, key=lambda k: k.created_ms)
        self.active = ordered[-1].key
        now_ms = int(time.time() * 1000)
        keep: list[Any] = [ordered[-1].key]
        for older, successor in pairwise(ordered):
            if now_ms - successor.created_ms < retire_after_seconds * 1000:
                keep.append(older.key)
        self.verification = KeySet(keep)

    @classmethod
    def load(cls, directory: Path, *, retire_after_seconds: int) -> KeyRing:
        return cls(
            _read_keys(directory), retire_after_seconds=retire_after_seconds, directory=directory
        )

    def reload_if_due(self) -> bool:
        """Pick up keys rotated by another process (at most every few seconds)."""
        if self.directory is None or time.monotonic() - self._loaded_at < RELOAD_INTERVAL_SECONDS:
            return False
        self._loaded_at = time.monotonic()
        self._install(_read_keys(self.directory))
        return True

    @property
    def active_kid(self) -> str:
        return str(self.active.kid)

    def jwks(self) -> dict[str, Any]:
        return {"keys": [k.as_dict(private=False) for k in self.verification.keys]}

    def sign(self, claims: dict[str, Any], *, typ: str = "JWT") -> str:
        header = {"alg": ALGORITHM, "kid": self.active_kid, "typ": typ}
        return jwt.encode(header, claims, self.active)

    def verify(self, token: str, *, typ: str) -> dict[str, Any]:
        """Signature, algorithm and kid checked; claims returned for the caller to validate.

        Only RS256 is accepted (no `none`, no HMAC with a public key); an unknown kid fails.
        """
        try:
            decoded = jwt.decode(token, self.verification, algorithms=[ALGORITHM])
        except (JoseError, ValueError, KeyError, TypeError) as exc:
            if not self.reload_if_due():
                raise TokenInvalid(f"token rejected ({type(exc).__name__})") from None
            return self.verify(token, typ=typ)
        if decoded.header.get("typ") != typ:
            raise TokenInvalid("token of the wrong type")
        return dict(decoded.claims)

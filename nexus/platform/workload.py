"""Workload identity between roles: each role signs short-lived ES256 tokens with its own key.

Keys live in `<var>/secrets/workload/`: `<name>.key` (private, 0600, only the role itself
needs it) and `<name>.pub` (public, what receivers load). A receiver that trusts a workload
needs only its `.pub` file. Which workload may call which capability is decided by the
receiver (for Runtime: Identity), never by the caller.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable
from pathlib import Path

from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import ECKey

from nexus.platform.files import write_private

WORKLOAD_HEADER = "x-nexus-workload"
DELEGATION_HEADER = "x-nexus-delegation"
DEADLINE_HEADER = "x-nexus-deadline"  # epoch milliseconds by which the caller stops waiting
WORKLOAD_ALGORITHM = "ES256"
WORKLOAD_TOKEN_TYPE = "workload+jwt"  # noqa: S105  (a JWT typ header, not a secret)
WORKLOAD_TOKEN_TTL_SECONDS = 60


class WorkloadKeyMissing(Exception):
    """A role has no workload key; the message names the file (never key material)."""


def workload_key_dir(secrets_dir: Path) -> Path:
    return secrets_dir / "workload"


def ensure_workload_keys(directory: Path, names: Iterable[str]) -> list[str]:
    """Create a key pair for each workload that has none; returns the names created. A
    public key missing beside its private key (a crash between the two files) is derived
    again from it."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    created = []
    for name in names:
        private = directory / f"{name}.key"
        if private.exists():
            public = directory / f"{name}.pub"
            if not public.exists():
                public.write_bytes(ECKey.import_key(private.read_bytes()).as_pem(private=False))
            continue
        key = ECKey.generate_key("P-256", private=True)
        write_private(private, key.as_pem(private=True), replace=False)
        (directory / f"{name}.pub").write_bytes(key.as_pem(private=False))
        created.append(name)
    return created


def load_public_keys(directory: Path) -> dict[str, ECKey]:
    """Every workload this receiver can recognise, by name."""
    return {path.stem: ECKey.import_key(path.read_bytes()) for path in directory.glob("*.pub")}


class WorkloadSigner:
    """Mints this role's workload tokens (one per call; they live at most a minute)."""

    def __init__(self, name: str, key: ECKey) -> None:
        self.name = name
        self._key = key

    @classmethod
    def load(cls, directory: Path, name: str) -> WorkloadSigner:
        path = directory / f"{name}.key"
        if not path.is_file():
            raise WorkloadKeyMissing(f"no workload key for {name!r} at {path}")
        return cls(name, ECKey.import_key(path.read_bytes()))

    def token(
        self,
        audience: str,
        *,
        ttl_seconds: int = WORKLOAD_TOKEN_TTL_SECONDS,
        org: str | None = None,
    ) -> str:
        """`org`: the tenant the call acts in (claim `org`), for receivers that take the org
        from the signed context instead of the body (AcceptCommand)."""
        now = int(time.time())
        claims: dict[str, object] = {
            "iss": self.name,
            "aud": audience,
            "iat": now,
            "exp": now + min(ttl_seconds, WORKLOAD_TOKEN_TTL_SECONDS),
            "jti": secrets.token_urlsafe(12),
        }
        if org is not None:
            claims["org"] = org
        header = {"alg": WORKLOAD_ALGORITHM, "kid": self.name, "typ": WORKLOAD_TOKEN_TYPE}
        return jwt.encode(header, claims, self._key, algorithms=[WORKLOAD_ALGORITHM])

    def headers(
        self,
        audience: str,
        *,
        deadline_ms: int,
        delegation: str | None = None,
        org: str | None = None,
    ) -> dict[str, str]:
        """The headers of one internal call: who is calling, for whom, in which org, until
        when."""
        headers = {
            WORKLOAD_HEADER: self.token(audience, org=org),
            DEADLINE_HEADER: str(deadline_ms),
        }
        if delegation is not None:
            headers[DELEGATION_HEADER] = delegation
        return headers


class WorkloadTokenInvalid(Exception):
    """A workload token is missing, forged, expired or for another audience."""


def verify_workload_token(
    token: str | None, keys: dict[str, ECKey], *, audience: str, skew_seconds: int = 5
) -> str:
    """The calling workload's name when its token is genuine and addressed to `audience`
    (for receivers outside Runtime; Runtime's Identity also checks capabilities)."""
    if not token:
        raise WorkloadTokenInvalid("missing workload token")
    for name, key in keys.items():
        try:
            decoded = jwt.decode(token, key, algorithms=[WORKLOAD_ALGORITHM])
        except (JoseError, ValueError, KeyError, TypeError):
            continue
        claims, now = decoded.claims, time.time()
        if (
            decoded.header.get("typ") == WORKLOAD_TOKEN_TYPE
            and claims.get("iss") == name
            and claims.get("aud") == audience
            and float(claims.get("exp", 0)) + skew_seconds >= now
            and float(claims.get("iat", 0)) - skew_seconds <= now
        ):
            return name
        break
    raise WorkloadTokenInvalid("workload token rejected")

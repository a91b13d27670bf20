"""Catalog's wire contract: canonical JSON, release snapshots and the Runtime release calls.

Canonical form (the basis of every digest and checksum Catalog publishes): JSON with sorted
keys, no insignificant whitespace, text in Unicode NFC with `\\r\\n` line ends normalized to
`\\n`, integral floats written as integers (`1.0` -> `1`), UTF-8. The same content always
yields the same bytes, whichever file layout, key order or YAML spelling it came from.
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SNAPSHOT_PATH = "/internal/v1/catalog/snapshot"
RELEASE_STATE_PATH = "/internal/v1/runtime/releases/state"
RELEASE_SCHEMA_PATH = "/internal/v1/runtime/releases/schema"
RELEASE_PREPARE_PATH = "/internal/v1/runtime/releases/prepare"
RELEASE_REPLICAS_PATH = "/internal/v1/runtime/releases/replicas"
RELEASES_CAPABILITY = "runtime.releases"
Consumer = Literal["runtime", "integration", "app"]
CONSUMERS: tuple[Consumer, ...] = ("runtime", "integration", "app")


def _normalize(value: Any) -> Any:
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value.replace("\r\n", "\n"))
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise ValueError("NaN and infinity have no canonical form")
        return int(value) if value.is_integer() else value
    if isinstance(value, dict):
        return {_normalize(str(k)): _normalize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalize(v) for v in value]
    raise TypeError(f"{type(value).__name__} has no canonical JSON form")


def canonical_json(value: Any) -> bytes:
    """The canonical bytes of a JSON-shaped value (see the module docstring)."""
    return json.dumps(
        _normalize(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")


def sha256_hex(value: Any) -> str:
    return hashlib.sha256(canonical_json(value)).hexdigest()


class Snapshot(BaseModel):
    """One consumer's projection of an org's active release publication.

    `checksum` is the SHA-256 of the canonical form of `{consumer, org_id, catalog_revision,
    content}`; a consumer recomputes it and refuses a snapshot that does not match.
    """

    model_config = ConfigDict(extra="forbid")

    consumer: Consumer
    org_id: str
    catalog_revision: int
    content: dict[str, Any]
    checksum: str

    @staticmethod
    def checksum_of(
        *, consumer: str, org_id: str, catalog_revision: int, content: dict[str, Any]
    ) -> str:
        return sha256_hex(
            {
                "consumer": consumer,
                "org_id": org_id,
                "catalog_revision": catalog_revision,
                "content": content,
            }
        )

    def verified(self) -> bool:
        return self.checksum == self.checksum_of(
            consumer=self.consumer,
            org_id=self.org_id,
            catalog_revision=self.catalog_revision,
            content=self.content,
        )


class SnapshotRejected(Exception):
    """A fetched snapshot failed verification; the consumer keeps its last verified one."""


class SnapshotKeeper:
    """What a consumer holds: the last snapshot that verified. A newer one that fails its
    checksum, belongs to another consumer or org, or goes backwards is refused, and the held
    one stays in force."""

    def __init__(self, consumer: Consumer, org_id: str | None = None) -> None:
        self.consumer = consumer
        self.org_id = org_id
        self.current: Snapshot | None = None

    def offer(self, raw: Any) -> Snapshot:
        """Adopt `raw` when it verifies; SnapshotRejected (keeping the held one) otherwise."""
        try:
            snapshot = Snapshot.model_validate(raw)
        except ValueError:
            raise SnapshotRejected("the snapshot is not well formed") from None
        if snapshot.consumer != self.consumer:
            raise SnapshotRejected(f"the snapshot is for {snapshot.consumer}, not {self.consumer}")
        if self.org_id is not None and snapshot.org_id != self.org_id:
            raise SnapshotRejected("the snapshot is for another org")
        if not snapshot.verified():
            raise SnapshotRejected("the snapshot checksum does not match its content")
        held = self.current
        if held is not None and snapshot.catalog_revision < held.catalog_revision:
            raise SnapshotRejected(
                f"revision {snapshot.catalog_revision} is older than the held "
                f"{held.catalog_revision}"
            )
        self.current = snapshot
        return snapshot


# ---------------------------------------------------------------------------- Runtime calls


class ReleaseComponent(BaseModel):
    """One metadata component of a release as Runtime receives it (owner App resolved)."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    key: str
    definition: dict[str, Any]
    override_policy: Literal["replace", "keep", "merge"] = "replace"
    #: The definition the org's previous release of the owning App installed, when any:
    #: Runtime compares the active definition with it to see a customer override.
    previous: dict[str, Any] | None = None


class ReleaseRequest(BaseModel):
    """Catalog -> Runtime: prepare the schema for, or install, the components of a release."""

    model_config = ConfigDict(extra="forbid")

    org_id: str
    catalog_revision: int
    fencing_token: int
    components: list[ReleaseComponent] = Field(default_factory=list, max_length=2000)
    #: components of uninstalled Apps whose removal policy deactivates them
    deactivate: list[ReleaseComponent] = Field(default_factory=list, max_length=2000)
    #: RUNTIME_PREPARED: the published `runtime` snapshot of `catalog_revision`; Runtime
    #: verifies its checksum and that every component it installs is the published one
    snapshot: Snapshot | None = None
    app_id: str | None = None


class ReleaseState(BaseModel):
    """Runtime's answer: the org, its engine and its current axes."""

    org_id: str
    engine_generation: int
    capabilities: list[str]
    schema_generation: int
    metadata_revision: int
    security_epoch: int
    kept_overrides: list[str] = Field(default_factory=list)
    changed: list[str] = Field(default_factory=list)
    #: the newest catalog revision whose runtime snapshot this replica verified
    verified_catalog_revision: int = 0


class ReplicaAck(BaseModel):
    """One runtime-api replica: the CatalogRevision it preloaded, and whether it is live
    (heard from within Runtime's live window, by the database clock)."""

    replica_id: str
    prepared_revision: int
    live: bool


class ReplicaAcks(BaseModel):
    replicas: list[ReplicaAck] = Field(default_factory=list)

    def missing(self, revision: int) -> list[str]:
        """The live replicas that have not acknowledged `revision` yet."""
        return sorted(
            r.replica_id for r in self.replicas if r.live and r.prepared_revision < revision
        )

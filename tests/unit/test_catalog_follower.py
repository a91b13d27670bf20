"""The consumer side of Catalog snapshots (docs/adr/0033), against a stand-in Catalog."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from joserfc.jwk import ECKey

from nexus.contracts.catalog import Snapshot
from nexus.contracts.roles import CATALOG_AUDIENCE
from nexus.platform.catalog_follower import SnapshotFollower
from nexus.platform.http_client import InternalClient
from nexus.platform.workload import WorkloadSigner, verify_workload_token

pytestmark = pytest.mark.asyncio
KEY = ECKey.generate_key("P-256", private=True)


def snapshot(revision: int, routes: list[str]) -> dict[str, Any]:
    content = {"apps": [], "routes": [{"route": r} for r in routes]}
    checksum = Snapshot.checksum_of(
        consumer="integration", org_id="00Dorg", catalog_revision=revision, content=content
    )
    return {
        "consumer": "integration",
        "org_id": "00Dorg",
        "catalog_revision": revision,
        "content": content,
        "checksum": checksum,
    }


class Catalog:
    """Answers the snapshot endpoint with whatever the test put in `reply`."""

    def __init__(self) -> None:
        self.reply: httpx.Response | Exception = httpx.Response(404)
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply


async def test_follows_verified_revisions_and_keeps_the_last_one() -> None:
    catalog = Catalog()
    applied: list[int] = []
    failing = {"next": False}

    async def apply(found: Snapshot) -> None:
        if failing["next"]:
            failing["next"] = False
            raise RuntimeError("database away")
        applied.append(found.catalog_revision)

    async with httpx.AsyncClient(transport=httpx.MockTransport(catalog)) as client:
        catalog_client = InternalClient(
            base_url="http://catalog",
            signer=WorkloadSigner("integration", KEY),
            audience=CATALOG_AUDIENCE,
            client=client,
            timeout_s=5,
        )
        follower = SnapshotFollower("integration", catalog=catalog_client, apply=apply)
        await follower.step()  # nothing active yet
        assert applied == []
        catalog.reply = httpx.Response(200, json=snapshot(3, ["a"]))
        await follower.step()
        await follower.step()  # the same revision is applied once
        assert applied == [3]
        request = catalog.seen[-1]
        assert request.url.params["consumer"] == "integration"
        token = request.headers["x-nexus-workload"]
        keys = {"integration": KEY}
        assert verify_workload_token(token, keys, audience=CATALOG_AUDIENCE) == "integration"

        tampered = snapshot(4, ["a", "b"])
        tampered["content"]["routes"] = []
        catalog.reply = httpx.Response(200, json=tampered)
        await follower.step()
        assert applied == [3]
        assert follower.keeper.current is not None
        assert follower.keeper.current.catalog_revision == 3  # the last verified one

        catalog.reply = httpx.Response(200, json=snapshot(2, []))  # older: refused
        await follower.step()
        assert follower.keeper.current.catalog_revision == 3

        catalog.reply = httpx.ConnectError("refused")
        await follower.step()
        assert follower.reachable is False
        assert follower.keeper.current.catalog_revision == 3

        catalog.reply = httpx.Response(200, json=snapshot(5, ["a"]))
        failing["next"] = True
        with pytest.raises(RuntimeError):
            await follower.step()  # `every` logs it; the next step applies again
        await follower.step()
        assert applied == [3, 5]
        assert follower.reachable is True

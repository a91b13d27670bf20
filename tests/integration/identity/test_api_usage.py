"""Runtime keeps the dialects' API usage: requests per user per UTC day, added up across
reports (and so across AppService processes and restarts)."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from nexus.contracts.usage import USAGE_PATH
from nexus.platform.secrets import workload_signer
from tests.integration.identity.conftest import Identity

pytestmark = pytest.mark.asyncio(loop_scope="module")


def headers(identity: Identity, workload: str) -> dict[str, str]:
    signer = workload_signer(identity.settings, workload)
    return signer.headers("runtime-api", deadline_ms=int((time.time() + 10) * 1000))


async def test_reports_add_up_per_user_and_day(identity: Identity) -> None:
    org = "00D000000000009AAA"
    async with httpx.AsyncClient(base_url=identity.url) as client:

        async def report(*counts: tuple[str, int]) -> dict[str, int]:
            body = {"counts": [{"org_id": org, "user_id": u, "requests": n} for u, n in counts]}
            reply = await client.post(USAGE_PATH, json=body, headers=headers(identity, "app-sfcrm"))
            assert reply.status_code == 200, reply.text
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", reply.json()["day"])
            return {t["user_id"]: t["requests"] for t in reply.json()["totals"]}

        assert await report(("005A", 3), ("005B", 1)) == {"005A": 3, "005B": 1}
        assert await report(("005A", 2), ("005A", 1)) == {"005A": 6}  # a second process
        assert await report(("005B", 0)) == {"005B": 1}  # asking only
        refused = await client.post(
            USAGE_PATH, json={"counts": []}, headers=headers(identity, "catalog")
        )
        assert refused.status_code == 403  # only the dialects report usage

#!/usr/bin/env python
"""Identity costs: token issuance (password grant over HTTP) and access-token validation.

    .venv/bin/python bench/identity_tokens.py [--issue 40] [--validate 20000]

Runs a real runtime-api app (uvicorn, in this process) on a fresh SQLite database, seeds a
user and a Connected App, then measures
  * issuance: sequential password-grant requests (argon2id verification dominates), beside
    the floor of one bare argon2 verification measured in the same run;
  * validation: `Authenticator.from_access_token` on a warm session cache (what every
    authenticated request pays), beside the bare opening of the token's AES-GCM seal (a
    `00D...!...` session handle, ADR 0075) in the same run.
Prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nexus.contracts.roles import LogicalService
from nexus.identity import admin
from nexus.identity.passwords import hash_password, verify_password
from nexus.identity.setup import bootstrap_first_admin
from nexus.platform.db.engine import create_engine, session_factory
from nexus.platform.migrations import upgrade_to_head
from nexus.platform.observability import configure_logging
from nexus.platform.settings import load_settings
from nexus.runtime.app import create_api_app
from tests.support.servers import serving

PASSWORD = "bench-password-123456"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main(issue_n: int, validate_n: int) -> dict[str, object]:
    var = Path(tempfile.mkdtemp(prefix="nexus-bench-id-"))
    url = f"sqlite+aiosqlite:///{var}/runtime.sqlite3"
    engine = create_engine(url, application_name="bench")
    await upgrade_to_head(engine, LogicalService.RUNTIME)
    sessions = session_factory(engine)
    await bootstrap_first_admin(sessions, password="bench-admin-password-1")
    await admin.create_user(
        sessions, username="bench", password=PASSWORD, email=None, display_name=None, is_admin=False
    )
    client = await admin.create_client(
        sessions,
        name="bench",
        redirect_uris=[],
        grant_types=["password"],
        scopes=["api"],
        run_as_username=None,
        public=False,
    )
    settings = load_settings(var_dir=var, runtime_database_url=url, login_max_failures=100)
    app = create_api_app(settings)
    form = {
        "grant_type": "password",
        "username": "bench",
        "password": PASSWORD,
        "client_id": client.client_id,
        "client_secret": client.client_secret,
    }
    async with serving(app) as base, httpx.AsyncClient(base_url=base) as http:
        await http.post("/services/oauth2/token", data=form)  # warm-up
        issue_ms = []
        for _ in range(issue_n):
            started = time.perf_counter()
            reply = await http.post("/services/oauth2/token", data=form)
            issue_ms.append((time.perf_counter() - started) * 1000)
            assert reply.status_code == 200, reply.text
        token = reply.json()["access_token"]

        stored = hash_password(PASSWORD)
        argon_ms = []
        for _ in range(max(5, issue_n // 4)):
            started = time.perf_counter()
            verify_password(stored, PASSWORD)
            argon_ms.append((time.perf_counter() - started) * 1000)

        authenticator = app.state.identity.authenticator
        await authenticator.from_access_token(token)  # fill the session cache
        validate_us = []
        for _ in range(validate_n):
            started = time.perf_counter()
            await authenticator.from_access_token(token)
            validate_us.append((time.perf_counter() - started) * 1e6)
        handles = app.state.identity.cfg.handles
        assert handles.read(token) is not None, "the token endpoint issues session handles"
        seal_us = []
        for _ in range(validate_n // 4):
            started = time.perf_counter()
            handles.read(token)
            seal_us.append((time.perf_counter() - started) * 1e6)
    await engine.dispose()
    return {
        "machine": f"{os.uname().nodename} {os.cpu_count()} cpu, Python {sys.version.split()[0]}",
        "issuance_password_grant_ms": {
            "p50": round(statistics.median(issue_ms), 1),
            "p99": round(pct(issue_ms, 0.99), 1),
            "n": issue_n,
        },
        "argon2_verify_ms": {"p50": round(statistics.median(argon_ms), 1)},
        "issuance_over_argon2": round(statistics.median(issue_ms) / statistics.median(argon_ms), 2),
        "validation_cached_us": {
            "p50": round(statistics.median(validate_us), 1),
            "p99": round(pct(validate_us, 0.99), 1),
            "n": validate_n,
        },
        "handle_open_us": {"p50": round(statistics.median(seal_us), 1)},
        "validation_over_handle_open": round(
            statistics.median(validate_us) / statistics.median(seal_us), 2
        ),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--issue", type=int, default=40)
    parser.add_argument("--validate", type=int, default=20000)
    args = parser.parse_args()
    configure_logging(role="bench", level="warning", fmt="json")
    print(json.dumps(asyncio.run(main(args.issue, args.validate)), indent=2))

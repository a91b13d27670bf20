"""Logs: structured, carry role and request id, never secrets; request id hygiene."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from nexus.platform.http import accept_request_id
from nexus.platform.observability import REDACTED, configure_logging, get_logger


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    yield
    logging.getLogger().handlers.clear()
    structlog.reset_defaults()


def test_json_lines_carry_role_and_request_id_and_mask_secrets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging(role="catalog", level="info", fmt="json")
    with structlog.contextvars.bound_contextvars(request_id="req-abcdef12"):
        get_logger("t").info(
            "login.attempt", user="ann", password="pw-1", access_token="tok-2", body="{...}"
        )
        logging.getLogger("uvicorn.error").warning("from the stdlib")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [line["event"] for line in lines] == ["login.attempt", "from the stdlib"]
    for line in lines:
        assert line["role"] == "catalog"
        assert line["request_id"] == "req-abcdef12"
    first = lines[0]
    assert first["user"] == "ann"
    assert first["password"] == first["access_token"] == first["body"] == REDACTED
    assert "pw-1" not in json.dumps(lines)


@pytest.mark.parametrize(
    ("raw", "kept"),
    [
        ("abcdef1234", True),
        ("req-2026-11-29.a:b_c", True),
        ("short", False),
        ("has space in it", False),
        ("x" * 129, False),
        ("inject\nline", False),
        (None, False),
    ],
)
def test_request_ids_are_kept_only_when_safe(raw: str | None, kept: bool) -> None:
    result = accept_request_id(raw)
    assert (result == raw) is kept
    assert 8 <= len(result) <= 128

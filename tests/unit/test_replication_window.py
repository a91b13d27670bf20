"""The replication window of `records/updated` / `records/deleted` (Runtime) and the dates the
sfcrm dialect parses for it: minute truncation, the 30-day bound, and how far it is covered."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from nexus.apps.sfcrm.changes import parse_moment, wire_moment
from nexus.apps.sfcrm.errors import SfError
from nexus.contracts.changes import ChangesRequest
from nexus.contracts.errors import BadRequest
from nexus.runtime.changes.service import DAY_MS, MINUTE_MS, SETTLE_MS, ReplicationWindow

NOW = int(datetime(2026, 12, 7, 12, 30, 45, tzinfo=UTC).timestamp() * 1000)


def window(start_ms: int, end_ms: int) -> ReplicationWindow:
    return ReplicationWindow(
        ChangesRequest(object="Account", start_ms=start_ms, end_ms=end_ms), NOW
    )


def test_a_window_is_truncated_to_the_minute_and_ends_at_the_database_clock() -> None:
    w = window(NOW - 10 * MINUTE_MS, NOW + 5 * MINUTE_MS)
    assert w.start == NOW - 10 * MINUTE_MS - 45_000
    assert w.end == NOW  # records stamped up to now are listed
    # reported covered a settle period behind the clock, on a minute
    assert w.covered == NOW - 45_000 - MINUTE_MS
    assert w.covered <= NOW - SETTLE_MS


def test_a_window_in_the_past_is_covered_to_its_end() -> None:
    w = window(NOW - DAY_MS, NOW - DAY_MS // 2)
    assert w.covered == w.end


@pytest.mark.parametrize(
    ("start_ms", "end_ms", "message"),
    [
        (NOW, NOW - MINUTE_MS, "precede"),
        (NOW + 1_000, NOW + 5_000, "precede"),  # the same minute once truncated
        (NOW - 31 * DAY_MS, NOW, "30 days"),
    ],
)
def test_bad_windows_are_invalid_replication_dates(
    start_ms: int, end_ms: int, message: str
) -> None:
    with pytest.raises(BadRequest) as refused:
        window(start_ms, end_ms)
    assert refused.value.code == "INVALID_REPLICATION_DATE"
    assert message in refused.value.message


@pytest.mark.parametrize(
    "raw",
    [
        "2026-12-07T12:30:45+00:00",  # simple-salesforce (%2B-encoded) and jsforce
        "2026-12-07T12:30:45 00:00",  # a `+` sent unencoded arrives as a space
        "2026-12-07T12:30:45Z",
        "2026-12-07T12:30:45.000+0000",  # what the dialect itself answers
        "2026-12-07T14:30:45+02:00",
        "2026-12-07T12:30:45",  # no zone: UTC
    ],
)
def test_the_forms_clients_send_parse_to_the_same_moment(raw: str) -> None:
    assert parse_moment(raw, "start") == NOW


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (None, "MISSING_ARGUMENT"),
        ("", "MISSING_ARGUMENT"),
        ("yesterday", "INVALID_REPLICATION_DATE"),
        ("2026-13-01T00:00:00Z", "INVALID_REPLICATION_DATE"),
    ],
)
def test_missing_or_malformed_dates_name_the_parameter(raw: str | None, code: str) -> None:
    with pytest.raises(SfError) as refused:
        parse_moment(raw, "end")
    assert refused.value.status == 400
    assert refused.value.code == code
    assert refused.value.fields == ["end"]


def test_moments_go_out_in_the_salesforce_form() -> None:
    assert wire_moment(NOW) == "2026-12-07T12:30:45.000+0000"

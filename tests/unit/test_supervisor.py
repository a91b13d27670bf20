"""The supervisor's restart policy, on real (tiny) child processes."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from nexus.platform import supervisor as supervisor_module
from nexus.platform.supervisor import RESTARTS_ENV, Child, GaveUp, Supervisor, restarts_from_env


def _watch_until(
    supervisor: Supervisor, seconds: float, events: list[supervisor_module.Restart] | None = None
) -> None:
    events = [] if events is None else events
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        events += supervisor.watch()
        time.sleep(0.01)


def test_a_child_that_keeps_failing_at_start_is_given_up_with_its_log_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervisor_module, "FIRST_BACKOFF_SECONDS", 0.01)
    supervisor = Supervisor(log_dir=tmp_path, env={})
    supervisor.start([Child("broken", [sys.executable, "-c", "raise SystemExit(3)"])])
    try:
        with pytest.raises(GaveUp) as raised:
            _watch_until(supervisor, 20)
    finally:
        supervisor.stop(grace_seconds=1)
    message = str(raised.value)
    assert "role broken exited 5 times in a row" in message
    assert "last exit code 3" in message
    assert str(tmp_path / "broken.log") in message
    assert supervisor.children[0].restarts == 4


def test_a_restarted_child_is_told_its_restart_count_and_backs_off_doubling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervisor_module, "FIRST_BACKOFF_SECONDS", 0.05)
    script = f"import os; print('restarts=' + os.environ['{RESTARTS_ENV}'], flush=True)"
    supervisor = Supervisor(log_dir=tmp_path, env={})
    supervisor.start([Child("flaky", [sys.executable, "-c", script])])
    events: list[supervisor_module.Restart] = []
    try:
        with pytest.raises(GaveUp):
            _watch_until(supervisor, 20, events)
    finally:
        supervisor.stop(grace_seconds=1)
    delays = [e.delay for e in events if not e.started]
    assert delays == [0.05, 0.1, 0.2, 0.4]  # the fifth fast failure gives up
    log = (tmp_path / "flaky.log").read_text().split()
    assert log == [f"restarts={n}" for n in range(5)]


def test_restart_count_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(RESTARTS_ENV, raising=False)
    assert restarts_from_env() == 0
    monkeypatch.setenv(RESTARTS_ENV, "3")
    assert restarts_from_env() == 3
    monkeypatch.setenv(RESTARTS_ENV, "many")
    assert restarts_from_env() == 0

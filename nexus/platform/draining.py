"""Whether this process is shutting down: /readyz answers 503 from the first stop signal on."""

from __future__ import annotations

_state = {"draining": False}


def start_draining() -> None:
    _state["draining"] = True


def is_draining() -> bool:
    return _state["draining"]

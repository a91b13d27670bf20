"""How a serving role tunes the interpreter once it has started up.

Two settings, both measured on the webhook pipeline (bench/RESULTS.md):

* `gc.freeze()` after start-up: start-up objects (modules, metadata, compiled statements) are
  long-lived; left in the collector's generations they are rescanned on every older-generation
  pass, which was most of the group-commit p99 tail.
* a 0.5 ms GIL switch interval: a busy event loop holds the GIL, and a driver thread waiting
  for it (aiosqlite's, after each call into SQLite) gets it only when the interpreter forces
  a switch, by default after 5 ms; every database call pays that hand-over once or twice
  (measured at 600/s on the then-threaded group commit: 6.6 -> 2.6 ms per batch).
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Iterator

GIL_SWITCH_SECONDS = 0.0005


@contextlib.contextmanager
def tuned_for_serving() -> Iterator[None]:
    """Freeze what start-up allocated and shorten the GIL switch interval; both undone on exit
    (tests run several roles in one process, one after another)."""
    gc.collect()
    gc.freeze()
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(GIL_SWITCH_SECONDS)
    try:
        yield
    finally:
        sys.setswitchinterval(switch_interval)
        gc.unfreeze()

"""JSON text the hot paths write, with encoders made once.

`json.dumps(value, separators=...)` builds a `JSONEncoder` per call, and even a kept
encoder's `encode` builds its C encoder per call (~5 us of ~7 us for a small dict on this
project's box, ADR 0054). These functions write exactly what `json.dumps` writes with the
same arguments (ASCII escapes, NaN/Infinity as `json.dumps` spells them); they skip the
circular-reference check, which JSON-decoded values and plain records never need.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any


def _encoder(*, sort_keys: bool) -> Callable[[Any, int], Sequence[str]]:
    """The C encoder `json.dumps(value, separators=(",", ":"), sort_keys=...)` ends in."""
    encoder = json.JSONEncoder(separators=(",", ":"), sort_keys=sort_keys)
    if c_make_encoder is None:  # no C accelerator: the kept encoder

        def kept(value: Any, _level: int) -> Sequence[str]:
            return (encoder.encode(value),)

        return kept
    return c_make_encoder(  # type: ignore[no-any-return]
        None, encoder.default, encode_basestring_ascii, None, ":", ",", sort_keys, False, True
    )


_compact = _encoder(sort_keys=False)
_canonical = _encoder(sort_keys=True)


def compact_json(value: Any) -> str:
    """`json.dumps(value, separators=(",", ":"))`, the same text, cheaper."""
    return "".join(_compact(value, 0))


def canonical_json(value: Any) -> str:
    """`json.dumps(value, sort_keys=True, separators=(",", ":"))`, the same text (digests
    stored by earlier releases still match), cheaper."""
    return "".join(_canonical(value, 0))

"""`compact_json` and `canonical_json` write what `json.dumps` writes with the same arguments."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nexus.platform.json_text import canonical_json, compact_json


@pytest.mark.parametrize(
    "value",
    [
        {"receipt_id": "0" * 32, "delivery_id": "d-1"},
        {"delivery_id": 'Zoë "q" \\ \n\u2028 😀', "request_id": "</script>"},
        {"receipt_id": "r", "duplicate": True, "n": 3, "x": 2.5, "z": None, "nan": float("nan")},
        {"code": "NOT_FOUND", "nested": {"a": [1, {"b": False}]}},
        {},
    ],
)
def test_compact_json_is_json_dumps_compact(value: dict[str, Any]) -> None:
    for _ in range(2):  # the encoder is kept: the second call is like the first
        assert compact_json(value) == json.dumps(value, separators=(",", ":"))


def test_compact_json_refuses_what_json_dumps_refuses() -> None:
    with pytest.raises(TypeError):
        compact_json({"not": object()})
    assert compact_json({"after": "a failure"}) == '{"after":"a failure"}'


def test_canonical_json_is_json_dumps_sorted_and_compact() -> None:
    value = {"b": [3, {"z": 1, "a": None}], "a": "Zoë", "c": 2.5}
    for _ in range(2):
        assert canonical_json(value) == json.dumps(value, sort_keys=True, separators=(",", ":"))

"""Lane heads to advance, in rounds that name each lane once (one UPDATE per round)."""

from __future__ import annotations

from nexus.platform.workqueue.store import _one_per_lane


def test_heads_on_distinct_lanes_are_one_round() -> None:
    assert _one_per_lane([("a", 3), ("b", 1), ("c", 7)]) == [[("b", 1), ("a", 3), ("c", 7)]]


def test_two_heads_of_one_lane_go_in_two_rounds_lower_sequence_first() -> None:
    assert _one_per_lane([("a", 2), ("b", 5), ("a", 1)]) == [[("a", 1), ("b", 5)], [("a", 2)]]


def test_nothing_to_advance_is_no_round() -> None:
    assert _one_per_lane([]) == []

"""Record ids: the form Salesforce clients expect, drawn uniformly from the OS's CSPRNG."""

from __future__ import annotations

import collections

import pytest

from nexus.platform import ids
from nexus.platform.ids import ID_PATTERN, new_id, random_base62, to_18

BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def test_a_new_id_has_its_prefix_twelve_random_characters_and_a_matching_suffix() -> None:
    made = [new_id("003") for _ in range(200)]
    for record_id in made:
        assert len(record_id) == 18
        assert record_id.startswith("003")
        assert ID_PATTERN.fullmatch(record_id)
        assert to_18(record_id) == record_id
        assert to_18(record_id[:15]) == record_id
    assert len(set(made)) == len(made)


@pytest.mark.parametrize("prefix", ["", "00", "0030", "00-", "é03"])
def test_a_malformed_prefix_is_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="key prefix"):
        new_id(prefix)


def test_every_base62_character_is_equally_likely() -> None:
    """62 does not divide 256: a byte taken modulo 62 would make "0".."7" ~25 % likelier.
    Over 240,000 draws each character's count is ~3,871 with a standard deviation of ~62;
    a modulo-biased character would be ~970 above that."""
    drawn = collections.Counter("".join(random_base62(12) for _ in range(20_000)))
    assert set(drawn) == set(BASE62)
    expected = 20_000 * 12 / 62
    assert max(abs(n - expected) for n in drawn.values()) < 6 * expected**0.5


def test_bytes_outside_the_alphabet_are_dropped_and_drawn_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Low 6 bits 62 and 63 name no character: those bytes are rejected (never folded onto
    another character) and more bytes are drawn until there are enough."""
    draws = [bytes([62, 63, 126, 255] * 4), bytes([0, 61, 64, 125, 1, 190]), bytes(range(16))]

    def token_bytes(size: int) -> bytes:
        assert size >= 12
        return draws.pop(0)

    monkeypatch.setattr(ids.secrets, "token_bytes", token_bytes)
    # 0 -> "0", 61 -> "z", 64 -> "0", 125 -> "z", 1 -> "1", 190 (low bits 62) dropped,
    # then 0..15 -> "0".."F" for the remaining seven
    assert random_base62(12) == "0z0z1" + "0123456"
    assert draws == []

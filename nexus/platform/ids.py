"""Salesforce-style record ids: 3-character key prefix + 12 random base62 characters
(15 case-sensitive characters) + a 3-character suffix that makes the id case-insensitively
unique (18 characters), the form Salesforce clients expect."""

from __future__ import annotations

import re
import secrets

_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_SUFFIX = "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345"
_PREFIX = re.compile(r"^[0-9A-Za-z]{3}$")
ID_PATTERN = re.compile(r"^[0-9A-Za-z]{15}([0-9A-Z]{3})?$")


def case_safe_suffix(id15: str) -> str:
    suffix = ""
    for chunk in range(3):
        bits = 0
        for position, char in enumerate(id15[chunk * 5 : chunk * 5 + 5]):
            if "A" <= char <= "Z":
                bits |= 1 << position
        suffix += _SUFFIX[bits]
    return suffix


def new_id(prefix: str) -> str:
    """A fresh 18-character id with the given key prefix (~71 random bits)."""
    if not _PREFIX.fullmatch(prefix):
        raise ValueError("a key prefix is 3 alphanumeric characters")
    id15 = prefix + "".join(secrets.choice(_BASE62) for _ in range(12))
    return id15 + case_safe_suffix(id15)


def to_18(value: str) -> str:
    """Normalize a 15- or 18-character id to its 18-character form; ValueError otherwise."""
    if not ID_PATTERN.fullmatch(value):
        raise ValueError("not a record id")
    id15 = value[:15]
    full = id15 + case_safe_suffix(id15)
    if len(value) == 18 and value[15:].upper() != full[15:]:
        raise ValueError("record id checksum does not match")
    return full

"""Salesforce-style record ids: 3-character key prefix + 12 random base62 characters
(15 case-sensitive characters) + a 3-character suffix that makes the id case-insensitively
unique (18 characters), the form Salesforce clients expect."""

from __future__ import annotations

import hashlib
import re
import secrets

_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_SUFFIX = "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345"
_PREFIX = re.compile(r"^[0-9A-Za-z]{3}$")
ID_PATTERN = re.compile(r"^[0-9A-Za-z]{15}([0-9A-Z]{3})?$")
_RANDOM_CHARS = 12
#: Random bytes drawn per try: a byte is kept with probability 62/64, so 12 of 16 fall
#: short about once in 10^5 draws (then another draw tops it up).
_DRAW_BYTES = 16
#: A random byte's low 6 bits, when below 62, name a base62 character; bytes whose low
#: 6 bits are 62 or 63 are dropped (rejection, not modulo: every character equally likely).
_BYTE_TO_CHAR = bytes(ord(_BASE62[b & 63]) if b & 63 < len(_BASE62) else 0 for b in range(256))
_REJECTED_BYTES = bytes(b for b in range(256) if b & 63 >= len(_BASE62))


def case_safe_suffix(id15: str) -> str:
    suffix = ""
    for chunk in range(3):
        bits = 0
        for position, char in enumerate(id15[chunk * 5 : chunk * 5 + 5]):
            if "A" <= char <= "Z":
                bits |= 1 << position
        suffix += _SUFFIX[bits]
    return suffix


def random_base62(length: int) -> str:
    """`length` uniformly random base62 characters from the OS's CSPRNG: one
    `token_bytes` call mapped through a table (not a `SystemRandom` call per character,
    which was most of a record create's id cost)."""
    chars = b""
    while len(chars) < length:
        drawn = secrets.token_bytes(max(_DRAW_BYTES, length + length // 4))
        chars += drawn.translate(_BYTE_TO_CHAR, _REJECTED_BYTES)
    return chars[:length].decode("ascii")


def new_id(prefix: str) -> str:
    """A fresh 18-character id with the given key prefix (~71 random bits)."""
    if not _PREFIX.fullmatch(prefix):
        raise ValueError("a key prefix is 3 alphanumeric characters")
    id15 = prefix + random_base62(_RANDOM_CHARS)
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


def fit(text: str, limit: int, *, digest: int = 16) -> str:
    """`text` when it fits `limit` characters, else a stable shortened form (a prefix and a
    hash of the whole), so two long keys stay equal exactly when they were equal."""
    if len(text) <= limit:
        return text
    tail = hashlib.sha256(text.encode()).hexdigest()[:digest]
    return f"{text[: limit - digest - 1]}~{tail}"

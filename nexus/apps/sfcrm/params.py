"""Request values several resources parse the same way: whole-number parameters (`limit`,
`offset`, `overallLimit`, `batchSize`) and object names in paths.

A number is ASCII digits only, and only as many as a count can need: `str.isdigit` is true
for `²` and `٣`, which `int()` refuses or reads as a digit, and `int()` refuses a string of
more than 4,300 digits; either would otherwise be a 500.
"""

from __future__ import annotations

from nexus.apps.sfcrm.errors import bad_request, not_found

#: More digits than any bound a resource has (the largest is 2,147,483,647 in SOQL).
MAX_DIGITS = 10
#: Runtime's bound on an object name; a longer one names no object.
MAX_OBJECT_NAME = 80


def whole_number(raw: str) -> int | None:
    """`raw` as a whole number, or None when it is not one written in ASCII digits."""
    text = raw.strip()
    if not text or len(text) > MAX_DIGITS or not (text.isascii() and text.isdigit()):
        return None
    return int(text)


def count_param(raw: str | None, name: str, *, default: int, low: int, high: int) -> int:
    """A query parameter that is a whole number from `low` to `high` (`default` if absent);
    anything else is 400 INVALID_QUERY_PARAMETER_VALUE naming it."""
    if raw is None:
        return default
    value = whole_number(raw)
    if value is None or not low <= value <= high:
        raise bad_request(
            "INVALID_QUERY_PARAMETER_VALUE", f"{name} is a number from {low} to {high}", [name]
        )
    return value


def object_in_path(name: str) -> str:
    """An object name from a path; one no object can have is Salesforce's NOT_FOUND, as an
    object the caller cannot see (never Runtime's refusal of the call's shape)."""
    if not 0 < len(name) <= MAX_OBJECT_NAME:
        raise not_found()
    return name

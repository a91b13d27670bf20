"""Whole-number parameters and object names the dialect's resources parse alike
(nexus/apps/sfcrm/params.py): what `str.isdigit` takes and `int` refuses is a 400."""

from __future__ import annotations

import pytest

from nexus.apps.sfcrm.errors import SfError
from nexus.apps.sfcrm.params import count_param, object_in_path, whole_number


@pytest.mark.parametrize(
    ("raw", "value"),
    [("7", 7), (" 25 ", 25), ("0", 0), ("2147483647", 2147483647)],
)
def test_whole_numbers(raw: str, value: int) -> None:
    assert whole_number(raw) == value


@pytest.mark.parametrize("raw", ["", " ", "²", "٣", "\uff11", "-1", "+1", "1.0", "1e3", "9" * 11])
def test_what_is_no_whole_number(raw: str) -> None:
    assert whole_number(raw) is None


def test_count_param_bounds_and_names_the_parameter() -> None:
    assert count_param(None, "limit", default=25, low=1, high=2000) == 25
    assert count_param("2000", "limit", default=25, low=1, high=2000) == 2000
    for raw in ("0", "2001", "²", "9" * 5000):
        with pytest.raises(SfError) as refused:
            count_param(raw, "limit", default=25, low=1, high=2000)
        assert (refused.value.status, refused.value.code) == (400, "INVALID_QUERY_PARAMETER_VALUE")
        assert refused.value.body()[0]["fields"] == ["limit"]


def test_an_object_name_no_object_can_have_is_not_found() -> None:
    assert object_in_path("Account") == "Account"
    for name in ("", "A" * 81):
        with pytest.raises(SfError) as refused:
            object_in_path(name)
        assert (refused.value.status, refused.value.code) == (404, "NOT_FOUND")

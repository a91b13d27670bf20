"""The CSV downloads' cell rule: formulas neutralised, numbers and phone numbers kept, CR/LF
quoted, and what a CSV reader gets back is the intended text."""

from __future__ import annotations

import csv
import io

import pytest

from nexus.apps.sfcrm.csv_export import csv_cell, csv_text


def read(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


@pytest.mark.parametrize(
    "value",
    [
        '=HYPERLINK("http://x","y")',
        "=1+1",
        "+HYPERLINK(1)",
        "+1 555 CALL",
        "+1+cmd|' /C calc'!A0",
        "-2+3+cmd|' /C calc'!A0",
        "-x",
        "- 5",
        "-1,5",
        "@SUM(A1:A2)",
        "\t=1+1",
        "\tplain",
        "\r=1+1",
        "\rplain",
    ],
)
def test_a_cell_a_spreadsheet_would_run_gets_a_leading_quote(value: str) -> None:
    assert csv_cell(value) == "'" + value
    assert read(csv_text(["h"], [[value]]))[1] == ["'" + value]


@pytest.mark.parametrize(
    "value",
    [
        "+15550100",
        "+1 555 0100",
        "+1 (555) 010-0100",
        "+44 20 7946.0958",
        "-12.5",
        "+3",
        "-.5",
        "-1e-07",
        "plain text",
        "a=b",
        "",
    ],
)
def test_numbers_phone_numbers_and_plain_text_stay_as_they_are(value: str) -> None:
    assert csv_cell(value) == value
    assert read(csv_text(["h"], [[value]]))[1] == [value]


def test_non_text_values() -> None:
    assert [csv_cell(v) for v in (None, True, False, -3, -12.5, 7)] == [
        "",
        "true",
        "false",
        "-3",
        "-12.5",
        "7",
    ]


@pytest.mark.parametrize("value", ["a\rb", "a\nb", "a\r\nb", "line\r"])
def test_a_cell_with_cr_or_lf_is_quoted_and_reads_back_whole(value: str) -> None:
    text = csv_text(["h", "next"], [[value, "z"]])
    assert f'"{value}",z\r\n' in text
    assert read(text) == [["h", "next"], [value, "z"]]


def test_rows_end_with_crlf_and_the_header_is_neutralised_too() -> None:
    text = csv_text(["=Label", "Name"], [["Ada, Countess", 'say "hi"'], [None, 1]])
    assert text == '\'=Label,Name\r\n"Ada, Countess","say ""hi"""\r\n,1\r\n'
    assert read(text) == [["'=Label", "Name"], ["Ada, Countess", 'say "hi"'], ["", "1"]]

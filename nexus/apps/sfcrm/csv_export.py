"""CSV downloads (list export, import error report) that a spreadsheet opens as plain text.

Formula injection (OWASP "CSV Injection"): a spreadsheet runs a cell that begins with `=`,
`+`, `-`, `@`, TAB or CR as a formula (`=HYPERLINK(...)`, `@SUM(...)`, DDE `-2+3+cmd|...`).
`csv_cell` prefixes such a cell with `'`, which spreadsheets show as text, except when a cell
starting with `+` or `-` is all a number or a phone number:

- `[+-]` and a plain decimal number, optionally with an exponent: `-12.5`, `+3`, `-1e-07`;
- `+` and a phone number made of ASCII digits, spaces, `(`, `)`, `.` and `-` only, with at
  least one digit: `+15550100`, `+1 555 0100`, `+1 (555) 010-0100`.

Those stay as they are: with no letter, `!`, `|`, `:`, `$`, quote or bracket, a "formula" can
only do arithmetic on literals; it cannot call a function, reference a cell, range, sheet or
name, or reach a DDE server. Anything else starting with one of the six characters is
neutralised (`-x`, `+1 555 CALL`, `- 5`, `@x`, a leading TAB or CR).

`csv_text` writes every cell (the header too) through `csv_cell`, quoted as needed
(`QUOTE_MINIMAL`), with CRLF row ends as RFC 4180 has them: Python's csv module then quotes
any cell holding CR or LF (with a bare-LF terminator it would leave a lone CR unquoted,
which a reader takes as a row break).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Sequence
from typing import Any

#: The first characters that make a spreadsheet read a cell as a formula (OWASP).
FORMULA_LEADS = frozenset("=+-@\t\r")
_NUMBER = re.compile(r"[+-](?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_PHONE = re.compile(r"\+[0-9 ().-]*[0-9][0-9 ().-]*")


def csv_cell(value: Any) -> str:
    """The text of one CSV cell: `None` is empty, booleans are `true`/`false`, and a value a
    spreadsheet would run as a formula gets a leading `'` (module docstring)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if text[:1] not in FORMULA_LEADS or _NUMBER.fullmatch(text) or _PHONE.fullmatch(text):
        return text
    return "'" + text


def csv_text(header: Sequence[Any], rows: Iterable[Sequence[Any]]) -> str:
    """A whole CSV document: the header row, then the rows, every cell through `csv_cell`."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n", quoting=csv.QUOTE_MINIMAL)
    writer.writerow([csv_cell(v) for v in header])
    writer.writerows([csv_cell(v) for v in row] for row in rows)
    return out.getvalue()

"""Text from a results file is data, never markup or a formula: escaping for each format opbench writes.

HTML is escaped by Jinja2's autoescaping (opbench.report.render turns it on whatever the template's name).
Markdown: `md()` makes a value inert inside a table cell (no HTML, no link or image, no emphasis, no cell
break). CSV: `csv_cell()` neutralises a text cell that a spreadsheet would run as a formula (OWASP's rule:
a leading '=', '+', '-', '@', tab or carriage return gets a leading apostrophe); numbers stay numbers.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from typing import Any

_MD = {
    "\\": "\\\\",
    "`": "\\`",
    "*": "\\*",
    "_": "\\_",
    "[": "\\[",
    "]": "\\]",
    "|": "\\|",
    "!": "\\!",
    "#": "\\#",
    "~": "\\~",
    "<": "&lt;",
    ">": "&gt;",
    "&": "&amp;",
    "\r": " ",
    "\n": " ",
}
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def md(value: object) -> str:
    """str(value) safe inside a Markdown table cell or heading."""
    return "".join(_MD.get(ch, ch) for ch in str(value))


def csv_cell(value: object) -> object:
    """A CSV cell that no spreadsheet evaluates: text starting like a formula gets a leading apostrophe."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def csv_text(columns: Iterable[str], rows: Iterable[Mapping[str, Any]]) -> str:
    """CSV with a header row; every text cell neutralised; keys missing from a row are empty."""
    cols = list(columns)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    for row in rows:
        w.writerow({k: csv_cell(row.get(k)) for k in cols})
    return buf.getvalue()

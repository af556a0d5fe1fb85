"""`opbench ab` on the terminal: progress while the sides run, then one row per case with its speed-up,
interval and verdict, and the summary."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from opbench.display.sweep import RichObserver
from opbench.documents import ResultsDoc
from opbench.texts import format_seconds, speedup_text, summary_text

STYLES = {"FASTER": "bold green", "SLOWER": "bold red", "SAME": "", "AMBIGUOUS": "yellow", "FAILED": "red"}


class AbObserver(RichObserver):
    """The sweep's progress; the results files are named at the end with the verdicts, not as tables."""

    def sweep_finished(self, doc: ResultsDoc, paths: dict[str, Path]) -> None:
        return None


def ab_table(result: Mapping[str, Any]) -> Table:
    table = Table(
        title=f"A = {result['a']}, B = {result['b']}: speed-up = time A / time B",
        title_justify="left",
        header_style="bold",
    )
    for col in (
        "op",
        "shape",
        "dtype",
        "A median",
        "B median",
        "speed-up [95% CI]",
        "verdict",
        "flags / reason",
    ):
        table.add_column(col, no_wrap=col not in ("flags / reason",))
    for r in result["rows"]:
        times = [
            format_seconds(s["median_s"]) if s.get("median_s") else s["status"] for s in (r["a"], r["b"])
        ]
        flags = [
            f"{side}: {', '.join(r[k]['flags'])}" for side, k in (("A", "a"), ("B", "b")) if r[k].get("flags")
        ]
        note = "; ".join([*flags, *([r["reason"]] if r.get("reason") else [])])
        table.add_row(
            r["op"], r["label"], r["dtype"], times[0], times[1], speedup_text(r),
            Text(r["verdict"], style=STYLES[r["verdict"]]), Text(note, style="magenta") if note else "",
        )  # fmt: skip
    return table


def print_ab(console: Console, result: Mapping[str, Any], paths: dict[str, Path]) -> None:
    console.print(ab_table(result))
    console.print(summary_text(result), soft_wrap=True)
    for path in [*result["results"], *map(str, paths.values())]:
        console.print(path, soft_wrap=True)

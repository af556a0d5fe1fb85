"""`opbench compare` and `opbench suites` on the terminal."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from opbench.documents import CompareResult
from opbench.texts import change_text, format_seconds, ratio_text, util_text

VERDICT_STYLES = {"regression": "bold red", "improvement": "bold green"}


def compare_table(result: CompareResult, old: str, new: str, threshold: float) -> Table:
    """One row per case of a comparison (report/compare.py), its verdict coloured."""
    table = Table(
        title=f"{old} -> {new} (significant: over {100 * threshold:.0f}% and outside both runs' IQRs)",
        title_justify="left",
        header_style="bold",
    )
    for col in (
        *("op", "shape", "dtype", "backend", "old", "new", "GFLOPS change", "noise old/new"),
        *("util old/new", "machine new/old", "flags new", "verdict"),
    ):
        table.add_column(col)
    for r in result["rows"]:
        measured = (
            [
                format_seconds(r["old_median_s"]),
                format_seconds(r["new_median_s"]),
                change_text(r),
                f"{100 * r['old_rel_iqr']:.1f}% / {100 * r['new_rel_iqr']:.1f}%",
                util_text(r),
                ratio_text(r.get("reference_ratio")),
                r["new_flags"].replace(";", ", ") or "-",
            ]
            if "time_ratio" in r
            else ["-"] * 7
        )
        verdict = r["verdict"] + (f" ({r['note']})" if r.get("note") else "")
        table.add_row(
            r["op"],
            r["shape"],
            r["dtype"],
            r["backend"],
            *measured,
            Text(verdict, style=VERDICT_STYLES.get(r["verdict"], "")),
        )
    return table


def suites_table(suites: list[Any]) -> Table:
    """The built-in suites (specs.load_suite): their sweeps and descriptions."""
    table = Table(
        title="built-in suites (opbench sweep --suite NAME [--scale F])",
        title_justify="left",
        header_style="bold",
        show_lines=True,
    )
    for col in ("suite", "sweeps", "description"):
        table.add_column(col)
    for name, spec in suites:
        sweeps = "\n".join(f"{p.op.name}: {len(p.shapes)} shapes ({p.mode})" for p in spec.plans)
        table.add_row(name, sweeps, spec.description + (f"\nsource: {spec.source}" if spec.source else ""))
    return table

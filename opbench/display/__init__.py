"""Terminal output with rich, one module per command's tables: sweep (results table and summary), peak,
tune (trials, confirmation, history, studies) and report (compare, suites). The CLI gathers the data and
prints what these build; nothing here measures or reads files. The formatting helpers below are shared
with the report's Markdown and HTML."""

from __future__ import annotations

from typing import Any


def format_seconds(s: float | None) -> str:
    """Three significant digits in the largest unit that keeps the number >= 1 (no '1e+03 us')."""
    if s is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if float(f"{s / scale:.3g}") >= 1 or unit == "ns":
            return f"{s / scale:.3g} {unit}"
    raise AssertionError("unreachable")


def spread(t: dict[str, Any]) -> float:
    """What the stability class rests on: the larger of the within-round IQR and the between-round spread
    (relative to the median); the IQR of all samples for files without rounds."""
    if "rel_iqr_within" in t:
        return float(max(t["rel_iqr_within"], t["rel_spread_rounds"]))
    return float(t["rel_iqr"])


def util_text(r: dict[str, Any]) -> str:
    """A compare row's utilization, old / new."""
    o, n = r.get("old_utilization"), r.get("new_utilization")
    return f"{100 * o:.1f}% / {100 * n:.1f}%" if o is not None and n is not None else "-"


def ratio_text(x: float | None) -> str:
    return f"{100 * x:.0f}%" if x is not None else "-"


def tiles_text(tiles: dict[str, int] | None) -> str:
    return " ".join(f"{k}={v}" for k, v in (tiles or {}).items()) or "cache-model default"

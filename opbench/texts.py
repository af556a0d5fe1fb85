"""How numbers read, in the terminal's tables (display/) and the report's Markdown and HTML (report/)
alike: times, spreads, ratios, tilings, and an A/B or compare row's speed-up with its doubt mark."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opbench.case import DOUBT_MARK, marked
from opbench.documents import CompareRow, Scalar
from opbench.record_blocks import TimeBlock
from opbench.tuning_documents import PortfolioDoc


def format_seconds(s: float | None) -> str:
    """Three significant digits in the largest unit that keeps the number >= 1 (no '1e+03 us')."""
    if s is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if float(f"{s / scale:.3g}") >= 1 or unit == "ns":
            return f"{s / scale:.3g} {unit}"
    raise AssertionError("unreachable")


def spread(t: TimeBlock) -> float:
    """What the stability class rests on: the larger of the within-round IQR and the between-round spread
    (relative to the median); the IQR of all samples for files without rounds."""
    if "rel_iqr_within" in t:
        return float(max(t["rel_iqr_within"], t.get("rel_spread_rounds", 0.0)))
    return float(t["rel_iqr"])


def util_text(r: CompareRow) -> str:
    """A compare row's utilization, old / new."""
    o, n = r.get("old_utilization"), r.get("new_utilization")
    return f"{100 * o:.1f}% / {100 * n:.1f}%" if o is not None and n is not None else "-"


def ratio_text(x: float | None) -> str:
    return f"{100 * x:.0f}%" if x is not None else "-"


def tiles_text(tiles: Mapping[str, Scalar] | None) -> str:
    return " ".join(f"{k}={v}" for k, v in (tiles or {}).items()) or "cache-model default"


def speedup_text(row: Mapping[str, Any]) -> str:
    if row["speedup"] is None:
        return "-"
    lo, hi = (factor_text(x)[:-1] for x in row["speedup_ci"])
    return f"{factor_text(row['speedup'])}{marked(row.get('doubts') or ())} [{lo}, {hi}]"


def factor_text(x: float) -> str:
    """1.014x, 0.881x; three significant digits only far from 1 (0.000372x, 1.24e+03x)."""
    return f"{x:.3f}x" if 0.01 <= x < 100 else f"{x:.3g}x"


def summary_text(result: Mapping[str, Any]) -> str:
    s = result["summary"]
    counts = ", ".join(f"{v} {n}" for v, n in s["counts"].items() if n)
    geo = "-" if s["geomean_speedup"] is None else factor_text(s["geomean_speedup"])
    if s.get("geomean_flagged"):
        geo += f" ({s['geomean_flagged']} of {s['geomean_cases']} flagged {DOUBT_MARK})"
    fast = ", ".join(f"fast_{p} {100 * v:.0f}%" for p, v in s["fast_p"].items())
    return (
        f"B ({result['b']}) against A ({result['a']}), {s['cases']} case(s): geomean speed-up {geo}; "
        f"{counts}; "
        f"{fast}; threshold ±{100 * result['threshold']:.1f}% ({result['threshold_source']}; the run's noise "
        f"{100 * result['noise']:.1f}%)"
    )


def change_text(row: CompareRow) -> str:
    """A compared case's GFLOPS change, marked where either run flagged the case."""
    return f"{100 * row['gflops_change']:+.1f}%" + marked(row.get("doubts") or "")


def loss_text(speed: float) -> str:
    """The time a relative speed loses against the best, "3.0%" ("failed" for 0: a shape no member ran)."""
    return "failed" if speed <= 0 else f"{1 / speed - 1:.1%}"


def speed_text(speed: float | None) -> str:
    """A relative speed (own best's time / this time) and the time it loses: "0.971 (+3.0%)"."""
    if speed is None:
        return "-"
    return "failed" if speed <= 0 else f"{speed:.3f} ({1 / speed - 1:+.1%})"


def portfolio_lines(doc: PortfolioDoc) -> list[str]:
    """The geomeans, the curve over K and the cost."""
    lines = [
        f"searched shapes, count-weighted geomean speed against each shape's own best: portfolio "
        f"{speed_text(doc['speed'])}, cache-model default {speed_text(doc['default_speed'])}"
    ]
    if conf := doc.get("confirmed"):
        lines.append(
            f"the same, confirmed in interleaved rounds: portfolio {speed_text(conf.get('speed'))}, default "
            f"{speed_text(conf.get('default_speed'))}"
            + (
                f"; held out: portfolio {speed_text(conf['holdout_speed'])}, default "
                f"{speed_text(conf.get('holdout_default_speed'))}"
                if "holdout_speed" in conf
                else ""
            )
        )
    if doc.get("holdout_speed") is not None:
        lines.append(
            f"held-out shapes (the rule: the nearest searched shape's tiling): portfolio "
            f"{speed_text(doc['holdout_speed'])}, default {speed_text(doc.get('holdout_default_speed'))}"
        )
    fallbacks = sum(bool(r.get("fallback")) for r in doc["shapes"])
    if fallbacks:
        lines.append(
            f"{fallbacks} shape(s) fall back to the cache-model default: their member was not confirmed "
            "faster beyond both 95% intervals"
        )
    curve = ", ".join(f"K={int(c['k'])} {loss_text(c['speed'])}" for c in doc["curve"])
    lines.append(
        f"loss against each shape's own best by portfolio size (a cell the search did not measure "
        f"estimated from nearby shapes): {curve}"
    )
    lines.append(
        f"cost: {doc['measurements']} measurements; measuring every searched shape x every tiling chosen "
        f"among would take {doc['grid_cells']}"
    )
    return lines


def point_label(point: Mapping[str, Scalar] | None) -> str:
    """A tiling, short (a portfolio's heat map columns): "m=96,n=64,k=64" for tile_m..., "default" for the
    cache model's."""
    if not point:
        return "default"
    return ",".join(f"{k.removeprefix('tile_')}={v}" for k, v in point.items())

"""Comparing two sweep result files case by case. A change counts as significant only when it is larger than
--threshold and the two runs' interquartile ranges of per-call time do not overlap, so a noisy case is never
called a regression because of its noise."""

from __future__ import annotations

from typing import Any

import numpy as np

from opbench.escape import csv_text, md


def _quartiles(record: dict[str, Any]) -> tuple[float, float, float]:
    t = record["time"]
    samples = t.get("samples_s") or [t["median_s"]]
    q25, q50, q75 = np.percentile(np.asarray(samples, dtype=np.float64), [25, 50, 75])
    return float(q25), float(q50), float(q75)


def _key(r: dict[str, Any]) -> tuple[str, str, str, str]:
    return (r["op"], r["label"], r["dtype"], r["backend"])


def compare(old: dict[str, Any], new: dict[str, Any], threshold: float) -> dict[str, Any]:
    """Rows per case present in either run, with verdict regression / improvement / unchanged /
    not comparable / only in old / only in new; plus warnings about differing machines or settings."""
    olds = {_key(r): r for r in old["records"]}
    news = {_key(r): r for r in new["records"]}
    rows = []
    for key in list(dict.fromkeys([*olds, *news])):
        o, n = olds.get(key), news.get(key)
        row: dict[str, Any] = {"op": key[0], "shape": key[1], "dtype": key[2], "backend": key[3]}
        if o is None or n is None:
            row["verdict"] = "only in new" if o is None else "only in old"
        elif o["status"] != "ok" or n["status"] != "ok":
            row["verdict"] = "not comparable"
            row["note"] = f"old {o['status']}, new {n['status']}"
        else:
            oq, nq = _quartiles(o), _quartiles(n)
            ratio = nq[1] / oq[1]  # > 1: the new run is slower
            overlap = oq[0] <= nq[2] and nq[0] <= oq[2]
            significant = abs(ratio - 1.0) > threshold and not overlap
            row.update(
                {
                    "old_median_s": oq[1],
                    "new_median_s": nq[1],
                    "time_ratio": ratio,
                    "gflops_change": oq[1] / nq[1] - 1.0,
                    "old_rel_iqr": (oq[2] - oq[0]) / oq[1],
                    "new_rel_iqr": (nq[2] - nq[0]) / nq[1],
                    "verdict": ("regression" if ratio > 1 else "improvement") if significant else "unchanged",
                }
            )
            if not significant and abs(ratio - 1.0) > threshold:
                row["note"] = "within the runs' noise (IQRs overlap)"
        rows.append(row)
    warnings = []
    om, nm = old.get("machine", {}), new.get("machine", {})
    if om.get("cpu_model") != nm.get("cpu_model"):
        warnings.append(f"different CPUs: {om.get('cpu_model')} vs {nm.get('cpu_model')}")
    ot, nt = (old.get("settings") or {}).get("threads"), (new.get("settings") or {}).get("threads")
    if ot != nt:
        warnings.append(f"different thread counts: {ot} vs {nt}")
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("regression", "improvement", "unchanged")}
    return {
        "old": old.get("_path"),
        "new": new.get("_path"),
        "threshold": threshold,
        "rows": rows,
        "warnings": warnings,
        "counts": counts,
    }


def to_markdown(result: dict[str, Any]) -> str:
    out = [
        f"# opbench compare: {md(result['old'])} -> {md(result['new'])}",
        "",
        f"Significant: change over {100 * result['threshold']:.0f}% with the runs' IQRs not overlapping.",
        "",
    ]
    out += [f"- warning: {md(w)}" for w in result["warnings"]]
    out += [
        "",
        "| op | shape | dtype | backend | old median (s) | new median (s) | GFLOPS change | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        case = " | ".join(md(r[k]) for k in ("op", "shape", "dtype", "backend"))
        if "time_ratio" in r:
            out.append(
                f"| {case} | {r['old_median_s']:.4g} | "
                f"{r['new_median_s']:.4g} | {100 * r['gflops_change']:+.1f}% | {md(r['verdict'])} |"
            )
        else:
            out.append(f"| {case} | - | - | - | {md(r['verdict'])} |")
    return "\n".join(out) + "\n"


CSV_COLUMNS = (
    "op",
    "shape",
    "dtype",
    "backend",
    "old_median_s",
    "new_median_s",
    "time_ratio",
    "gflops_change",
    "old_rel_iqr",
    "new_rel_iqr",
    "verdict",
    "note",
)


def to_csv(result: dict[str, Any]) -> str:
    return csv_text(CSV_COLUMNS, result["rows"])

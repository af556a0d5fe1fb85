"""Comparing two sweep result files case by case. A change counts as significant only when it is larger than
--threshold, the two runs' interquartile ranges of per-call time do not overlap (so a noisy case is never
called a regression because of its noise), and, where both runs carry an in-run reference (reference.py),
the time normalised by the machine's speed changed by more than --threshold too: a case that got slower
exactly as much as the machine's own probe did is not a change of the code. A case measured with our CPUs
apart (flag `apart`) in one run and not the other is not comparable: the placement alone moves a case
that passes data between threads often by more than any threshold. A case measured in several processes
(--processes) changed only when the two runs' ranges over their processes (every process's median and
the bootstrap interval over processes) do not overlap either."""

from __future__ import annotations

import numpy as np

from opbench.case import DOUBT_MARK, Result, Status, named_doubts
from opbench.documents import CompareResult, CompareRow, ResultsDoc
from opbench.escape import csv_text, md
from opbench.guards import DISTRUST_FLAGS
from opbench.history import process_range
from opbench.machine import identity_label
from opbench.texts import change_text, ratio_text, util_text

# The two runs' in-run references differing by more than this is worth a warning.
MACHINE_SPEED_WARN = 0.10


def _quartiles(r: Result) -> tuple[float, float, float]:
    assert r.time is not None, "compared cases are ok, and an ok case has a time"
    samples = r.time.samples_s or [r.time.median_s]
    q25, q50, q75 = np.percentile(np.asarray(samples, dtype=np.float64), [25, 50, 75])
    return float(q25), float(q50), float(q75)


def _process_range(r: Result) -> tuple[float, float] | None:
    """Where a case measured in several processes could have landed (the bootstrap interval of its median
    over processes, and every process's median); None for one measured in one process."""
    t = r.time
    if t is None or len(t.per_process or ()) < 2 or not t.interval_s:
        return None
    low, high = process_range({"time": t.to_block()})
    return min(low, t.interval_s[0]), max(high, t.interval_s[1])


def reference_value(r: Result) -> float | None:
    """The in-run reference a result's machine_speed rests on (FMA GFLOPS, or triad GB/s for a memory-bound
    case); None for records without one (older files, GPUs)."""
    ref = r.reference
    if ref is None:
        return None
    value = ref.triad_gbs if ref.basis == "triad" else ref.fma_gflops
    return value if value is not None and value > 0 else None


def _apart(r: Result) -> bool:
    return "apart" in r.flags


def _key(r: Result) -> tuple[str, str, str, str]:
    return (r.case.op.name, r.case.label, r.case.dtype, r.case.backend)


def compare(old: ResultsDoc, new: ResultsDoc, threshold: float) -> CompareResult:
    """Rows per case present in either run, with verdict regression / improvement / unchanged /
    not comparable / only in old / only in new; plus warnings about differing machines or settings."""
    olds = {_key(r): r for r in map(Result.from_record, old["records"])}
    news = {_key(r): r for r in map(Result.from_record, new["records"])}
    rows = []
    for key in list(dict.fromkeys([*olds, *news])):
        o, n = olds.get(key), news.get(key)
        row: CompareRow = {"op": key[0], "shape": key[1], "dtype": key[2], "backend": key[3]}
        if o is None or n is None:
            row["verdict"] = "only in new" if o is None else "only in old"
        elif o.status is not Status.OK or n.status is not Status.OK:
            row["verdict"] = "not comparable"
            row["note"] = f"old {o.status.value}, new {n.status.value}"
        else:
            oq, nq = _quartiles(o), _quartiles(n)
            ratio = nq[1] / oq[1]  # > 1: the new run is slower
            overlap = oq[0] <= nq[2] and nq[0] <= oq[2]
            # With several processes a run's range spans its processes: a case that only moved as much as
            # one process differs from another (issue 39) is no change.
            o_range, n_range = _process_range(o), _process_range(n)
            lo_o, hi_o = (min(oq[0], o_range[0]), max(oq[2], o_range[1])) if o_range else (oq[0], oq[2])
            lo_n, hi_n = (min(nq[0], n_range[0]), max(nq[2], n_range[1])) if n_range else (nq[0], nq[2])
            between = not overlap and lo_o <= hi_n and lo_n <= hi_o
            significant = abs(ratio - 1.0) > threshold and not overlap and not between
            o_ref, n_ref = reference_value(o), reference_value(n)
            ref_ratio = n_ref / o_ref if o_ref and n_ref else None  # < 1: the machine ran slower in new
            norm = ratio * ref_ratio if ref_ratio is not None else None  # time at equal machine speed
            machine_moved = (
                significant
                and norm is not None
                and not (abs(norm - 1.0) > threshold and (norm > 1) == (ratio > 1))
            )
            # Measured with our CPUs apart in one run only (reference.py's hand-off probe): the placement
            # alone moved an LSTM by 1.3-2x, so the change says nothing about the code.
            placement_moved = significant and not machine_moved and _apart(o) != _apart(n)
            # An improvement the new run's guards distrust (guards.py) is never reported as one.
            distrusted = sorted(set(n.flags) & set(DISTRUST_FLAGS))
            too_good = significant and not machine_moved and not placement_moved and ratio < 1 and distrusted
            row.update(
                {
                    "old_median_s": oq[1],
                    "new_median_s": nq[1],
                    "time_ratio": ratio,
                    "gflops_change": oq[1] / nq[1] - 1.0,
                    "old_rel_iqr": (oq[2] - oq[0]) / oq[1],
                    "new_rel_iqr": (nq[2] - nq[0]) / nq[1],
                    "old_utilization": o.utilization,
                    "new_utilization": n.utilization,
                    "reference_ratio": ref_ratio,
                    "normalised_time_ratio": norm,
                    "old_flags": ";".join(o.flags),
                    "new_flags": ";".join(n.flags),
                    # the flags that put the change in doubt (case.doubts), of either run
                    "doubts": ";".join(named_doubts(("old", o.flags), ("new", n.flags))),
                    "verdict": "not comparable"
                    if placement_moved or too_good
                    else ("regression" if ratio > 1 else "improvement")
                    if significant and not machine_moved
                    else "unchanged",
                }
            )
            if machine_moved:
                assert ref_ratio is not None
                row["note"] = (
                    f"the machine's in-run reference moved by as much ({100 * (ref_ratio - 1):+.0f}%): "
                    "at equal machine speed the change is within the threshold"
                )
            elif too_good:
                row["note"] = (
                    f"the new run flags this case {', '.join(distrusted)} (too good to be true: its notes "
                    "say why); not counted as an improvement"
                )
            elif placement_moved:
                row["note"] = (
                    f"measured only with our CPUs apart in the {'new' if _apart(n) else 'old'} run (flag "
                    "apart: the hypervisor placed our vCPUs on distant cores), not in the other; run again"
                )
            elif between and abs(ratio - 1.0) > threshold:
                row["note"] = (
                    "within the spread between the runs' processes (time.per_process, time.interval_s): "
                    "the case moved as much as one fresh process differs from another"
                )
            elif not significant and abs(ratio - 1.0) > threshold:
                row["note"] = "within the runs' noise (IQRs overlap)"
        rows.append(row)
    warnings = []
    om, nm = old.get("machine", {}), new.get("machine", {})
    oi, ni = om.get("identity"), nm.get("identity")
    if oi and ni and oi != ni:
        diff = sorted(k for k in set(oi) | set(ni) if oi.get(k) != ni.get(k))
        warnings.append(
            f"different machines: {identity_label(oi)} vs {identity_label(ni)} (differ in {', '.join(diff)})"
        )
    elif om.get("cpu_model") != nm.get("cpu_model"):
        warnings.append(f"different CPUs: {om.get('cpu_model')} vs {nm.get('cpu_model')}")
    ratios = sorted(x for r in rows if (x := r.get("reference_ratio")) is not None)
    machine_speed_ratio = ratios[len(ratios) // 2] if ratios else None
    if machine_speed_ratio is not None and abs(machine_speed_ratio - 1.0) > MACHINE_SPEED_WARN:
        warnings.append(
            f"the machines ran at different speeds: the new run's in-run reference is "
            f"{100 * machine_speed_ratio:.0f}% of the old run's (median over cases); compare the "
            "utilization columns, which are normalised by it"
        )
    ot, nt = (old.get("settings") or {}).get("threads"), (new.get("settings") or {}).get("threads")
    if ot != nt:
        warnings.append(f"different thread counts: {ot} vs {nt}")
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("regression", "improvement", "unchanged")}
    return {
        "machine_speed_ratio": machine_speed_ratio,
        "old": old.get("_path"),
        "new": new.get("_path"),
        "threshold": threshold,
        "rows": rows,
        "warnings": warnings,
        "counts": counts,
        "flagged": sum(bool(r.get("doubts")) for r in rows),  # changes measured on a flagged case
    }


def to_markdown(result: CompareResult) -> str:
    out = [
        f"# opbench compare: {md(result['old'])} -> {md(result['new'])}",
        "",
        f"Significant: change over {100 * result['threshold']:.0f}% with the runs' IQRs not overlapping.",
        "",
    ]
    out += [f"- warning: {md(w)}" for w in result["warnings"]]
    if result.get("flagged"):
        out += [
            f"- {DOUBT_MARK} {result['flagged']} change(s) measured on a case flagged in either "
            "run (the flags columns say which)"
        ]
    out += [
        "",
        "| op | shape | dtype | backend | old median (s) | new median (s) | GFLOPS change | util old / new "
        "| machine new/old | flags old / new | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        case = " | ".join(md(r[k]) for k in ("op", "shape", "dtype", "backend"))
        if "time_ratio" in r:
            out.append(
                f"| {case} | {r['old_median_s']:.4g} | "
                f"{r['new_median_s']:.4g} | {change_text(r)} | {util_text(r)} | "
                f"{ratio_text(r.get('reference_ratio'))} | {md(r['old_flags']) or '-'} / "
                f"{md(r['new_flags']) or '-'} | {md(r['verdict'])} |"
            )
        else:
            out.append(f"| {case} | - | - | - | - | - | - | {md(r['verdict'])} |")
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
    "old_utilization",
    "new_utilization",
    "reference_ratio",
    "normalised_time_ratio",
    "old_flags",
    "new_flags",
    "doubts",
    "verdict",
    "note",
)


def to_csv(result: CompareResult) -> str:
    return csv_text(CSV_COLUMNS, result["rows"])

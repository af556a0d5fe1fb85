"""A/B verdicts (`opbench ab`): each case's speed of side B relative to side A, with a bootstrap 95%
interval, and a verdict, from the records of one run in which both sides were visited back to back in
every round (sweep.SweepConfig.paired).

The speed-up is time A / time B (> 1: B is faster), the ratio of the two sides' median per-call times over
every sample. Its interval comes from a paired, two-level bootstrap: rounds are drawn with replacement,
the same rounds for both sides (a round's A and B ran seconds apart, so a machine that slowed down during
the run slows both), then samples within each drawn round; where the sides ran in several processes
(--processes), the rounds' processes are drawn first, so that a case that only moved between processes
is SAME or AMBIGUOUS. The verdict on B, after nvbench's compare:
  FASTER     the whole interval lies above 1 + threshold
  SLOWER     the whole interval lies below 1 / (1 + threshold)
  SAME       the whole interval lies within [1 / (1 + threshold), 1 + threshold]
  AMBIGUOUS  the interval straddles a bound; or the machine's in-run reference moved by more than the
             threshold between the two sides' visits of a round (median over rounds) and the verdict at
             equal machine speed would be another; or B would be FASTER but is flagged suspect or
             mistrusted (never counted as faster)
  FAILED     a side has no measurement (skipped, failed, wrong answer)
The threshold defaults to the noise the run measured: the median over cases and sides of the larger of the
relative IQR of a side's samples and the spread of its round medians, and at least NOISE_FLOOR.
fast_p (KernelBench) is the share of all cases in which B is correct (verified or not checked, neither
suspect nor mistrusted) and faster than A by more than a factor p (a case whose A failed has no speed-up and
does not count). `b_failed` counts the cases in which B itself has no measurement (`--fail-on failed`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any, TypedDict

import numpy as np

from opbench.blocks import Time
from opbench.case import Result, Status, named_doubts
from opbench.documents import Scalar
from opbench.dtypes import Array
from opbench.escape import csv_text, md
from opbench.guards import DISTRUST_FLAGS
from opbench.texts import speedup_text, summary_text

VERDICTS = ("FASTER", "SLOWER", "SAME", "AMBIGUOUS", "FAILED")


class AbSide(TypedDict, total=False):
    """One side of a case as the A/B document shows it ({"status": "missing"} where it has no record)."""

    backend: str
    status: str
    reason: str | None
    median_s: float | None
    gflops: float | None
    utilization: float | None
    peak: str | None
    flags: list[str]
    verify_ok: bool | None
    repro: str | None


# One case of an A/B run: its sides, the speed-up with its interval, the verdict and why ("pass" is a
# keyword, hence the functional form).
AbRow = TypedDict(
    "AbRow",
    {
        "op": str,
        "pass": str,
        "shape": dict[str, Scalar],
        "label": str,
        "dtype": str,
        "a": AbSide,
        "b": AbSide,
        "speedup": float | None,
        "speedup_ci": list[float] | None,
        "machine_b_over_a": float | None,
        "doubts": list[str],
        "verdict": str,
        "reason": str,
        "repro": str,
    },
    total=False,
)


class AbSummary(TypedDict):
    cases: int
    geomean_speedup: float | None
    geomean_flagged: int
    geomean_cases: int
    counts: dict[str, int]
    b_failed: int
    fast_p: dict[str, float]


class AbResult(TypedDict, total=False):
    """The A/B document (opbench.ab): its sides, threshold, rows and summary; the command adds the command
    line and the results files it read."""

    a: str
    b: str
    threshold: float
    threshold_source: str
    noise: float
    rows: list[AbRow]
    summary: AbSummary
    command: str
    results: list[str]


NOISE_FLOOR = 0.02
BOOTSTRAP_DRAWS = 2000
FAST_P = (1.0, 1.1, 1.5)


def round_samples(time: Time) -> list[Array | None]:
    """A record's per-call samples split by round, in visit order (None for a round the record dropped:
    throttled, or with our CPUs apart, and slower); one pool when the record does not say how they split
    (files before schema 7)."""
    samples = np.asarray(time.samples_s or (time.median_s,), dtype=np.float64)
    rounds = time.per_round or ()
    sizes = [int(r["n_samples"]) if r.get("kept") else 0 for r in rounds]
    if not rounds or any("kept" not in r for r in rounds) or sum(sizes) != len(samples):
        return [samples]
    ends = np.cumsum(sizes)
    return [samples[e - n : e] if n else None for n, e in zip(sizes, ends, strict=True)]


def round_processes(time: Time) -> list[int | None]:
    """The worker process of each round of a record (--processes), in visit order; None where it ran in the
    sweep's own process."""
    return [r.get("process") for r in time.per_round or ()]


def speedup_interval(
    a: list[Array | None],
    b: list[Array | None],
    seed: int = 0,
    draws: int = BOOTSTRAP_DRAWS,
    processes: list[Any] | None = None,
) -> tuple[float, float, float]:
    """(speed-up, 2.5th, 97.5th percentile) of time A / time B over the rounds both sides kept, paired by
    round (visit order); a side given as one pool is paired with the other's pooled samples. `processes`:
    each round's processes (both sides'), where they ran in several: processes are drawn first, then
    rounds within each, so that the interval spans how much one fresh process differs from another."""

    def pooled(side: list[Array | None]) -> Array:
        return np.concatenate([r for r in side if r is not None])

    kept = [i for i, (ra, rb) in enumerate(zip(a, b, strict=False)) if ra is not None and rb is not None]
    both: list[tuple[Array, Array]] = [(a[i], b[i]) for i in kept]  # type: ignore[misc]
    if len(a) != len(b) or len(a) == 1 or not both:  # not split alike, or no round kept by both: pooled
        both, kept = [(pooled(a), pooled(b))], [0]
        processes = None
    pa, pb = [p[0] for p in both], [p[1] for p in both]
    point = float(np.median(np.concatenate(pa)) / np.median(np.concatenate(pb)))
    paired = len(both)
    rng = np.random.default_rng(seed)
    pick_rounds: Array | list[Array] = rng.integers(0, paired, size=(draws, paired))
    if processes is not None and len(processes) == len(a) and all(None not in p for p in processes):
        members: dict[Any, list[int]] = {}
        for j, i in enumerate(kept):
            members.setdefault(processes[i], []).append(j)
        groups = list(members.values())
        if len(groups) > 1:
            tops = rng.integers(0, len(groups), size=(draws, len(groups)))
            pick_rounds = [
                np.concatenate([rng.choice(groups[g], size=len(groups[g])) for g in tops[t]])
                for t in range(draws)
            ]

    def resampled(side: list[Array]) -> list[Array]:  # per round: draws x its sample count
        return [r[rng.integers(0, len(r), size=(draws, len(r)))] for r in side]

    ra, rb = resampled(pa), resampled(pb)
    ratios = np.empty(draws)
    for t in range(draws):
        rounds = pick_rounds[t]
        ratios[t] = np.median(np.concatenate([ra[i][t] for i in rounds])) / np.median(
            np.concatenate([rb[i][t] for i in rounds])
        )
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    return point, float(min(lo, point)), float(max(hi, point))


def machine_moved(a: Time, b: Time) -> float | None:
    """How much faster the machine ran (its in-run reference) during B's visits than during A's of the same
    round, median over rounds (1.0: not at all); None where the records carry no reference."""
    ratios = []
    for ra, rb in zip(a.per_round or (), b.per_round or (), strict=False):
        sa, sb = ra.get("machine_speed"), rb.get("machine_speed")
        if sa and sb:
            ratios.append(sb / sa)
    return statistics.median(ratios) if ratios else None


def noise(pairs: list[tuple[Result, Result]]) -> float:
    """The run's noise: median over cases and sides of max(relative IQR, spread of round medians)."""
    values = [
        max(r.time.rel_iqr or 0.0, r.time.rel_spread_rounds or 0.0)
        for pair in pairs
        for r in pair
        if r.status is Status.OK and r.time
    ]
    return statistics.median(values) if values else 0.0


def verdict(lo: float, hi: float, threshold: float) -> str:
    """FASTER, SLOWER, SAME or AMBIGUOUS from the interval alone."""
    up, down = 1.0 + threshold, 1.0 / (1.0 + threshold)
    if lo > up:
        return "FASTER"
    if hi < down:
        return "SLOWER"
    if lo >= down and hi <= up:
        return "SAME"
    return "AMBIGUOUS"


def _correct(r: Result) -> bool:
    verified = r.verify.ok is not False if r.verify else True
    return r.status is Status.OK and verified and not set(r.flags) & set(DISTRUST_FLAGS)


def _side(r: Result | None) -> AbSide:
    if r is None:
        return {"status": "missing"}
    return {
        "backend": r.case.backend,
        "status": r.status.value,
        "reason": r.outcome.text,
        "median_s": r.time.median_s if r.time else None,
        "gflops": r.gflops,
        "utilization": r.utilization,
        "peak": r.peak.name if r.peak else None,
        "flags": list(r.flags),
        "verify_ok": r.verify.ok if r.verify else None,
        "repro": r.repro,
    }


def analyse(
    results: Sequence[Result], a_name: str, b_name: str, threshold: float | None, seed: int = 0
) -> AbResult:
    """The A/B rows (one per case: op, pass, shape, dtype) of one run's results, and the summary."""
    cases: dict[tuple[str, str, str], dict[str, Result]] = {}
    for r in results:
        cases.setdefault((r.case.op.name, r.case.label, r.case.dtype), {})[r.case.backend] = r
    pairs = [(c[a_name], c[b_name]) for c in cases.values() if a_name in c and b_name in c]
    measured = noise(pairs)
    used = threshold if threshold is not None else max(NOISE_FLOOR, measured)
    rows = []
    for (op, label, dtype), sides in cases.items():
        a, b = sides.get(a_name), sides.get(b_name)
        base = a or b
        assert base is not None
        row: AbRow = {
            "op": op, "pass": base.case.pass_name, "shape": base.case.shape_fields(), "label": label,
            "dtype": dtype, "a": _side(a), "b": _side(b), "speedup": None, "speedup_ci": None,
        }  # fmt: skip
        if a is None or b is None or a.status is not Status.OK or b.status is not Status.OK:
            failed = [f"{n} {s['status']}" + (f" ({s['reason']})" if s.get("reason") else "")
                      for n, s in (("A", row["a"]), ("B", row["b"])) if s["status"] != "ok"]  # fmt: skip
            row["verdict"], row["reason"] = "FAILED", "; ".join(failed)
            rows.append(row)
            continue
        ta, tb = a.time, b.time
        assert ta is not None and tb is not None, "an ok case has a time"
        procs = list(zip(round_processes(ta), round_processes(tb), strict=False))
        point, lo, hi = speedup_interval(round_samples(ta), round_samples(tb), seed, processes=procs or None)
        moved = machine_moved(ta, tb)
        named = named_doubts(("A", a.flags), ("B", b.flags))
        row["speedup"], row["speedup_ci"] = point, [lo, hi]
        row["machine_b_over_a"], row["doubts"] = moved, named
        v, reason = verdict(lo, hi, used), ""
        # The machine ran faster or slower during B's visits than during A's, by more than the threshold,
        # and at equal machine speed (the interval divided by that ratio) the verdict would differ.
        if (
            moved is not None
            and abs(math.log(moved)) > math.log(1.0 + used)
            and verdict(lo / moved, hi / moved, used) != v
        ):
            v, reason = (
                "AMBIGUOUS",
                f"the machine's in-run reference ran {100 * (moved - 1):+.0f}% during B's visits against A's "
                "of the same rounds",
            )
        elif v == "FASTER" and not _correct(b):
            flags = ", ".join(sorted(set(b.flags) & set(DISTRUST_FLAGS))) or "not verified correct"
            v, reason = "AMBIGUOUS", f"B is flagged {flags}: never counted as FASTER"
        row["verdict"], row["reason"] = v, reason
        rows.append(row)
    timed = [r["speedup"] for r in rows if r["speedup"]]
    counts = {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}
    b_records = [cases[(r["op"], r["label"], r["dtype"])].get(b_name) for r in rows]
    # B correct and timed beside a timed A: a case whose A failed has no speed-up to count
    correct_b = [
        s for r, b in zip(rows, b_records, strict=True)
        if b is not None and _correct(b) and (s := r["speedup"]) is not None
    ]  # fmt: skip
    fast_p = {f"{p:g}": sum(s > p for s in correct_b) / len(rows) if rows else 0.0 for p in FAST_P}
    return {
        "a": a_name,
        "b": b_name,
        "threshold": used,
        "threshold_source": "--threshold" if threshold is not None else "measured noise",
        "noise": measured,
        "rows": rows,
        "summary": {
            "cases": len(rows),
            "geomean_speedup": math.exp(statistics.fmean(math.log(s) for s in timed)) if timed else None,
            # how many of the speed-ups the geometric mean took came from a flagged side (case.doubts)
            "geomean_flagged": sum(bool(r.get("doubts")) for r in rows if r["speedup"]),
            "geomean_cases": len(timed),
            "counts": counts,
            "b_failed": sum(r["b"]["status"] != "ok" for r in rows),
            "fast_p": fast_p,
        },
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def to_markdown(result: AbResult) -> str:
    out = [f"## A/B: {md(result['b'])} (B) against {md(result['a'])} (A)", "", md(summary_text(result)), ""]
    out += [
        "| op | shape | dtype | A median (s) | B median (s) | speed-up B/A [95% CI] | verdict | flags A / B "
        "| repro |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        a, b = r["a"], r["b"]
        times = [f"{s['median_s']:.4g}" if s.get("median_s") else md(s["status"]) for s in (a, b)]
        flags = f"{md(', '.join(a.get('flags') or [])) or '-'} / {md(', '.join(b.get('flags') or [])) or '-'}"
        verdict_text = md(r["verdict"]) + (f" ({md(r['reason'])})" if r.get("reason") else "")
        out.append(
            f"| {md(r['op'])} | {md(r['label'])} | {md(r['dtype'])} | {times[0]} | {times[1]} | "
            f"{md(speedup_text(r))} | {verdict_text} | {flags} | {md(r.get('repro') or '')} |"
        )
    return "\n".join(out) + "\n"


CSV_COLUMNS = (
    *("op", "pass", "label", "dtype", "a_backend", "b_backend", "a_status", "b_status", "a_median_s"),
    *("b_median_s", "a_utilization", "b_utilization", "speedup", "speedup_lo", "speedup_hi", "verdict"),
    *("reason", "a_flags", "b_flags", "speedup_doubts", "repro"),
)


def to_csv(result: AbResult) -> str:
    rows = []
    for r in result["rows"]:
        a, b = r["a"], r["b"]
        lo, hi = r["speedup_ci"] or (None, None)
        rows.append({
            "op": r["op"], "pass": r["pass"], "label": r["label"], "dtype": r["dtype"],
            "a_backend": result["a"], "b_backend": result["b"],
            "a_status": a["status"], "b_status": b["status"],
            "a_median_s": a.get("median_s"), "b_median_s": b.get("median_s"),
            "a_utilization": a.get("utilization"), "b_utilization": b.get("utilization"),
            "speedup": r["speedup"], "speedup_lo": lo, "speedup_hi": hi, "verdict": r["verdict"],
            "reason": r.get("reason", ""), "a_flags": ";".join(a.get("flags") or []),
            "b_flags": ";".join(b.get("flags") or []), "speedup_doubts": ";".join(r.get("doubts") or []),
            "repro": r.get("repro", ""),
        })  # fmt: skip
    return csv_text(CSV_COLUMNS, rows)

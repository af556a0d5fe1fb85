"""Do opbench's numbers reproduce on this machine, and does it say so when they cannot?

Runs the default `opbench sweep gemm`, `sweep conv` and `sweep lstm` three times, each in its own process,
then once more while this script keeps a competing process busy on one of the sweep's CPUs for the whole
run (and ends it afterwards). Prints, over the cases measured (status ok) in all three quiet runs:

- the share whose utilization agrees across the three runs within 5 percentage points (target >= 90%),
  and that share among the cases no run flagged `apart` (our vCPUs placed apart by the hypervisor);
- by backend and by op: that share, the share for the utilization against the probe beside each case
  (`reference.utilization_beside`, what `utilization` was before schema 10), the share for the utilization
  corrected by the FMA probe alone (each kept round's median time brought to the best by its FMA probe to
  the sensitivity used, as before the cache probe), the share whose medians agree within 5%, and how many
  were flagged `process_dependent` in some run;
- the share whose medians agree within max(2 x spread, 3%) for every pair of runs (spread: the larger of
  the within-round IQR and the between-round spread, relative to the median);
- every case whose medians differ by more than 15% between two runs with no trust flag (unstable, noisy,
  drifting, throttled, apart, contended, single_sample) in any run: a "silent disagreement" (target: none);
- the share of the contended run's cases flagged `contended`, and its header warnings;
- each run's wall time, the in-run probes' share of it, how many hand-off probes found our CPUs apart and
  how many cases each run flagged `unlike_earlier_runs` (the runs share a fresh cache: history.py).

    python benchmarks/reproducibility.py [--runs 3] [--ops gemm,conv,lstm] [--out DIR] [-- SWEEP ARGS]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TRUST_FLAGS = {
    "unstable", "noisy", "drifting", "throttled", "apart", "contended", "single_sample", "unlike_earlier_runs"
}  # fmt: skip
UTIL_POINTS = 0.05
MEDIAN_FLOOR = 0.03
SILENT = 0.15


def run_sweep(op: str, out: Path, extra: list[str], cache: Path) -> tuple[dict[str, Any], float]:
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "opbench", "sweep", op, "--out", str(out), "--quiet", *extra],
        capture_output=True,
        text=True,
        env={**os.environ, "OPBENCH_CACHE_DIR": str(cache)},
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"opbench sweep {op} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    path = Path(proc.stdout.split()[0])
    return json.loads(path.read_text()), wall


def spread(r: dict[str, Any]) -> float:
    t = r["time"]
    return float(max(t.get("rel_iqr_within", t["rel_iqr"]), t.get("rel_spread_rounds", 0.0)))


def fma_alone(r: dict[str, Any]) -> float | None:
    """The utilization corrected by the FMA probe alone: each kept round's median time brought to the
    machine's best by that round's FMA probe to the sensitivity used (the records' correction works on
    the samples and the speed index; rounds' medians are close enough to compare the two probes)."""
    ref = r.get("reference") or {}
    best, sens = ref.get("fma_best_gflops"), (ref.get("sensitivity") or {}).get("used")
    rounds = [x for x in r["time"]["per_round"] if x.get("kept") and x.get("fma_gflops")]
    if not best or sens is None or not rounds:
        return None
    median = statistics.median(x["median_s"] * min(1.0, x["fma_gflops"] / best) ** sens for x in rounds)
    return float(r["flops"] / median / 1e9 / best)


def key(r: dict[str, Any]) -> tuple[str, str, str, str]:
    return (r["op"], r["label"], r["dtype"], r["backend"])


def competitor(cpu: int) -> subprocess.Popen[bytes]:
    code = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True:\n    pass\n"
    return subprocess.Popen([sys.executable, "-c", code])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--ops", default="gemm,conv,lstm")
    p.add_argument("--out", help="keep the results files here (default: a temporary directory)")
    p.add_argument("extra", nargs="*", help="more sweep arguments, after --")
    args = p.parse_args()
    ops = args.ops.split(",")
    base = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="opbench-repro-"))

    # A cache of our own, holding the machine's peaks and best probes but no history of earlier runs
    # (history.py): the runs below are judged against each other only.
    from opbench import peak

    cache = base / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    if (peak.cache_dir() / "peaks.json").exists():
        shutil.copy(peak.cache_dir() / "peaks.json", cache / "peaks.json")
    docs: dict[str, list[dict[str, Any]]] = {op: [] for op in ops}
    walls: dict[str, list[float]] = {op: [] for op in ops}
    for i in range(args.runs):
        for op in ops:
            doc, wall = run_sweep(op, base / f"run{i + 1}", args.extra, cache)
            docs[op].append(doc)
            walls[op].append(wall)
            print(f"run {i + 1} {op}: {wall:.1f} s", flush=True)
    cpu = sorted(os.sched_getaffinity(0))[0]
    busy = competitor(cpu)
    contended: dict[str, dict[str, Any]] = {}
    try:
        time.sleep(0.5)
        for op in ops:
            doc, wall = run_sweep(op, base / "contended", args.extra, cache)
            contended[op] = doc
            what = f"a process spinning on CPU {cpu} throughout"
            print(f"contended run {op}: {wall:.1f} s ({what})", flush=True)
    finally:
        busy.kill()
        busy.wait()

    from opbench.machine import cpu_model, identity_label

    print()
    print(f"machine: {cpu_model()}, {identity_label(docs[ops[0]][0]['machine'].get('identity'))}, "
          f"{os.cpu_count()} CPUs; results under {base}")  # fmt: skip
    total = util_ok = med_ok = 0
    clear = clear_ok = 0  # cases with no `apart` flag in any run
    silent: list[str] = []
    util_spreads: list[float] = []
    # per backend and per op: [cases, utilization within 5 points, the probe-beside utilization within 5
    # points, the FMA-probe-alone utilization within 5 points, medians within 5%, flagged
    # process_dependent in some run]
    groups: dict[str, list[int]] = {}
    for op in ops:
        by_run = [{key(r): r for r in d["records"] if r["status"] == "ok"} for d in docs[op]]
        common = set.intersection(*(set(b) for b in by_run))
        for k in sorted(common):
            rs = [b[k] for b in by_run]
            total += 1
            utils = [r["utilization"] for r in rs if r.get("utilization") is not None]
            beside = [(r.get("reference") or {}).get("utilization_beside", r.get("utilization")) for r in rs]
            alone = [fma_alone(r) for r in rs]
            medians = [r["time"]["median_s"] for r in rs]
            row = [
                1,
                len(utils) == len(rs) and max(utils) - min(utils) <= UTIL_POINTS,
                None not in beside and max(beside) - min(beside) <= UTIL_POINTS,  # type: ignore[operator]
                None not in alone and max(alone) - min(alone) <= UTIL_POINTS,  # type: ignore[operator]
                max(medians) / min(medians) - 1 <= 0.05,
                any("process_dependent" in r["flags"] for r in rs),
            ]
            for g in (f"backend {k[3]}", f"op {k[0]}"):
                groups[g] = [a + int(b) for a, b in zip(groups.get(g, [0] * 6), row, strict=True)]
            if len(utils) == len(rs):
                util_spreads.append(max(utils) - min(utils))
                util_ok += max(utils) - min(utils) <= UTIL_POINTS
                if not any("apart" in r["flags"] for r in rs):
                    clear += 1
                    clear_ok += max(utils) - min(utils) <= UTIL_POINTS
            agree = True
            for a, b in itertools.combinations(rs, 2):
                ma, mb = a["time"]["median_s"], b["time"]["median_s"]
                diff = abs(ma - mb) / min(ma, mb)
                agree &= diff <= max(2 * max(spread(a), spread(b)), MEDIAN_FLOOR)
                flagged = any(TRUST_FLAGS & set(r["flags"]) for r in rs)
                if diff > SILENT and not flagged:
                    silent.append(f"{' '.join(k)}: medians {ma * 1e3:.3g} vs {mb * 1e3:.3g} ms ({diff:+.0%})")
            med_ok += agree
    silent = list(dict.fromkeys(silent))
    print(f"cases measured in all {args.runs} quiet runs: {total}")
    print(f"utilization agrees within {100 * UTIL_POINTS:.0f} points: {util_ok}/{total} = "
          f"{100 * util_ok / max(total, 1):.1f}% (target >= 90%); "
          f"largest disagreement {100 * max(util_spreads or [0]):.1f} points")  # fmt: skip
    print(f"  of the {clear} case(s) with no run flagging them apart: {clear_ok}/{clear} = "
          f"{100 * clear_ok / max(clear, 1):.1f}%")  # fmt: skip
    print(f"medians agree within max(2 x spread, 3%): {med_ok}/{total} = {100 * med_ok / max(total, 1):.1f}%")
    print("| group | cases | utilization within 5 points | beside the probe | FMA probe alone | "
          "medians within 5% | process_dependent |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for g in sorted(groups):
        n, u, ub, ua, t, pd = groups[g]
        shares = " | ".join(f"{100 * x / n:.0f}%" for x in (u, ub, ua, t))
        print(f"| {g} | {n} | {shares} | {pd} |")
    print(f"silent disagreements (> {100 * SILENT:.0f}% apart, no flag in any run): {len(silent)}")
    for line in silent:
        print(f"  {line}")
    flagged = ok = 0
    for op in ops:
        recs = [r for r in contended[op]["records"] if r["status"] == "ok"]
        ok += len(recs)
        flagged += sum("contended" in r["flags"] for r in recs)
        for w in (contended[op].get("environment") or {}).get("warnings", []):
            print(f"contended run {op} header warning: {w}")
    print(f"contended run: {flagged}/{ok} = {100 * flagged / max(ok, 1):.1f}% of cases flagged contended")
    for op in ops:
        shares = [(d.get("environment") or {}).get("reference", {}).get("share_of_run") for d in docs[op]]
        speeds = sorted(r["machine_speed"] for d in docs[op] for r in d["records"] if r.get("machine_speed"))
        placement = []
        for d in docs[op]:
            seen = (d.get("environment") or {}).get("reference", {}).get("handoff_apart") or {}
            if seen.get("probes"):
                placement.append(f"{seen['probes_apart']}/{seen['probes']}")
        if placement:
            print(f"{op}: hand-off probes with our CPUs apart, per run: {', '.join(placement)}")
        unlike = [sum("unlike_earlier_runs" in r["flags"] for r in d["records"]) for d in docs[op]]
        print(f"{op}: cases flagged unlike_earlier_runs, per run: {', '.join(map(str, unlike))}")
        print(f"{op}: wall {', '.join(f'{w:.1f}' for w in walls[op])} s; probes "
              f"{', '.join(f'{100 * s:.1f}%' for s in shares if s is not None)} of the run; machine speed "
              f"{100 * speeds[0]:.0f}-{100 * speeds[-1]:.0f}%" if speeds else "")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

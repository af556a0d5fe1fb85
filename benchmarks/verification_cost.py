"""What verification costs in wall time: the default `opbench sweep gemm`, `sweep conv` and `sweep lstm`, each
run whole as a user runs it, with verification (the first call's float64 check, each visit's new inputs and
the check of its timed calls) and without (--no-verify), interleaved: run A, run B, run A, run B, ... so
that the machine's drift falls on both. Prints each op's median wall time of each and their ratio.

    python benchmarks/verification_cost.py [--ops gemm,conv,lstm] [--repeats 3]
    python benchmarks/verification_cost.py --baseline "/path/to/old/venv/bin/opbench"

With --baseline, side B is another build's `opbench` (the same default sweeps with verification), so the
ratio is this build's verification against that one's (issue 38's target: at most 1.10).
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from opbench import __version__
from opbench.machine import cpu_model


def wall_s(command: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{shlex.join(command)} failed: {proc.stderr.strip()[-500:]}")
    return time.perf_counter() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default="gemm,conv,lstm")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--baseline", help="another build's opbench command, side B (default: --no-verify)")
    args = p.parse_args()
    mine = [sys.executable, "-m", "opbench"]
    other = shlex.split(args.baseline) if args.baseline else mine
    label_b = f"baseline ({args.baseline})" if args.baseline else "--no-verify"
    print(f"# {cpu_model()}, opbench {__version__}: A = this build's default sweep, B = {label_b}\n")
    print("| sweep | A median (s) | B median (s) | A / B | runs |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for op in args.ops.split(","):
            times: dict[str, list[float]] = {"a": [], "b": []}
            for r in range(args.repeats):
                for side in ("a", "b") if r % 2 == 0 else ("b", "a"):
                    out = str(Path(tmp) / f"{op}-{side}-{r}")
                    cmd = [*(mine if side == "a" else other), "sweep", op, "--quiet", "--out", out]
                    if side == "b" and not args.baseline:
                        cmd.append("--no-verify")
                    times[side].append(wall_s(cmd))
            a, b = statistics.median(times["a"]), statistics.median(times["b"])
            print(f"| {op} | {a:.1f} | {b:.1f} | {a / b:.3f} | {args.repeats} each |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

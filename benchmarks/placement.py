"""Which in-run probe follows a case's speed: the FMA loop, the triad, or the hand-off between our CPUs?

Interleaves, in one process for --seconds, the in-run probes (reference.py: the FMA loop, the hand-off
round trip between the caller and our pool's worker, and a DRAM triad) with a few cases timed by the
sweep's backends (our LSTM and GEMM and torch's by default), round after round. Prints, per case, its
time's range and the correlation of its speed (1 / time) with each probe's speed (FMA GFLOPS, triad GB/s,
1 / hand-off ns), then the cases' median times while the hand-off read near its best (<= 3x) and apart,
with how many rounds fell in each.

    python benchmarks/placement.py [--seconds 120] [--backends cpp,torch] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--backends", default="cpp,torch")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()

    from opbench import kernels
    from opbench.machine import cpu_model, pin_to_cpus
    from opbench.ops import get_op
    from opbench.reference import APART_FACTOR, NativeProber
    from opbench.sweep.config import setup_backends

    pin_to_cpus(args.threads)
    prober = NativeProber()
    if not prober.can_handoff():
        raise SystemExit("the hand-off probe needs two CPUs in this process's affinity mask")
    backends = tuple(args.backends.split(","))
    states = setup_backends(backends, args.threads, "cpu")
    cases = {}
    for op_name, labels in (("lstm", ("T25 B16 I256 H256", "T25 B4 I256 H256")), ("gemm", ("256x256x256",))):
        op = get_op(op_name)
        for label in labels:
            shape = next(s for s in op.default_cases() if s.label().startswith(label))
            inputs = op.make_inputs(shape, "fp32", 0)
            for b in backends:
                cases[f"{op_name} {label} {b}"] = states[b].backend.prepare(op_name, shape, inputs, {})

    rows: list[dict[str, float]] = []
    end = time.perf_counter() + args.seconds
    while time.perf_counter() < end:
        row = {
            "fma": prober.fma("fp32", args.threads),
            "handoff": 1.0 / prober.handoff(),
            "triad": kernels.stream_triad(args.threads, 1 << 23, 2),
        }
        for name, case in cases.items():
            loops = max(1, int(0.03 / max(case.run(1), 1e-6)))
            row[name] = loops / statistics.median(case.run(loops) for _ in range(3))  # calls per second
        rows.append(row)

    cols = {k: np.array([r[k] for r in rows]) for k in rows[0]}
    probes = ("fma", "handoff", "triad")
    best_handoff = 1.0 / cols["handoff"].max()
    apart = (1.0 / cols["handoff"]) > APART_FACTOR * best_handoff
    print(f"machine: {cpu_model()}, {args.threads} threads; {len(rows)} rounds over {args.seconds:.0f} s")
    print(f"hand-off: best {best_handoff:.0f} ns, median {statistics.median(1 / cols['handoff']):.0f} ns; "
          f"{int(apart.sum())}/{len(rows)} rounds apart (> {APART_FACTOR:g}x the best)")  # fmt: skip
    print()
    print(f"{'case':34s} {'time range':>20s}  " + "  ".join(f"corr {p:>7s}" for p in probes))
    for name in cases:
        t = 1.0 / cols[name]
        corr = "  ".join(f"{np.corrcoef(cols[name], cols[p])[0, 1]:+12.2f}" for p in probes)
        print(f"{name:34s} {t.min() * 1e6:8.0f}-{t.max() * 1e6:8.0f} us  {corr}")
    print()
    print(f"{'case':34s} {'near':>18s} {'apart':>18s} {'apart/near':>10s}")
    for name in cases:
        t = 1.0 / cols[name]
        near_t = float(np.median(t[~apart])) if (~apart).any() else float("nan")
        apart_t = float(np.median(t[apart])) if apart.any() else float("nan")
        print(f"{name:34s} {near_t * 1e6:10.0f} us (n={int((~apart).sum()):3d}) "
              f"{apart_t * 1e6:8.0f} us (n={int(apart.sum()):3d}) {apart_t / near_t:10.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

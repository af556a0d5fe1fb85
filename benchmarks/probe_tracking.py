"""Which in-run probe follows the cases' speed? The evidence behind the cache probe and the speed index
(opbench/reference.py, measure.Visit.speed_index).

For --minutes, in one process on --threads threads, round after round: the probes (the FMA loop, the
cache triad in L2 as reference.py takes it, a triad in L3, a triad in DRAM) and then a few cases (ours,
torch and TensorFlow where installed: GEMMs, a conv and an LSTM), each timed as the median of 5 samples
of ~10 ms. Prints, for each case:

- the correlation of its speed with each probe, both smoothed over --window rounds (the slow moves a whole
  run shares, not one round's noise);
- the spread (max / min - 1) between the medians of --parts equal stretches of the run, of the raw time
  and of the time brought to the best by the FMA probe alone and by the speed index (the geometric mean
  of the FMA and cache probes), each to the power 1.

    python benchmarks/probe_tracking.py [--minutes 8] [--threads 2] [--window 20] [--parts 8]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from opbench.tiles import Tiles


def timed(fn: Callable[[], Any], target_s: float = 0.01, samples: int = 5) -> float:
    fn()
    t0 = time.perf_counter()
    fn()
    loops = max(1, int(target_s / max(time.perf_counter() - t0, 1e-7)))
    values = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(loops):
            fn()
        values.append((time.perf_counter() - t0) / loops)
    return statistics.median(values)


def cases(threads: int) -> dict[str, Callable[[], Any]]:
    from opbench import kernels

    rng = np.random.default_rng(0)
    a = rng.standard_normal((512, 512), dtype=np.float32)
    b = rng.standard_normal((512, 512), dtype=np.float32)
    a2, b2 = a[:256, :256].copy(), b[:256, :256].copy()
    o, o2 = np.empty_like(a), np.empty_like(a2)
    out: dict[str, Callable[[], Any]] = {
        "ours gemm 512": lambda: kernels.gemm(a, b, out=o, tiles=Tiles(threads=threads)),
        "ours gemm 256": lambda: kernels.gemm(a2, b2, out=o2, tiles=Tiles(threads=threads)),
    }
    try:
        import torch

        torch.set_num_threads(threads)
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        x, w = torch.randn(4, 32, 28, 28), torch.randn(32, 32, 3, 3)
        lstm, xs = torch.nn.LSTM(256, 256), torch.randn(25, 16, 256)

        def no_grad(fn: Callable[[], Any]) -> Callable[[], Any]:
            def run() -> Any:
                with torch.no_grad():
                    return fn()

            return run

        out["torch mm 512"] = no_grad(lambda: torch.mm(ta, tb))
        out["torch conv"] = no_grad(lambda: torch.nn.functional.conv2d(x, w, padding=1))
        out["torch lstm"] = no_grad(lambda: lstm(xs))
    except ImportError:
        pass
    try:
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        fa, fb = tf.constant(a), tf.constant(b)
        fx = tf.constant(rng.random((4, 28, 28, 32), dtype=np.float32))
        fw = tf.constant(rng.random((3, 3, 32, 32), dtype=np.float32))
        out["tf mm 512"] = lambda: tf.linalg.matmul(fa, fb).numpy()
        out["tf conv"] = lambda: tf.nn.conv2d(fx, fw, 1, "SAME").numpy()
    except ImportError:
        pass
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=8.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--window", type=int, default=20)
    p.add_argument("--parts", type=int, default=8)
    args = p.parse_args()
    from opbench import kernels
    from opbench.machine import cpu_model
    from opbench.reference import NativeProber

    prober = NativeProber()
    probes: dict[str, Callable[[], float]] = {
        "fma": lambda: prober.fma("fp32", args.threads),
        "cache": lambda: prober.cache(args.threads),
        "l3": lambda: kernels.stream_triad(args.threads, 1 << 18, 10),
        "dram": lambda: kernels.stream_triad(args.threads, 1 << 23, 2),
    }
    work = cases(args.threads)
    rows: list[dict[str, float]] = []
    end = time.time() + 60 * args.minutes
    while time.time() < end:
        row = {k: f() for k, f in probes.items()}
        row.update({k: timed(f) for k, f in work.items()})
        rows.append(row)
    n, w = len(rows), args.window
    print(f"machine: {cpu_model()}; {args.threads} thread(s); {n} rounds over {args.minutes:g} min")
    if n < 2 * w:
        print(f"too few rounds for a window of {w}")
        return 1
    logs = {k: np.log([r[k] for r in rows]) for k in rows[0]}

    def smooth(x: np.ndarray) -> np.ndarray:
        return np.convolve(x, np.ones(w) / w, mode="valid")

    index = (logs["fma"] + logs["cache"]) / 2
    parts = [slice(i * n // args.parts, (i + 1) * n // args.parts) for i in range(args.parts)]

    def spread(y: np.ndarray) -> float:
        medians = [float(np.median(y[s])) for s in parts]
        return 100 * (math.exp(max(medians) - min(medians)) - 1)

    head = " | ".join(f"corr. {k}" for k in probes)
    print(f"| case | {head} | stretches: raw | FMA probe alone | speed index |")
    print("|---|" + "---|" * (len(probes) + 3))
    for name in work:
        y = logs[name]
        corr = " | ".join(f"{-np.corrcoef(smooth(y), smooth(logs[k]))[0, 1]:+.2f}" for k in probes)
        stretches = " | ".join(f"{spread(x):.1f}%" for x in (y, y + logs["fma"], y + index))
        print(f"| {name} | {corr} | {stretches} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

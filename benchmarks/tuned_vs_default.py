"""A tuned GEMM against the untuned default (cache-model tiles), measured side by side in one run.

    opbench tune gemm --m 1024 --n 1024 --k 1024        # records the winner under tuning/records/
    python benchmarks/tuned_vs_default.py --m 1024 --n 1024 --k 1024 --rounds 7

The tuned tiles come from the record for this shape (opbench.tuned.tuned_tiles says which record);
both variants use the same inputs, are verified against float64 and are timed alternately over the rounds.
"""

from __future__ import annotations

import argparse
import sys

from side_by_side import measure_variants, print_markdown

from opbench import __version__
from opbench.kernels import default_threads, default_tiles
from opbench.machine import cpu_model
from opbench.ops.gemm import GemmShape
from opbench.timing import Timer, TimerConfig
from opbench.tuned import tuned_tiles


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--m", type=int, default=1024)
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--k", type=int, default=1024)
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--threads", type=int, default=default_threads())
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    shape = GemmShape(args.m, args.n, args.k)
    tuned, note = tuned_tiles(shape.m, shape.n, shape.k, args.dtype, args.threads)
    if "no tuned record" in note:
        print(
            f"no tuned record for {shape.label()} {args.dtype}: run opbench tune gemm first", file=sys.stderr
        )
        return 2
    d = default_tiles()
    default = {t: d[t] for t in ("tile_m", "tile_n", "tile_k")}
    print(
        f"# {cpu_model()}; opbench {__version__}; {args.threads} thread(s); medians of {args.rounds} rounds"
    )
    print(f"# tuned tiles {tuned} ({note}); default {default} (cache model)")
    timer = Timer(TimerConfig(max_time_s=1.0, target_rel_iqr=0.01, min_samples=10))
    r = measure_variants(
        "gemm",
        shape,
        args.dtype,
        args.threads,
        args.rounds,
        timer,
        {"default": ("cpp", {}), "tuned": ("cpp", tuned)},
    )
    if not (r["default"]["ok"] and r["tuned"]["ok"]):
        print("verification FAILED", file=sys.stderr)
        return 1
    ratio = r["tuned"]["gflops"] / r["default"]["gflops"]
    print_markdown(
        ["shape", "dtype", "threads", "default GFLOPS", "tuned GFLOPS", "tuned / default"],
        [
            [
                shape.label(),
                args.dtype,
                args.threads,
                f"{r['default']['gflops']:.1f}",
                f"{r['tuned']['gflops']:.1f}",
                f"{ratio:.3f}",
            ]
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

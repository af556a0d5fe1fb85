"""Our C++ GEMM vs torch.mm, measured side by side in one run with the sweep's own backends and Timer.

For every (shape, dtype, threads) the two backends are timed alternately for --rounds rounds and each
side's median over rounds is compared, so drift on a shared machine hits both equally. Prints the ratio
ours / torch (> 1: ours is faster) and each side's utilization of the measured FMA peak.

    python benchmarks/gemm_vs_torch.py             # square 256..2048 + skinny, fp32+fp16, 1+2 threads
    python benchmarks/gemm_vs_torch.py --markdown  # also print a table for docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import sys

from side_by_side import measure_pair, print_markdown

from opbench import __version__, peak
from opbench.machine import cpu_model, library_versions
from opbench.ops import gemm
from opbench.timing import Timer, TimerConfig

SQUARE = [256, 512, 1024, 2048]
# Skinny shapes from DeepBench's GEMM tables (M, N, K): small-batch fully-connected layers.
SKINNY = [(16, 4096, 1024), (4096, 16, 1024), (1760, 16, 1760), (35, 8457, 1760)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--dtype", default="fp32,fp16")
    p.add_argument("--sizes", default=",".join(map(str, SQUARE)), help="square sizes")
    p.add_argument("--no-skinny", action="store_true")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()

    shapes = [gemm.GemmShape(n, n, n) for n in map(int, args.sizes.split(","))]
    if not args.no_skinny:
        shapes += [gemm.GemmShape(*s) for s in SKINNY]
    threads_list = [int(t) for t in args.threads.split(",")]
    dtypes = args.dtype.split(",")
    timer = Timer(TimerConfig(max_time_s=0.5, call_budget_s=2.0))
    libs = library_versions()
    print(
        f"# {cpu_model()}; torch {libs['torch']}; opbench {__version__}; medians of {args.rounds} "
        "interleaved rounds; util = ours / measured FMA peak"
    )

    rows = []
    header = (
        f"{'shape':>16} {'dtype':>5} {'thr':>3} {'ours GF/s':>10} {'torch GF/s':>10} "
        f"{'ours/torch':>10} {'ours util':>9} {'peak':>7}"
    )
    print(header)
    for threads in threads_list:
        for dtype in dtypes:
            pk = peak.measured(dtype, threads)
            for shape in shapes:
                r = measure_pair("gemm", shape, dtype, threads, args.rounds, timer)
                ours, torch = r["cpp"]["gflops"], r["torch"]["gflops"]
                bad = "" if r["cpp"]["ok"] and r["torch"]["ok"] else "  (verification FAILED)"
                row = (shape.label(), dtype, threads, ours, torch, ours / torch, ours / pk.gflops, pk.gflops)
                rows.append(row)
                print(
                    f"{row[0]:>16} {dtype:>5} {threads:>3} {ours:10.1f} {torch:10.1f} {row[5]:10.2f} "
                    f"{100 * row[6]:8.1f}% {pk.gflops:7.0f}{bad}",
                    flush=True,
                )
    if args.markdown:
        head = ["shape MxNxK", "dtype", "threads", "ours GFLOPS", "torch GFLOPS", "ours / torch", "ours util"]
        print_markdown(
            head,
            [
                [label, dtype, threads, f"{ours:.1f}", f"{torch:.1f}", f"{ratio:.2f}", f"{100 * util:.0f}%"]
                for label, dtype, threads, ours, torch, ratio, util, _ in rows
            ],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

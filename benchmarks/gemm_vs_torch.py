"""Our C++ GEMM vs torch.mm, measured side by side in one run with the sweep's own backends and Timer.

For every (shape, dtype, threads) the two backends are timed alternately for --rounds rounds and each
side's median over rounds is compared, so drift on a shared machine hits both equally. Prints the ratio
ours / torch (> 1: ours is faster) and each side's utilization of the measured FMA peak.

    python benchmarks/gemm_vs_torch.py             # square 256..4096, DeepBench skinny; fp32, fp16; 1, 2 thr
    python benchmarks/gemm_vs_torch.py --tuned     # also our kernel with the tiles opbench tune recorded
    python benchmarks/gemm_vs_torch.py --markdown  # also print a table for docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import sys

from side_by_side import measure_variants, print_markdown

from opbench import __version__, peak
from opbench.machine import cpu_model, library_versions
from opbench.ops import gemm
from opbench.timing import Timer, TimerConfig

SQUARE = [256, 512, 1024, 2048, 4096]
# Skinny shapes from DeepBench's GEMM tables (M, N, K): small-batch fully-connected and recurrent layers.
SKINNY = [
    (16, 4096, 1024),
    (4096, 16, 1024),
    (1760, 16, 1760),
    (35, 8457, 1760),
    (7680, 1, 2560),
    (7680, 2, 2560),
    (7680, 4, 2560),
]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--dtype", default="fp32,fp16")
    p.add_argument("--sizes", default=",".join(map(str, SQUARE)), help="square sizes")
    p.add_argument("--skinny", default="all", help="'all', 'none' or MxNxK,... (default: DeepBench's)")
    p.add_argument(
        "--tuned", action="store_true", help="also time our kernel with the tiles opbench tune recorded"
    )
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()

    shapes = [gemm.GemmShape(n, n, n) for n in map(int, args.sizes.split(",")) if n]
    if args.skinny == "all":
        shapes += [gemm.GemmShape(*s) for s in SKINNY]
    elif args.skinny != "none":
        shapes += [gemm.GemmShape(*map(int, s.split("x"))) for s in args.skinny.split(",")]
    threads_list = [int(t) for t in args.threads.split(",")]
    dtypes = args.dtype.split(",")
    timer = Timer(TimerConfig(max_time_s=0.5, call_budget_s=2.0))
    libs = library_versions()
    print(
        f"# {cpu_model()}; torch {libs['torch']}; opbench {__version__}; medians of {args.rounds} "
        "interleaved rounds; util = ours / measured FMA peak"
    )

    rows = []
    tuned_head = f" {'tuned GF/s':>10}" if args.tuned else ""
    header = (
        f"{'shape':>16} {'dtype':>5} {'thr':>3} {'ours GF/s':>10}{tuned_head} {'torch GF/s':>10} "
        f"{'ours/torch':>10} {'ours util':>9} {'peak':>7}"
    )
    print(header)
    for threads in threads_list:
        for dtype in dtypes:
            pk = peak.measured(dtype, threads)
            for shape in shapes:
                variants = {"cpp": ("cpp", {}), "torch": ("torch", {})}
                if args.tuned:
                    variants["tuned"] = ("cpp", {"tuned": True})
                r = measure_variants("gemm", shape, dtype, threads, args.rounds, timer, variants)
                ours, torch = r["cpp"]["gflops"], r["torch"]["gflops"]
                tuned = r["tuned"]["gflops"] if args.tuned else None
                bad = "" if all(v["ok"] for v in r.values()) else "  (verification FAILED)"
                row = (shape.label(), dtype, threads, ours, tuned, torch, ours / torch, ours / pk.gflops)
                rows.append(row)
                tuned_cell = f" {tuned:10.1f}" if tuned is not None else ""
                print(
                    f"{row[0]:>16} {dtype:>5} {threads:>3} {ours:10.1f}{tuned_cell} {torch:10.1f} "
                    f"{row[6]:10.2f} {100 * row[7]:8.1f}% {pk.gflops:7.0f}{bad}",
                    flush=True,
                )
    if args.markdown:
        head = ["shape MxNxK", "dtype", "threads", "ours GFLOPS"]
        head += ["ours tuned GFLOPS"] if args.tuned else []
        head += ["torch GFLOPS", "ours / torch", "ours util"]
        print_markdown(
            head,
            [
                [label, dtype, threads, f"{ours:.1f}"]
                + ([f"{tuned:.1f}"] if args.tuned else [])
                + [f"{torch:.1f}", f"{ratio:.2f}", f"{100 * util:.0f}%"]
                for label, dtype, threads, ours, tuned, torch, ratio, util in rows
            ],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

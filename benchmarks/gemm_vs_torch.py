"""Our C++ GEMM vs torch.mm, measured side by side in one run with the sweep's own backends and Timer.

For every (shape, dtype, threads) the two backends are timed alternately for --rounds rounds and each
side's median over rounds is compared, so drift on a shared machine hits both equally. Prints the ratio
ours / torch (> 1: ours is faster) and each side's utilization of the measured FMA peak.

    python benchmarks/gemm_vs_torch.py             # square 256..4096, DeepBench skinny; fp32, fp16; 1, 2 thr
    python benchmarks/gemm_vs_torch.py --tuned     # also our kernel with the tiles opbench tune recorded
    python benchmarks/gemm_vs_torch.py --markdown  # also print a table for docs/benchmarks.md

On a CPU with AVX512-FP16, fp16 rows also time our fp16-accumulating kernel (accumulate="fp16", each tile_k
block summed in fp16) and print its max relative error vs float64 beside the fp32-accumulating one's.
"""

from __future__ import annotations

import argparse
import sys

from side_by_side import measure_variants, print_markdown

from opbench import __version__, kernels, peak
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
        "interleaved rounds; util = ours / FMA peak measured in this run"
    )

    # FP16 accumulation (our opt-in kernel) runs beside the others on fp16 rows where this CPU has it.
    f16acc = kernels.default_tiles()["fp16_accumulate"]
    with_f16acc = "fp16" in dtypes and f16acc["available"]
    if "fp16" in dtypes and not with_f16acc:
        print(f"# fp16 accumulation not measured: {f16acc['reason']}")
    extra = (["tuned"] if args.tuned else []) + (["f16acc"] if with_f16acc else [])
    print(
        f"{'shape':>16} {'dtype':>5} {'thr':>3} {'ours GF/s':>10}"
        + "".join(f" {e + ' GF/s':>12}" for e in extra)
        + f" {'torch GF/s':>10} {'ours/torch':>10}"
        + "".join(f" {e + '/torch':>12}" for e in extra)
        + f" {'ours util':>9} {'peak':>7}"
        + ("  max rel err ours / f16acc" if with_f16acc else "")
    )
    rows = []
    for threads in threads_list:
        for dtype in dtypes:
            pk = peak.measured(dtype, threads, refresh=True)  # in this run: the VM's speed drifts
            for shape in shapes:
                variants = {"cpp": ("cpp", {}), "torch": ("torch", {})}
                if args.tuned:
                    variants["tuned"] = ("cpp", {"tuned": True})
                if with_f16acc and dtype == "fp16":
                    variants["f16acc"] = ("cpp", {"accumulate": "fp16"})
                r = measure_variants("gemm", shape, dtype, threads, args.rounds, timer, variants)
                torch = r["torch"]["gflops"]
                row = {
                    "shape": shape.label(),
                    "dtype": dtype,
                    "threads": threads,
                    "gflops": {label: v["gflops"] for label, v in r.items()},
                    "err": {label: v["max_rel_err"] for label, v in r.items()},
                    "util": r["cpp"]["gflops"] / pk.gflops,
                    "ok": all(v["ok"] for v in r.values()),
                }
                rows.append(row)
                g = row["gflops"]
                err = row["err"]
                errs = f"  {err['cpp']:.2e} / {err['f16acc']:.2e}" if "f16acc" in err else ""
                print(
                    f"{row['shape']:>16} {dtype:>5} {threads:>3} {g['cpp']:10.1f}"
                    + "".join(f" {g[e]:12.1f}" if e in g else f" {'-':>12}" for e in extra)
                    + f" {torch:10.1f} {g['cpp'] / torch:10.2f}"
                    + "".join(f" {g[e] / torch:12.2f}" if e in g else f" {'-':>12}" for e in extra)
                    + f" {100 * row['util']:8.1f}% {pk.gflops:7.0f}{errs}"
                    + ("" if row["ok"] else "  (verification FAILED)"),
                    flush=True,
                )
    if args.markdown:
        head = ["shape MxNxK", "dtype", "threads", "ours GFLOPS"]
        head += [f"ours {e} GFLOPS" for e in extra] + ["torch GFLOPS", "ours / torch"]
        head += [f"{e} / torch" for e in extra] + ["ours util"]
        head += ["max rel err ours", "max rel err f16acc"] if with_f16acc else []
        table = []
        for row in rows:
            g, torch = row["gflops"], row["gflops"]["torch"]
            cells = [row["shape"], row["dtype"], row["threads"], f"{g['cpp']:.1f}"]
            cells += [f"{g[e]:.1f}" if e in g else "-" for e in extra]
            cells += [f"{torch:.1f}", f"{g['cpp'] / torch:.2f}"]
            cells += [f"{g[e] / torch:.2f}" if e in g else "-" for e in extra] + [f"{100 * row['util']:.0f}%"]
            if with_f16acc:
                cells += [f"{row['err']['cpp']:.1e}", f"{row['err']['f16acc']:.1e}" if "f16acc" in g else "-"]
            table.append(cells)
        print_markdown(head, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Batched GEMM on attention's shapes (issue 44): ours against every peer present, interleaved.

    python benchmarks/batched_gemm.py                 # fp32, 1 and 2 threads
    python benchmarks/batched_gemm.py --threads 2 --dtype bf16 --markdown
    python benchmarks/batched_gemm.py --dtype fp16 --peers torch,mindspore,tensorflow

The products of self-attention, batch x heads of them: QK^T (S x 64 by 64 x S) and the weighted values
(S x S by S x 64), for BERT-base (12 heads, S = 128) and BERT-large (16 heads, S = 384), with batch x heads
from 12 to 1536. For every (shape, threads) our batched kernel and each peer (torch.bmm, MindSpore's
BatchMatMul, tf.linalg.matmul, numpy's matmul of stacks, which calls its OpenBLAS once per product) are
verified against float64 and then timed one after the other for --rounds rounds; each side's figure is its
median over rounds. Prints GFLOPS and ours / the best peer (named), then each thread count's geometric mean
and minimum. (The OpenBLAS 0.3.34 anchor of small_shapes.py has no batched call; numpy stands for it.)
"""

from __future__ import annotations

import argparse
from typing import Any

from side_by_side import (
    available_peers,
    measure_variants,
    print_markdown,
    ratio_summary,
    run_per_thread_count,
)

from opbench import __version__, kernels
from opbench.machine import cpu_model, library_versions, pin_to_cpus
from opbench.ops import gemm
from opbench.timing import Timer, TimerConfig

HEAD = 64  # BERT's head size, base and large
MODELS = {"bert-base": (12, 128, (1, 8, 32, 128)), "bert-large": (16, 384, (1, 8, 32))}  # heads, S, batches
PEERS = ("torch", "mindspore", "tensorflow", "numpy")


def shapes() -> list[tuple[str, gemm.GemmShape]]:
    out = []
    for model, (heads, seq, batches) in MODELS.items():
        for b in batches:
            out.append((f"{model} QK", gemm.GemmShape(seq, seq, HEAD, b * heads)))
            out.append((f"{model} WV", gemm.GemmShape(seq, HEAD, seq, b * heads)))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--markdown", action="store_true")
    p.add_argument(
        "--peers",
        default=",".join(PEERS),
        help="the peers to measure (default: all); numpy's fp16 matmul runs under 1 GFLOPS, for minutes",
    )
    args = p.parse_args()
    unknown = set(args.peers.split(",")) - set(PEERS)
    if unknown:
        p.error(f"unknown peer(s) {', '.join(sorted(unknown))} (expected some of {', '.join(PEERS)})")
    threads_list = [int(t) for t in args.threads.split(",")]
    if len(threads_list) > 1:
        return run_per_thread_count(__file__, threads_list)
    threads = threads_list[0]
    pin_to_cpus(threads)
    available = available_peers(args.peers.split(","), "gemm", args.dtype)
    timer = Timer(TimerConfig(max_time_s=0.3, call_budget_s=2.0))
    libs = library_versions()
    print(
        f"# {cpu_model()}; kernel set {kernels.default_tiles()['isa']}; torch {libs.get('torch')}; "
        f"opbench {__version__}; {args.dtype}; {threads} thread(s); medians of {args.rounds} interleaved "
        "rounds"
    )
    head = f"{'product':>14} {'shape':>18} {'ours GF/s':>9} {'best peer':>20} {'ours/best':>9}"
    print(f"{head}  every peer (GF/s)")
    rows: list[dict[str, Any]] = []
    for what, shape in shapes():
        variants = {"ours": ("cpp", {}), **{n: (n, {}) for n in available}}
        r = measure_variants("gemm", shape, args.dtype, threads, args.rounds, timer, variants)
        theirs = {n: r[n]["gflops"] for n in available if r[n]["ok"]}
        best = max(theirs, key=theirs.__getitem__)
        ours = r["ours"]["gflops"]
        row = {"what": what, "shape": shape.label(), "ours": ours, "ok": r["ours"]["ok"], "best": best,
               "ratio": ours / theirs[best], "peers": {n: r[n]["gflops"] for n in available}}  # fmt: skip
        rows.append(row)
        every = " ".join(f"{n} {v:.1f}" for n, v in row["peers"].items())
        flag = "" if row["ok"] else "  (ours: verification FAILED)"
        print(
            f"{what:>14} {row['shape']:>18} {ours:9.1f} {best + f' {theirs[best]:.1f}':>20} "
            f"{row['ratio']:9.2f}  {every}{flag}",
            flush=True,
        )
    summary = ratio_summary(rows, lambda r: f"{r['what']} {r['shape']}")
    print(f"\n## {threads} thread(s): ours / best peer {summary}")
    if args.markdown:
        head = ["product", "shape", "threads", "ours GFLOPS", *available, "best peer", "ours / best"]
        table = [
            [
                r["what"],
                r["shape"],
                threads,
                f"{r['ours']:.1f}",
                *(f"{r['peers'][n]:.1f}" for n in available),
                r["best"],
                f"{r['ratio']:.2f}",
            ]  # fmt: skip
            for r in rows
        ]
        print_markdown(head, table)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

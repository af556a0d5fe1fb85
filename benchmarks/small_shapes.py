"""Small, skinny and memory-bound shapes (issue 17): our kernels against every peer present, interleaved.

    pip install scipy-openblas32                  # the OpenBLAS 0.3.34 anchor (optional, benchmarks only)
    python benchmarks/small_shapes.py             # every class, 1 and 2 threads, fp32
    python benchmarks/small_shapes.py --classes gemv,small-m --threads 2 --markdown

For every (shape, threads) our kernel and each peer (torch, MindSpore, TensorFlow, numpy's BLAS, OpenBLAS
0.3.34's sgemm and, for M = 1 or N = 1, its sgemv) are verified against float64 and then timed one after
the other for --rounds rounds; each side's figure is its median over rounds. Prints GFLOPS, ours / the best
peer (named), and for memory-bound shapes (arithmetic intensity below the machine balance, operands beyond
the last-level cache) the bytes they must move per second against the triad bandwidth measured in this run.
A summary gives each class's geometric mean and minimum of ours / best peer.

Classes: gemv (1xNxK and Mx1xK at 4096, 8192), small-m (M = 2..32 x 4096 x 4096), cubes (32..256),
skinny (ResNet-50's classifier 128x1000x2048; tall 4096 x {8, 16} x 4096), large (BERT-base at 1024 tokens,
squares 1024-4096: they must keep their level), conv (3x3 at 7x7 with 512
channels and 14x14 with 256, batch 4) and depthwise (3x3 at 112x112 with 32 channels, 56x56 with 128,
and MobileNet's stride-2 112x112 with 64; batch 4). MindSpore's CPU convolution takes seconds per call:
it joins the conv classes only with --mindspore-conv.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import openblas_anchor
from side_by_side import geomean, measure_variants, print_markdown, run_per_thread_count

from opbench import __version__, kernels, peak
from opbench.backends import make_backend
from opbench.machine import cpu_model, library_versions, pin_to_cpus
from opbench.ops import conv, gemm
from opbench.timing import Timer, TimerConfig


def _conv(n: int, c: int, hw: int, k: int, stride: int = 1, groups: int = 1) -> conv.ConvShape:
    return conv.ConvShape(n, c, hw, hw, k, 3, 3, stride, stride, 1, 1, 1, 1, groups)


G = gemm.GemmShape
CLASSES: dict[str, tuple[str, list[Any]]] = {
    "gemv": ("gemm", [G(1, 4096, 4096), G(1, 8192, 8192), G(4096, 1, 4096), G(8192, 1, 8192)]),
    "small-m": ("gemm", [G(m, 4096, 4096) for m in (2, 4, 8, 16, 32)]),
    "cubes": ("gemm", [G(s, s, s) for s in (32, 64, 96, 128, 160, 192, 256)]),
    "skinny": ("gemm", [G(128, 1000, 2048), G(4096, 8, 4096), G(4096, 16, 4096)]),
    # Large shapes must keep their level: BERT-base at 1024 tokens (QKV, FFN up and down) and squares.
    "large": (
        "gemm",
        [
            G(1024, 2304, 768),
            G(1024, 3072, 768),
            G(1024, 768, 3072),
            *(G(s, s, s) for s in (1024, 2048, 4096)),
        ],
    ),
    "conv": ("conv", [_conv(4, 512, 7, 512), _conv(4, 256, 14, 256)]),
    "depthwise": (
        "conv",
        [_conv(4, 32, 112, 32, groups=32), _conv(4, 128, 56, 128, groups=128), _conv(4, 64, 112, 64, 2, 64)],
    ),
}
GEMM_PEERS = ("torch", "mindspore", "tensorflow", "numpy")
CONV_PEERS = ("torch", "tensorflow")


def peers_for(op_name: str, shape: Any, available: set[str], mindspore_conv: bool) -> list[str]:
    if op_name == "gemm":
        names = [*GEMM_PEERS, "openblas"]
        if shape.m == 1 or shape.n == 1:
            names.append("openblas-gemv")
    else:
        names = [*CONV_PEERS, *(["mindspore"] if mindspore_conv else [])]
    return [n for n in names if n in available]


def memory_bound(op: Any, shape: Any, dtype: str, fma_gflops: float, triad_gbs: float) -> bool:
    """Below the machine balance and larger than the last-level cache: the bytes set the pace."""
    nbytes = op.min_bytes(shape, dtype)
    return op.flops(shape) / nbytes < fma_gflops / triad_gbs and nbytes > kernels.l3_bytes()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--classes", default=",".join(CLASSES), help=f"any of {', '.join(CLASSES)}")
    p.add_argument("--peers", default="", help="only these peers (default: every one present)")
    p.add_argument("--mindspore-conv", action="store_true", help="also time MindSpore's CPU convolution")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()
    classes = [c.strip() for c in args.classes.split(",") if c.strip()]
    for c in classes:
        if c not in CLASSES:
            p.error(f"unknown class {c!r} (choose from {', '.join(CLASSES)})")
    threads_list = [int(t) for t in args.threads.split(",")]
    if len(threads_list) > 1:
        return run_per_thread_count(__file__, threads_list)
    pin_to_cpus(threads_list[0])

    anchor = openblas_anchor.register()
    available = set(anchor)
    for name in (*GEMM_PEERS, "mindspore"):
        reason = make_backend(name).unavailable_reason()
        if reason is None:
            available.add(name)
        else:
            print(f"# {name} not measured: {reason}")
    if not anchor:
        print(f"# OpenBLAS anchor not measured: {openblas_anchor.OpenBlasBackend().unavailable_reason()}")
    if args.peers:
        available &= set(args.peers.split(","))

    timer = Timer(TimerConfig(max_time_s=0.3, call_budget_s=2.0))
    libs = library_versions()
    print(
        f"# {cpu_model()}; kernel set {kernels.default_tiles()['isa']}; torch {libs.get('torch')}; "
        f"opbench {__version__}; {args.dtype}; medians of {args.rounds} interleaved rounds"
    )
    rows: list[dict[str, Any]] = []
    for threads in threads_list:
        fma = peak.measured(args.dtype, threads, refresh=True).gflops
        triad = max(kernels.stream_triad(threads, 2 * kernels.l3_bytes() // 8, 5) for _ in range(2))
        print(f"\n## {threads} thread(s): FMA peak {fma:.0f} GFLOPS, triad {triad:.1f} GB/s (measured now)")
        print(
            f"{'class':>9} {'shape':>28} {'ours GF/s':>9} {'best peer':>24} {'ours/best':>9} "
            f"{'GB/s':>6} {'%triad':>6}  every peer (GF/s)"
        )
        for cls in classes:
            op_name, shapes = CLASSES[cls]
            op = gemm if op_name == "gemm" else conv
            for shape in shapes:
                peers = peers_for(op_name, shape, available, args.mindspore_conv)
                variants = {"ours": ("cpp", {}), **{n: (n, {}) for n in peers}}
                r = measure_variants(op_name, shape, args.dtype, threads, args.rounds, timer, variants)
                ours = r["ours"]["gflops"]
                ok = {n: v["ok"] for n, v in r.items()}
                theirs = {n: r[n]["gflops"] for n in peers if ok[n]}
                best = max(theirs, key=theirs.__getitem__) if theirs else None
                ratio = ours / theirs[best] if best else float("nan")
                mem = memory_bound(op, shape, args.dtype, fma, triad)
                gbs = op.min_bytes(shape, args.dtype) / (op.flops(shape) / (ours * 1e9)) / 1e9
                row = {
                    "class": cls,
                    "shape": shape.label(),
                    "threads": threads,
                    "ours": ours,
                    "ours_ok": ok["ours"],
                    "best": best,
                    "ratio": ratio,
                    "peers": {n: r[n]["gflops"] for n in peers},
                    "failed": [n for n in peers if not ok[n]],
                    "gbs": gbs if mem else None,
                    "triad": triad,
                }
                rows.append(row)
                best_text = f"{best} {theirs[best]:.1f}" if best else "-"
                every = " ".join(f"{n} {v:.1f}" for n, v in row["peers"].items())
                flags = ("" if ok["ours"] else "  (ours: verification FAILED)") + "".join(
                    f"  ({n}: wrong answer, not compared)" for n in row["failed"]
                )
                mem_text = f"{gbs:6.1f} {100 * gbs / triad:5.0f}%" if mem else f"{'':>6} {'':>6}"
                line = f"{cls:>9} {row['shape']:>28} {ours:9.1f} {best_text:>24} {ratio:9.2f} {mem_text}"
                print(f"{line}  {every}{flags}", flush=True)

    print("\n## Summary: ours / best peer per class (geometric mean, minimum)")
    for threads in threads_list:
        for cls in classes:
            mine = [r for r in rows if r["class"] == cls and r["threads"] == threads and r["best"]]
            if not mine:
                continue
            low = min(mine, key=lambda r: r["ratio"])
            mem = [r["gbs"] / r["triad"] for r in mine if r["gbs"]]
            mem_text = f"; memory-bound at {100 * min(mem):.0f}-{100 * max(mem):.0f}% of triad" if mem else ""
            print(
                f"{threads} thr {cls:>9}: geomean {geomean([r['ratio'] for r in mine]):.2f}, "
                f"min {low['ratio']:.2f} ({low['shape']} vs {low['best']}){mem_text}"
            )

    if args.markdown:
        names = sorted({n for r in rows for n in r["peers"]}, key=lambda n: (n not in GEMM_PEERS, n))
        head = [
            "class",
            "shape",
            "threads",
            "ours GFLOPS",
            *names,
            "best peer",
            "ours / best",
            "GB/s (% triad)",
        ]
        table = []
        for r in rows:
            cells = [r["class"], r["shape"], r["threads"], f"{r['ours']:.1f}"]
            cells += [f"{r['peers'][n]:.1f}" if n in r["peers"] else "-" for n in names]
            cells += [r["best"] or "-", f"{r['ratio']:.2f}"]
            cells += [f"{r['gbs']:.1f} ({100 * r['gbs'] / r['triad']:.0f}%)" if r["gbs"] else "-"]
            table.append(cells)
        print_markdown(head, table)
    return 0 if all(r["ours_ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

"""bf16 GEMM (issue 20): our kernel against every bf16 peer present, interleaved, with utilization against the
bf16 unit's measured peak.

    python benchmarks/bf16.py                       # BERT-base shapes and squares, 1 and 2 threads
    python benchmarks/bf16.py --threads 2 --rounds 5 --markdown

For every (shape, threads) our kernel and each peer (torch: oneDNN's bf16 matmul; TensorFlow; numpy with
--peers, which runs ml_dtypes' element loop) are verified against float64 (bf16 output, products summed in
fp32) and then timed one after the other for --rounds rounds; each side's figure is its median over rounds.
The peak is the one `opbench peak` names for bf16, measured now beside the run: AVX512-BF16 dot products
(vdpbf16ps) where the CPU has them, else the fp32 FMA loop (bf16 is then widened onto the fp32 units).
MindSpore is not a peer: its CPU kernels have no bf16 MatMul (MindSpore 2.10). Convolutions and the LSTM
suite are not measured in bf16 yet: opbench's bf16 kernels cover GEMM so far.

Shapes: BERT-base at 128, 512 and 1024 tokens (QKV 2304, attention output 768, FFN up 3072 and down, K 3072)
and squares 256-4096.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from side_by_side import geomean, measure_variants, print_markdown, run_per_thread_count

from opbench import __version__, kernels, peak
from opbench.backends import make_backend
from opbench.machine import cpu_model, library_versions, pin_to_cpus
from opbench.ops import gemm
from opbench.timing import Timer, TimerConfig

G = gemm.GemmShape
BERT = [G(t, n, k) for t in (128, 512, 1024) for n, k in ((2304, 768), (768, 768), (3072, 768), (768, 3072))]
SQUARES = [G(s, s, s) for s in (256, 512, 1024, 2048, 4096)]
SUITES: dict[str, list[Any]] = {"bert": BERT, "squares": SQUARES}
PEERS = ("torch", "tensorflow", "mindspore")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--suites", default="bert,squares", help=f"any of {', '.join(SUITES)}")
    p.add_argument("--peers", default=",".join(PEERS), help="peers to try (numpy too if named)")
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    for s in suites:
        if s not in SUITES:
            p.error(f"unknown suite {s!r} (choose from {', '.join(SUITES)})")
    threads_list = [int(t) for t in args.threads.split(",")]
    if len(threads_list) > 1:
        return run_per_thread_count(__file__, threads_list)
    threads = threads_list[0]
    pin_to_cpus(threads)

    peers = []
    for name in args.peers.split(","):
        backend = make_backend(name)
        reason = backend.unavailable_reason() or backend.unsupported_reason("gemm", "bf16")
        if reason is None:
            peers.append(name)
        else:
            print(f"# {name} not measured: {reason}")
    libs = library_versions()
    bf16 = kernels.default_tiles()["bf16"]
    the_peak = peak.measured("bf16", threads, refresh=True)
    print(
        f"# {cpu_model()}; opbench {__version__}; torch {libs.get('torch')}; tensorflow "
        f"{libs.get('tensorflow') or libs.get('tensorflow-cpu')}; bf16 kernel: {bf16['description']}; "
        f"medians of {args.rounds} interleaved rounds"
    )
    print(f"\n## {threads} thread(s): {the_peak.name} {the_peak.gflops:.0f} GFLOPS (measured now)")
    print(
        f"{'shape':>16} {'ours GF/s':>9} {'util':>5} {'best peer':>20} {'util':>5} {'ours/best':>9}"
        "  every peer"
    )
    timer = Timer(TimerConfig(max_time_s=0.3, call_budget_s=2.0))
    rows: list[dict[str, Any]] = []
    for suite in suites:
        for shape in SUITES[suite]:
            variants = {"ours": ("cpp", {}), **{n: (n, {}) for n in peers}}
            r = measure_variants("gemm", shape, "bf16", threads, args.rounds, timer, variants)
            ours = r["ours"]["gflops"]
            theirs = {n: r[n]["gflops"] for n in peers if r[n]["ok"]}
            best = max(theirs, key=theirs.__getitem__) if theirs else None
            ratio = ours / theirs[best] if best else float("nan")
            row = {"suite": suite, "shape": shape.label(), "ours": ours, "ok": r["ours"]["ok"], "best": best}
            row |= {"ratio": ratio, "peers": {n: r[n]["gflops"] for n in peers}, "peak": the_peak.gflops}
            rows.append(row)
            best_text = f"{best} {theirs[best]:.0f}" if best else "-"
            best_util = f"{100 * theirs[best] / the_peak.gflops:4.0f}%" if best else "    -"
            flags = "" if row["ok"] else "  (ours: verification FAILED)"
            flags += "".join(f"  ({n}: wrong answer)" for n in peers if not r[n]["ok"])
            every = " ".join(f"{n} {v:.0f}" for n, v in row["peers"].items())
            print(
                f"{row['shape']:>16} {ours:9.0f} {100 * ours / the_peak.gflops:4.0f}% {best_text:>20} "
                f"{best_util} "
                f"{ratio:9.2f}  {every}{flags}",
                flush=True,
            )
    print(
        f"\n## Summary, {threads} thread(s): ours / best peer (geometric mean, minimum), ours % of the peak"
    )
    for suite in suites:
        mine = [r for r in rows if r["suite"] == suite and r["best"]]
        if mine:
            low = min(mine, key=lambda r: r["ratio"])
            utils = [100 * r["ours"] / r["peak"] for r in mine]
            print(
                f"{suite:>8}: geomean {geomean([r['ratio'] for r in mine]):.2f}, min {low['ratio']:.2f} "
                f"({low['shape']} vs {low['best']}); ours {min(utils):.0f}-{max(utils):.0f}% of the peak"
            )
    if args.markdown:
        head = ["shape", "threads", "ours GFLOPS", "ours % peak", *peers, "best peer", "ours / best"]
        table = [
            [r["shape"], threads, f"{r['ours']:.0f}", f"{100 * r['ours'] / r['peak']:.0f}%"]
            + [f"{r['peers'][n]:.0f}" for n in peers]
            + [r["best"] or "-", f"{r['ratio']:.2f}"]
            for r in rows
        ]
        print_markdown(head, table)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

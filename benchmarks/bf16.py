"""bf16 (issue 20): our GEMM, conv2d and LSTM against every bf16 peer present, interleaved, with utilization
against the bf16 unit's measured peak.

    python benchmarks/bf16.py                       # every suite, 1 and 2 threads
    python benchmarks/bf16.py --suites resnet50,lstm --threads 2 --rounds 5 --markdown

For every (shape, threads) our kernel and each peer (torch: oneDNN's bf16 matmul; TensorFlow; numpy with
--peers, which runs ml_dtypes' element loop) are verified against float64 (bf16 output, products summed in
fp32) and then timed one after the other for --rounds rounds; each side's figure is its median over rounds.
The peak is the one `opbench peak` names for bf16, measured now beside the run: AVX512-BF16 dot products
(vdpbf16ps) where the CPU has them, else the fp32 FMA loop (bf16 is then widened onto the fp32 units).
MindSpore is not a peer: its CPU kernels have no bf16 MatMul or Conv2D (MindSpore 2.10). The frameworks' bf16
conv and LSTM are verified against their own bound (fp32 sums, bf16 gates and cell arithmetic:
ops/recurrent.py), ours against fp32 cells with h and c rounded to bf16.

Suites:
- bert: BERT-base GEMMs at 128, 512 and 1024 tokens (QKV 2304, attention output 768, FFN up 3072 and down,
  K 3072);
- squares: GEMM 256-4096;
- resnet50: the distinct convolutions of ResNet-50 (v1.5: stride 2 in the 3x3s), batch 2;
- depthwise: MobileNet-v2's depthwise 3x3 convolutions (32-960 channels, planes 112-7), batch 2;
- lstm: one-layer LSTMs of 25-50 steps, hidden 256-1024, batch 1-64 (the fp32 benchmark's and batch 1).

--variant LABEL:KEY=VALUE,... (repeatable) times our kernel again with those tiles beside the default, as
side "ours LABEL": the ISA, tile sizes, the path thresholds or an AMX layout, for instance
`--variant 1x4:isa=amx,amx_rows=1,amx_cols=4`, or its own thread count (`--variant t4:threads=4`: ours on
4 threads, the peers on --threads). Its ratio to the best peer is printed after the peers.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from side_by_side import (
    available_peers,
    measure_variants,
    print_markdown,
    ratio_summary,
    run_per_thread_count,
)

from opbench import __version__, kernels, peak
from opbench.machine import cpu_model, library_versions, pin_to_cpus
from opbench.ops import conv, gemm, lstm
from opbench.timing import Timer, TimerConfig

G = gemm.GemmShape
BERT = [G(t, n, k) for t in (128, 512, 1024) for n, k in ((2304, 768), (768, 768), (3072, 768), (768, 3072))]
SQUARES = [G(s, s, s) for s in (256, 512, 1024, 2048, 4096)]


def _conv(c: int, hw: int, k: int, f: int, stride: int = 1, groups: int = 1) -> Any:
    pad = f // 2
    fields = dict(n=2, c=c, h=hw, w=hw, k=k, r=f, s=f, pad_h=pad, pad_w=pad, stride_h=stride, stride_w=stride)
    return conv.shape_from_case({**fields, "groups": groups})


RESNET50 = [
    _conv(3, 224, 64, 7, 2),
    *(_conv(c, 56, k, f) for c, k, f in ((64, 64, 1), (64, 64, 3), (64, 256, 1), (256, 64, 1))),
    _conv(128, 56, 128, 3, 2),
    *(_conv(c, 28, k, f) for c, k, f in ((128, 128, 3), (128, 512, 1), (512, 128, 1))),
    _conv(256, 28, 256, 3, 2),
    *(_conv(c, 14, k, f) for c, k, f in ((256, 256, 3), (256, 1024, 1), (1024, 256, 1))),
    _conv(512, 14, 512, 3, 2),
    *(_conv(c, 7, k, f) for c, k, f in ((512, 512, 3), (512, 2048, 1), (2048, 512, 1))),
]
# MobileNet-v2's depthwise 3x3 layers (planes 112-7, stride 1 and 2), batch 2.
DEPTHWISE = [
    _conv(c, hw, c, 3, stride, groups=c)
    for c, hw, stride in ((32, 112, 1), (96, 112, 2), (144, 56, 1), (144, 56, 2), (192, 28, 1), (384, 14, 1),
                          (576, 14, 2), (960, 7, 1))
]  # fmt: skip
LSTM = [
    lstm.LstmShape(*d)
    for d in (
        (25, 64, 512, 512),
        (25, 16, 512, 512),
        (25, 64, 1024, 1024),
        (50, 8, 256, 256),
        (25, 1, 512, 512),
    )
]
# suite -> (op, shapes)
SUITES: dict[str, tuple[str, list[Any]]] = {
    "bert": ("gemm", BERT),
    "squares": ("gemm", SQUARES),
    "resnet50": ("conv", RESNET50),
    "depthwise": ("conv", DEPTHWISE),
    "lstm": ("lstm", LSTM),
}
PEERS = ("torch", "tensorflow", "mindspore")


def unit_ratio(threads: int, rounds: int = 5) -> str:
    """The bf16 unit's FMA-loop peak over the fp32 unit's, the two loops interleaved (median of `rounds`):
    about 2 where vdpbf16ps runs (two products per lane), 1 where bf16 is widened onto the fp32 units."""
    ratios = []
    for _ in range(rounds):
        bf16, kernel = kernels.fma_peak("bf16", threads, 0.05, 2)
        fp32, _ = kernels.fma_peak("fp32", threads, 0.05, 2)
        ratios.append(bf16 / fp32)
    ratios.sort()
    median = ratios[len(ratios) // 2]
    return f"bf16 unit ({kernel}) / fp32 FMA loop: {median:.2f}x (median of {rounds}, interleaved)"


def _variant(text: str) -> tuple[str, dict[str, Any]]:
    """ "LABEL:key=value,..." as (label, cpp params); a value is an int where it reads as one."""
    label, sep, fields = text.partition(":")
    if not sep or not label:
        raise argparse.ArgumentTypeError(f"--variant {text!r}: expected LABEL:KEY=VALUE,...")
    params: dict[str, Any] = {}
    for field in filter(None, fields.split(",")):
        key, eq, value = field.partition("=")
        if not eq:
            raise argparse.ArgumentTypeError(f"--variant {text!r}: {field!r} is not KEY=VALUE")
        params[key] = int(value) if value.lstrip("-").isdigit() else value
    return label, params


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--suites", default=",".join(SUITES), help=f"any of {', '.join(SUITES)}")
    p.add_argument("--peers", default=",".join(PEERS), help="peers to try (numpy too if named)")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--variant", type=_variant, action="append", default=[], help="LABEL:KEY=VALUE,...")
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

    ops = sorted({SUITES[s][0] for s in suites})
    peers_of = {op: available_peers(args.peers.split(","), op, "bf16", f"for {op}") for op in ops}
    peers = [n for n in args.peers.split(",") if any(n in v for v in peers_of.values())]
    libs = library_versions()
    bf16 = kernels.default_tiles()["bf16"]
    the_peak = peak.measured("bf16", threads, refresh=True)
    kernel = bf16["description"]
    if bf16["fp32_units"]:
        kernel = f"{bf16['fp32_tile']} from {bf16['fp32_units_min_rows']} rows, else {kernel}"
    print(
        f"# {cpu_model()}; opbench {__version__}; torch {libs.get('torch')}; tensorflow "
        f"{libs.get('tensorflow') or libs.get('tensorflow-cpu')}; bf16 kernel: {kernel}; "
        f"medians of {args.rounds} interleaved rounds"
    )
    print(f"\n## {threads} thread(s): {the_peak.name} {the_peak.gflops:.0f} GFLOPS (measured now)")
    if kernels.cpu_info()["bf16_dot"]:  # (elsewhere there is no bf16 unit to compare)
        print(unit_ratio(threads))
    print(
        f"{'shape':>26} {'ours GF/s':>9} {'util':>5} {'best peer':>20} {'util':>5} {'ours/best':>9}"
        "  every peer"
    )
    timer = Timer(TimerConfig(max_time_s=0.3, call_budget_s=2.0))
    rows: list[dict[str, Any]] = []
    for suite in suites:
        op, shapes = SUITES[suite]
        for shape in shapes:
            variants = {"ours": ("cpp", {}), **{n: (n, {}) for n in peers_of[op]}}
            variants |= {f"ours {label}": ("cpp", params) for label, params in args.variant}
            r = measure_variants(op, shape, "bf16", threads, args.rounds, timer, variants)
            ours = r["ours"]["gflops"]
            theirs = {n: r[n]["gflops"] for n in peers_of[op] if r[n]["ok"]}
            best = max(theirs, key=theirs.__getitem__) if theirs else None
            ratio = ours / theirs[best] if best else float("nan")
            row = {"suite": suite, "shape": shape.label(), "ours": ours, "ok": r["ours"]["ok"], "best": best}
            row |= {
                "ratio": ratio,
                "peers": {n: r[n]["gflops"] for n in peers_of[op]},
                "peak": the_peak.gflops,
            }
            rows.append(row)
            best_text = f"{best} {theirs[best]:.0f}" if best else "-"
            best_util = f"{100 * theirs[best] / the_peak.gflops:4.0f}%" if best else "    -"
            flags = "" if row["ok"] else "  (ours: verification FAILED)"
            flags += "".join(f"  ({n}: wrong answer)" for n in peers_of[op] if not r[n]["ok"])
            every = " ".join(f"{n} {v:.0f}" for n, v in row["peers"].items())
            for label, _ in args.variant:
                side = r[f"ours {label}"]
                mine = side["gflops"] / theirs[best] if best else float("nan")
                every += f"  {label} {side['gflops']:.0f} ({mine:.2f})" + ("" if side["ok"] else " FAILED")
                row["ok"] = row["ok"] and side["ok"]
            print(
                f"{row['shape']:>26} {ours:9.0f} {100 * ours / the_peak.gflops:4.0f}% {best_text:>20} "
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
            utils = [100 * r["ours"] / r["peak"] for r in mine]
            summary = ratio_summary(mine, lambda r: r["shape"])
            print(f"{suite:>8}: {summary}; ours {min(utils):.0f}-{max(utils):.0f}% of the peak")
    if args.markdown:
        head = ["shape", "threads", "ours GFLOPS", "ours % peak", *peers, "best peer", "ours / best"]
        table = [
            [r["shape"], threads, f"{r['ours']:.0f}", f"{100 * r['ours'] / r['peak']:.0f}%"]
            + [f"{r['peers'][n]:.0f}" if n in r["peers"] else "-" for n in peers]
            + [r["best"] or "-", f"{r['ratio']:.2f}"]
            for r in rows
        ]
        print_markdown(head, table)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

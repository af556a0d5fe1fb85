"""Our backward passes vs torch's autograd (and MindSpore's vjp, TensorFlow's tape), measured side by side
in one run: the training issue's reference cases.

    python benchmarks/backward_vs_torch.py --markdown [--rounds 5] [--threads 2] [--dtype fp32]

Cases: GEMM backward at 1024^3 (dA = dC B^T and dB = A^T dC) and neighbours; conv backward for 3x3
64->64 at 56x56, batch 8, and neighbours (stride 2, 1x1, depthwise; MindSpore's CPU convolution is too slow
for these sizes and is left out of the conv rows unless --mindspore-conv); LSTM, GRU and RNN (tanh) backward
at hidden 512, batch 64, 25 steps, and a smaller batch. torch times the backward only
(autograd.grad over a graph built once, retain_graph=True); MindSpore's vjp recomputes the forward in each
call and TensorFlow's tape runs inside tf.function, so those columns say what they time. Ratios are ours /
theirs (> 1: ours is faster); util = ours / the FMA peak measured in the same run.
"""

from __future__ import annotations

import argparse
import sys

from side_by_side import measure_pair, print_markdown

from opbench import __version__, peak
from opbench.machine import cpu_model, library_versions
from opbench.ops import conv, gemm, gru, lstm, rnn
from opbench.timing import Timer, TimerConfig

GEMM = [(1024, 1024, 1024), (512, 512, 512), (2048, 1024, 512), (64, 4096, 1024)]
RECURRENT = [(25, 64, 512, 512), (25, 16, 512, 512)]
CONV = [
    dict(n=8, c=64, h=56, w=56, k=64, r=3, s=3, pad_h=1, pad_w=1),
    dict(n=8, c=128, h=28, w=28, k=128, r=3, s=3, pad_h=1, pad_w=1),
    dict(n=8, c=64, h=56, w=56, k=128, r=3, s=3, pad_h=1, pad_w=1, stride_h=2, stride_w=2),
    dict(n=8, c=64, h=56, w=56, k=256, r=1, s=1),
    dict(n=8, c=32, h=56, w=56, k=32, r=3, s=3, pad_h=1, pad_w=1, groups=32),
    dict(n=8, c=144, h=56, w=56, k=144, r=3, s=3, pad_h=1, pad_w=1, stride_h=2, stride_w=2, groups=144),
]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", default="2")
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--backends", default="cpp,torch,mindspore,tensorflow", help="cpp first")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--ops", default="gemm,conv,lstm,gru,rnn")
    p.add_argument("--mindspore-conv", action="store_true", help="also time MindSpore on the conv rows")
    args = p.parse_args()
    names = tuple(args.backends.split(","))
    others = names[1:]
    timer = Timer(TimerConfig(max_time_s=0.5, call_budget_s=2.0))
    libs = library_versions()
    print(
        f"# {cpu_model()}; torch {libs['torch']}; opbench {__version__}; medians of {args.rounds} "
        "interleaved rounds; util = ours / FMA peak measured in this run"
    )
    cases = []
    if "gemm" in args.ops:
        cases += [("gemm:bwd", gemm.GemmShape(*d)) for d in GEMM]
    if "conv" in args.ops:
        cases += [("conv:bwd", conv.shape_from_case(c)) for c in CONV]
    for name, shape_class in (("lstm", lstm.LstmShape), ("gru", gru.GruShape), ("rnn", rnn.RnnShape)):
        if name in args.ops.split(","):
            cases += [(f"{name}:bwd", shape_class(*d)) for d in RECURRENT]
    rows = []
    for threads in map(int, args.threads.split(",")):
        for dtype in args.dtype.split(","):
            pk = peak.measured(dtype, threads, refresh=True)
            for key, shape in cases:
                skip = {"mindspore"} if key == "conv:bwd" and not args.mindspore_conv else set()
                if key == "conv:bwd" and shape.groups > 1:
                    skip.add("tensorflow")  # TensorFlow has no grouped-conv gradients on the CPU
                present = tuple(n for n in names if n not in skip)
                r = measure_pair(key, shape, dtype, threads, args.rounds, timer, present)
                ours = r[names[0]]["gflops"]
                theirs = [r[o]["gflops"] if o in r else float("nan") for o in others]
                timed = [r[o]["details"].get("timed", "") for o in others if o in r]
                bad = "" if all(v["ok"] for v in r.values()) else "  (verification FAILED)"
                rows.append((key, shape.label(), dtype, threads, ours, theirs, ours / pk.gflops))
                print(
                    f"{key:>9} {shape.label():>28} {dtype:>5} {threads:>3} {ours:7.1f} "
                    + " ".join(f"{t:9.1f}" for t in theirs)
                    + " "
                    + " ".join(f"{ours / t:8.2f}" for t in theirs)
                    + bad,
                    flush=True,
                )
            for o, t in zip([o for o in others if o in r], timed, strict=True):
                print(f"#   {o} times: {t}")
    if args.markdown:
        head = [
            "op",
            "shape",
            "dtype",
            "threads",
            "ours GFLOPS",
            *[f"{o} GFLOPS" for o in others],
            *[f"ours / {o}" for o in others],
            "ours util",
        ]
        table = [
            [
                key,
                label,
                dtype,
                threads,
                f"{ours:.1f}",
                *[f"{t:.1f}" for t in theirs],
                *[f"{ours / t:.2f}" for t in theirs],
                f"{100 * util:.0f}%",
            ]
            for key, label, dtype, threads, ours, theirs, util in rows
        ]
        print_markdown(head, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

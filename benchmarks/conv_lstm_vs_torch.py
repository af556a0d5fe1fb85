"""Our conv2d and recurrent layers vs torch (F.conv2d, nn.RNN/GRU/LSTM) and MindSpore (ops.conv2d,
nn.RNN/GRU/LSTM), measured side by side in one run.

    python benchmarks/conv_lstm_vs_torch.py --markdown [--ops conv,lstm,gru,rnn]

Shapes: the fast-kernels issue's reference cases (conv 3x3 64->64 at 56x56, batch 8; LSTM hidden 512,
batch 64, 25 steps), the training issue's GRU and RNN (tanh and ReLU) at the same size, and a few
neighbours; ratios are ours / theirs (> 1: ours is faster). --no-mindspore
leaves MindSpore out (its CPU convolution runs at about 1.5 GFLOPS, so the conv rows take minutes).
"""

from __future__ import annotations

import argparse
import sys

from side_by_side import measure_pair, print_markdown

from opbench import __version__, peak
from opbench.machine import cpu_model, library_versions
from opbench.ops import conv, gru, lstm, rnn
from opbench.timing import Timer, TimerConfig

CONV = [
    dict(n=8, c=64, h=56, w=56, k=64, r=3, s=3, pad_h=1, pad_w=1),
    dict(n=8, c=128, h=28, w=28, k=128, r=3, s=3, pad_h=1, pad_w=1),
    dict(n=8, c=256, h=14, w=14, k=256, r=3, s=3, pad_h=1, pad_w=1),
    dict(n=8, c=64, h=56, w=56, k=256, r=1, s=1),
    dict(n=8, c=3, h=224, w=224, k=64, r=7, s=7, pad_h=3, pad_w=3, stride_h=2, stride_w=2),
]
LSTM = [(25, 64, 512, 512), (25, 16, 512, 512), (25, 64, 1024, 1024), (50, 8, 256, 256)]
GRU = [(25, 64, 512, 512), (25, 16, 512, 512), (50, 8, 256, 256)]
RNN = [(25, 64, 512, 512, 0), (25, 64, 512, 512, 1), (50, 8, 256, 256, 0)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="2")
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--markdown", action="store_true")
    p.add_argument("--no-mindspore", action="store_true")
    p.add_argument("--ops", default="conv,lstm,gru,rnn", help="which of conv, lstm, gru, rnn")
    args = p.parse_args()
    names = ("cpp", "torch") if args.no_mindspore else ("cpp", "torch", "mindspore")
    timer = Timer(TimerConfig(max_time_s=0.5, call_budget_s=2.0))
    libs = library_versions()
    print(
        f"# {cpu_model()}; torch {libs['torch']}; opbench {__version__}; medians of {args.rounds} "
        "interleaved rounds; util = ours / FMA peak measured in this run"
    )
    every = {
        "conv": [conv.shape_from_case(c) for c in CONV],
        "lstm": [lstm.LstmShape(*d) for d in LSTM],
        "gru": [gru.GruShape(*d) for d in GRU],
        "rnn": [rnn.RnnShape(*d) for d in RNN],
    }
    cases = [(op_name, shape) for op_name in args.ops.split(",") for shape in every[op_name]]
    rows = []
    others = names[1:]
    print(
        f"{'op':>4} {'shape':>26} {'dtype':>5} {'thr':>3} {'ours':>7} "
        + " ".join(f"{o:>9}" for o in others)
        + " "
        + " ".join(f"{'/' + o:>10}" for o in others)
        + "   (GFLOPS; ours / theirs)"
    )
    for threads in map(int, args.threads.split(",")):
        for dtype in args.dtype.split(","):
            pk = peak.measured(dtype, threads, refresh=True)  # in this run: the VM's speed drifts
            for op_name, shape in cases:
                r = measure_pair(op_name, shape, dtype, threads, args.rounds, timer, names)
                ours = r["cpp"]["gflops"]
                theirs = [r[o]["gflops"] for o in others]
                bad = "" if all(v["ok"] for v in r.values()) else "  (verification FAILED)"
                rows.append((op_name, shape.label(), dtype, threads, ours, theirs, ours / pk.gflops))
                print(
                    f"{op_name:>4} {shape.label():>26} {dtype:>5} {threads:>3} {ours:7.1f} "
                    + " ".join(f"{t:9.1f}" for t in theirs)
                    + " "
                    + " ".join(f"{ours / t:10.2f}" for t in theirs)
                    + bad,
                    flush=True,
                )
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
                op_name,
                label,
                dtype,
                threads,
                f"{ours:.1f}",
                *[f"{t:.1f}" for t in theirs],
                *[f"{ours / t:.2f}" for t in theirs],
                f"{100 * util:.0f}%",
            ]
            for op_name, label, dtype, threads, ours, theirs, util in rows
        ]
        print_markdown(head, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The parsers of `opbench tune`, `opbench studies` and `opbench shapes`."""

from __future__ import annotations

import argparse

from opbench.cli.options import (
    AXIS_FLAGS,
    DEFAULT_PROCESSES,
    KERNEL_ACCUMULATE_HELP,
    Parser,
    isas,
    op_params,
)
from opbench.cli.types import at_most, export_formats, holdout, op, positive_int, seed, threads


def add_tune(sub: argparse._SubParsersAction[Parser]) -> None:
    t = sub.add_parser(
        "tune", help="search tile sizes with Optuna (crash-isolated, resumable, distributable)"
    )
    t.add_argument("op", type=op, help="gemm, conv, rnn, gru or lstm")
    tg = t.add_argument_group("gemm shape (--m, --n and --k required)")
    tg.add_argument("--m", type=positive_int, help="rows of A and C")
    tg.add_argument("--n", type=positive_int, help="columns of B and C")
    tg.add_argument("--k", type=positive_int, help="inner dimension")
    tg.add_argument("--batch-count", type=positive_int, help="products of a batched GEMM (default 1)")
    t.add_argument(
        "--problem", help="the shape as a benchdnn-style problem descriptor (instead of the above)"
    )
    pg = t.add_argument_group("a portfolio: a few tilings and a rule for many shapes (instead of one shape)")
    pg.add_argument(
        "--batch-file",
        help="the shapes: a benchdnn batch file (opbench shapes writes one; '# count=N' weighs a shape)",
    )
    pg.add_argument("--suite", help="the shapes: a built-in suite's, of this op (opbench suites)")
    pg.add_argument(
        "--portfolio",
        type=at_most(64, positive_int),
        help="choose at most K tilings and the rule that gives each shape one",
    )
    pg.add_argument(
        "--holdout",
        type=holdout,
        default=0.0,
        help="share of the shapes kept out of the search; the rule's loss on them is reported (default 0)",
    )
    pg.add_argument("--holdout-seed", type=seed, default=0, help="which shapes are held out (default 0)")
    pg.add_argument(
        "--export",
        type=export_formats,
        help="json, cpp or json,cpp: write the dispatch table to --out as NAME.json / NAME.hpp",
    )
    tc = t.add_argument_group(
        "conv and rnn/gru/lstm shape (one value each; unset ones at the op's base point)"
    )
    for dest in ("batch", "input_size", "in_channels", "out_channels", "filter_size", "seq_len", "hidden"):
        tc.add_argument(AXIS_FLAGS[dest], dest=dest, type=positive_int)
    op_params(tc)
    t.add_argument(
        "--dtype",
        choices=("fp32", "fp16", "bf16"),
        help="default fp32; with --batch-file, the file's --cfg where it names one",
    )
    t.add_argument(
        "--pass",
        dest="pass_name",
        default="fwd",
        choices=("fwd", "bwd"),
        help="tune the forward kernel (default) or the backward pass's (gemm, conv)",
    )
    t.add_argument(
        "--trials",
        type=at_most(1_000_000, positive_int),
        help="trials this process runs (default 50); with --portfolio, per shape, in all (default 6)",
    )
    t.add_argument(
        "--timeout", type=at_most(30 * 86_400), help="stop starting trials after this many seconds"
    )
    t.add_argument("--threads", type=threads, help="threads (default: all cores; at most 8 per core)")
    t.add_argument("--sampler", default="tpe", choices=("tpe", "gp", "cmaes", "random", "grid"))
    t.add_argument("--seed", type=seed, help="sampler seed (default: random)")
    t.add_argument(
        "--study", help="study name (default: OP-SHAPE-DTYPE-tTHREADS, e.g. gemm-64x64x64-fp32-t2)"
    )
    t.add_argument(
        "--storage",
        help="sqlite:///FILE or postgresql://USER:PASSWORD@HOST/DB (default: sqlite under --out/tuning/)",
    )
    t.add_argument("--out", default="reports", help="directory of the default storage (default: reports/)")
    t.add_argument("--space", help="search-space file or name in tuning/spaces (default: the op's)")
    t.add_argument("--params", help="parameters to search, e.g. tile_n,tile_k (the rest stay at the default)")
    t.add_argument("--cache-fit", action="store_true", help="enforce the space file's cache-fit constraints")
    t.add_argument("--isa", choices=isas(), help="tune this kernel set")
    t.add_argument(
        "--kernel",
        help="tune your own kernel instead: FILE.py:FUNC or module:FUNC, called with the op's inputs and one "
        "keyword per parameter of --space (README: your own kernel)",
    )
    t.add_argument("--kernel-accumulate", choices=("fp32", "fp16", "bf16"), help=KERNEL_ACCUMULATE_HELP)
    t.add_argument(
        "--baseline-params",
        help="with --kernel: the point the winner is compared with, NAME=VALUE,... (default: the first value "
        "of each parameter)",
    )
    t.add_argument(
        "--objectives", default="gflops", help="gflops, or gflops,error for the accuracy/speed front"
    )
    t.add_argument(
        "--trial-timeout",
        type=at_most(86_400),
        default=60.0,
        help="a candidate silent for this long is killed and recorded as a timeout (default 60)",
    )
    t.add_argument(
        "--trial-time-s",
        type=at_most(60),
        default=None,
        help="sample each trial for at most this long (default 0.5, at most 60); shorter ranks the "
        "candidates less precisely, and the confirmation re-measures the best with its own timer",
    )
    t.add_argument(
        "--confirm-top",
        type=at_most(100, positive_int),
        default=3,
        help="re-measure this many best tilings",
    )
    t.add_argument(
        "--confirm-rounds", type=at_most(100, positive_int), default=3, help="re-measurement rounds"
    )
    t.add_argument(
        "--confirm-processes",
        type=at_most(32, positive_int),
        default=None,
        help="fresh worker processes the re-measurement rounds run in, each with a randomized memory "
        f"layout (default {DEFAULT_PROCESSES}, or OPBENCH_PROCESSES, at most --confirm-rounds)",
    )
    t.add_argument("--force", action="store_true", help="continue a study recorded for another fingerprint")
    t.add_argument(
        "--show", action="store_true", help="print the study's history and best trials; run nothing"
    )
    t.add_argument("--heartbeat-s", type=positive_int, default=5, help=argparse.SUPPRESS)
    t.add_argument("--grace-s", type=positive_int, default=15, help=argparse.SUPPRESS)


def add_studies(sub: argparse._SubParsersAction[Parser]) -> None:
    st = sub.add_parser("studies", help="list the tuning studies in a storage")
    st.add_argument("--storage", help="storage URL (default: sqlite under --out/tuning/)")
    st.add_argument("--out", default="reports")


def add_shapes(sub: argparse._SubParsersAction[Parser]) -> None:
    sh = sub.add_parser(
        "shapes", help="the GEMM, conv and recurrent shapes a torch model runs, as a benchdnn batch file"
    )
    sh.add_argument(
        "--torch",
        required=True,
        metavar="MODULE:FACTORY",
        help="the model: FILE.py:FACTORY or module:FACTORY, called with no arguments, returning an nn.Module",
    )
    sh.add_argument(
        "--input",
        action="append",
        required=True,
        help="an input's sizes, e.g. 1x3x224x224, or 8x128:int64 for token ids (repeat for each input)",
    )
    sh.add_argument(
        "--dtype",
        default="fp32",
        choices=("fp32", "fp16", "bf16"),
        help="the dtype the batch file's problems run in (--cfg); the model is read in fp32",
    )
    sh.add_argument("--out", help="write the batch file here (default: standard output)")
    sh.add_argument("--force", action="store_true", help="replace an existing --out file")

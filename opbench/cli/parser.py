"""The argument parser of every command (its value types, which refuse bad values in one line, are in
cli/types.py)."""

from __future__ import annotations

import argparse

from opbench.cli.options import (
    AXIS_FLAGS,
    DEFAULT_PROCESSES,
    KERNEL_ACCUMULATE_HELP,
    PUBLISH_PROCESSES,
    PUBLISH_ROUNDS,
    Parser,
    isas,
    op_params,
)
from opbench.cli.tune_parser import add_shapes, add_studies, add_tune
from opbench.cli.types import (
    at_most,
    bytes_size,
    fail_on,
    op,
    positive_int,
    processes,
    rounds,
    scale,
    seed,
    threads,
)
from opbench.tiles import CONV_PATHS


def _problem_options(p: argparse._ActionsContainer) -> None:
    """benchdnn-style problems (opbench/descriptors.py), as sweep and ab take them."""
    p.add_argument(
        "--problem",
        action="append",
        help="a benchdnn-style problem descriptor (repeatable): conv mb2ic64ih56oc64kh3ph1, "
        "gemm 1024x768:768x3072, rnn/gru/lstm l1t25mb16sic256",
    )
    p.add_argument(
        "--batch-file", help="a file of problem descriptors, one or more a line, with benchdnn's options"
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="with --batch-file: refuse a line opbench does not run (a 3-D conv, int8, ...) instead of "
        "skipping it with its reason",
    )


def _case_options(s: argparse._ActionsContainer) -> None:
    """What `opbench sweep` and `opbench ab` both take: the shapes (axes, specs, suites, problems), dtypes,
    threads, device, output, seed, rounds, verification, timer and memory limits, training passes."""
    s.add_argument(
        "op",
        nargs="?",
        type=op,
        help="gemm, conv, rnn, gru or lstm (with --spec/--suite: run only that op's part)",
    )
    s.add_argument("--spec", help="a TOML sweep spec (see opbench/specs.py)")
    s.add_argument("--suite", help="a built-in suite (opbench suites lists them)")
    _problem_options(s)
    s.add_argument("--scale", type=scale, help="shrink batch and input size of every case by this factor")
    s.add_argument(
        "--mode",
        choices=("one-factor", "product"),
        help="vary one axis at a time around the base point, or the cross product "
        "(default: product for gemm, one-factor for the others)",
    )
    g = s.add_argument_group("gemm axes (sizes: 64,128 or 64:1024:x2 or 64:512:+64; unset ones are 1024)")
    for dest in ("m", "n", "k"):
        g.add_argument(AXIS_FLAGS[dest], dest=dest)
    g.add_argument(
        AXIS_FLAGS["batch_count"],
        dest="batch_count",
        help="products of a batched GEMM (batch x M x K by batch x K x N; default 1: a plain GEMM)",
    )
    c = s.add_argument_group("conv and rnn/gru/lstm axes (unset ones stay at the op's base point)")
    for dest in ("batch", "input_size", "in_channels", "out_channels", "filter_size", "seq_len", "hidden"):
        c.add_argument(AXIS_FLAGS[dest], dest=dest)
    op_params(c)
    s.add_argument("--dtype", help="fp32, fp16, bf16, or several comma-separated (default: fp32,fp16)")
    s.add_argument(
        "--threads", type=threads, help="threads for every backend (default: all cores; at most 8 per core)"
    )
    s.add_argument(
        "--device",
        default="cpu",
        help="cpu (default), cuda[:i] (torch, tensorflow, mindspore), ascend[:i] (mindspore)",
    )
    s.add_argument("--out", default="reports", help="output directory (default: reports/)")
    s.add_argument("--format", default="json,csv", help="json, csv or both (default: json,csv)")
    s.add_argument(
        "--seed", type=seed, default=0, help="seed of the random inputs and of the round order (default 0)"
    )
    s.add_argument(
        "--rounds",
        type=rounds,
        default=3,
        help="visit every case this many times, in a shuffled order per round, so its samples come from "
        "moments spread over the run (default 3; 1 times each case once)",
    )
    s.add_argument(
        "--processes",
        type=processes,
        default=None,
        help="run each backend's cases in this many fresh worker processes, round r in process r mod N, "
        "each with its own randomized memory layout, so that one process's state is one sample and not "
        f"the answer (default {DEFAULT_PROCESSES}, or OPBENCH_PROCESSES, at most --rounds; 0: in this "
        f"process; for figures you publish: --processes {PUBLISH_PROCESSES} --rounds {PUBLISH_ROUNDS})",
    )
    s.add_argument("--no-verify", action="store_true", help="skip checking outputs against float64")
    s.add_argument(
        "--verify-max-gflop",
        type=at_most(1e6),
        default=60.0,
        help="skip (and say so) verification costlier than this in float64 (default 60)",
    )
    s.add_argument("--cold-cache", action="store_true", help="flush caches before every sample (1 call each)")
    s.add_argument(
        "--min-sample-ms",
        type=at_most(10_000),
        default=10.0,
        help="shortest sample (default 10, at most 10000)",
    )
    s.add_argument(
        "--max-time-s", type=at_most(3600), default=1.0, help="sampling cap per case (at most 3600)"
    )
    s.add_argument(
        "--call-budget-s",
        type=at_most(3600),
        default=1.0,
        help="a call slower than this is timed once and flagged single_sample",
    )
    s.add_argument(
        "--max-call-s",
        type=at_most(86_400),
        default=60.0,
        help="skip a case predicted to take longer per call (default 60)",
    )
    s.add_argument(
        "--max-memory",
        type=bytes_size,
        help="skip a case needing more memory (default: 80%% of available memory)",
    )
    s.add_argument(
        "--pass",
        dest="passes",
        help="training passes: fwd, bwd or fwd,bwd (default fwd). bwd times the gradients of the inputs "
        "and weights given an upstream gradient (gemm in this version); records carry 'pass'",
    )


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="opbench", description="Operator-level micro-benchmarks and tiling autotuner.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)

    s = sub.add_parser("sweep", help="measure an operator over shapes, dtypes and backends")
    _case_options(s)
    s.add_argument(
        "--backend", help="comma-separated backends (default: the op's: cpp,torch,mindspore[,numpy])"
    )
    s.add_argument("--verbose", action="store_true", help="also print each case's repro command")
    s.add_argument("--tile-m", type=positive_int, help="cpp backend: tile_m (default: cache model)")
    s.add_argument("--tile-n", type=positive_int, help="cpp backend: tile_n")
    s.add_argument("--tile-k", type=positive_int, help="cpp backend: tile_k")
    s.add_argument("--isa", choices=isas(), help="cpp backend: force a kernel set")
    s.add_argument(
        "--conv-path",
        choices=CONV_PATHS[1:],
        help="cpp backend, conv: force a way instead of the planner's model (kernels.conv2d's "
        "tiles.conv_path; details.path says which ran)",
    )
    s.add_argument(
        "--tuned",
        action="store_true",
        help="cpp backend: use the tiles opbench tune recorded (exact shape or nearest)",
    )
    s.add_argument(
        "--accumulate",
        choices=("fp32", "fp16"),
        default="fp32",
        help="cpp backend, gemm, fp16 cases: fp16 sums each tile_k block in fp16 (AVX512-FP16; --isa ref "
        "emulates it), the blocks in fp32; verified against that blocked bound (default fp32)",
    )
    s.add_argument(
        "--kernel",
        help="also run your own kernel, FILE.py:FUNC or module:FUNC, as the backend kernel:FUNC (called like "
        "opbench tune --kernel calls it)",
    )
    s.add_argument("--kernel-params", help="with --kernel: its keyword arguments, NAME=VALUE,...")
    s.add_argument("--kernel-accumulate", choices=("fp32", "fp16", "bf16"), help=KERNEL_ACCUMULATE_HELP)
    s.add_argument("--quiet", action="store_true", help="no progress bar or table; print only file paths")

    ab = sub.add_parser("ab", help="two sides of the same cases, interleaved, with a verdict per case")
    _case_options(ab)
    ab.add_argument(
        "--a",
        required=True,
        help="side A: a backend (cpp, torch, ...), cpp with tiles (cpp:tile_m=56,tile_n=512,tile_k=256), or "
        "a kernel FILE.py:FUNC[:NAME=VALUE,...]",
    )
    ab.add_argument("--b", required=True, help="side B, the one judged: FASTER, SLOWER, SAME or AMBIGUOUS")
    ab.add_argument("--kernel-accumulate", choices=("fp32", "fp16", "bf16"), help=KERNEL_ACCUMULATE_HELP)
    ab.add_argument(
        "--threshold",
        type=at_most(10),
        help="smallest relative change a verdict may call FASTER or SLOWER (default: the noise the run "
        "measured, at least 0.02)",
    )
    ab.add_argument(
        "--fail-on",
        type=fail_on,
        help="for CI: slower (exit 1 when a case is SLOWER), failed (exit 1 when side B has no correct "
        "measurement of a case: wrong answer, crash, skipped), or slower,failed",
    )
    ab.add_argument("--quiet", action="store_true", help="no progress bar")

    pk = sub.add_parser("peak", help="measure (and cache) peak FLOPS per dtype and thread count")
    pk.add_argument(
        "--dtype",
        default="fp32,fp16,bf16",
        help="each dtype's peak is its execution unit's: fp32 FMA, fp16 FMA (AVX512-FP16) or bf16 dot "
        "product (AVX512-BF16), the fp32 FMA where the CPU lacks that unit",
    )
    pk.add_argument("--threads", help="thread counts, e.g. 1,2 (default: 1 and all cores)")
    pk.add_argument("--refresh", action="store_true", help="measure again instead of using the cache")
    pk.add_argument(
        "--device",
        default="cpu",
        help="cpu (default) or cuda[:i]: on a GPU, torch GEMM peaks (fp32, fp16, bf16) and copy bandwidth",
    )
    pk.add_argument(
        "--datasheets",
        action="store_true",
        help="print the accelerator datasheet peaks (dense) used on GPUs and NPUs, with their sources",
    )

    add_tune(sub)
    add_studies(sub)
    add_shapes(sub)

    rp = sub.add_parser(
        "report", help="turn sweep results and tuning studies into HTML/Markdown/CSV/JSON reports"
    )
    rp.add_argument("results", nargs="*", help="results .json files written by opbench sweep")
    rp.add_argument("--study", action="append", default=[], help="a tuning study to include (repeatable)")
    rp.add_argument("--storage", help="storage of the studies (default: sqlite under reports/tuning/)")
    rp.add_argument("--out", default="reports/report", help="report directory (its name is sanitised)")
    rp.add_argument("--format", default="html,md,csv,json", help="html, md, csv, json (default: all)")
    rp.add_argument("--baseline", help="backend the others are compared to (default: torch when present)")
    rp.add_argument("--title", default="opbench report")
    rp.add_argument("--force", action="store_true", help="replace an existing report")

    cp = sub.add_parser("compare", help="per-case change between two sweep result files, noise-aware")
    cp.add_argument("old")
    cp.add_argument("new")
    cp.add_argument(
        "--threshold",
        type=at_most(100),
        default=0.10,
        help="smallest relative change that can count as significant (default 0.10)",
    )
    cp.add_argument("--out", help="also write the comparison here (directory; name sanitised)")
    cp.add_argument("--format", default="md,csv,json", help="with --out: md, csv, json")
    cp.add_argument("--force", action="store_true", help="replace an existing comparison directory")
    cp.add_argument("--fail-on-regression", action="store_true", help="exit 1 when a regression is found")

    sub.add_parser("suites", help="list the built-in sweep suites")
    sub.add_parser("info", help="CPU features, kernel dispatch, default tiles and backend availability")
    return p

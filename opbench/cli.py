"""Command line: argument parsing and validation -> library calls. No measurement logic lives here.

Every invalid input ends in one line on stderr and exit code 2, before anything is written.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any, NoReturn

from opbench.errors import UsageError, missing_dependency


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def _int_from(text: str, lowest: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got '{text}'") from None
    if v < lowest:
        raise argparse.ArgumentTypeError(f"must be >= {lowest}, got {v}")
    return v


def _positive_int(text: str) -> int:
    return _int_from(text, 1)


# Oversubscription is a legitimate experiment, up to a bound: 8 threads per usable core, and never more than
# the kernels' pool allows (1024).
THREADS_PER_CORE = 8


def _threads(text: str) -> int:
    return _threads_within_bound(_positive_int(text))


def _threads_within_bound(v: int) -> int:
    from opbench.kernels import MAX_THREADS, default_threads

    cores = default_threads()
    bound = min(MAX_THREADS, THREADS_PER_CORE * cores)
    if v > bound:
        raise argparse.ArgumentTypeError(
            f"{v} threads on {cores} usable core(s): the limit is {bound} "
            f"({THREADS_PER_CORE} per core, at most {MAX_THREADS})"
        )
    return v


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got '{text}'") from None
    if not v > 0:  # also rejects nan
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    if v == float("inf"):
        raise argparse.ArgumentTypeError("must be finite")
    return v


def _at_most(limit: float, kind: Any = _positive_float) -> Any:
    """An argparse type: `kind`, and at most `limit` (a time or a count that would never end otherwise)."""

    def parse(text: str) -> Any:
        v = kind(text)
        if v > limit:
            shown = str(int(limit)) if float(limit).is_integer() else f"{limit:g}"
            raise argparse.ArgumentTypeError(f"must be <= {shown}, got {text}")
        return v

    return parse


def _seed(text: str) -> int:
    return int(_at_most(2**32 - 1, lambda t: _int_from(t, 0))(text))


# Sweep axes on the command line, per op: option dest -> flag (the op module's AXES names the dests).
AXIS_FLAGS = {
    "m": "--m",
    "n": "--n",
    "k": "--k",
    "batch": "--batch",
    "input_size": "--input-size",
    "in_channels": "--in-channels",
    "out_channels": "--out-channels",
    "filter_size": "--filter-size",
    "seq_len": "--seq-len",
    "hidden": "--hidden",
}
PARAM_FLAGS = {"stride": "--stride", "padding": "--padding", "dilation": "--dilation", "groups": "--groups"}


def _rounds(text: str) -> int:
    v = _positive_int(text)
    if v > 100:
        raise argparse.ArgumentTypeError(f"at most 100 rounds, got {v}")
    return v


def _scale(text: str) -> float:
    v = _positive_float(text)
    if v > 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return v


def _padding(text: str) -> int | str:
    if text == "same":
        return text
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be 'same' or an integer >= 0, got '{text}'") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be 'same' or an integer >= 0, got {v}")
    return v


def _bytes(text: str) -> int:
    """'8G', '512M', '1.5GiB', '1000000' -> bytes."""
    units = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    unit = t[-1:] if t[-1:] in units and t[-1:] != "" else ""
    try:
        v = float(t[: len(t) - len(unit)]) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a size like 8G or 512M, got '{text}'") from None
    if not 0 < v < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a size > 0, got '{text}'")
    return int(v)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="opbench", description="Operator-level micro-benchmarks and tiling autotuner.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("sweep", help="measure an operator over shapes, dtypes and backends")
    s.add_argument("op", nargs="?", help="gemm, conv or lstm (with --spec/--suite: run only that op's part)")
    s.add_argument("--spec", help="a TOML sweep spec (see opbench/specs.py)")
    s.add_argument("--suite", help="a built-in suite (opbench suites lists them)")
    s.add_argument("--scale", type=_scale, help="shrink batch and input size of every case by this factor")
    s.add_argument(
        "--mode",
        choices=("one-factor", "product"),
        help="vary one axis at a time around the base point, or the cross product "
        "(default: product for gemm, one-factor for conv and lstm)",
    )
    g = s.add_argument_group("gemm axes (sizes: 64,128 or 64:1024:x2 or 64:512:+64; unset ones are 1024)")
    for dest in ("m", "n", "k"):
        g.add_argument(AXIS_FLAGS[dest], dest=dest)
    c = s.add_argument_group("conv and lstm axes (unset ones stay at the op's base point)")
    for dest in ("batch", "input_size", "in_channels", "out_channels", "filter_size", "seq_len", "hidden"):
        c.add_argument(AXIS_FLAGS[dest], dest=dest)
    c.add_argument("--stride", type=_positive_int, help="conv stride (default 1)")
    c.add_argument("--padding", type=_padding, help="conv padding: 'same' (default) or an integer")
    c.add_argument("--dilation", type=_positive_int, help="conv dilation (default 1)")
    c.add_argument("--groups", type=_positive_int, help="conv groups (default 1)")
    s.add_argument("--dtype", help="fp32, fp16 or both (default: fp32,fp16)")
    s.add_argument(
        "--backend", help="comma-separated backends (default: the op's: cpp,torch,mindspore[,numpy])"
    )
    s.add_argument(
        "--threads", type=_threads, help="threads for every backend (default: all cores; at most 8 per core)"
    )
    s.add_argument(
        "--device",
        default="cpu",
        help="cpu (default), cuda[:i] (torch, tensorflow, mindspore), ascend[:i] (mindspore)",
    )
    s.add_argument("--out", default="reports", help="output directory (default: reports/)")
    s.add_argument("--format", default="json,csv", help="json, csv or both (default: json,csv)")
    s.add_argument(
        "--seed", type=_seed, default=0, help="seed of the random inputs and of the round order (default 0)"
    )
    s.add_argument(
        "--rounds",
        type=_rounds,
        default=3,
        help="visit every case this many times, in a shuffled order per round, so its samples come from "
        "moments spread over the run (default 3; 1 times each case once)",
    )
    s.add_argument("--no-verify", action="store_true", help="skip checking outputs against float64")
    s.add_argument(
        "--verify-max-gflop",
        type=_at_most(1e6),
        default=60.0,
        help="skip (and say so) verification costlier than this in float64 (default 60)",
    )
    s.add_argument("--cold-cache", action="store_true", help="flush caches before every sample (1 call each)")
    s.add_argument(
        "--min-sample-ms",
        type=_at_most(10_000),
        default=10.0,
        help="shortest sample (default 10, at most 10000)",
    )
    s.add_argument(
        "--max-time-s", type=_at_most(3600), default=1.0, help="sampling cap per case (at most 3600)"
    )
    s.add_argument(
        "--call-budget-s",
        type=_at_most(3600),
        default=1.0,
        help="a call slower than this is timed once and flagged single_sample",
    )
    s.add_argument(
        "--max-call-s",
        type=_at_most(86_400),
        default=60.0,
        help="skip a case predicted to take longer per call (default 60)",
    )
    s.add_argument(
        "--max-memory",
        type=_bytes,
        help="skip a case needing more memory (default: 80%% of available memory)",
    )
    s.add_argument("--tile-m", type=_positive_int, help="cpp backend: tile_m (default: cache model)")
    s.add_argument("--tile-n", type=_positive_int, help="cpp backend: tile_n")
    s.add_argument("--tile-k", type=_positive_int, help="cpp backend: tile_k")
    s.add_argument("--isa", choices=("avx512", "avx2", "ref"), help="cpp backend: force a kernel set")
    s.add_argument(
        "--tuned",
        action="store_true",
        help="cpp backend, gemm: use the tiles opbench tune recorded (exact shape or nearest)",
    )
    s.add_argument(
        "--accumulate",
        choices=("fp32", "fp16"),
        default="fp32",
        help="cpp backend, gemm, fp16 cases: fp16 sums each tile_k block in fp16 (AVX512-FP16; --isa ref "
        "emulates it), the blocks in fp32; verified against that blocked bound (default fp32)",
    )
    s.add_argument("--quiet", action="store_true", help="no progress bar or table; print only file paths")

    pk = sub.add_parser("peak", help="measure (and cache) peak FLOPS per dtype and thread count")
    pk.add_argument("--dtype", default="fp32,fp16")
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

    t = sub.add_parser(
        "tune", help="search tile sizes with Optuna (crash-isolated, resumable, distributable)"
    )
    t.add_argument("op", help="gemm")
    t.add_argument("--m", type=_positive_int, help="rows of A and C")
    t.add_argument("--n", type=_positive_int, help="columns of B and C")
    t.add_argument("--k", type=_positive_int, help="inner dimension")
    t.add_argument("--dtype", default="fp32", choices=("fp32", "fp16"))
    t.add_argument(
        "--trials",
        type=_at_most(1_000_000, _positive_int),
        default=50,
        help="trials this process runs (default 50)",
    )
    t.add_argument(
        "--timeout", type=_at_most(30 * 86_400), help="stop starting trials after this many seconds"
    )
    t.add_argument("--threads", type=_threads, help="threads (default: all cores; at most 8 per core)")
    t.add_argument("--sampler", default="tpe", choices=("tpe", "gp", "cmaes", "random", "grid"))
    t.add_argument("--seed", type=_seed, help="sampler seed (default: random)")
    t.add_argument("--study", help="study name (default: gemm-MxNxK-DTYPE-tTHREADS)")
    t.add_argument(
        "--storage",
        help="sqlite:///FILE or postgresql://USER:PASSWORD@HOST/DB (default: sqlite under --out/tuning/)",
    )
    t.add_argument("--out", default="reports", help="directory of the default storage (default: reports/)")
    t.add_argument("--space", help="search-space file or name in tuning/spaces (default: gemm)")
    t.add_argument("--params", help="parameters to search, e.g. tile_n,tile_k (the rest stay at the default)")
    t.add_argument("--cache-fit", action="store_true", help="enforce the space file's cache-fit constraints")
    t.add_argument("--isa", choices=("avx512", "avx2", "ref"), help="tune this kernel set")
    t.add_argument(
        "--objectives", default="gflops", help="gflops, or gflops,error for the accuracy/speed front"
    )
    t.add_argument(
        "--trial-timeout",
        type=_at_most(86_400),
        default=60.0,
        help="a candidate silent for this long is killed and recorded as a timeout (default 60)",
    )
    t.add_argument(
        "--confirm-top",
        type=_at_most(100, _positive_int),
        default=3,
        help="re-measure this many best tilings",
    )
    t.add_argument(
        "--confirm-rounds", type=_at_most(100, _positive_int), default=3, help="re-measurement rounds"
    )
    t.add_argument("--force", action="store_true", help="continue a study recorded for another fingerprint")
    t.add_argument(
        "--show", action="store_true", help="print the study's history and best trials; run nothing"
    )
    t.add_argument("--heartbeat-s", type=_positive_int, default=5, help=argparse.SUPPRESS)
    t.add_argument("--grace-s", type=_positive_int, default=15, help=argparse.SUPPRESS)

    st = sub.add_parser("studies", help="list the tuning studies in a storage")
    st.add_argument("--storage", help="storage URL (default: sqlite under --out/tuning/)")
    st.add_argument("--out", default="reports")

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
        type=_at_most(100),
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


def _plans_from_args(args: argparse.Namespace) -> tuple[list[Any], dict[str, Any] | None]:
    """The sweep plans this command asks for, and the suite/spec it came from (None for the command line)."""
    from opbench.ops import get_op
    from opbench.ranges import parse_sizes
    from opbench.space import expand
    from opbench.specs import SweepPlan, load_spec, load_suite

    given_axes = {d: getattr(args, d) for d in AXIS_FLAGS if getattr(args, d) is not None}
    given_params = {d: getattr(args, d) for d in PARAM_FLAGS if getattr(args, d) is not None}
    if args.spec and args.suite:
        raise UsageError("give --spec or --suite, not both")
    if args.spec or args.suite:
        if given_axes or given_params or args.mode:
            flags = [AXIS_FLAGS.get(d) or PARAM_FLAGS[d] for d in [*given_axes, *given_params]] or ["--mode"]
            raise UsageError(f"{flags[0]} cannot be combined with --spec/--suite (the spec sets the shapes)")
        spec = load_spec(args.spec) if args.spec else load_suite(args.suite)
        plans = list(spec.plans)
        if args.op:
            get_op(args.op)
            plans = [pl for pl in plans if pl.op == args.op]
            if not plans:
                raise UsageError(
                    f"{spec.name} has no {args.op} sweep (it has: {', '.join(p.op for p in spec.plans)})"
                )
        meta = {"name": spec.name, "description": spec.description, "source": spec.source, "path": spec.path}
        return plans, meta

    if not args.op:
        raise UsageError("opbench sweep: name an op (gemm, conv, lstm) or give --spec/--suite")
    op = get_op(args.op)
    for dest in [*given_axes, *given_params]:
        if dest not in op.AXES and dest not in op.PARAMS:
            allowed = " ".join(AXIS_FLAGS[a] for a in op.AXES) + "".join(
                f" {PARAM_FLAGS[p]}" for p in op.PARAMS
            )
            flag = AXIS_FLAGS.get(dest) or PARAM_FLAGS[dest]
            raise UsageError(f"{flag} does not apply to {args.op} (its options: {allowed})")
    axes = {d: parse_sizes(v, AXIS_FLAGS[d]) for d, v in given_axes.items()}
    mode = args.mode or op.DEFAULT_MODE
    params = {**op.PARAMS, **given_params}
    try:
        if axes:
            shapes = expand(op, axes, dict(op.BASE), params, mode)
        elif given_params and hasattr(op, "DEFAULT_AXES"):
            shapes = expand(op, op.DEFAULT_AXES, dict(op.BASE), params, mode)
        else:
            shapes = op.default_cases()
    except ValueError as e:
        raise UsageError(str(e)) from None
    return [SweepPlan(args.op, tuple(shapes), mode, None, None, "")], None


def _check_out_dir(out: str) -> Path:
    from opbench.files import check_writable_dir

    return check_writable_dir(Path(out), "--out")


def cmd_sweep(args: argparse.Namespace) -> int:
    from opbench.backends import parse_backends
    from opbench.dtypes import parse_dtypes
    from opbench.kernels import default_threads
    from opbench.machine import available_memory_bytes
    from opbench.ops import get_op
    from opbench.results import parse_formats
    from opbench.space import scale_shapes
    from opbench.sweep import SweepConfig
    from opbench.timing import TimerConfig

    plans, suite = _plans_from_args(args)
    cli_dtypes = parse_dtypes(args.dtype) if args.dtype is not None else None
    cli_backends = parse_backends(args.backend) if args.backend is not None else None
    formats = parse_formats(args.format)
    out_dir = _check_out_dir(args.out)
    if not re.fullmatch(r"cpu|(cuda|ascend)(:\d+)?", args.device):
        raise UsageError(f"unknown device '{args.device}' (expected cpu, cuda[:index] or ascend[:index])")
    threads = args.threads or default_threads()
    timer = TimerConfig(
        min_sample_s=args.min_sample_ms / 1e3,
        max_time_s=args.max_time_s,
        call_budget_s=args.call_budget_s,
        cold_cache=args.cold_cache,
    )
    cpp_params = {
        "tile_m": args.tile_m,
        "tile_n": args.tile_n,
        "tile_k": args.tile_k,
        "isa": args.isa,
        "tuned": args.tuned,
        "accumulate": args.accumulate,
    }
    if args.tuned and (args.tile_m or args.tile_n or args.tile_k):
        raise UsageError("--tuned and --tile-m/--tile-n/--tile-k are exclusive")
    if args.accumulate == "fp16":
        from opbench import kernels

        f16acc = kernels.default_tiles(args.isa)["fp16_accumulate"]
        if not f16acc["available"]:
            raise UsageError(f"--accumulate fp16: {f16acc['reason']}")
    budget = args.max_memory or int(available_memory_bytes() * 0.8)

    configs = []
    for plan in plans:
        op = get_op(plan.op)
        if args.scale:
            shapes, unscaled = scale_shapes(op, list(plan.shapes), args.scale)
        else:
            shapes, unscaled = list(plan.shapes), []
        configs.append(
            SweepConfig(
                op=plan.op,
                shapes=tuple(shapes),
                dtypes=tuple(cli_dtypes or plan.dtypes or ("fp32", "fp16")),
                backends=tuple(cli_backends or plan.backends or op.DEFAULT_BACKENDS),
                threads=threads,
                device=args.device,
                timer=timer,
                verify=not args.no_verify,
                seed=args.seed,
                cpp_params=cpp_params,
                max_memory_bytes=budget,
                max_call_s=args.max_call_s,
                verify_max_gflop=args.verify_max_gflop,
                unscaled=tuple(unscaled) if args.scale else None,
                rounds=args.rounds,
            )
        )
    _check_memory(configs, budget)
    meta = {
        "suite": suite,
        "scale": args.scale,
        "plans": [pl.description for pl in plans],
        "modes": [pl.mode for pl in plans],
        "command": args.command_line,
    }
    return _run_sweeps(configs, meta, out_dir, formats, quiet=args.quiet)


def _check_memory(configs: list[Any], budget: int) -> None:
    """A case over the budget is skipped when the sweep reaches it; if no case fits, say so up front."""
    from opbench.ops import get_op

    smallest = None
    for cfg in configs:
        op = get_op(cfg.op)
        for shape in cfg.shapes:
            verify = cfg.verify and op.verify_cost_flops(shape) <= cfg.verify_max_gflop * 1e9
            for d in cfg.dtypes:
                need = op.memory_bytes(shape, d, reference=verify)
                if need <= budget:
                    return
                if smallest is None or need < smallest[0]:
                    smallest = (need, shape, d)
    if smallest is not None:
        need, shape, d = smallest
        raise UsageError(
            f"no case fits in memory: the smallest, {shape.label()} ({d}), needs about "
            f"{need / 2**30:.1f} GiB, "
            f"more than the {budget / 2**30:.1f} GiB budget (--max-memory; default 80% of available memory)"
        )


def _sweep_header(
    cfg: Any,
    meta: dict[str, Any],
    states: dict[str, Any],
    peak_table: dict[str, Any],
    cpus: list[int],
    index: int,
    bandwidth: dict[str, Any] | None,
) -> dict[str, Any]:
    from dataclasses import asdict

    from opbench import machine, sweep
    from opbench.ops import get_op

    op = get_op(cfg.op)
    return {
        "op": cfg.op,
        "shape_fields": list(op.SHAPE_FIELDS),
        "command": meta["command"],
        "flop_note": op.FLOP_NOTE,
        "suite": meta["suite"],
        "scale": meta["scale"],
        "mode": meta["modes"][index],
        "description": meta["plans"][index],
        "factor_levels": sweep.factor_levels(cfg),
        "settings": {
            "threads": cfg.threads,
            "device": cfg.device,
            "dtypes": list(cfg.dtypes),
            "backends": list(cfg.backends),
            "verify": cfg.verify,
            "verify_max_gflop": cfg.verify_max_gflop,
            "seed": cfg.seed,
            "rounds": cfg.rounds,
            "timer": asdict(cfg.timer),
            "max_memory_bytes": cfg.max_memory_bytes,
            "max_call_s": cfg.max_call_s,
            "cpp": {k: v for k, v in cfg.cpp_params.items() if v is not None},
        },
        "machine": {**machine.provenance(cfg.threads, cpus), **_accelerator_block(cfg.device)},
        "peaks": {d: peak_table[d] for d in cfg.dtypes},
        "bandwidth": bandwidth,
        "backends": sweep.backend_summary({n: states[n] for n in cfg.backends}),
    }


def _accelerator_block(device: str) -> dict[str, Any]:
    """GPU provenance at the start of a run on a cuda device (name, CUDA, driver, clocks); empty on CPU."""
    from opbench import gpu

    info = gpu.provenance(device)
    return {"accelerator": info} if info is not None else {}


def _environment(writer: Any, bench: Any) -> None:
    """The run's environment block (contention, load, frequency, warnings, probe summary) into the header,
    and this run's best probes into the machine's cache; also after an interrupt."""
    from opbench import history as runs
    from opbench import peak
    from opbench.reference import THROTTLED_SPEED, apart_warning

    contended = sum("contended" in r.get("flags", []) for r in writer.doc["records"])
    env = bench.monitor.finish(contended_cases=contended)
    if bench.reference is not None:
        env["reference"] = bench.reference.summary()
        peak.record_best_probes(bench.reference.run_best)
        throttled = sum("throttled" in r.get("flags", []) for r in writer.doc["records"])
        if throttled:
            env["warnings"].append(
                f"{throttled} case(s) measured only while the machine ran below "
                f"{100 * THROTTLED_SPEED:.0f}% of its best in-run probe: flagged throttled"
            )
        apart = sum("apart" in r.get("flags", []) for r in writer.doc["records"])
        if apart:
            env["warnings"].append(apart_warning(apart, bench.reference))
    unlike = sum(runs.FLAG in r.get("flags", []) for r in writer.doc["records"])
    if unlike:
        env["warnings"].append(runs.warning(unlike))
    writer.doc["environment"] = env
    writer.flush()


def _run_sweeps(
    configs: list[Any], meta: dict[str, Any], out_dir: Path, formats: list[str], quiet: bool
) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from opbench import history as runs
    from opbench import machine, peak, sweep, visits
    from opbench.display import print_summary
    from opbench.machine import utc_stamp
    from opbench.results import ResultsWriter

    # Rich assumes 80 columns when stdout is not a terminal; the table needs about 110.
    console = Console(quiet=quiet, width=None if sys.stdout.isatty() else 120, markup=False)
    err_console = Console(stderr=True, quiet=quiet, markup=False)
    first = configs[0]
    all_dtypes = tuple(dict.fromkeys(d for c in configs for d in c.dtypes))
    all_backends = tuple(dict.fromkeys(b for c in configs for b in c.backends))
    writers: list[ResultsWriter] = []
    try:
        cpus = machine.pin_to_cpus(first.threads) if first.device == "cpu" else machine.allowed_cpus()
        with err_console.status("measuring peak FLOPS (cached per machine)..."):
            peak_table = sweep.resolve_peaks(all_dtypes, first.threads, first.device)
            bandwidth = peak.bandwidth(first.threads).to_dict() if first.device == "cpu" else None
        with err_console.status("loading backends..."):
            states = sweep.setup_backends(all_backends, first.threads, first.device)
        if first.device != "cpu" and all(st.reason for st in states.values()):
            reasons = "; ".join(f"{name}: {st.reason}" for name, st in states.items())
            raise UsageError(f"no backend can run on '{first.device}' here ({reasons})")
        history = visits.SpeedHistory()
        # One in-run reference for the whole command (its probe budget and best values shared); each
        # results file gets its own contention monitor, whose findings go into its header.
        reference = sweep.make_reference(first)
        stamp = utc_stamp()
        prefix = f"{meta['suite']['name']}-" if meta["suite"] else ""
        for index, cfg in enumerate(configs):
            header = _sweep_header(cfg, meta, states, peak_table, cpus, index, bandwidth)
            writer = ResultsWriter(out_dir, f"{prefix}{cfg.op}-{stamp}", formats, header)
            writers.append(writer)
            progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=err_console,
                transient=True,
            )
            bench = sweep.make_bench(cfg, cpus, reference)
            with progress:
                task = progress.add_task(cfg.op, total=cfg.n_cases * cfg.rounds)

                def on_records(
                    records: list[tuple[int, dict[str, Any]]], writer: ResultsWriter = writer
                ) -> None:
                    writer.put(records)

                def on_case_start(description: str, task: Any = task, progress: Progress = progress) -> None:
                    progress.update(task, description=description, advance=1)

                try:
                    sweep.run_sweep(cfg, states, peak_table, on_records, on_case_start, history, bench)
                    if runs.apply(writer.doc, peak.cache_dir()):  # flags cases unlike earlier runs
                        writer.refresh()
                finally:
                    _environment(writer, bench)
            if "accelerator" in writer.doc["machine"]:
                from opbench import gpu

                writer.doc["machine"]["accelerator"]["smi_end"] = gpu.clocks(cfg.device)  # clocks at the end
            writer.finish()
            print_summary(console, writer.doc, writer.paths)
            if quiet:
                for path in writer.paths.values():
                    print(path)
    except KeyboardInterrupt:
        if not writers:
            print("opbench: interrupted before any case ran; nothing written", file=sys.stderr)
        else:
            kept = ", ".join(str(p) for w in writers for p in w.paths.values())
            done = sum(len(w.doc["records"]) for w in writers)
            print(f"opbench: interrupted; {done} finished case(s) kept in {kept}", file=sys.stderr)
        return 130
    return 0


def _print_datasheets() -> int:
    from rich.console import Console
    from rich.table import Table

    from opbench.accelerators import ACCELERATORS

    dtypes = ("fp32", "tf32", "fp16", "bf16")
    table = Table(
        title="accelerator datasheet peaks (TFLOPS, dense)", title_justify="left", header_style="bold"
    )
    for col in ("device", *dtypes, "source"):
        table.add_column(col, justify="right" if col in dtypes else "left")
    for acc in ACCELERATORS:
        cells = [f"{acc.tflops[d]:g}" if d in acc.tflops else "-" for d in dtypes]
        table.add_row(acc.name, *cells, acc.source)
    console = Console(markup=False, width=None if sys.stdout.isatty() else 160)
    console.print(table)
    console.print(
        "Sparse (2:4) figures are never used. fp16/bf16 are tensor-core or cube peaks; fp32 is the CUDA-core "
        "peak (TF32 is listed apart). A sweep with --device cuda uses the row matching the device's name."
    )
    return 0


def _gpu_peak(device: str) -> int:
    from rich.console import Console
    from rich.table import Table

    from opbench import gpu, peak
    from opbench.backends import accelerator_name

    if gpu.device_index(device) is None:
        raise UsageError(f"unknown device '{device}' for opbench peak (expected cpu or cuda[:index])")
    try:
        result = gpu.measure_peaks(device)
    except (ImportError, RuntimeError) as e:
        raise UsageError(f"cannot measure peaks on '{device}': {e}") from None
    name = accelerator_name(device) or device
    table = Table(title=f"peak FLOPS on {name}", title_justify="left", header_style="bold")
    for col in ("dtype", "achieved GFLOPS", "datasheet GFLOPS", "achieved / datasheet"):
        table.add_column(col, justify="left" if col == "dtype" else "right")
    for dtype, achieved in result["gemm_gflops"].items():
        ds = peak.accelerator_datasheet(name, dtype, 1)
        ratio = f"{achieved / ds.gflops:.2f}" if ds else "-"
        table.add_row(dtype, f"{achieved:.0f}", f"{ds.gflops:.0f}" if ds else "-", ratio)
    console = Console(markup=False, width=None if sys.stdout.isatty() else 120)
    console.print(table)
    console.print(
        f"torch.matmul {result['gemm_size']}^3, {result['timing']}; TF32 for fp32 matmul: "
        f"{result['tf32_matmul']}. Device copy: {result['copy_gb_s']:.0f} GB/s (read + write)."
    )
    return 0


def cmd_peak(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from opbench import peak
    from opbench.dtypes import parse_dtypes
    from opbench.kernels import default_threads
    from opbench.ranges import parse_sizes

    if args.datasheets:
        return _print_datasheets()
    if args.device != "cpu":
        return _gpu_peak(args.device)
    dtypes = parse_dtypes(args.dtype)
    counts = parse_sizes(args.threads, "--threads") if args.threads else sorted({1, default_threads()})
    for count in counts:
        try:
            _threads_within_bound(count)
        except argparse.ArgumentTypeError as e:
            raise UsageError(f"--threads: {e}") from None
    table = Table(title="peak FLOPS", title_justify="left", header_style="bold")
    for col in ("dtype", "threads", "measured GFLOPS", "datasheet GFLOPS", "measured / datasheet"):
        table.add_column(col, justify="left" if col in ("dtype", "threads") else "right")
    console = Console(markup=False, width=None if sys.stdout.isatty() else 120)
    notes: dict[str, None] = {}  # ordered set
    with Console(stderr=True).status("running FMA-throughput loops..."):
        for d in dtypes:
            for t in counts:
                m = peak.measured(d, t, refresh=args.refresh)
                ds = peak.datasheet(d, t)
                ratio = f"{m.gflops / ds.gflops:.2f}" if ds else "-"
                table.add_row(d, str(t), f"{m.gflops:.1f}", f"{ds.gflops:.1f}" if ds else "-", ratio)
                notes[f"{d} measured: {m.name}; {m.detail.split(', best')[0]}"] = None
                notes[f"{d} datasheet: {ds.detail}" if ds else f"{d} datasheet: clock frequency unknown"] = (
                    None
                )
    console.print(table)
    for note in notes:
        console.print(note, style="dim")
    for t in counts:
        b = peak.bandwidth(t, refresh=args.refresh)
        console.print(f"memory bandwidth, {t} thread(s): {b.gbs:.1f} GB/s measured ({b.detail})")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from rich.console import Console

    from opbench import kernels
    from opbench.backends import BACKENDS
    from opbench.machine import cpu_model

    console = Console(markup=False)
    f = kernels.cpu_features()
    console.print(
        f"CPU: {cpu_model()} ({f['vendor']}), {f['logical_cpus']} logical CPUs, "
        f"{kernels.default_threads()} usable"
    )
    console.print("features: " + ", ".join(k for k, v in f["features"].items() if v))
    console.print(f"kernel sets: {', '.join(f['isas'])}; selected: {f['selected_isa']}")
    c = f["caches"]
    console.print(
        f"caches ({f['cache_source']}): L1d {c['l1d']['size_bytes'] // 1024} KiB {c['l1d']['ways']}-way, "
        f"L2 {c['l2']['size_bytes'] // 1024} KiB {c['l2']['ways']}-way, "
        f"L3 {c['l3']['size_bytes'] // 2**20} MiB {c['l3']['ways']}-way"
    )
    for isa in f["isas"]:
        t = kernels.default_tiles(isa)
        console.print(
            f"  {isa}: {t['description']}; default tiles m={t['tile_m']} n={t['tile_n']} k={t['tile_k']}"
        )
    for name, cls in BACKENDS.items():
        reason = cls().unavailable_reason()
        console.print(f"backend {name}: " + ("available" if reason is None else f"unavailable ({reason})"))
    return 0


def _storage_url(storage: str | None, out: str) -> str:
    from opbench.tune.storage import default_url

    if storage:
        if "://" not in storage:
            raise UsageError(
                f"--storage must be a URL like sqlite:///FILE or postgresql://..., got '{storage}'"
            )
        return str(storage)
    return default_url(_check_out_dir(out))


def _tiles_text(tiles: dict[str, int] | None) -> str:
    return " ".join(f"{k}={v}" for k, v in (tiles or {}).items()) or "cache-model default"


def cmd_tune(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from opbench.kernels import default_threads
    from opbench.ops.gemm import GemmShape
    from opbench.tune import study as tuner

    if args.op != "gemm":
        raise UsageError(f"opbench tune supports gemm (got '{args.op}')")
    objectives = tuple(o.strip() for o in args.objectives.split(",") if o.strip())
    if objectives not in (("gflops",), ("gflops", "error")):
        raise UsageError(f"--objectives must be 'gflops' or 'gflops,error', got '{args.objectives}'")
    storage = _storage_url(args.storage, args.out)
    threads = args.threads or default_threads()
    console = Console(markup=False, highlight=False, width=None if sys.stdout.isatty() else 120)
    if args.show:
        if not args.study and None in (args.m, args.n, args.k):
            raise UsageError("--show needs --study NAME (or --m, --n and --k to name the default study)")
        name = args.study or f"gemm-{args.m}x{args.n}x{args.k}-{args.dtype}-t{threads}"
        return _show_study(console, tuner.load_existing(name, storage))
    missing = [f"--{d}" for d in ("m", "n", "k") if getattr(args, d) is None]
    if missing:
        raise UsageError(f"opbench tune gemm needs {', '.join(missing)}")
    shape = GemmShape(args.m, args.n, args.k)
    from opbench.machine import available_memory_bytes
    from opbench.ops import gemm as gemm_op

    need = gemm_op.memory_bytes(shape, args.dtype)
    if need > available_memory_bytes() * 0.8:
        raise UsageError(
            f"shape {shape.label()} ({args.dtype}) needs about {need / 2**30:.1f} GiB, more than 80% of "
            "available memory"
        )
    suffix = "-mo" if len(objectives) > 1 else ""
    cfg = tuner.TuneConfig(
        shape=shape,
        dtype=args.dtype,
        threads=threads,
        study_name=args.study or f"gemm-{shape.label()}-{args.dtype}-t{threads}{suffix}",
        storage_url=storage,
        trials=args.trials,
        timeout_s=args.timeout,
        sampler=args.sampler,
        seed=args.seed,
        space=args.space,
        params=tuple(p.strip() for p in args.params.split(",")) if args.params else None,
        cache_fit=args.cache_fit,
        isa=args.isa,
        objectives=objectives,
        trial_timeout_s=args.trial_timeout,
        confirm_top=args.confirm_top,
        confirm_rounds=args.confirm_rounds,
        force=args.force,
        heartbeat_s=args.heartbeat_s,
        grace_s=args.grace_s,
        command=tuple(args.command_line),
    )

    def on_event(kind: str, info: dict[str, Any]) -> None:
        if kind == "space":
            params = ", ".join(f"{n} {len(v)} values ({v[0]}..{v[-1]})" for n, v in info["params"].items())
            rules = ", ".join(info["constraints"]) or "none"
            console.print(
                f"study {cfg.study_name} in {tuner.mask(cfg.storage_url)}: {params}; "
                f"{info['valid_points']} valid tilings (constraints: {rules}); "
                f"{info['already']} already measured"
            )
        elif kind == "trial":
            head = f"#{info['number']:<4} {_tiles_text(info.get('tiles')):40}"
            if info.get("reused_from") is not None:
                value = info.get("failure") or f"{info.get('gflops', 0):.1f} GFLOPS"
                console.print(f"{head} {value} (already measured in trial {info['reused_from']})")
            elif info.get("failure"):
                console.print(f"{head} failed: {info['failure']}")
            else:
                err = (
                    f", max rel err {info['max_rel_err']:.2e}" if info.get("max_rel_err") is not None else ""
                )
                console.print(f"{head} {info['gflops']:.1f} GFLOPS{err}")
        elif kind == "exhausted":
            console.print(
                f"every one of the {info['valid_points']} valid tilings is measured: the search is done"
            )

    try:
        summary = tuner.run(cfg, on_event)
    except KeyboardInterrupt:
        print(
            "opbench: interrupted; every finished trial is in the study (re-run the same command to resume)",
            file=sys.stderr,
        )
        return 130
    console.print(
        f"{summary['trials']} trials in the study, {summary['measured_points']} of "
        f"{summary['valid_points']} valid tilings measured"
    )
    if "pareto" in summary:
        table = Table(
            title="accuracy/speed front (Pareto-optimal trials)", title_justify="left", header_style="bold"
        )
        for col in ("trial", "tiles", "GFLOPS", "max rel err vs float64"):
            table.add_column(col)
        for p in sorted(summary["pareto"], key=lambda p: -p["gflops"]):
            table.add_row(
                str(p["number"]), _tiles_text(p["tiles"]), f"{p['gflops']:.1f}", f"{p['max_rel_err']:.3e}"
            )
        console.print(table)
        console.print(
            "the tuner runs the fp32-accumulating kernel: this front trades speed against the summation "
            "order's rounding; fp16 accumulation (sweep --accumulate fp16) is not a tuning dimension"
        )
        return 0
    conf = summary.get("confirmation")
    if not conf:
        console.print("no trial succeeded: nothing to confirm")
        return 0
    table = Table(
        title=f"confirmation: top {cfg.confirm_top} and the default, re-measured in "
        f"{cfg.confirm_rounds} interleaved rounds",
        title_justify="left",
        header_style="bold",
    )
    for col in ("", "tiles", "GFLOPS", "95% CI", "samples", "machine speed", "flags"):
        table.add_column(col)
    for r in conf["rows"]:
        if "failure" in r:
            table.add_row(r["name"], _tiles_text(r["tiles"]), "-", r["failure"], "-", "-", "")
        else:
            lo, hi = r["gflops_ci"]
            speed = r.get("machine_speed")
            table.add_row(
                r["name"],
                _tiles_text(r["tiles"]),
                f"{r['gflops']:.1f}",
                f"{lo:.1f} - {hi:.1f}",
                str(r["n_samples"]),
                "-" if speed is None else f"{100 * speed:.0f}%",
                ", ".join(r.get("flags") or []),
            )
    console.print(table)
    if conf.get("best"):
        best = conf["best"]
        lo, hi = best["gflops_ci"]
        line = f"best: {_tiles_text(best['tiles'])}: {best['gflops']:.1f} GFLOPS (95% CI {lo:.1f}-{hi:.1f})"
        if conf.get("speedup") is not None:
            line += (
                f", {conf['speedup']:.3f}x the cache-model default ({conf['default']['gflops']:.1f} GFLOPS)"
            )
        console.print(line)
    if summary.get("record_warning"):
        print(f"opbench: warning: {summary['record_warning']}", file=sys.stderr)
    if summary.get("record"):
        console.print(f"tuned record saved: {summary['record']}")
    elif summary.get("record_verdict"):
        console.print(f"no tuned record saved: the default stays ({summary['record_verdict']})")
    return 0


def _show_study(console: Any, study: Any) -> int:
    from rich.table import Table

    from opbench.tune.study import trial_rows

    fp = study.user_attrs.get("fingerprint", {})
    console.print(
        f"study {study.study_name}: {fp.get('op')} {fp.get('shape')} {fp.get('dtype')}, "
        f"{fp.get('threads')} thread(s), {fp.get('cpu_model')}, {study.user_attrs.get('valid_points')} "
        "valid tilings"
    )
    table = Table(title="history", title_justify="left", header_style="bold")
    for col in ("trial", "state", "tiles", "GFLOPS", "note"):
        table.add_column(col)
    for r in trial_rows(study):
        note = r["failure"] or ""
        if r["reused_from"] is not None:
            note = (note + "; " if note else "") + f"value of trial {r['reused_from']}"
        if r["retry_of"] is not None:
            note = (note + "; " if note else "") + f"retry of trial {r['retry_of']} (its worker stopped)"
        gf = f"{r['gflops']:.1f}" if r["gflops"] is not None else "-"
        table.add_row(str(r["number"]), r["state"], _tiles_text(r["tiles"]), gf, note)
    console.print(table)
    conf = study.user_attrs.get("confirmation")
    if conf and conf.get("best"):
        best = conf["best"]
        console.print(
            f"confirmed best: {_tiles_text(best['tiles'])}: {best['gflops']:.1f} GFLOPS"
            + (f", {conf['speedup']:.3f}x the default" if conf.get("speedup") else "")
        )
    return 0


def cmd_studies(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from opbench.tune.study import list_studies

    storage = _storage_url(args.storage, args.out)
    rows = list_studies(storage)
    console = Console(markup=False, width=None if sys.stdout.isatty() else 120)
    from opbench.tune.storage import mask

    table = Table(title=f"studies in {mask(storage)}", title_justify="left", header_style="bold")
    for col in ("study", "problem", "trials", "best GFLOPS", "best tiles", "started"):
        table.add_column(col)
    for r in rows:
        shape = "x".join(str(v) for v in (r["shape"] or {}).values())
        problem = f"{shape} {r['dtype'] or ''} t{r['threads']}" if shape else "-"
        best = f"{r['best_value']:.1f}" if r["best_value"] is not None else "-"
        table.add_row(
            r["name"],
            problem,
            str(r["trials"]),
            best,
            _tiles_text(r["best_tiles"]) if r["best_tiles"] else "-",
            r["started"] or "-",
        )
    console.print(table)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from rich.console import Console

    from opbench.report import inputs, model, plots, render
    from opbench.results import parse_formats

    formats = parse_formats(args.format, render.FORMATS)
    if not args.results and not args.study:
        raise UsageError("opbench report needs results files and/or --study NAME")
    target = render.output_dir(args.out, args.force)
    docs = [inputs.load_results(p) for p in args.results]
    studies = [inputs.load_study(name, _storage_url(args.storage, "reports")) for name in args.study]
    backends = {r["backend"] for d in docs for r in d["records"]}
    if args.baseline and args.baseline not in backends:
        raise UsageError(
            f"--baseline {args.baseline} is not among the backends in these results "
            f"({', '.join(sorted(backends)) or 'none'})"
        )
    m = model.build(docs, studies, args.baseline, args.title, args.command_line)
    figures = plots.all_plots(m)
    written = render.write(m, figures, target, formats)
    console = Console(markup=False, highlight=False)
    n_plots = sum(len(v) for v in figures.values())
    console.print(
        f"report: {len(m['sections'])} op/dtype sections, {len(m['studies'])} studies, {n_plots} plots"
    )
    for fmt, path in written.items():
        console.print(f"wrote {fmt.upper()}: {path}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from opbench.files import atomic_write_text, json_text
    from opbench.report import compare, inputs, render
    from opbench.results import parse_formats

    formats = parse_formats(args.format, ("md", "csv", "json")) if args.out else []
    target = render.output_dir(args.out, args.force) if args.out else None
    result = compare.compare(inputs.load_results(args.old), inputs.load_results(args.new), args.threshold)
    console = Console(markup=False, highlight=False, width=None if sys.stdout.isatty() else 170)
    table = Table(
        title=f"{args.old} -> {args.new} (significant: over {100 * args.threshold:.0f}% and outside "
        "both runs' IQRs)",
        title_justify="left",
        header_style="bold",
    )
    for col in (
        *("op", "shape", "dtype", "backend", "old", "new", "GFLOPS change", "noise old/new"),
        *("util old/new", "machine new/old", "verdict"),
    ):
        table.add_column(col)
    from opbench.display import format_seconds

    styles = {"regression": "bold red", "improvement": "bold green"}
    for r in result["rows"]:
        measured = (
            [
                format_seconds(r["old_median_s"]),
                format_seconds(r["new_median_s"]),
                f"{100 * r['gflops_change']:+.1f}%",
                f"{100 * r['old_rel_iqr']:.1f}% / {100 * r['new_rel_iqr']:.1f}%",
                compare.util_text(r),
                compare.ratio_text(r.get("reference_ratio")),
            ]
            if "time_ratio" in r
            else ["-"] * 6
        )
        verdict = r["verdict"] + (f" ({r['note']})" if r.get("note") else "")
        table.add_row(
            r["op"],
            r["shape"],
            r["dtype"],
            r["backend"],
            *measured,
            Text(verdict, style=styles.get(r["verdict"], "")),
        )
    console.print(table)
    for w in result["warnings"]:
        console.print(f"warning: {w}")
    c = result["counts"]
    console.print(
        f"{c['regression']} regression(s), {c['improvement']} improvement(s), {c['unchanged']} unchanged"
    )
    if target is not None:
        texts = {
            "md": lambda: compare.to_markdown(result),
            "csv": lambda: compare.to_csv(result),
            "json": lambda: json_text(result),
        }

        def fill(d: Path) -> None:
            for fmt in formats:
                atomic_write_text(d / f"compare.{fmt}", texts[fmt]())

        render.replace_dir(target, fill)
        console.print(f"wrote {', '.join(formats)} to {target}")
    return 1 if args.fail_on_regression and c["regression"] else 0


def cmd_suites(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from opbench.specs import load_suite, suite_names

    table = Table(
        title="built-in suites (opbench sweep --suite NAME [--scale F])",
        title_justify="left",
        header_style="bold",
        show_lines=True,
    )
    for col in ("suite", "sweeps", "description"):
        table.add_column(col)
    for name in suite_names():
        spec = load_suite(name)
        sweeps = "\n".join(f"{p.op}: {len(p.shapes)} shapes ({p.mode})" for p in spec.plans)
        table.add_row(name, sweeps, spec.description + (f"\nsource: {spec.source}" if spec.source else ""))
    Console(markup=False, width=None if sys.stdout.isatty() else 120).print(table)
    return 0


COMMANDS = {
    "report": cmd_report,
    "compare": cmd_compare,
    "sweep": cmd_sweep,
    "tune": cmd_tune,
    "studies": cmd_studies,
    "peak": cmd_peak,
    "suites": cmd_suites,
    "info": cmd_info,
}


def _one_line(text: str) -> str:
    """A message as one printable line, whatever it quotes from the input: whitespace runs become one space,
    other control characters (a terminal escape sequence in an argument) are shown escaped."""
    text = " ".join(str(text).split())
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def _internal_error(e: BaseException) -> int:
    """A bug, not bad input: the traceback (credentials masked) for a report, and exit status 1."""
    import traceback

    from opbench.secrets import mask

    sys.stderr.write(mask("".join(traceback.format_exception(type(e), e, e.__traceback__))))
    print(
        f"opbench: internal error: {mask(e)} (a bug in opbench; please report it with the traceback above)",
        file=sys.stderr,
    )
    return 1


def main(argv: list[str] | None = None) -> int:
    from opbench.secrets import mask, mask_argv, register

    argv = list(sys.argv[1:] if argv is None else argv)
    for token in argv:  # passwords given on the command line are masked in every message from here on
        if "://" in token or "password" in token.lower():
            register(token)
    try:
        for i, token in enumerate(argv):
            if "\x00" in token:  # no path or value can hold one (a real command line cannot even pass it)
                raise UsageError(f"argument {i + 1} holds a NUL byte")
        args = build_parser().parse_args(argv)
        args.command_line = ["opbench", *mask_argv(argv)]  # what results, reports and studies record
        return COMMANDS[args.command](args)
    except UsageError as e:
        msg = _one_line(mask(e))
        print(msg if msg.startswith("opbench") else f"opbench: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("opbench: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("opbench: error: out of memory (a smaller problem, or --max-memory)", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:  # an optional dependency this command needs (opbench[tune], ...)
        hint = missing_dependency(e)
        if hint is None:
            return _internal_error(e)
        print(f"opbench: error: {hint}", file=sys.stderr)
        return 2
    except OSError as e:  # the file system refused: a path given on the command line, a full disk
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        print(f"opbench: error: {mask(where)}{mask(e.strerror or e)}", file=sys.stderr)
        return 2
    except Exception as e:
        return _internal_error(e)


if __name__ == "__main__":
    sys.exit(main())

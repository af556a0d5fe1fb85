"""`opbench sweep`: plans from the arguments, checked; progress and tables while opbench.runs runs them."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from opbench import descriptors, kernels
from opbench.backends import parse_backends, register
from opbench.backends.user_backend import UserKernelBackend
from opbench.cli.common import check_flags_apply, check_out_dir
from opbench.cli.options import AXIS_FLAGS, PARAM_FLAGS, resolve_processes
from opbench.display.sweep import RichObserver, print_batch_lines
from opbench.documents import Fields, Params, Scalar, SuiteInfo, SweepMeta
from opbench.dtypes import parse_dtypes
from opbench.errors import UsageError
from opbench.kernels import default_threads
from opbench.machine import available_memory_bytes
from opbench.ops import PASSES, pass_of
from opbench.ops.base import Op
from opbench.ops.space import expand
from opbench.ranges import parse_sizes
from opbench.results import ResultsWriter, parse_formats
from opbench.runs import run_sweeps
from opbench.specs import SweepPlan, load_batch_spec, load_spec, load_suite, plans_from_problems
from opbench.sweep.config import SweepConfig, SweepOptions, check_memory, configs_for
from opbench.timing import TimerConfig
from opbench.userkernel import parse_kernel, parse_params


def plans_from_args(args: argparse.Namespace) -> tuple[list[SweepPlan], SuiteInfo | None]:
    """The sweep plans this command asks for, and the suite/spec it came from (None for the command line)."""
    given_axes = {d: getattr(args, d) for d in AXIS_FLAGS if getattr(args, d) is not None}
    given_params = {d: getattr(args, d) for d in PARAM_FLAGS if getattr(args, d) is not None}
    sources = [f for f, v in (("--spec", args.spec), ("--suite", args.suite), ("--problem", args.problem),
                              ("--batch-file", args.batch_file)) if v]  # fmt: skip
    if len(sources) > 1:
        raise UsageError(
            f"give one of --spec, --suite, --problem and --batch-file, not {' and '.join(sources)}"
        )
    op: Op[Any] | None = args.op  # the parser's (an unknown op: a UsageError naming those there are)
    if args.problem or args.batch_file:
        return problem_plans(args, given_axes, given_params)
    if args.spec or args.suite:
        _refuse_shape_flags(
            {**given_axes, **given_params}, args.mode, "--spec/--suite (the spec sets the shapes)"
        )
        spec = load_spec(args.spec) if args.spec else load_suite(args.suite)
        plans = list(spec.plans)
        if op is not None:
            plans = [pl for pl in plans if pl.op is op]
            if not plans:
                raise UsageError(
                    f"{spec.name} has no {op.name} sweep (it has: {', '.join(p.op.name for p in spec.plans)})"
                )
        suite = SuiteInfo(name=spec.name, description=spec.description, source=spec.source, path=spec.path)
        return plans, suite

    if op is None:
        raise UsageError(
            f"opbench {args.command}: name an op (gemm, conv, rnn, gru, lstm) or give --spec/--suite, or "
            "--problem/--batch-file"
        )
    check_flags_apply(op, {**given_axes, **given_params})
    axes = {d: parse_sizes(v, AXIS_FLAGS[d]) for d, v in given_axes.items()}
    mode = args.mode or op.default_mode
    params = {**op.params, **given_params}
    try:
        if axes:
            shapes = expand(op, axes, dict(op.base), params, mode)
        elif given_params and op.default_axes:
            shapes = expand(op, op.default_axes, dict(op.base), params, mode)
        else:
            shapes = op.default_cases()
    except ValueError as e:
        raise UsageError(str(e)) from None
    return [SweepPlan(op, tuple(shapes), mode, None, None, "")], None


def _refuse_shape_flags(given: Fields, mode: str | None, source: str) -> None:
    """A shape flag (or --mode) given beside a source of shapes: 'FLAG cannot be combined with SOURCE'."""
    if given or mode:
        flags = [AXIS_FLAGS.get(d) or PARAM_FLAGS[d] for d in given] or ["--mode"]
        raise UsageError(f"{flags[0]} cannot be combined with {source}")


def problem_plans(
    args: argparse.Namespace, given_axes: dict[str, str], given_params: dict[str, Scalar]
) -> tuple[list[SweepPlan], SuiteInfo | None]:
    """--problem DESC ... or --batch-file FILE: the plans, and the batch file as the run's suite."""
    extra = {**given_axes, **{k: v for k, v in given_params.items() if k != "nonlinearity"}}
    _refuse_shape_flags(extra, args.mode, "--problem/--batch-file (the descriptor sets it)")
    nonlinearity = given_params.get("nonlinearity")
    start = descriptors.options(None if nonlinearity is None else str(nonlinearity))
    op_name = args.op.name if args.op else None
    if args.batch_file:
        spec = load_batch_spec(args.batch_file, op_name, start, args.strict)
        suite = SuiteInfo(
            name=spec.name, description=spec.description, source=None, path=spec.path, lines=spec.lines
        )
        return list(spec.plans), suite
    if args.strict:
        raise UsageError("--strict applies to --batch-file")
    problems = [descriptors.parse(text, op_name, "--problem", start) for text in args.problem]
    for p in problems:
        for note in p.notes:
            print(f"opbench: note: --problem '{p.text}': {note}", file=sys.stderr)
    return list(plans_from_problems(problems)), None


def nothing_to_run(suite: SuiteInfo | None) -> int:
    """A batch file whose every problem is skipped: its lines said (what was skipped and why); nothing is
    measured or written, and that is not an error (benchdnn passes such a file too)."""
    console = Console(stderr=False)
    suite = suite or SuiteInfo()
    lines = suite.get("lines")
    runs = bool(lines and lines["lines"])
    what = "every problem in it is skipped" if runs else "it has no problem descriptors in it"
    console.print(f"opbench: nothing to run in {suite.get('path')}: {what}")
    if lines and lines["skipped"]:
        print_batch_lines(console, lines, tuple(dict.fromkeys(s["family"] for s in lines["skipped"])))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    plans, suite = plans_from_args(args)
    if not plans:
        return nothing_to_run(suite)
    extra = _user_kernel(args)  # ("kernel:FUNC",) with --kernel, else ()
    cli_backends = parse_backends(args.backend) if args.backend is not None else None
    if cli_backends and extra and extra[0] in cli_backends:
        extra = ()  # --backend names the kernel itself (a repro command does)
    ours = {  # the cpp backend's options (its flags; CppBackend.case_params reads them)
        "tile_m": args.tile_m,
        "tile_n": args.tile_n,
        "tile_k": args.tile_k,
        "isa": args.isa,
        "tuned": args.tuned,
        "accumulate": args.accumulate,
        "conv_path": args.conv_path,
    }
    if args.tuned and (args.tile_m or args.tile_n or args.tile_k or args.conv_path):
        raise UsageError("--tuned and --tile-m/--tile-n/--tile-k/--conv-path are exclusive")
    if args.conv_path and any(plan.op.name != "conv" for plan in plans):
        raise UsageError("--conv-path applies to conv sweeps (forward) only")
    if args.accumulate == "fp16":
        f16acc = kernels.default_tiles(args.isa)["fp16_accumulate"]
        if not f16acc["available"]:
            raise UsageError(f"--accumulate fp16: {f16acc['reason']}")
    configs, out_dir, formats, meta = sweep_configs(
        args,
        plans,
        suite,
        lambda plan: (*(cli_backends or plan.backends or plan.op.default_backends), *extra),
        {"cpp": ours},
    )
    return _run_sweeps(configs, meta, out_dir, formats, quiet=args.quiet, verbose=args.verbose)


def sweep_configs(
    args: argparse.Namespace,
    plans: list[SweepPlan],
    suite: SuiteInfo | None,
    backends_of: Callable[[SweepPlan], Sequence[str]],
    backend_options: dict[str, Params],
    paired: bool = False,
) -> tuple[list[SweepConfig], Path, list[str], SweepMeta]:
    """The sweep configs of `plans` with the measurement options both sweep and ab take, mapped from the
    arguments onto SweepOptions (`backends_of(plan)`: each plan's backends; `paired`: ab's rounds), checked;
    the output directory, formats and the run's metadata."""
    passes = _passes(args.passes, [pl.op for pl in plans])
    cli_dtypes = parse_dtypes(args.dtype) if args.dtype is not None else None
    formats = parse_formats(args.format)
    out_dir = check_out_dir(args.out)
    if not re.fullmatch(r"cpu|(cuda|ascend)(:\d+)?", args.device):
        raise UsageError(f"unknown device '{args.device}' (expected cpu, cuda[:index] or ascend[:index])")
    threads = args.threads or default_threads()
    timer = TimerConfig(
        min_sample_s=args.min_sample_ms / 1e3,
        max_time_s=args.max_time_s,
        call_budget_s=args.call_budget_s,
        cold_cache=args.cold_cache,
    )
    budget = args.max_memory or int(available_memory_bytes() * 0.8)
    options = SweepOptions(
        threads=threads,
        device=args.device,
        timer=timer,
        dtypes=tuple(cli_dtypes) if cli_dtypes else None,
        passes=passes,
        verify=not args.no_verify,
        seed=args.seed,
        backend_options=backend_options,
        max_memory_bytes=budget,
        max_call_s=args.max_call_s,
        verify_max_gflop=args.verify_max_gflop,
        scale=args.scale,
        rounds=args.rounds,
        processes=resolve_processes(args.processes, args.rounds, "--processes", "--rounds"),
        paired=paired,
    )
    configs = configs_for(plans, options, backends_of)
    check_memory(configs, budget)
    meta: SweepMeta = {
        "suite": suite,
        "scale": args.scale,
        "plans": [pl.description for pl in plans],
        "modes": [pl.mode for pl in plans],
        "command": args.command_line,
    }
    return configs, out_dir, formats, meta


def _passes(text: str | None, ops: list[Op[Any]]) -> tuple[str, ...]:
    """--pass fwd,bwd: the passes in the order given (duplicates dropped); each op must have every one."""
    if text is None:
        return ("fwd",)
    passes = tuple(dict.fromkeys(p.strip() for p in text.split(",")))
    for p in passes:
        if p not in PASSES:
            raise UsageError(f"--pass: unknown pass '{p}' (expected {', '.join(PASSES)}, comma-separated)")
    for op in ops:
        for p in passes:
            pass_of(op, p)  # a UsageError naming the ops that have this pass
    return passes


def _user_kernel(args: argparse.Namespace) -> tuple[str, ...]:
    """--kernel FILE.py:FUNC [--kernel-params k=v,...]: the backend kernel:FUNC, registered for this run."""
    if args.kernel is None:
        if args.kernel_params is not None:
            raise UsageError("--kernel-params applies to --kernel")
        if args.kernel_accumulate is not None:
            raise UsageError("--kernel-accumulate applies to --kernel")
        return ()
    kernel = parse_kernel(args.kernel, args.kernel_accumulate or "fp32")
    params = parse_params(args.kernel_params) if args.kernel_params else {}
    name = f"kernel:{kernel.func}"
    register(name, lambda: UserKernelBackend(kernel, params))
    return (name,)


def _run_sweeps(
    configs: list[SweepConfig], meta: SweepMeta, out_dir: Path, formats: list[str], quiet: bool, verbose: bool
) -> int:
    writers: list[ResultsWriter] = []
    try:
        run_sweeps(configs, meta, out_dir, formats, RichObserver(quiet, verbose), writers)
    except KeyboardInterrupt:
        if not writers:
            print("opbench: interrupted before any case ran; nothing written", file=sys.stderr)
        else:
            kept = ", ".join(str(p) for w in writers for p in w.paths.values())
            done = sum(len(w.doc["records"]) for w in writers)
            print(f"opbench: interrupted; {done} finished case(s) kept in {kept}", file=sys.stderr)
        return 130
    return 0

"""`opbench tune` and `opbench studies`."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from rich.console import Console

from opbench import descriptors
from opbench.cli import portfolio
from opbench.cli.common import check_flags_apply, storage_url
from opbench.cli.options import AXIS_FLAGS, PARAM_FLAGS, resolve_processes
from opbench.display import tune as show
from opbench.display.tune import history_table, studies_table
from opbench.errors import UsageError
from opbench.kernels import default_threads
from opbench.machine import available_memory_bytes
from opbench.ops import pass_of
from opbench.ops.base import Op, Shape
from opbench.ops.space import expand
from opbench.texts import tiles_text
from opbench.tune import study as tuner
from opbench.tune.config import TUNABLE_OPS, default_study_name
from opbench.tune.storage import mask
from opbench.tune.study import list_studies, trial_rows
from opbench.tuning_documents import SpaceEvent, TrialEvent, TuneEvent
from opbench.userkernel import KernelRef, parse_kernel, parse_params

if TYPE_CHECKING:  # the opbench[tune] extra, imported where a study is opened
    import optuna


def cmd_tune(args: argparse.Namespace) -> int:
    forward: Op[Any] = args.op  # the parser's (an unknown op: a UsageError naming those there are)
    if forward.name not in TUNABLE_OPS:
        raise UsageError(f"opbench tune supports {', '.join(TUNABLE_OPS)} (got '{forward.name}')")
    op = pass_of(forward, args.pass_name)  # a pass it lacks: a UsageError naming those that have it
    key = op.key
    if key != forward.key and args.kernel:
        raise UsageError("--pass bwd tunes opbench's own backward kernels; it does not apply to --kernel")
    objectives = tuple(o.strip() for o in args.objectives.split(",") if o.strip())
    if objectives not in (("gflops",), ("gflops", "error")):
        raise UsageError(f"--objectives must be 'gflops' or 'gflops,error', got '{args.objectives}'")
    if args.kernel_accumulate and not args.kernel:
        raise UsageError("--kernel-accumulate applies to --kernel")
    kernel = parse_kernel(args.kernel, args.kernel_accumulate or "fp32") if args.kernel else None
    if kernel is not None and args.isa:
        raise UsageError("--isa chooses opbench's own kernel set; it does not apply to --kernel")
    if args.baseline_params and kernel is None:
        raise UsageError(
            "--baseline-params applies to --kernel (opbench's kernels compare with the cache model)"
        )
    baseline = tuple(parse_params(args.baseline_params).items()) if args.baseline_params else None
    storage = storage_url(args.storage, args.out)
    threads = args.threads or default_threads()
    console = Console(markup=False, highlight=False, width=None if sys.stdout.isatty() else 120)
    if args.portfolio is not None or args.batch_file or args.suite:
        shapes, weights, dtype, source = portfolio.shapes_of(args, op)
        name = args.study or portfolio.default_name(
            op, source, dtype, threads, args.portfolio, kernel.name if kernel else ""
        )
        base = _config(args, op, shapes[0], dtype, threads, name, storage, objectives, kernel, baseline)
        return portfolio.run(
            args, replace(base, trials=args.trials or portfolio.TRIALS), shapes, weights, console
        )
    args.dtype = args.dtype or "fp32"
    if args.show:
        unnamed = forward.name == "gemm" and None in (args.m, args.n, args.k) and not args.problem
        if not args.study and unnamed:
            raise UsageError(
                "--show needs --study NAME (or --m, --n and --k, or --problem, to name the default study)"
            )
        name = args.study or default_study_name(
            key, _shape(args, forward), args.dtype, threads, kernel=kernel
        )
        return _show_study(console, tuner.load_existing(name, storage))
    shape = _shape(args, forward)

    need = op.memory_bytes(shape, args.dtype)
    if need > available_memory_bytes() * 0.8:
        raise UsageError(
            f"shape {shape.label()} ({args.dtype}) needs about {need / 2**30:.1f} GiB, more than 80% of "
            "available memory"
        )
    suffix = "-mo" if len(objectives) > 1 else ""
    name = args.study or default_study_name(key, shape, args.dtype, threads, suffix, kernel)
    cfg = _config(args, op, shape, args.dtype, threads, name, storage, objectives, kernel, baseline)

    def on_event(kind: str, event: TuneEvent) -> None:
        if kind == "space":
            info = cast(SpaceEvent, event)
            params = ", ".join(f"{n} {len(v)} values ({v[0]}..{v[-1]})" for n, v in info["params"].items())
            rules = ", ".join(info["constraints"]) or "none"
            console.print(
                f"study {cfg.study_name} in {tuner.mask(cfg.storage_url)}: {params}; "
                f"{info['valid_points']} valid tilings (constraints: {rules}); "
                f"{info['already']} already measured"
            )
        elif kind == "trial":
            console.print(show.trial_line(cast(TrialEvent, event)))
        elif kind == "exhausted":
            info = cast(SpaceEvent, event)
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
        console.print(show.pareto_table(summary["pareto"]))
        console.print(
            "the tuner runs the fp32-accumulating kernel: this front trades speed against the summation "
            "order's rounding; fp16 accumulation (sweep --accumulate fp16) is not a tuning dimension"
        )
        return 0
    conf = summary.get("confirmation")
    if not conf:
        console.print("no trial succeeded: nothing to confirm")
        return 0
    console.print(show.confirmation_table(conf, cfg.confirm_top, cfg.confirm_rounds))
    best = show.best_line(conf)
    if best:
        console.print(best)
    if summary.get("record_warning"):
        print(f"opbench: warning: {summary['record_warning']}", file=sys.stderr)
    if summary.get("record"):
        console.print(f"tuned record saved: {summary['record']}")
    elif summary.get("record_verdict"):
        console.print(f"no tuned record saved: the default stays ({summary['record_verdict']})")
    return 0


def _config(
    args: argparse.Namespace, op: Op[Any], shape: Shape, dtype: str, threads: int, name: str, storage: str,
    objectives: tuple[str, ...], kernel: KernelRef | None, baseline: tuple[tuple[str, Any], ...] | None,
) -> tuner.TuneConfig:  # fmt: skip
    """The run's settings for one shape (a portfolio's: its first, each shape's study replacing it)."""
    return tuner.TuneConfig(
        shape=shape,
        dtype=dtype,
        threads=threads,
        study_name=name,
        storage_url=storage,
        trials=args.trials or 50,
        timeout_s=args.timeout,
        sampler=args.sampler,
        seed=args.seed,
        space=args.space,
        params=tuple(p.strip() for p in args.params.split(",")) if args.params else None,
        cache_fit=args.cache_fit,
        isa=args.isa,
        objectives=objectives,
        trial_timeout_s=args.trial_timeout,
        trial_time_s=args.trial_time_s or tuner.TRIAL_TIMER["max_time_s"],
        confirm_top=args.confirm_top,
        confirm_rounds=args.confirm_rounds,
        confirm_processes=confirm_processes(args),
        force=args.force,
        heartbeat_s=args.heartbeat_s,
        grace_s=args.grace_s,
        command=tuple(args.command_line),
        op=op,
        kernel=kernel,
        baseline_params=baseline,
    )


def _shape(args: argparse.Namespace, op: Op[Any]) -> Shape:
    """The one shape `opbench tune OP` names: gemm from --m, --n and --k (all required); the others from
    their sweep axes and parameters, one value each, the rest at the op's base point."""
    given = {d: getattr(args, d) for d in [*AXIS_FLAGS, *PARAM_FLAGS] if getattr(args, d, None) is not None}
    if args.problem is not None:
        extra = [AXIS_FLAGS.get(d) or PARAM_FLAGS[d] for d in given if d != "nonlinearity"]
        if extra:
            raise UsageError(f"{extra[0]} cannot be combined with --problem (the descriptor sets the shape)")
        start = descriptors.options(given.get("nonlinearity"))
        return descriptors.parse(args.problem, op.name, "--problem", start).shape
    if op.name == "gemm":
        missing = [f"--{d}" for d in ("m", "n", "k") if getattr(args, d) is None]
        if missing:
            raise UsageError(f"opbench tune gemm needs {', '.join(missing)} (or --problem MxK:KxN)")
        return op.make_shape({"m": args.m, "n": args.n, "k": args.k, "batch_count": args.batch_count or 1})
    check_flags_apply(op, given)
    axes = {d: [v] for d, v in given.items() if d in op.axes}
    params = {**op.params, **{d: v for d, v in given.items() if d in op.params}}
    try:
        (shape,) = expand(op, axes, dict(op.base), params, "product")
    except ValueError as e:
        raise UsageError(str(e)) from None
    return shape


def _show_study(console: Console, study: optuna.Study) -> int:
    fp = study.user_attrs.get("fingerprint", {})
    console.print(
        f"study {study.study_name}: {fp.get('op')} {fp.get('shape')} {fp.get('dtype')}, "
        f"{fp.get('threads')} thread(s), {fp.get('cpu_model')}, {study.user_attrs.get('valid_points')} "
        "valid tilings"
    )
    console.print(history_table(trial_rows(study)))
    conf = study.user_attrs.get("confirmation")
    if conf and conf.get("best"):
        best = conf["best"]
        console.print(
            f"confirmed best: {tiles_text(best['tiles'])}: {best['gflops']:.1f} GFLOPS"
            + (f", {conf['speedup']:.3f}x the default" if conf.get("speedup") else "")
        )
    return 0


def cmd_studies(args: argparse.Namespace) -> int:
    storage = storage_url(args.storage, args.out)
    rows = list_studies(storage)
    console = Console(markup=False, width=None if sys.stdout.isatty() else 120)
    console.print(studies_table(mask(storage), rows))
    return 0


def confirm_processes(args: argparse.Namespace) -> int:
    """--confirm-processes (default: --processes's default, at most --confirm-rounds); at least 1 (the
    trials' own worker)."""
    given = args.confirm_processes
    return max(1, resolve_processes(given, args.confirm_rounds, "--confirm-processes", "--confirm-rounds"))

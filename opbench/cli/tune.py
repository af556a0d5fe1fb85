"""`opbench tune` and `opbench studies`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from opbench.cli.common import storage_url
from opbench.errors import UsageError


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
    storage = storage_url(args.storage, args.out)
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

    storage = storage_url(args.storage, args.out)
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

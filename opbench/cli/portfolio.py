"""`opbench tune OP --batch-file FILE | --suite NAME --portfolio K`: the shapes read, the portfolio searched
(tune/portfolio_run.py), its table printed, its dispatch table exported (tune/export.py)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from opbench.batchfiles import read_batch
from opbench.cli.options import AXIS_FLAGS, PARAM_FLAGS
from opbench.display.tune import portfolio_table, trial_line
from opbench.errors import UsageError
from opbench.files import atomic_write_text
from opbench.machine import available_memory_bytes
from opbench.ops.base import Op, Shape
from opbench.specs import SUITES_DIR, load_suite
from opbench.texts import portfolio_lines, tiles_text
from opbench.tune import export, portfolio_run, portfolio_search
from opbench.tune.config import TuneConfig
from opbench.tune.study import load_existing
from opbench.tuning_documents import PortfolioDoc

MAX_SHAPES = 512
# per shape, where --trials is not given: half go to the tilings nearer shapes transfer (portfolio_search);
# 3-4 came within 3% of 30-60-trial per-shape TPE on BERT, ResNet-50 and a user kernel (docs/benchmarks.md)
TRIALS = 6


def shapes_of(args: argparse.Namespace, op: Op[Any]) -> tuple[list[Shape], list[float], str, str]:
    """The shapes of --batch-file or --suite that are OP's, each once with its count summed; the dtype
    (--dtype, else the one the file's problems name, else fp32) and what to call the set."""
    if bool(args.batch_file) == bool(args.suite):
        raise UsageError("--portfolio needs the shapes: --batch-file FILE or --suite NAME (one of them)")
    if args.portfolio is None:
        raise UsageError("--batch-file and --suite tune a portfolio: give --portfolio K (the most tilings)")
    flags = {**AXIS_FLAGS, **PARAM_FLAGS, "problem": "--problem"}  # what names one shape (tune.py's _shape)
    single = [flag for dest, flag in flags.items() if getattr(args, dest, None) is not None]
    if single:
        raise UsageError(f"{single[0]} names one shape; --portfolio takes its shapes from the file")
    if args.objectives.replace(" ", "") != "gflops":
        raise UsageError("--portfolio optimises speed alone (--objectives gflops)")
    weights: dict[Shape, float] = {}
    dtypes: set[tuple[str, ...] | None] = set()
    if args.batch_file or (SUITES_DIR / f"{args.suite}.batch").is_file():
        path = Path(args.batch_file) if args.batch_file else SUITES_DIR / f"{args.suite}.batch"
        for p in read_batch(path, op.name).problems:
            weights[p.shape] = weights.get(p.shape, 0.0) + p.count
            dtypes.add(p.dtypes)
        source = path.stem
    else:
        for plan in load_suite(args.suite).plans:
            if plan.op.name == op.name:
                weights.update({s: weights.get(s, 0.0) + 1.0 for s in plan.shapes})
        source = args.suite
    if not weights:
        raise UsageError(f"{args.batch_file or args.suite}: no {op.name} problem opbench runs")
    if len(weights) > MAX_SHAPES:
        raise UsageError(f"{len(weights)} shapes; a portfolio takes at most {MAX_SHAPES}")
    named = {d for d in dtypes if d}
    dtype = args.dtype or (
        next(iter(named))[0] if len(named) == 1 and len(next(iter(named))) == 1 else "fp32"
    )
    for shape in weights:
        need = op.memory_bytes(shape, dtype)
        if need > available_memory_bytes() * 0.8:
            raise UsageError(
                f"shape {shape.label()} ({dtype}) needs about {need / 2**30:.1f} GiB, more than 80% of "
                "available memory"
            )
    return list(weights), list(weights.values()), dtype, source


def default_name(op: Op[Any], source: str, dtype: str, threads: int, k: int, kernel: str = "") -> str:
    """portfolio-gemm-bert-fp32-t2-k4; its shapes' studies are named after it without the -kK, so that
    portfolios of another K over the same shapes share them."""
    who = f"{kernel}-" if kernel else ""
    return f"portfolio-{op.key.replace(':', '-')}-{who}{source}-{dtype}-t{threads}-k{k}"


def run(args: argparse.Namespace, base: TuneConfig, shapes: list[Shape], weights: list[float],
        console: Console) -> int:  # fmt: skip
    if args.show:
        return _show(console, base)
    prefix = args.study or base.study_name.removesuffix(f"-k{args.portfolio}")
    cfg = portfolio_search.PortfolioConfig(base, tuple(shapes), tuple(weights), args.portfolio, args.holdout,
                                           args.holdout_seed, prefix)  # fmt: skip
    console.print(
        f"portfolio {base.study_name}: {len(shapes)} {base.op.name} shapes ({sum(weights):g} calls), at most "
        f"{args.portfolio} tilings, {base.trials} trials per shape"
        + (f", {args.holdout:.0%} of the shapes held out" if args.holdout else "")
    )

    def on_event(kind: str, event: dict[str, object]) -> None:
        label = f"{event.get('shape', '')}"
        if kind == "trial":
            console.print(f"{label:22} {trial_line(event)}")  # type: ignore[arg-type]
        elif kind == "cell":
            value = event.get("failure") or f"{event.get('gflops', 0.0):.1f} GFLOPS"
            console.print(f"{label:22} cell  {tiles_text(event.get('point')):40} {value}")  # type: ignore[arg-type]

    try:
        doc = portfolio_run.run(cfg, on_event)
    except KeyboardInterrupt:
        print("opbench: interrupted; every finished measurement is in the studies (re-run the same command "
              "to resume)", file=sys.stderr)  # fmt: skip
        return 130
    _print(console, doc)
    for fmt in args.export or ():
        path = Path(args.out) / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', base.study_name)}.{_EXT[fmt]}"
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, export.to_json(doc) if fmt == "json" else export.to_cpp(doc))
        console.print(f"dispatch table written: {path}")
    return 0


_EXT = {"json": "json", "cpp": "hpp"}


def _print(console: Console, doc: PortfolioDoc) -> None:
    console.print(portfolio_table(doc))
    for line in portfolio_lines(doc):
        console.print(line)


def _show(console: Console, base: TuneConfig) -> int:
    study = load_existing(base.study_name, base.storage_url)
    doc = study.user_attrs.get("portfolio")
    if doc is None:
        raise UsageError(f"study '{base.study_name}' holds no portfolio (run the command without --show)")
    _print(console, doc)
    return 0

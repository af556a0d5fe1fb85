"""`opbench ab OP --a SIDE --b SIDE`: two sides of the same cases, visited back to back in every round of
one run, with a verdict per case (report/ab.py). A side is a backend (`cpp`, `torch`), our kernel with
fixed parameters (`cpp:tile_m=56,tile_n=512`), a user kernel (`FILE.py:FUNC` or `module:FUNC`, with its
parameters after one more colon: `FILE.py:FUNC:block_k=64`), or a backend as another installed Python
environment runs it (`python=PATH:BACKEND[:NAME=VALUE,...]`: two builds of a kernel library). The run
writes the usual results files (both sides' records, with repro commands) and an A/B file beside them: one
record per case with its verdict, speedup and speedup_ci, and the summary."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opbench.backends import BACKENDS, make_backend, parse_backends, plugins, register
from opbench.backends.base import Backend
from opbench.backends.remote import RemoteBackend
from opbench.backends.side import SideBackend
from opbench.backends.user_backend import UserKernelBackend
from opbench.case import Result
from opbench.cli.sweep import nothing_to_run, plans_from_args, sweep_configs
from opbench.display.ab import AbObserver, print_ab
from opbench.documents import Params
from opbench.errors import UsageError
from opbench.files import json_text, reserve
from opbench.machine import utc_stamp
from opbench.report import ab as verdicts
from opbench.repro import command
from opbench.runs import run_sweeps
from opbench.userkernel import parse_kernel, parse_params


def parse_side(text: str, taken: str | None = None, accumulate: str | None = None) -> tuple[str, Any, bool]:
    """A side's record name, a function making its backend, and whether it is a user kernel; `taken`: the
    other side's name (the same backend on both sides is an A/A run, its B named 'NAME (B)'); `accumulate`:
    what a kernel side declares it sums in (--kernel-accumulate)."""
    text = text.strip()
    head, sep, rest = text.partition(":")
    name = text if text != taken else f"{text} (B)"
    if text.startswith("python="):
        return name, _remote_side(name, text), False
    if head.lower() in (*BACKENDS, *plugins()):
        (backend,) = parse_backends(head)
        fixed = _side_params(rest, backend, text) if sep else {}
        return name, lambda: SideBackend(name, make_backend(backend, registered=False), fixed), False
    if not sep:
        raise UsageError(
            f"side '{text}': expected a backend ({', '.join(BACKENDS)}), cpp:tile_m=...,tile_n=..., or a "
            "kernel FILE.py:FUNC[:NAME=VALUE,...]"
        )
    spec, params = text, {}
    where, _, last = text.rpartition(":")
    if "=" in last and where.count(":") >= 1:
        spec, params = where, parse_params(last)
    kernel = parse_kernel(spec, accumulate or "fp32")

    def make() -> Backend:
        backend = UserKernelBackend(kernel, params)
        backend.name = name  # type: ignore[misc]
        return backend

    return name, make, True


def _remote_side(name: str, text: str) -> Callable[[], Backend]:
    """python=PATH:BACKEND[:NAME=VALUE,...]: the backend as another installed environment runs it."""
    python, sep, backend_spec = text.removeprefix("python=").partition(":")
    backend, _, params = backend_spec.partition(":")
    if not sep or not python or backend not in BACKENDS:
        raise UsageError(
            f"side '{text}': expected python=PATH:BACKEND (BACKEND one of {', '.join(BACKENDS)})"
        )
    found = shutil.which(python) if os.sep not in python else python
    if found is None or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise UsageError(f"side '{text}': '{python}' is not an executable Python interpreter")
    fixed = _side_params(params, backend, text) if params else {}
    return lambda: RemoteBackend(name, found, backend, fixed)


def _side_params(text: str, backend: str, side: str) -> Params:
    """NAME=VALUE,... fixed for every case of a side, checked by `backend` (what it takes:
    Backend.param_names; each value: Backend.parse_param)."""
    made = make_backend(backend, registered=False)
    allowed = made.param_names
    if not allowed:
        takers = ", ".join(name for name, cls in BACKENDS.items() if cls.param_names)
        raise UsageError(f"side '{side}': {backend} takes no parameters (only {takers} does)")
    out: Params = {}
    for item in (t.strip() for t in text.split(",") if t.strip()):
        key, sep, value = item.partition("=")
        if not sep or key not in allowed:
            raise UsageError(
                f"side '{side}': expected NAME=VALUE with NAME one of {', '.join(allowed)}, got '{item}'"
            )
        try:
            out[key] = made.parse_param(key, value)
        except ValueError as e:
            raise UsageError(f"side '{side}': {e}") from None
    return out


def cmd_ab(args: argparse.Namespace) -> int:
    a_name, make_a, a_kernel = parse_side(args.a, accumulate=args.kernel_accumulate)
    b_name, make_b, b_kernel = parse_side(args.b, taken=a_name, accumulate=args.kernel_accumulate)
    if args.kernel_accumulate and not (a_kernel or b_kernel):
        raise UsageError("--kernel-accumulate applies to a kernel side (FILE.py:FUNC)")
    register(a_name, make_a)
    register(b_name, make_b)
    plans, suite = plans_from_args(args)
    if not plans:
        return nothing_to_run(suite)
    configs, out_dir, formats, meta = sweep_configs(
        args, plans, suite, lambda plan: (a_name, b_name), {}, paired=True
    )
    observer = AbObserver(args.quiet)
    writers: list[Any] = []
    try:
        run_sweeps(configs, meta, out_dir, formats, observer, writers)
    except KeyboardInterrupt:
        kept = ", ".join(str(p) for w in writers for p in w.paths.values()) or "nothing"
        print(f"opbench: interrupted; the finished cases are kept in {kept} (no verdicts)", file=sys.stderr)
        return 130
    results = [Result.from_record(r) for w in writers for r in w.doc["records"]]
    result = verdicts.analyse(results, a_name, b_name, args.threshold, seed=args.seed)
    for row in result["rows"]:
        row["repro"] = ab_command(args, row, configs)
    result["command"] = args.command_line
    result["results"] = [str(p) for w in writers for p in w.paths.values()]
    paths = write_ab(result, out_dir, formats)
    print_ab(observer.console, result, paths)
    return exit_code(result["summary"], args.fail_on or frozenset())


def exit_code(summary: verdicts.AbSummary, fail_on: frozenset[str]) -> int:
    """--fail-on: 1 when a case is SLOWER (slower) or side B has no correct measurement of a case (failed:
    a wrong answer, a crash, a skip), else 0."""
    if "slower" in fail_on and summary["counts"]["SLOWER"]:
        return 1
    if "failed" in fail_on and summary["b_failed"]:
        return 1
    return 0


def ab_command(args: argparse.Namespace, row: verdicts.AbRow, configs: list[Any]) -> str:
    """The `opbench ab` command that runs this one case again, both sides, with the run's settings."""
    cfg = next(c for c in configs if c.op.name == row["op"])
    shape = cfg.op.shape_from_case(row["shape"])
    index = next((i for i, s in enumerate(cfg.shapes) if s == shape), 0)
    sides = ["--a", args.a, "--b", args.b]
    if args.kernel_accumulate:
        sides += ["--kernel-accumulate", args.kernel_accumulate]
    if args.threshold is not None:
        sides += ["--threshold", f"{args.threshold:g}"]
    return command(["opbench"], "ab", row["op"], shape, row["dtype"], row["pass"], cfg, index, sides)


def write_ab(result: verdicts.AbResult, out_dir: Path, formats: list[str]) -> dict[str, Path]:
    """ab-STAMP.json (kind opbench.ab) and .csv beside the results files, each written once, exclusively."""
    texts = {}
    if "json" in formats:
        texts["json"] = json_text({"kind": "opbench.ab", "schema_version": 1, **result})
    if "csv" in formats:
        texts["csv"] = verdicts.to_csv(result)
    name = reserve(out_dir, f"ab-{utc_stamp()}", texts)
    return {suffix: out_dir / f"{name}.{suffix}" for suffix in texts}

"""Shared by the benchmark scripts: time our kernel and other backends alternately on the same inputs, with
the sweep's own backends, Timer and settling, and compare medians over rounds."""

from __future__ import annotations

import math
import statistics
import subprocess
import sys
from typing import Any

from opbench.backends import make_backend
from opbench.machine import keep_freed_memory, wait_until_quiet
from opbench.ops import get_op
from opbench.timing import Timer


def measure_variants(
    op_name: str,
    shape: Any,
    dtype: str,
    threads: int,
    rounds: int,
    timer: Timer,
    variants: dict[str, tuple[str, dict[str, Any]]],
) -> dict[str, dict[str, Any]]:
    """variants: label -> (backend name, params). Each is verified against float64 and timed in every
    round, one after the other; returns label -> {'gflops': median over rounds, 'ok': verified,
    'max_rel_err': largest error vs float64 relative to the largest |reference|, 'details'}. A variant's
    params may name its own "threads" (then its backend runs on that many, the others on `threads`)."""
    keep_freed_memory()  # as a sweep does (runs.py): a per-call output pays malloc, not fresh pages
    op = get_op(op_name)
    inputs = op.make_inputs(shape, dtype, seed=0)
    ref = op.reference(shape, inputs)
    sides: dict[str, Any] = {}
    for label, (name, given) in variants.items():
        params = {k: v for k, v in given.items() if k != "threads"}
        own_threads = int(given.get("threads", threads))
        backend = make_backend(name)
        backend.setup(own_threads, "cpu")
        prepared = backend.prepare(op_name, shape, inputs, params)
        # A case may say how it accumulates (opbench's fp16 accumulation names its block size).
        acc = prepared.details.get("accumulate") or backend.accumulation(op_name, dtype)
        checked = op.check(shape, prepared.output(), inputs, ref, dtype, acc)
        sides[label] = {
            "prepared": prepared,
            "ok": checked["ok"],
            "max_rel_err": checked.get("max_rel_err"),
            "medians": [],
            "backend": backend,
            "threads": own_threads,
        }
    for _ in range(rounds):
        for side in sides.values():
            side["backend"].setup(side["threads"], "cpu")  # another side may have changed torch's threads
            wait_until_quiet()
            side["medians"].append(timer.measure(side["prepared"].run).median_s)
    flops = op.flops(shape)
    return {
        label: {
            "gflops": flops / statistics.median(s["medians"]) / 1e9,
            "ok": s["ok"],
            "max_rel_err": s["max_rel_err"],
            "details": s["prepared"].details,
        }
        for label, s in sides.items()
    }


def measure_pair(
    op_name: str,
    shape: Any,
    dtype: str,
    threads: int,
    rounds: int,
    timer: Timer,
    names: tuple[str, ...] = ("cpp", "torch"),
) -> dict[str, dict[str, Any]]:
    """Our kernel and other backends side by side, each with default parameters."""
    return measure_variants(op_name, shape, dtype, threads, rounds, timer, {n: (n, {}) for n in names})


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def ratio_summary(rows: list[dict[str, Any]], label: Any) -> str:
    """'geomean G, min R (LABEL vs PEER)' of rows with "ratio" (ours / best) and "best" (the peer's name);
    label(row) names a row's shape."""
    low = min(rows, key=lambda r: r["ratio"])
    mean = geomean([r["ratio"] for r in rows])
    return f"geomean {mean:.2f}, min {low['ratio']:.2f} ({label(low)} vs {low['best']})"


def available_peers(names: list[str], op: str, dtype: str, what: str = "") -> list[str]:
    """The backends of `names` that run `op` in `dtype` here; each other one printed as a comment line with
    its reason ('# NAME not measured WHAT: reason')."""
    available = []
    for name in names:
        backend = make_backend(name)
        reason = backend.unavailable_reason() or backend.unsupported_reason(op, dtype)
        if reason is None:
            available.append(name)
        else:
            print(f"# {name} not measured{' ' + what if what else ''}: {reason}")
    return available


def run_per_thread_count(script: str, threads_list: list[int]) -> int:
    """Run `script` again once per thread count, with this process's arguments and --threads=T, and return
    the worst exit code. Each run pins itself to that many CPUs before any framework starts a thread:
    MindSpore's CPU kernels ignore their thread setting, and only the process's CPU set bounds them."""
    argv, skip = [], False
    for a in sys.argv[1:]:
        if not skip and not a.startswith("--threads"):
            argv.append(a)
        skip = a == "--threads"
    return max(
        subprocess.run([sys.executable, script, *argv, f"--threads={t}"]).returncode for t in threads_list
    )


def print_markdown(head: list[str], rows: list[list[Any]]) -> None:
    """A Markdown table for docs/benchmarks.md."""
    print("\n| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(map(str, row)) + " |")

"""Sweep: expand (shape x dtype x backend) into cases, verify and time each, and build result records.

A case that cannot run (backend missing, dtype unsupported, an exception, a wrong answer) becomes a
record with a status and a reason; it never ends the sweep.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from opbench import peak as peaks
from opbench.backends import BACKENDS, Backend
from opbench.errors import BackendUnavailable
from opbench.ops import get_op
from opbench.timing import Timer, TimerConfig

# Utilization below this is flagged: the backend leaves the hardware nearly idle (e.g. no fp16 kernel).
SLOW_UTILIZATION = 0.01


@dataclass(frozen=True)
class SweepConfig:
    op: str
    shapes: tuple[Any, ...]
    dtypes: tuple[str, ...]
    backends: tuple[str, ...]
    threads: int
    device: str = "cpu"
    timer: TimerConfig = field(default_factory=TimerConfig)
    verify: bool = True
    seed: int = 0
    cpp_params: dict[str, Any] = field(default_factory=dict)  # tile_m/tile_n/tile_k/isa for our kernel

    @property
    def n_cases(self) -> int:
        return len(self.shapes) * len(self.dtypes) * len(self.backends)


@dataclass
class BackendState:
    backend: Backend
    reason: str | None = None  # why every case of this backend is skipped
    version: str | None = None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    msg = text[0] if text else ""
    msg = msg if len(msg) <= 300 else msg[:297] + "..."
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def setup_backends(cfg: SweepConfig) -> dict[str, BackendState]:
    states: dict[str, BackendState] = {}
    for name in cfg.backends:
        st = BackendState(BACKENDS[name]())
        st.reason = st.backend.unavailable_reason()
        if st.reason is None:
            try:
                st.backend.setup(cfg.threads, cfg.device)
                st.version = st.backend.version()
            except BackendUnavailable as e:
                st.reason = str(e)
            except Exception as e:  # a framework that imports but cannot initialise
                st.reason = f"setup failed: {_one_line(e)}"
        states[name] = st
    return states


def backend_summary(states: dict[str, BackendState]) -> dict[str, Any]:
    return {
        name: {"available": st.reason is None, "reason": st.reason, "version": st.version}
        for name, st in states.items()
    }


def resolve_peaks(cfg: SweepConfig) -> dict[str, dict[str, Any]]:
    """Per dtype: the peak used for utilization (measured on CPU) and the datasheet estimate beside it."""
    out: dict[str, dict[str, Any]] = {}
    if cfg.device != "cpu":
        return {d: {"used": None, "measured": None, "datasheet": None} for d in cfg.dtypes}
    for d in cfg.dtypes:
        m = peaks.measured(d, cfg.threads)
        ds = peaks.datasheet(d, cfg.threads)
        out[d] = {"used": m.to_dict(), "measured": m.to_dict(), "datasheet": ds.to_dict() if ds else None}
    return out


def base_record(cfg: SweepConfig, shape: Any, dtype: str, backend: str) -> dict[str, Any]:
    op = get_op(cfg.op)
    flops = op.flops(shape)
    min_bytes = op.min_bytes(shape, dtype)
    return {
        "op": cfg.op,
        "shape": shape.to_dict(),
        "label": shape.label(),
        "dtype": dtype,
        "backend": backend,
        "threads": cfg.threads,
        "device": cfg.device,
        "status": "ok",
        "reason": None,
        "flops": flops,
        "min_bytes": min_bytes,
        "arithmetic_intensity": flops / min_bytes,
        "time": None,
        "gflops": None,
        "gflops_best": None,
        "peak": None,
        "utilization": None,
        "verify": None,
        "details": {},
        "notes": [],
        "flags": [],
    }


def measure_case(
    cfg: SweepConfig,
    st: BackendState,
    shape: Any,
    dtype: str,
    inputs: dict[str, np.ndarray],
    reference: Callable[[], np.ndarray],
    peak: dict[str, Any] | None,
    timer: Timer,
) -> dict[str, Any]:
    op = get_op(cfg.op)
    rec = base_record(cfg, shape, dtype, st.backend.name)
    if st.reason is not None:
        rec.update(status="skipped", reason=st.reason)
        return rec
    unsupported = st.backend.unsupported_reason(cfg.op, dtype)
    if unsupported is not None:
        rec.update(status="skipped", reason=unsupported)
        return rec
    rec["notes"] = st.backend.notes(cfg.op, dtype)
    try:
        params = cfg.cpp_params if st.backend.name == "cpp" else {}
        prepared = st.backend.prepare(cfg.op, inputs, params)
        rec["details"] = prepared.details
        if cfg.verify:
            acc = st.backend.accumulate.get(dtype, dtype)
            result = op.check(prepared.output(), inputs, reference(), dtype, acc)
            rec["verify"] = {**result, "accumulate_assumed": acc}
            if not result["ok"]:
                rec.update(status="wrong_answer", reason=result.get("reason") or "error above the bound")
                return rec
        m = timer.measure(prepared.run)
    except MemoryError:
        rec.update(status="failed", reason="out of memory")
        return rec
    except Exception as e:
        rec.update(status="failed", reason=_one_line(e))
        return rec

    rec["time"] = m.to_dict()
    rec["gflops"] = rec["flops"] / m.median_s / 1e9 if m.median_s > 0 else None
    rec["gflops_best"] = rec["flops"] / m.min_s / 1e9 if m.min_s > 0 else None
    if m.single_sample:
        rec["flags"].append("single_sample")  # implies too few samples to judge stability
    elif m.stability != "stable":
        rec["flags"].append(m.stability)
    if peak is not None and rec["gflops"] is not None:
        rec["peak"] = {k: peak[k] for k in ("gflops", "source", "name")}
        rec["utilization"] = rec["gflops"] / peak["gflops"]
        if rec["utilization"] < SLOW_UTILIZATION:
            rec["flags"].append("slow")
        if peak["source"] == "measured" and (rec["gflops_best"] or 0.0) > peak["gflops"] * 1.02:
            rec["flags"].append("over_peak")
            rec["notes"].append("faster than the measured peak: the peak or this timing is wrong")
    return rec


def run_sweep(
    cfg: SweepConfig,
    states: dict[str, BackendState],
    peak_table: dict[str, dict[str, Any]],
    on_record: Callable[[dict[str, Any]], None],
    on_case_start: Callable[[str], None] | None = None,
) -> None:
    """Measure every case in order (shape, dtype, then backends side by side), reporting each record."""
    from opbench import _core

    op = get_op(cfg.op)
    flush = None
    if cfg.timer.cold_cache:
        l3 = _core.cpu_info()["caches"]["l3"]["size_bytes"]
        flush_bytes = max(2 * l3, 64 << 20)

        def flush() -> None:
            _core.flush_cache(flush_bytes)

    timer = Timer(cfg.timer, flush=flush)
    for i, shape in enumerate(cfg.shapes):
        for dtype in cfg.dtypes:
            inputs = op.make_inputs(shape, dtype, cfg.seed + i)
            # Computed at most once per (shape, dtype), and only if some backend gets to verification.
            reference = functools.cache(functools.partial(op.reference, inputs))
            for name in cfg.backends:
                if on_case_start:
                    on_case_start(f"{cfg.op} {shape.label()} {dtype} {name}")
                peak = peak_table.get(dtype, {}).get("used")
                on_record(measure_case(cfg, states[name], shape, dtype, inputs, reference, peak, timer))

"""Sweep: expand (shape x dtype x backend) into cases, verify and time each, and build result records.

A case that cannot run (backend missing, dtype unsupported, over the memory budget, predicted to take too
long, an exception, a wrong answer) becomes a record with a status and a reason; it never ends the sweep.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opbench import peak as peaks
from opbench.backends import BACKENDS, Backend
from opbench.errors import BackendUnavailable
from opbench.machine import wait_until_quiet
from opbench.ops import get_op
from opbench.timing import Timer, TimerConfig

# Utilization below this is flagged: the backend leaves the hardware nearly idle (e.g. no fp16 kernel).
SLOW_UTILIZATION = 0.01
# A case bigger than this, for a backend with no speed on record yet, is first probed at a smaller scale.
PROBE_MIN_FLOPS = 2e9
PROBE_TARGET_FLOPS = 2e8
# Before timing, wait at most this long for other threads of the process (BLAS or framework pools still
# spinning after their last call, e.g. the float64 reference's OpenBLAS) to go quiet.
QUIET_MAX_WAIT_S = 1.0
# Error messages that mean "no kernel for this dtype/op here" in torch ("not implemented for 'Half'") and
# MindSpore ("... is not supported", "unsupported data type").
UNSUPPORTED = re.compile(r"not implemented for|not supported|unsupported|no kernel", re.IGNORECASE)


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
    cpp_params: dict[str, Any] = field(default_factory=dict)  # tile_m/tile_n/tile_k/isa for our kernels
    max_memory_bytes: int | None = None  # a case needing more is skipped ('memory')
    max_call_s: float = 60.0  # a case predicted to take longer per call is skipped ('predicted')
    verify_max_gflop: float = 60.0  # float64 verification costlier than this is skipped (and said so)
    # With --scale: the shapes as the spec gave them, parallel to `shapes`; records report their factors.
    unscaled: tuple[Any, ...] | None = None

    @property
    def n_cases(self) -> int:
        return len(self.shapes) * len(self.dtypes) * len(self.backends)


@dataclass
class BackendState:
    backend: Backend
    reason: str | None = None  # why every case of this backend is skipped
    version: str | None = None


class SpeedHistory:
    """The best GFLOPS each (backend, op, dtype) reached in this process, to predict a case's call time."""

    def __init__(self) -> None:
        self._best: dict[tuple[str, str, str], tuple[float, str]] = {}

    def record(self, backend: str, op: str, dtype: str, gflops: float, how: str) -> None:
        key = (backend, op, dtype)
        if key not in self._best or gflops > self._best[key][0]:
            self._best[key] = (gflops, how)

    def best(self, backend: str, op: str, dtype: str) -> tuple[float, str] | None:
        return self._best.get((backend, op, dtype))


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    msg = text[0] if text else ""
    msg = msg if len(msg) <= 300 else msg[:297] + "..."
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def setup_backends(names: tuple[str, ...], threads: int, device: str) -> dict[str, BackendState]:
    states: dict[str, BackendState] = {}
    for name in names:
        st = BackendState(BACKENDS[name]())
        st.reason = st.backend.unavailable_reason()
        if st.reason is None:
            try:
                st.backend.setup(threads, device)
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


def resolve_peaks(dtypes: tuple[str, ...], threads: int, device: str) -> dict[str, dict[str, Any]]:
    """Per dtype: the peak used for utilization (measured on CPU) and the datasheet estimate beside it."""
    out: dict[str, dict[str, Any]] = {}
    name = peaks.accelerator_name(device) if device != "cpu" else None
    for d in dtypes:
        if device != "cpu":
            # An accelerator's utilization is against its datasheet peak (accelerators.py), when listed.
            ds_acc = peaks.accelerator_datasheet(name, d, threads) if name else None
            used = ds_acc.to_dict() if ds_acc else None
            out[d] = {"used": used, "measured": None, "datasheet": used, "device_name": name}
            continue
        m = peaks.measured(d, threads)
        ds = peaks.datasheet(d, threads)
        out[d] = {"used": m.to_dict(), "measured": m.to_dict(), "datasheet": ds.to_dict() if ds else None}
    return out


@functools.lru_cache(maxsize=1)
def host_flush_bytes() -> int:
    """What a cold-cache sample writes first on the host: twice the L3, at least 64 MiB."""
    from opbench import _core

    return int(max(2 * _core.cpu_info()["caches"]["l3"]["size_bytes"], 64 << 20))


def host_flush_note() -> str:
    return f"{host_flush_bytes() >> 20} MiB written on the host before each sample (one call per sample)"


def _factors(cfg: SweepConfig, shape: Any) -> dict[str, Any]:
    """Axis values of the case as the spec gave them (before --scale)."""
    op = get_op(cfg.op)
    if cfg.unscaled is None:
        return dict(op.factors(shape))
    return dict(op.factors(cfg.unscaled[cfg.shapes.index(shape)]))


def base_record(cfg: SweepConfig, shape: Any, dtype: str, backend: str) -> dict[str, Any]:
    op = get_op(cfg.op)
    flops = op.flops(shape)
    min_bytes = op.min_bytes(shape, dtype)
    return {
        "op": cfg.op,
        "shape": shape.to_dict(),
        "factors": _factors(cfg, shape),
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


def _params(cfg: SweepConfig, st: BackendState) -> dict[str, Any]:
    return cfg.cpp_params if st.backend.name == "cpp" else {}


def probe_gflops(cfg: SweepConfig, st: BackendState, shape: Any, dtype: str) -> float | None:
    """GFLOPS of one warm call on a scaled-down copy of `shape` (batch and input size shrunk until it costs
    about PROBE_TARGET_FLOPS), or None if the shape cannot be shrunk enough or the probe fails."""
    op = get_op(cfg.op)
    small, factor = shape, 1.0
    for _ in range(20):
        if op.flops(small) <= PROBE_TARGET_FLOPS:
            break
        factor /= 2
        small = op.scale(shape, factor)
    if op.flops(small) > 10 * PROBE_TARGET_FLOPS:
        return None
    try:
        prepared = st.backend.prepare(cfg.op, small, op.make_inputs(small, dtype, cfg.seed), _params(cfg, st))
        prepared.run(1)
        seconds = prepared.run(1)
    except Exception:
        return None
    return op.flops(small) / seconds / 1e9 if seconds > 0 else None


def measure_case(
    cfg: SweepConfig,
    st: BackendState,
    shape: Any,
    dtype: str,
    inputs: dict[str, Any],
    reference: Callable[[], Any] | None,
    peak: dict[str, Any] | None,
    timer: Timer,
    history: SpeedHistory,
) -> dict[str, Any]:
    """One case. `reference` is None when verification is off or over its cost cap."""
    op = get_op(cfg.op)
    name = st.backend.name
    rec = base_record(cfg, shape, dtype, name)
    if st.reason is not None:
        rec.update(status="skipped", reason=st.reason)
        return rec
    unsupported = st.backend.unsupported_reason(cfg.op, dtype)
    if unsupported is not None:
        rec.update(status="skipped", reason=unsupported)
        return rec

    known = history.best(name, cfg.op, dtype)
    if known is None and rec["flops"] > PROBE_MIN_FLOPS:
        probed = probe_gflops(cfg, st, shape, dtype)
        if probed is not None:
            history.record(name, cfg.op, dtype, probed, "a scaled-down probe of this case")
            known = history.best(name, cfg.op, dtype)
    if known is not None:
        gflops, how = known
        predicted_s = rec["flops"] / (gflops * 1e9)
        if predicted_s > cfg.max_call_s:
            rec.update(
                status="skipped",
                reason=(
                    f"predicted {predicted_s:.0f} s per call at the {gflops:.2g} GFLOPS {name} "
                    f"reached on {how}, "
                    f"over --max-call-s {cfg.max_call_s:g}"
                ),
            )
            return rec

    rec["notes"] = st.backend.notes(cfg.op, dtype)
    try:
        prepared = st.backend.prepare(cfg.op, shape, inputs, _params(cfg, st))
        rec["details"] = prepared.details
        if reference is not None:
            # The case may say how it accumulates (opbench's fp16 accumulation names its block size).
            acc = prepared.details.get("accumulate") or st.backend.accumulate.get(dtype, dtype)
            result = op.check(shape, prepared.output(), inputs, reference(), dtype, acc)
            rec["verify"] = {**result, "accumulate_assumed": acc}
            if not result["ok"]:
                rec.update(status="wrong_answer", reason=result.get("reason") or "error above the bound")
                return rec
        elif cfg.verify:
            cost = op.verify_cost_flops(shape) / 1e9
            rec["verify"] = {
                "skipped": f"float64 verification would cost {cost:.0f} GFLOP, over "
                f"--verify-max-gflop {cfg.verify_max_gflop:g}"
            }
        settle_s = wait_until_quiet(QUIET_MAX_WAIT_S)
        device_flush = prepared.cache_flush() if cfg.timer.cold_cache else None
        m = timer.measure(prepared.run, device_flush[0] if device_flush else None)
        method = prepared.clock
        if cfg.timer.cold_cache:
            method += "; cold cache: " + (device_flush[1] if device_flush else host_flush_note())
    except MemoryError:
        rec.update(status="failed", reason="out of memory")
        return rec
    except Exception as e:
        # A framework without a kernel for this dtype on this device says so in its error: that is a
        # missing path (skipped, unsupported), not a failure of the measurement.
        reason = _one_line(e)
        if UNSUPPORTED.search(reason):
            rec.update(status="skipped", reason=f"unsupported by {name}: {reason}")
        else:
            rec.update(status="failed", reason=reason)
        return rec

    rec["time"] = {**m.to_dict(), "settle_s": settle_s, "method": method}
    if settle_s >= QUIET_MAX_WAIT_S:
        rec["notes"].append(
            f"other threads of this process were still busy after {QUIET_MAX_WAIT_S:g} s; "
            "the timing may be disturbed"
        )
    rec["gflops"] = rec["flops"] / m.median_s / 1e9 if m.median_s > 0 else None
    rec["gflops_best"] = rec["flops"] / m.min_s / 1e9 if m.min_s > 0 else None
    if rec["gflops"] is not None:
        history.record(name, cfg.op, dtype, rec["gflops"], f"{cfg.op} {shape.label()} earlier in this run")
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
            rec["notes"].append(
                "faster than the measured peak: the peak or this timing is wrong "
                "(a peak cached while the machine was busy: opbench peak --refresh)"
            )
    return rec


def factor_levels(cfg: SweepConfig) -> dict[str, list[Any]]:
    """Every level of every axis the sweep covers (before --scale), for the results header."""
    levels: dict[str, list[Any]] = {}
    for shape in cfg.shapes:
        for axis, value in _factors(cfg, shape).items():
            if value not in levels.setdefault(axis, []):
                levels[axis].append(value)
    return {
        axis: sorted(values, key=str) if any(isinstance(v, str) for v in values) else sorted(values)
        for axis, values in levels.items()
    }


def _memory_skip(cfg: SweepConfig, shape: Any, dtype: str, need: int, backend: str) -> dict[str, Any]:
    rec = base_record(cfg, shape, dtype, backend)
    assert cfg.max_memory_bytes is not None
    rec.update(
        status="skipped",
        reason=(
            f"memory: needs about {need / 2**30:.1f} GiB, over the {cfg.max_memory_bytes / 2**30:.1f} GiB "
            f"budget (--max-memory)"
        ),
    )
    return rec


def run_sweep(
    cfg: SweepConfig,
    states: dict[str, BackendState],
    peak_table: dict[str, dict[str, Any]],
    on_record: Callable[[dict[str, Any]], None],
    on_case_start: Callable[[str], None] | None = None,
    history: SpeedHistory | None = None,
) -> None:
    """Measure every case in order (shape, dtype, then backends side by side), reporting each record."""
    from opbench import _core

    op = get_op(cfg.op)
    history = history or SpeedHistory()
    flush = None
    if cfg.timer.cold_cache:
        flush_bytes = host_flush_bytes()

        def flush() -> None:
            _core.flush_cache(flush_bytes)

    timer = Timer(cfg.timer, flush=flush)
    for i, shape in enumerate(cfg.shapes):
        will_verify = cfg.verify and op.verify_cost_flops(shape) <= cfg.verify_max_gflop * 1e9
        for dtype in cfg.dtypes:
            need = op.memory_bytes(shape, dtype, reference=will_verify)
            if cfg.max_memory_bytes is not None and need > cfg.max_memory_bytes:
                for name in cfg.backends:
                    on_record(_memory_skip(cfg, shape, dtype, need, name))
                continue
            inputs = op.make_inputs(shape, dtype, cfg.seed + i)
            # Computed at most once per (shape, dtype), and only if some backend gets to verification.
            reference = (
                functools.cache(functools.partial(op.reference, shape, inputs)) if will_verify else None
            )
            for name in cfg.backends:
                if on_case_start:
                    on_case_start(f"{cfg.op} {shape.label()} {dtype} {name}")
                peak = peak_table.get(dtype, {}).get("used")
                on_record(
                    measure_case(cfg, states[name], shape, dtype, inputs, reference, peak, timer, history)
                )

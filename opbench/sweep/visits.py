"""One case of a sweep and its visits: decide whether it runs (backend, dtype, predicted call time),
verify it against the float64 reference, time each visit through measure.Bench, and turn its visits into
a Result (case.py). sweep/driver.py expands the cases, orders the rounds and drives these.

The timed kernel is the verified kernel: before every timed visit the case's inputs get new values
(ops/spot.py: refreshed, written in place by Prepared.refill where the backend can), and after it the output
of the timed calls (Prepared.timed_output) is checked on them (the op's spot_check). A case whose timed
output is wrong is a wrong answer, whatever its first call returned; the checks are in verify.timed.

A case that cannot run (backend missing, dtype unsupported, predicted to take too long, an exception, a
wrong answer) becomes a Result with an Outcome saying why; it never ends the sweep.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

from opbench import kernels
from opbench.backends.base import Backend, Prepared
from opbench.backends.remote import RemoteBackend
from opbench.case import OK, Case, Outcome, Reason, Result
from opbench.documents import Params, PeakDict, Scalar
from opbench.dtypes import Inputs
from opbench.guards import zeros_guard
from opbench.measure import Bench
from opbench.ops import pass_of
from opbench.ops.base import Op, Shape
from opbench.ops.spot import refreshed
from opbench.repro import sweep_command
from opbench.sweep import verification
from opbench.sweep.caseresult import case_result
from opbench.sweep.caserun import CaseRun
from opbench.sweep.config import BackendState, SweepConfig, one_line, processes
from opbench.timing import Timer

# A first visit whose samples took more than this many times the round's --max-time-s share is not
# visited again (one round: the rounds of a slow case would multiply the sweep's time).
SLOW_ROUND_FACTOR = 1.5
# A case bigger than this, for a backend with no speed on record yet, is first probed at a smaller scale.
PROBE_MIN_FLOPS = 2e9
PROBE_TARGET_FLOPS = 2e8
# Error messages that mean "no kernel for this dtype/op here" in torch ("not implemented for 'Half'") and
# MindSpore ("... is not supported", "unsupported data type").
UNSUPPORTED = re.compile(r"not implemented for|not supported|unsupported|no kernel", re.IGNORECASE)


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


@functools.lru_cache(maxsize=1)
def host_flush_bytes() -> int:
    """What a cold-cache sample writes first on the host: twice the L3, at least 64 MiB."""
    return int(max(2 * kernels.l3_bytes(), 64 << 20))


def host_flush_note() -> str:
    return f"{host_flush_bytes() >> 20} MiB written on the host before each sample (one call per sample)"


def case_factors(cfg: SweepConfig, shape: Shape) -> dict[str, Scalar]:
    """Axis values of the case as the spec gave them (before --scale)."""
    if cfg.unscaled is None:
        return dict(cfg.op.factors(shape))
    return dict(cfg.op.factors(cfg.unscaled[cfg.shapes.index(shape)]))


def make_case(cfg: SweepConfig, shape: Shape, dtype: str, backend: Backend, pass_name: str = "fwd") -> Case:
    """The Case of (shape, pass, dtype, backend) in this sweep, with the parameters the backend makes of the
    run's options for it (Backend.case_params: our kernels' tiles, ISA, accumulation and --tuned lookup)."""
    op = pass_of(cfg.op, pass_name)
    return Case(
        op=op,
        shape=shape,
        dtype=dtype,
        backend=backend.name,
        threads=cfg.threads,
        device=cfg.device,
        params=_params(cfg, backend, shape, dtype, op.key),
        factors=case_factors(cfg, shape),
    )


def _params(cfg: SweepConfig, backend: Backend, shape: Shape, dtype: str, key: str) -> Params:
    options = cfg.backend_options.get(backend.name, {})
    return backend.case_params(options, key, shape, dtype, cfg.threads)


def probe_gflops(cfg: SweepConfig, st: BackendState, op: Op[Any], shape: Shape, dtype: str) -> float | None:
    """GFLOPS of one warm call of `op` on a scaled-down copy of `shape` (batch and input size shrunk
    until it costs about PROBE_TARGET_FLOPS), or None if the shape cannot be shrunk enough or the probe
    fails."""
    key = op.key
    small, factor = shape, 1.0
    for _ in range(20):
        if op.flops(small) <= PROBE_TARGET_FLOPS:
            break
        factor /= 2
        small = op.scale(shape, factor)
    if op.flops(small) > 10 * PROBE_TARGET_FLOPS:
        return None
    try:
        inputs = op.make_inputs(small, dtype, cfg.seed)
        prepared = st.backend.prepare(key, small, inputs, _params(cfg, st.backend, small, dtype, key))
        prepared.run(1)
        seconds = prepared.run(1)
    except Exception:
        return None
    return op.flops(small) / seconds / 1e9 if seconds > 0 else None


def prepare(st: BackendState, case: CaseRun, inputs: Inputs, process: int) -> Prepared:
    """The case prepared by its backend, in worker `process` where it runs in several."""
    params = dict(case.case.params)
    if isinstance(st.backend, RemoteBackend):
        return st.backend.prepare_in(process, case.case.key, case.shape, inputs, params)
    return st.backend.prepare(case.case.key, case.shape, inputs, params)


def _is_memory_bound(bench: Bench, case: Case) -> bool:
    ref = bench.reference
    if ref is None:
        return False

    min_bytes = case.min_bytes()
    return ref.memory_bound(case.flops / min_bytes, min_bytes, kernels.l3_bytes(), case.dtype)


def _visit(
    cfg: SweepConfig,
    case: CaseRun,
    prepared: Prepared,
    bench: Bench,
    timer: Timer,
    pool: str,
    process: int | None,
) -> None:
    device_flush = prepared.cache_flush() if cfg.timer.cold_cache else None
    visit = bench.measure(
        prepared.run,
        dtype=case.dtype,
        memory_bound=_is_memory_bound(bench, case.case),
        flush=device_flush[0] if device_flush else None,
        timer=timer,
        # A first visit follows verification (the float64 reference's BLAS pool may spin): it settles.
        # Another process of the same backend has its own pool, which may still spin.
        owner=(pool if process is None else f"{pool}/{process}") if case.visits else None,
    )
    if process is not None:
        visit.process, visit.offsets = process, dict(getattr(prepared, "offsets", {}) or {})
    case.visits.append(visit)
    if not case.method:
        case.method = prepared.clock
        if cfg.timer.cold_cache:
            case.method += "; cold cache: " + (device_flush[1] if device_flush else host_flush_note())
    elif prepared.clock not in case.method:  # another process timed it otherwise (a CUDA graph not captured)
        case.method += f"; in another visit: {prepared.clock}"


def timed_visit(
    cfg: SweepConfig,
    case: CaseRun,
    prepared: Prepared,
    bench: Bench,
    timer: Timer,
    pool: str,
    fresh: bool = False,
    process: int | None = None,
) -> None:
    """One timed visit on new input values, its timed output checked (sweep/verification.py). `fresh`: the
    case was just prepared on new values (no refill needed). `process`: the worker it ran in (--processes)."""
    refilled = fresh or (cfg.verify and verification.refill(cfg, case, prepared))
    _visit(cfg, case, prepared, bench, timer, pool, process)
    if cfg.verify:
        verification.check_timed(cfg, case, prepared, refilled)


def _failure(name: str, e: BaseException) -> Outcome:
    """A framework without a kernel for this dtype on this device says so in its error: that is a missing
    path (skipped, unsupported), not a failure of the measurement."""
    if isinstance(e, MemoryError):
        return Outcome(Reason.ERROR, "out of memory")
    reason = one_line(e)
    if UNSUPPORTED.search(reason):
        return Outcome(Reason.UNSUPPORTED, f"unsupported by {name}: {reason}")
    return Outcome(Reason.ERROR, reason)


def decide(cfg: SweepConfig, st: BackendState, case: CaseRun, need: int, history: SpeedHistory) -> Outcome:
    """Whether a case runs: every gate, in this order, before its inputs are made. Its op runs the shape
    (Op.unsupported); its memory (`need`, verification included) is within --max-memory; its backend is
    there and runs the op in the dtype; its call is not predicted to take over --max-call-s (at the best
    speed this backend reached on the op and dtype in this process, else on a scaled-down probe). OK, or
    the Outcome that ends it (a skip)."""
    op, key, name, dtype = case.case.op, case.case.key, st.backend.name, case.dtype
    unsupported = op.unsupported(case.shape)
    if unsupported is not None:
        return Outcome(Reason.UNSUPPORTED, unsupported)
    if cfg.max_memory_bytes is not None and need > cfg.max_memory_bytes:
        return memory_skip(cfg, need)
    if st.reason is not None:
        return Outcome(Reason.UNSUPPORTED, st.reason)
    unsupported = st.backend.unsupported_reason(key, dtype)
    if unsupported is not None:
        return Outcome(Reason.UNSUPPORTED, unsupported)
    flops = case.case.flops
    known = history.best(name, key, dtype)
    if known is None and flops > PROBE_MIN_FLOPS:
        probed = probe_gflops(cfg, st, op, case.shape, dtype)
        if probed is not None:
            history.record(name, key, dtype, probed, "a scaled-down probe of this case")
            known = history.best(name, key, dtype)
    if known is not None:
        gflops, how = known
        predicted_s = flops / (gflops * 1e9)
        if predicted_s > cfg.max_call_s:
            text = (
                f"predicted {predicted_s:.0f} s per call at the {gflops:.2g} GFLOPS {name} reached on {how}, "
                f"over --max-call-s {cfg.max_call_s:g}"
            )
            return Outcome(Reason.TIME, text)
    return OK


def memory_skip(cfg: SweepConfig, need: int) -> Outcome:
    assert cfg.max_memory_bytes is not None
    return Outcome(
        Reason.MEMORY,
        f"memory: needs about {need / 2**30:.1f} GiB, over the {cfg.max_memory_bytes / 2**30:.1f} GiB "
        f"budget (--max-memory)",
    )


def first_visit(
    cfg: SweepConfig,
    st: BackendState,
    case: CaseRun,
    inputs: Inputs,
    expected: verification.Expected | None,
    bench: Bench,
    timer: Timer,
    history: SpeedHistory,
    keep: bool = False,
) -> None:
    """Verify a case that decide() let run, then time its first visit. `expected` (the group's float64
    reference and bounds) is None when verification is off or over its cost cap. (The caller gives the
    case its repro command: repro.sweep_command.)"""
    key, name, dtype, flops = case.case.key, st.backend.name, case.dtype, case.case.flops
    case.notes = st.backend.notes(key, dtype)
    case.finished = True  # until the case proves it can be timed
    try:
        prepared = prepare(st, case, inputs, 0)
        case.details = prepared.details
        # The case may say how it accumulates (opbench's fp16 accumulation names its block size).
        # (the device is passed only off the CPU: a plug-in written before it was an argument still runs)
        device = (cfg.device,) if cfg.device != "cpu" else ()
        acc = prepared.details.get("accumulate") or st.backend.accumulation(key, dtype, *device)
        case.accumulate, case.inputs, case.first_inputs = acc, inputs, inputs
        output = prepared.output()  # verified where `expected` is given; its zeros counted either way
        if not verification.check_first(cfg, case, output, expected):
            return
        case.guards = zeros_guard(case.case, output)
        del output
        case.finished = False
        timed_visit(cfg, case, prepared, bench, timer, st.backend.pool, process=_process_or_none(st, 0))
    except Exception as e:
        case.end(_failure(name, e))
        return
    if case.finished:  # its timed output was wrong
        return
    m = case.visits[0].measurement
    # A case whose minimum samples overran the round's share of --max-time-s (a call of a large fraction
    # of it, or over --call-budget-s) is visited once: its rounds would multiply the sweep's time.
    if m.single_sample or m.n * m.loops * m.median_s > SLOW_ROUND_FACTOR * timer.config.max_time_s:
        case.slow = cfg.rounds > 1
    case.keep = keep and not case.slow
    if case.keep:
        case.prepared[0] = prepared
    else:
        case.inputs = case.first_inputs = None  # a later visit prepares it again, on new values
    gflops = flops / m.median_s / 1e9
    if math.isfinite(gflops):
        history.record(name, key, dtype, gflops, f"{cfg.op.name} {case.case.label} earlier in this run")


def later_visit(cfg: SweepConfig, st: BackendState, case: CaseRun, bench: Bench, timer: Timer) -> None:
    """Another round of a case that ran, in the process whose turn it is (CaseRun.process): the prepared case
    kept from its earlier visit there (its inputs refilled with new values; a process visited for the first
    time prepares it on the first values and keeps it), else the inputs made again with the same seed, given
    new values and prepared again; timed and its timed output checked (timed_visit). A failure now ends the
    case's visits and is noted; the rounds already measured stay (a wrong timed output ends the case as a
    wrong answer)."""
    op = case.case.op
    process = case.process(st)
    try:
        prepared, fresh = case.prepared.get(process), False
        if prepared is None and case.keep:
            # the first values, as the kept case of process 0 was prepared on: the refill moves them
            assert case.first_inputs is not None
            prepared = case.prepared[process] = prepare(st, case, case.first_inputs, process)
        elif prepared is None:
            inputs = op.make_inputs(case.shape, case.dtype, cfg.seed + case.shape_index)
            if cfg.verify:  # new values for this visit, as a kept case gets by refill
                inputs = refreshed(inputs, verification.visit_seed(cfg, case, len(case.visits) + 1))
            prepared = prepare(st, case, inputs, process)
            case.inputs, fresh = inputs, True
        timed_visit(cfg, case, prepared, bench, timer, st.backend.pool, fresh, _process_or_none(st, process))
        if not case.keep:
            case.inputs = None
    except Exception as e:
        case.finished = True
        case.prepared = {}
        case.inputs = case.first_inputs = None
        case.notes.append(f"round {len(case.visits) + 1} failed ({one_line(e)}); earlier rounds kept")


def _process_or_none(st: BackendState, process: int) -> int | None:
    return process if processes(st) else None


def measure_case(
    cfg: SweepConfig,
    st: BackendState,
    shape: Shape,
    dtype: str,
    inputs: Inputs,
    expected: verification.Expected | None,
    peak: PeakDict | None,
    bench: Bench,
    history: SpeedHistory,
) -> Result:
    """One case, one visit (what a single-round sweep does per case): decided, then verified and timed."""
    case = CaseRun(0, 0, make_case(cfg, shape, dtype, st.backend))
    need = case.case.op.memory_bytes(shape, dtype, reference=expected is not None)
    outcome = decide(cfg, st, case, need, history)
    if outcome.ok:
        first_visit(cfg, st, case, inputs, expected, bench, bench.timer, history)
    else:
        case.end(outcome)
    case.repro = sweep_command(case.case, cfg, 0, st.backend, case.details)
    bench.finish()
    return case_result(case, peak)

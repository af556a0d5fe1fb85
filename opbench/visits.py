"""One case of a sweep and its visits: decide whether it runs (backend, dtype, predicted call time),
verify it against the float64 reference, time each visit through measure.Bench, and turn its visits into
the result record. sweep.py expands the cases, orders the rounds and drives these.

A case that cannot run (backend missing, dtype unsupported, predicted to take too long, an exception, a
wrong answer) becomes a record with a status and a reason; it never ends the sweep.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opbench.measure import QUIET_MAX_WAIT_S, Bench, Visit, combine
from opbench.ops import get_op
from opbench.reference import APART_FACTOR, THROTTLED_SPEED
from opbench.timing import Timer

if TYPE_CHECKING:
    from opbench.sweep import BackendState, SweepConfig

# Utilization below this is flagged: the backend leaves the hardware nearly idle (e.g. no fp16 kernel).
SLOW_UTILIZATION = 0.01
# A first visit whose samples took more than this many times the round's --max-time-s share is not
# visited again (one round: the rounds of a slow case would multiply the sweep's time).
SLOW_ROUND_FACTOR = 1.5
# A case bigger than this, for a backend with no speed on record yet, is first probed at a smaller scale.
PROBE_MIN_FLOPS = 2e9
PROBE_TARGET_FLOPS = 2e8
# Verification's float64 BLAS work runs on one thread when it costs at most this many FLOPs: a
# multi-threaded OpenBLAS call leaves its pool spinning for about 110 ms, which the timing that follows
# must wait out (measure.Bench settles), and that wait cost more than a short check saves on two threads.
ONE_THREAD_VERIFY_FLOPS = 4e9
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


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    msg = text[0] if text else ""
    msg = msg if len(msg) <= 300 else msg[:297] + "..."
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


@functools.lru_cache(maxsize=1)
def host_flush_bytes() -> int:
    """What a cold-cache sample writes first on the host: twice the L3, at least 64 MiB."""
    from opbench import kernels

    return int(max(2 * kernels.l3_bytes(), 64 << 20))


def host_flush_note() -> str:
    return f"{host_flush_bytes() >> 20} MiB written on the host before each sample (one call per sample)"


def case_factors(cfg: SweepConfig, shape: Any) -> dict[str, Any]:
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
        "factors": case_factors(cfg, shape),
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
        "machine_speed": None,
        "reference": None,
        "verify": None,
        "details": {},
        "notes": [],
        "flags": [],
    }


def _params(cfg: SweepConfig, st: BackendState, shape: Any, dtype: str) -> dict[str, Any]:
    """What the backend is asked for besides the case: our kernels' tiles, ISA and accumulation. With
    --tuned, the tiles `opbench tune` recorded for this case on this machine are looked up here, where the
    case is built (the kernels do not read the tuner's records), and named in the record's tiles_source."""
    if st.backend.name != "cpp":
        return {}
    params = {k: v for k, v in cfg.cpp_params.items() if k != "tuned"}
    if cfg.cpp_params.get("tuned") and cfg.op == "gemm":
        from opbench.tune.records import tuned_tiles

        tiles, note = tuned_tiles(shape.m, shape.n, shape.k, dtype, cfg.threads)
        params.update(tiles, tiles_note=note)
    return params


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
        inputs = op.make_inputs(small, dtype, cfg.seed)
        prepared = st.backend.prepare(cfg.op, small, inputs, _params(cfg, st, small, dtype))
        prepared.run(1)
        seconds = prepared.run(1)
    except Exception:
        return None
    return op.flops(small) / seconds / 1e9 if seconds > 0 else None


@dataclass
class Case:
    """One (shape, dtype, backend) of a sweep and the visits it has had so far."""

    index: int
    shape_index: int
    shape: Any
    dtype: str
    backend: str
    record: dict[str, Any] | None = None  # the record as the first visit left it (status, details, verify)
    visits: list[Visit] = field(default_factory=list)
    finished: bool = False  # no more visits: skipped, failed or wrong before timing, or a later visit failed
    method: str = ""
    slow: bool = False  # its first visit overran the round's time budget: one visit only (round_budget_note)
    prepared: Any = None  # kept between rounds when it fits the sweep's keep budget (KEEP_PREPARED_BYTES)


def _is_memory_bound(bench: Bench, rec: dict[str, Any]) -> bool:
    ref = bench.reference
    if ref is None:
        return False
    from opbench import kernels

    return ref.memory_bound(rec["arithmetic_intensity"], rec["min_bytes"], kernels.l3_bytes(), rec["dtype"])


def _visit(cfg: SweepConfig, case: Case, prepared: Any, bench: Bench, timer: Timer) -> None:
    assert case.record is not None
    device_flush = prepared.cache_flush() if cfg.timer.cold_cache else None
    visit = bench.measure(
        prepared.run,
        dtype=case.dtype,
        memory_bound=_is_memory_bound(bench, case.record),
        flush=device_flush[0] if device_flush else None,
        timer=timer,
        # A first visit follows verification (the float64 reference's BLAS pool may spin): it settles.
        owner=case.backend if case.visits else None,
    )
    case.visits.append(visit)
    if not case.method:
        case.method = prepared.clock
        if cfg.timer.cold_cache:
            case.method += "; cold cache: " + (device_flush[1] if device_flush else host_flush_note())


def verify_threads(cost_flops: float) -> contextlib.AbstractContextManager[Any]:
    """The BLAS thread limit for a verification of `cost_flops` (ONE_THREAD_VERIFY_FLOPS)."""
    if cost_flops > ONE_THREAD_VERIFY_FLOPS:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(1, user_api="blas")


def _failure(rec: dict[str, Any], name: str, e: BaseException) -> None:
    """A framework without a kernel for this dtype on this device says so in its error: that is a missing
    path (skipped, unsupported), not a failure of the measurement."""
    if isinstance(e, MemoryError):
        rec.update(status="failed", reason="out of memory")
        return
    reason = one_line(e)
    if UNSUPPORTED.search(reason):
        rec.update(status="skipped", reason=f"unsupported by {name}: {reason}")
    else:
        rec.update(status="failed", reason=reason)


def first_visit(
    cfg: SweepConfig,
    st: BackendState,
    case: Case,
    inputs: dict[str, Any],
    reference: Callable[[], Any] | None,
    bench: Bench,
    timer: Timer,
    history: SpeedHistory,
    keep: bool = False,
) -> None:
    """Decide whether the case runs (backend, dtype, predicted time), verify it, then time its first
    visit. `reference` is None when verification is off or over its cost cap."""
    op = get_op(cfg.op)
    name = st.backend.name
    shape, dtype = case.shape, case.dtype
    rec = case.record = base_record(cfg, shape, dtype, name)
    case.finished = True  # until the case proves it can be timed
    if st.reason is not None:
        rec.update(status="skipped", reason=st.reason)
        return
    unsupported = st.backend.unsupported_reason(cfg.op, dtype)
    if unsupported is not None:
        rec.update(status="skipped", reason=unsupported)
        return

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
            return

    rec["notes"] = st.backend.notes(cfg.op, dtype)
    try:
        prepared = st.backend.prepare(cfg.op, shape, inputs, _params(cfg, st, shape, dtype))
        rec["details"] = prepared.details
        if reference is not None:
            # The case may say how it accumulates (opbench's fp16 accumulation names its block size).
            acc = prepared.details.get("accumulate") or st.backend.accumulate.get(dtype, dtype)
            output = prepared.output()
            with verify_threads(op.verify_cost_flops(shape)):
                result = op.check(shape, output, inputs, reference(), dtype, acc)
            rec["verify"] = {**result, "accumulate_assumed": acc}
            if not result["ok"]:
                rec.update(status="wrong_answer", reason=result.get("reason") or "error above the bound")
                return
        elif cfg.verify:
            cost = op.verify_cost_flops(shape) / 1e9
            rec["verify"] = {
                "skipped": f"float64 verification would cost {cost:.0f} GFLOP, over "
                f"--verify-max-gflop {cfg.verify_max_gflop:g}"
            }
        _visit(cfg, case, prepared, bench, timer)
    except Exception as e:
        _failure(rec, name, e)
        return
    case.finished = False
    m = case.visits[0].measurement
    # A case whose minimum samples overran the round's share of --max-time-s (a call of a large fraction
    # of it, or over --call-budget-s) is visited once: its rounds would multiply the sweep's time.
    if m.single_sample or m.n * m.loops * m.median_s > SLOW_ROUND_FACTOR * timer.config.max_time_s:
        case.slow = cfg.rounds > 1
    if keep and not case.slow:
        case.prepared = prepared
    gflops = rec["flops"] / m.median_s / 1e9
    if math.isfinite(gflops):
        history.record(name, cfg.op, dtype, gflops, f"{cfg.op} {shape.label()} earlier in this run")


def later_visit(cfg: SweepConfig, st: BackendState, case: Case, bench: Bench, timer: Timer) -> None:
    """Another round of a case that ran: the prepared case kept from its first visit, else fresh inputs (the
    same seed) prepared again; timed. A failure now ends the case's visits and is noted; the rounds
    already measured stay."""
    op = get_op(cfg.op)
    assert case.record is not None
    try:
        prepared = case.prepared
        if prepared is None:
            inputs = op.make_inputs(case.shape, case.dtype, cfg.seed + case.shape_index)
            prepared = st.backend.prepare(
                cfg.op, case.shape, inputs, _params(cfg, st, case.shape, case.dtype)
            )
        _visit(cfg, case, prepared, bench, timer)
    except Exception as e:
        case.finished = True
        case.record["notes"].append(
            f"round {len(case.visits) + 1} failed ({one_line(e)}); earlier rounds kept"
        )


def case_record(case: Case, peak: dict[str, Any] | None) -> dict[str, Any]:
    """The record of a case from its first visit's record and all its visits. `peak` is the fallback peak
    (a GPU's datasheet) used where no in-run reference was taken."""
    assert case.record is not None
    rec = {**case.record, "notes": list(case.record["notes"]), "flags": list(case.record["flags"])}
    if not case.visits:
        return rec
    c = combine(case.visits)
    m = c.measurement
    rec["time"] = {**c.time, "method": case.method}
    if rec["time"]["settle_s"] >= QUIET_MAX_WAIT_S:
        rec["notes"].append(
            f"other threads of this process were still busy after {QUIET_MAX_WAIT_S:g} s; "
            "the timing may be disturbed"
        )
    if m.first_call:
        rec["notes"].append(
            "the first call is the only sample: it took over 5x --call-budget-s, so no warm-up call was made"
        )
    if case.slow:
        rec["notes"].append(
            "measured in one round: a call takes too large a share of the sampling budget to repeat it "
            "over rounds (more time: --max-time-s)"
        )
    if c.time["dropped_rounds"]:
        rec["notes"].append(
            f"slower rounds measured while the machine ran below {100 * THROTTLED_SPEED:.0f}% of its best "
            f"in-run probe, or while our CPUs sat apart (hand-off over {APART_FACTOR:g}x its best), were "
            "dropped (time.dropped_rounds)"
        )
    rec["gflops"] = rec["flops"] / m.median_s / 1e9 if m.median_s > 0 else None
    rec["gflops_best"] = rec["flops"] / m.min_s / 1e9 if m.min_s > 0 else None
    rec["flags"] += c.flags
    rec["machine_speed"] = c.machine_speed
    rec["reference"] = c.reference
    used = peak
    if c.reference is not None and c.reference["fma_gflops"]:
        used = {
            "gflops": c.reference["fma_gflops"],
            "source": "in-run",
            "name": f"in-run FMA probe ({case.visits[0].before['fma'].key})",
        }
    if used is not None and rec["gflops"] is not None:
        rec["peak"] = {k: used[k] for k in ("gflops", "source", "name")}
        rec["utilization"] = rec["gflops"] / used["gflops"]
        if rec["utilization"] < SLOW_UTILIZATION:
            rec["flags"].append("slow")
        if used["source"] in ("measured", "in-run") and (rec["gflops_best"] or 0.0) > used["gflops"] * 1.02:
            rec["flags"].append("over_peak")
            rec["notes"].append(
                "faster than the measured peak: the peak or this timing is wrong "
                "(a peak cached while the machine was busy: opbench peak --refresh)"
            )
    return rec


def measure_case(
    cfg: SweepConfig,
    st: BackendState,
    shape: Any,
    dtype: str,
    inputs: dict[str, Any],
    reference: Callable[[], Any] | None,
    peak: dict[str, Any] | None,
    bench: Bench,
    history: SpeedHistory,
) -> dict[str, Any]:
    """One case, one visit (what a single-round sweep does per case)."""
    case = Case(0, 0, shape, dtype, st.backend.name)
    first_visit(cfg, st, case, inputs, reference, bench, bench.timer, history)
    bench.finish()
    return case_record(case, peak)

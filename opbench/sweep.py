"""Sweep: expand (shape x dtype x backend) into cases, verify and time each, and build result records.

A case that cannot run (backend missing, dtype unsupported, over the memory budget, predicted to take too
long, an exception, a wrong answer) becomes a record with a status and a reason; it never ends the sweep.
"""

from __future__ import annotations

import contextlib
import functools
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from opbench import peak as peaks
from opbench.backends import BACKENDS, Backend
from opbench.contention import Monitor
from opbench.errors import BackendUnavailable
from opbench.machine import allowed_cpus
from opbench.measure import QUIET_MAX_WAIT_S, Bench, Visit, combine, speed_of
from opbench.ops import get_op
from opbench.reference import THROTTLED_SPEED, InRunReference
from opbench.timing import Timer, TimerConfig

# Utilization below this is flagged: the backend leaves the hardware nearly idle (e.g. no fp16 kernel).
SLOW_UTILIZATION = 0.01
# A first visit whose samples took more than this many times the round's --max-time-s share is not
# visited again (one round: the rounds of a slow case would multiply the sweep's time).
SLOW_ROUND_FACTOR = 1.5
# The fewest samples one round of a case takes (round_timer); the record's statistics use every round's.
ROUND_MIN_SAMPLES = 2
# Prepared cases (inputs in the backend's tensors, traced functions) are kept between rounds up to this
# many bytes in all (and a quarter of --max-memory): preparing again each round costs more than the
# sampling in conv and LSTM sweeps (TensorFlow traces, Keras layers, MindSpore cells).
KEEP_PREPARED_BYTES = 1 << 30
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
    rounds: int = 1  # visits per case, interleaved over shuffled rounds (the CLI's default is 3)

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
        "machine_speed": None,
        "reference": None,
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


def round_timer(config: TimerConfig, rounds: int) -> TimerConfig:
    """The timer of one visit when a case is visited over `rounds` rounds: the sampling budget split
    between them, so the rounds together take about what one visit took before. A round takes at least
    ROUND_MIN_SAMPLES samples (a steady case stops there): with 3, three rounds of a steady LSTM or small
    GEMM took 9 samples where one visit had taken 5, and the sweep 50% longer."""
    if rounds <= 1:
        return config
    return replace(
        config,
        warmup_s=config.warmup_s / rounds,
        min_samples=max(ROUND_MIN_SAMPLES, math.ceil(config.min_samples / rounds)),
        max_samples=max(3, math.ceil(config.max_samples / rounds)),
        max_time_s=config.max_time_s / rounds,
    )


def visit_order(
    groups: list[list[int]], rounds: int, seed: int, owners: list[str] | None = None
) -> list[list[int]]:
    """The case indices each round visits. `groups` are the cases of each (shape, dtype) in sweep order;
    `owners[i]` the backend of case i. Round 1 keeps each group's backends together (their float64
    reference is computed once) but shuffles the order of the groups and of the backends within each.
    Later rounds visit one backend's cases after another's, both orders shuffled per round: a switch of
    framework costs a wait for the previous one's pool to go quiet (measure.Bench), and a round that
    switched at every visit spent more time waiting than sampling. Without `owners`, later rounds shuffle
    every case. Seeded. A single round keeps the sweep order (small shapes first predict the time of
    large ones)."""
    if rounds == 1:
        return [[i for g in groups for i in g]]  # one visit per case: the sweep's own order
    order: list[list[int]] = []
    flat = [i for g in groups for i in g]
    blocks: dict[str, list[int]] = {}
    for i in flat:
        blocks.setdefault(owners[i] if owners else str(i), []).append(i)
    for r in range(rounds):
        rng = random.Random(f"opbench-rounds/{seed}/{r}")
        if r == 0:
            shuffled = [list(g) for g in groups]
            rng.shuffle(shuffled)
            for g in shuffled:
                rng.shuffle(g)
            order.append([i for g in shuffled for i in g])
        else:
            names = list(blocks)
            rng.shuffle(names)
            visits: list[int] = []
            for name in names:
                block = list(blocks[name])
                rng.shuffle(block)
                visits += block
            order.append(visits)
    return order


def _is_memory_bound(bench: Bench, rec: dict[str, Any]) -> bool:
    ref = bench.reference
    if ref is None:
        return False
    return ref.memory_bound(rec["arithmetic_intensity"], rec["min_bytes"], l3_bytes(), rec["dtype"])


@functools.lru_cache(maxsize=1)
def l3_bytes() -> int:
    from opbench import _core

    return int(_core.cpu_info()["caches"]["l3"]["size_bytes"])


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
    reason = _one_line(e)
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
        prepared = st.backend.prepare(cfg.op, shape, inputs, _params(cfg, st))
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
            prepared = st.backend.prepare(cfg.op, case.shape, inputs, _params(cfg, st))
        _visit(cfg, case, prepared, bench, timer)
    except Exception as e:
        case.finished = True
        case.record["notes"].append(
            f"round {len(case.visits) + 1} failed ({_one_line(e)}); earlier rounds kept"
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
            f"rounds measured while the machine ran below {100 * THROTTLED_SPEED:.0f}% of its best in-run "
            "probe were dropped (time.dropped_rounds)"
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


def make_reference(cfg: SweepConfig) -> InRunReference | None:
    """The in-run FMA/triad reference of a sweep on the CPU; None on an accelerator (no CPU probe there)."""
    from opbench import peak as peaks

    return InRunReference(cfg.threads, load_best=peaks.best_probe) if cfg.device == "cpu" else None


def make_bench(cfg: SweepConfig, cpus: list[int], reference: InRunReference | None = None) -> Bench:
    """The sweep's Bench: the in-run FMA/triad reference on CPU (`reference`, else a new one; none on an
    accelerator), contention watched on the CPUs this process runs on, caches flushed before each sample
    with --cold-cache."""
    from opbench import _core

    flush = None
    if cfg.timer.cold_cache:
        flush_bytes = host_flush_bytes()

        def flush() -> None:
            _core.flush_cache(flush_bytes)

    ref = (reference or make_reference(cfg)) if cfg.device == "cpu" else None
    return Bench(Timer(cfg.timer, flush=flush), ref, Monitor(cpus))


def run_sweep(
    cfg: SweepConfig,
    states: dict[str, BackendState],
    peak_table: dict[str, dict[str, Any]],
    on_records: Callable[[list[tuple[int, dict[str, Any]]]], None],
    on_case_start: Callable[[str], None] | None = None,
    history: SpeedHistory | None = None,
    bench: Bench | None = None,
) -> None:
    """Visit every case cfg.rounds times in interleaved, shuffled rounds (visit_order), then once more
    for a case whose every round ran on a throttled machine (at most a quarter of the cases). After every
    visit the case's record is reported as [(index, record)] (index in sweep order: shape, dtype,
    backend), so the caller can keep files up to date; when all rounds are done, machine_speed is
    recomputed against the best probe of the whole run and every record reported again in one batch."""
    op = get_op(cfg.op)
    history = history or SpeedHistory()
    bench = bench or make_bench(cfg, allowed_cpus())
    timer = Timer(round_timer(cfg.timer, cfg.rounds), flush=bench.timer.flush)
    cases: list[Case] = []
    groups: list[list[int]] = []
    for i, shape in enumerate(cfg.shapes):
        for dtype in cfg.dtypes:
            group = []
            for name in cfg.backends:
                group.append(len(cases))
                cases.append(Case(len(cases), i, shape, dtype, name))
            groups.append(group)

    def peak_of(case: Case) -> dict[str, Any] | None:
        return peak_table.get(case.dtype, {}).get("used")

    def report(case: Case) -> None:
        on_records([(case.index, case_record(case, peak_of(case)))])

    def start(case: Case, r: int) -> None:
        if on_case_start:
            suffix = f" (round {r + 1}/{cfg.rounds})" if cfg.rounds > 1 else ""
            on_case_start(f"{cfg.op} {case.shape.label()} {case.dtype} {case.backend}{suffix}")

    order = visit_order(groups, cfg.rounds, cfg.seed, [c.backend for c in cases])
    keep_budget = KEEP_PREPARED_BYTES if cfg.rounds > 1 else 0
    if cfg.max_memory_bytes is not None:
        keep_budget = min(keep_budget, cfg.max_memory_bytes // 4)
    # Round 1, a (shape, dtype) group at a time: inputs and the float64 reference made once per group.
    group_of = {i: g for g in groups for i in g}
    prepared_group: tuple[int, dict[str, Any], Any] | None = None
    for index in order[0]:
        case = cases[index]
        start(case, 0)
        will_verify = cfg.verify and op.verify_cost_flops(case.shape) <= cfg.verify_max_gflop * 1e9
        need = op.memory_bytes(case.shape, case.dtype, reference=will_verify)
        if cfg.max_memory_bytes is not None and need > cfg.max_memory_bytes:
            case.record = _memory_skip(cfg, case.shape, case.dtype, need, case.backend)
            case.finished = True
            report(case)
            continue
        gid = group_of[index][0]
        if prepared_group is None or prepared_group[0] != gid:
            prepared_group = None  # free the previous group's inputs and reference first
            inputs = op.make_inputs(case.shape, case.dtype, cfg.seed + case.shape_index)
            reference = (
                functools.cache(functools.partial(op.reference, case.shape, inputs)) if will_verify else None
            )
            prepared_group = (gid, inputs, reference)
        _, inputs, reference = prepared_group
        size = op.memory_bytes(case.shape, case.dtype, reference=False)
        keep = size <= keep_budget
        first_visit(cfg, states[case.backend], case, inputs, reference, bench, timer, history, keep)
        if case.prepared is not None:
            keep_budget -= size
        report(case)
    prepared_group = None
    for r, indices in enumerate(order[1:], start=1):
        for index in indices:
            case = cases[index]
            if case.finished or case.slow:
                continue
            start(case, r)
            later_visit(cfg, states[case.backend], case, bench, timer)
            report(case)
    # A case whose every round ran on a throttled machine is measured once more (bounded).
    retry = [
        c for c in cases if not (c.finished or c.slow) and c.visits and all(v.throttled for v in c.visits)
    ]
    for case in retry[: math.ceil(len(cases) / 4)]:
        start(case, len(case.visits))
        later_visit(cfg, states[case.backend], case, bench, timer)
        report(case)
    for case in cases:
        case.prepared = None
    bench.finish()
    if bench.reference is not None:
        for case in cases:
            for v in case.visits:
                v.machine_speed = speed_of(v, bench.reference)
        on_records([(c.index, case_record(c, peak_of(c))) for c in cases if c.visits])

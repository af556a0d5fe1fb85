"""The sweep's driver: expand (shape x pass x dtype x backend) into cases, resolve the peaks, order the
interleaved rounds and drive each case's visits (sweep/visits.py: decide, verify, time, Result)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from opbench import kernels, sampling
from opbench import peak as peaks
from opbench.backends import accelerator_name
from opbench.case import Result
from opbench.contention import Monitor
from opbench.documents import BackendSummary, PeakDict, PeakEntry, PeakTable
from opbench.dtypes import Inputs
from opbench.gpu import smi_name
from opbench.guards import peer_guard
from opbench.machine import allowed_cpus
from opbench.measure import Bench, rate
from opbench.overhead import DTYPE, CallOverhead, tiny_shape
from opbench.record_blocks import SensitivityBlock
from opbench.reference import InRunReference
from opbench.repro import sweep_command
from opbench.sweep.caseresult import case_result
from opbench.sweep.caserun import CaseRun
from opbench.sweep.config import BackendState, SweepConfig, processes
from opbench.sweep.verification import Expected
from opbench.sweep.visits import (
    SpeedHistory,
    case_factors,
    decide,
    first_visit,
    host_flush_bytes,
    later_visit,
    make_case,
)
from opbench.timing import Timer, TimerConfig

# The fewest samples one round of a case takes (round_timer); the record's statistics use every round's.
ROUND_MIN_SAMPLES = 2
# Prepared cases (inputs in the backend's tensors, traced functions) are kept between rounds up to this
# many bytes in all (and a quarter of --max-memory): preparing again each round costs more than the
# sampling in conv and LSTM sweeps (TensorFlow traces, Keras layers, MindSpore cells).
KEEP_PREPARED_BYTES = 1 << 30


def backend_summary(
    states: dict[str, BackendState], overheads: dict[str, CallOverhead] | None = None
) -> dict[str, BackendSummary]:
    """Per backend: available or why not, its version, the worker processes its cases ran in (each one's
    randomized layout: layout.py) or why they ran in this process, and one user's call of the op on a tiny
    case (`overheads`: call_overheads)."""
    out: dict[str, BackendSummary] = {}
    for name, st in states.items():
        out[name] = {"available": st.reason is None, "reason": st.reason, "version": st.version}
        if processes(st):
            out[name]["processes"] = st.backend.layouts()  # type: ignore[attr-defined]
        if st.in_process:
            out[name]["in_process"] = st.in_process
        if overheads and name in overheads:
            o = overheads[name]
            out[name]["call_overhead_s"] = o["seconds"]
            out[name]["call_overhead_case"] = o["case"]
            out[name]["call_overhead_call"] = o["call"]
    return out


def call_overheads(cfg: SweepConfig, states: dict[str, BackendState]) -> dict[str, CallOverhead]:
    """Per available backend: one user's call of the sweep's op (its forward pass) on the op's tiny case,
    timed where its cases run (Backend.call_overhead, overhead.py), with the run's options for it."""
    out: dict[str, CallOverhead] = {}
    op = cfg.op.name
    for name in cfg.backends:
        st = states[name]
        shape = tiny_shape(op)
        if st.reason is not None or shape is None:
            continue
        params = st.backend.case_params(cfg.backend_options.get(name, {}), op, shape, DTYPE, cfg.threads)
        out[name] = st.backend.call_overhead(op, params)
    return out


def resolve_peaks(dtypes: tuple[str, ...], threads: int, device: str, backends: tuple[str, ...]) -> PeakTable:
    """Per dtype: the peak used for utilization (measured on CPU) and the datasheet estimate beside it. An
    accelerator is named by the sweep's own `backends` that can name one (torch, TensorFlow), else by
    nvidia-smi: a sweep of MindSpore alone never imports the other two to learn it."""
    out: PeakTable = {}
    name = accelerator_name(device, backends) or smi_name(device) if device != "cpu" else None
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
    groups: list[list[int]], rounds: int, seed: int, owners: list[str] | None = None, paired: bool = False
) -> list[list[int]]:
    """The case indices each round visits. `groups` are the cases of each (shape, dtype) in sweep order;
    `owners[i]` the backend of case i. Round 1 keeps each group's backends together (their float64
    reference is computed once) but shuffles the order of the groups and of the backends within each.
    Later rounds visit one backend's cases after another's, both orders shuffled per round: a switch of
    framework costs a wait for the previous one's pool to go quiet (measure.Bench), and a round that
    switched at every visit spent more time waiting than sampling. Without `owners`, later rounds shuffle
    every case. `paired`: every round is ordered as round 1 (each group's backends back to back, in a
    shuffled order: A/B runs). Seeded. A single round keeps the sweep order (small shapes first predict the
    time of large ones)."""
    if rounds == 1:
        return [[i for g in groups for i in g]]  # one visit per case: the sweep's own order
    order: list[list[int]] = []
    flat = [i for g in groups for i in g]
    blocks: dict[str, list[int]] = {}
    for i in flat:
        blocks.setdefault(owners[i] if owners else str(i), []).append(i)
    for r in range(rounds):
        rng = random.Random(f"opbench-rounds/{seed}/{r}")
        if r == 0 or paired:
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


def factor_levels(cfg: SweepConfig) -> dict[str, list[Any]]:
    """Every level of every axis the sweep covers (before --scale), for the results header."""
    levels: dict[str, list[Any]] = {}
    for shape in cfg.shapes:
        for axis, value in case_factors(cfg, shape).items():
            if value not in levels.setdefault(axis, []):
                levels[axis].append(value)
    return {
        axis: sorted(values, key=str) if any(isinstance(v, str) for v in values) else sorted(values)
        for axis, values in levels.items()
    }


def make_reference(cfg: SweepConfig) -> InRunReference | None:
    """The in-run FMA/triad reference of a sweep on the CPU; None on an accelerator (no CPU probe there)."""
    return InRunReference(cfg.threads, load_best=peaks.best_probe) if cfg.device == "cpu" else None


def make_bench(cfg: SweepConfig, cpus: list[int], reference: InRunReference | None = None) -> Bench:
    """The sweep's Bench: the in-run FMA/triad reference on CPU (`reference`, else a new one; none on an
    accelerator), contention watched on the CPUs this process runs on, caches flushed before each sample
    with --cold-cache."""
    flush = None
    if cfg.timer.cold_cache:
        flush_bytes = host_flush_bytes()

        def flush() -> None:
            kernels.flush_cache(flush_bytes)

    ref = (reference or make_reference(cfg)) if cfg.device == "cpu" else None
    return Bench(Timer(cfg.timer, flush=flush), ref, Monitor(cpus))


def run_sweep(
    cfg: SweepConfig,
    states: dict[str, BackendState],
    peak_table: PeakTable,
    on_records: Callable[[list[tuple[int, Result]]], None],
    on_case_start: Callable[[str], None] | None = None,
    history: SpeedHistory | None = None,
    bench: Bench | None = None,
) -> None:
    """Visit every case cfg.rounds times in interleaved, shuffled rounds (visit_order), then once more
    for a case whose every round ran on a throttled machine (at most a quarter of the cases). After every
    visit the case's Result is reported as [(index, result)] (index in sweep order: shape, dtype,
    backend), so the caller can keep files up to date; when all rounds are done, machine_speed is
    recomputed against the best probe of the whole run and every result reported again in one batch."""
    history = history or SpeedHistory()
    bench = bench or make_bench(cfg, allowed_cpus())
    timer = Timer(round_timer(cfg.timer, cfg.rounds), flush=bench.timer.flush)
    cases: list[CaseRun] = []
    groups: list[list[int]] = []
    for i, shape in enumerate(cfg.shapes):
        for pass_name in cfg.passes:
            for dtype in cfg.dtypes:
                group = []
                for name in cfg.backends:
                    group.append(len(cases))
                    cases.append(
                        CaseRun(len(cases), i, make_case(cfg, shape, dtype, states[name].backend, pass_name))
                    )
                groups.append(group)

    def peak_of(case: CaseRun) -> PeakDict | None:
        return peak_table.get(case.dtype, PeakEntry()).get("used")

    def report(case: CaseRun) -> None:
        on_records([(case.index, case_result(case, peak_of(case)))])

    def start(case: CaseRun, r: int) -> None:
        if on_case_start:
            suffix = f" (round {r + 1}/{cfg.rounds})" if cfg.rounds > 1 else ""
            on_case_start(f"{cfg.op.name} {case.case.label} {case.dtype} {case.backend}{suffix}")

    order = visit_order(groups, cfg.rounds, cfg.seed, [c.backend for c in cases], cfg.paired)
    keep_budget = KEEP_PREPARED_BYTES if cfg.rounds > 1 else 0
    if cfg.max_memory_bytes is not None:
        keep_budget = min(keep_budget, cfg.max_memory_bytes // 4)
    # Round 1, a (shape, pass, dtype) group at a time: inputs and the float64 reference made once per group.
    group_of = {i: g for g in groups for i in g}
    prepared_group: tuple[int, Inputs, Expected | None] | None = None
    for index in order[0]:
        case = cases[index]
        op = case.case.op
        start(case, 0)
        st = states[case.backend]
        will_verify = cfg.verify and op.verify_cost_flops(case.shape) <= cfg.verify_max_gflop * 1e9
        outcome = decide(
            cfg, st, case, op.memory_bytes(case.shape, case.dtype, reference=will_verify), history
        )
        if not outcome.ok:
            case.end(outcome)
            case.repro = sweep_command(case.case, cfg, case.shape_index, st.backend, {})
            report(case)
            continue
        gid = group_of[index][0]
        if prepared_group is None or prepared_group[0] != gid:
            prepared_group = None  # free the previous group's inputs and reference first
            inputs = op.make_inputs(case.shape, case.dtype, cfg.seed + case.shape_index)
            expected = Expected(op, case.shape, inputs, case.dtype) if will_verify else None
            prepared_group = (gid, inputs, expected)
        _, inputs, expected = prepared_group
        size = op.memory_bytes(case.shape, case.dtype, reference=False)
        kept_bytes = size * max(1, processes(st))  # a copy in each process
        first_visit(cfg, st, case, inputs, expected, bench, timer, history, kept_bytes <= keep_budget)
        case.repro = sweep_command(case.case, cfg, case.shape_index, st.backend, case.details)
        if case.keep:
            keep_budget -= kept_bytes
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
    # A case whose every round ran on a throttled machine (or with our CPUs apart) is measured once more
    # (bounded).
    retry = [c for c in cases if not (c.finished or c.slow) and c.visits and all(v.slowed for v in c.visits)]
    for case in retry[: math.ceil(len(cases) / 4)]:
        start(case, len(case.visits))
        later_visit(cfg, states[case.backend], case, bench, timer)
        report(case)
    for case in cases:
        case.prepared = {}
    bench.finish()
    if bench.reference is not None:
        for case in cases:
            for v in case.visits:
                rate(v, bench.reference)
    # Every result again, with the backends compared case by case (peer_guard: too fast to be true), and
    # each utilization corrected by how far its backend's cases followed the in-run probe.
    timed = [c for c in cases if c.visits]
    follows = sensitivities(timed)
    results = peer_guard([case_result(c, peak_of(c), follows.get(_group(c))) for c in timed])
    on_records([(c.index, r) for c, r in zip(timed, results, strict=True)])


def _group(case: CaseRun) -> tuple[str, str, str]:
    return (case.backend, case.case.key, case.dtype)


def sensitivities(cases: list[CaseRun]) -> dict[tuple[str, str, str], SensitivityBlock]:
    """How far the speed of each (backend, op, dtype)'s cases followed the machine's speed index (the FMA
    and cache probes, measure.Visit.speed_index) across their visits (sampling.sensitivity, pooled over the
    group's cases, each relative to its own mean)."""
    points: dict[tuple[str, str, str], list[tuple[float, float, str]]] = {}
    for c in cases:
        for v in c.visits:
            if (index := v.speed_index) is not None:
                points.setdefault(_group(c), []).append((index, v.measurement.median_s, str(c.index)))
    return {
        g: {**sampling.sensitivity(p), "over": f"{len({x[2] for x in p})} cases of {' '.join(g)}"}
        for g, p in points.items()
    }

"""The nested blocks of a result record and the results header's environment block. Each block's record
layout (the file's own JSON, schema v10) is a TypedDict, so that mypy checks every key written or read.
What a Result holds (Time, Peak, Reference, Verify, Guards, Details) and a sweep's Environment are small
frozen dataclasses: to_block gives the layout (case.Result.to_record), from_block reads one back from any
readable file, a field of the wrong type as absent (case.Result.from_record). They are built by the
measurement path (time, reference, contention) and the sweep (peak, verify, guards); Details keeps the
backend's own names for what it ran with."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import TypedDict, TypeVar, cast

_T = TypeVar("_T")


def _number(value: object) -> float | None:
    """A finite number read from a record; None for anything else (a bool, a string, NaN)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _of(value: object, kind: type[_T]) -> _T | None:
    """`value` if it is a `kind` (a bool is no int), else None: a record's field read back."""
    return value if isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool) else None


class MeasurementBlock(TypedDict, total=False):
    """One set of timed samples (measurement.Measurement.to_dict)."""

    n_samples: int
    loops: int
    median_s: float
    iqr_s: float
    min_s: float
    mean_s: float
    std_s: float
    rel_iqr: float
    stability: str
    single_sample: bool
    cold_cache: bool
    first_call: bool
    samples_s: list[float]


class WindowBlock(TypedDict, total=False):
    """Contention over one window (a visit, or the whole run): other processes' and steal's share of our
    CPUs, and whether that contended (contention.shares); `available` False where /proc could not say."""

    available: bool
    wall_s: float
    others_cpu_s: float
    others_share: float
    steal_share: float
    contended: bool
    cpu_mhz: float | None


class SnapshotBlock(TypedDict, total=False):
    """The machine at one moment: our CPUs, load average, run queue, frequency, governor."""

    cpus: list[int]
    loadavg: list[float] | None
    procs_running: int
    cpu_mhz: float | None
    governor: str | None


class ProcessUseBlock(TypedDict):
    """Another process's CPU time during the run."""

    pid: int
    name: str
    cpu_s: float


class EnvironmentBlock(TypedDict, total=False):
    """A results file's environment block: snapshots at the start and end, the run's contention, the
    busiest other processes, the in-run reference's summary and the run's warnings."""

    start: SnapshotBlock
    end: SnapshotBlock
    warnings: list[str]
    run: WindowBlock
    other_processes: list[ProcessUseBlock]
    reference: ReferenceSummary


@dataclass(frozen=True, kw_only=True)
class Environment:
    """A sweep's environment (contention.Monitor.finish, with runs.py's warnings and the in-run
    reference's summary): the machine at the start and at the end, the run's warnings, the run's
    contention, the busiest other processes and the in-run reference over the run."""

    start: SnapshotBlock
    end: SnapshotBlock
    warnings: tuple[str, ...] = ()
    run: WindowBlock | None = None  # None where /proc could not say
    other_processes: tuple[ProcessUseBlock, ...] = ()
    reference: ReferenceSummary | None = None  # None without probes (a GPU)

    def to_block(self) -> EnvironmentBlock:
        out: EnvironmentBlock = {"start": self.start, "end": self.end, "warnings": list(self.warnings)}
        if self.run is not None:
            out["run"] = self.run
        out["other_processes"] = list(self.other_processes)
        if self.reference is not None:
            out["reference"] = self.reference
        return out

    def warned(self, *warnings: str) -> Environment:
        """This environment with more warnings."""
        return replace(self, warnings=(*self.warnings, *warnings))


class ProbeBlock(TypedDict):
    """One in-run reference probe beside a visit (reference.Probe.to_dict): its value, how long before or
    after the visit it was taken, and whether an earlier probe's value was reused."""

    value: float
    age_s: float
    reused: bool


class ReferenceSummary(TypedDict):
    """The in-run reference over a whole run (reference.InRunReference.summary): its probes and their cost,
    the best values known and seen, and how each probe is taken."""

    probes: int
    reused: int
    probe_s: float
    share_of_run: float | None
    best: dict[str, float]
    best_this_run: dict[str, float]
    throttled_below: float
    fma_probe: str
    cache_probe: str
    triad_probe: str
    handoff_probe: str | None
    apart_above: float
    handoff_apart: dict[str, int]


class RoundBlock(TypedDict, total=False):
    """One visit of a case (measure.Visit.to_dict), and whether the combined time kept it."""

    n_samples: int
    loops: int
    median_s: float
    rel_iqr: float
    fma_gflops: float | None
    cache_gbs: float | None
    triad_gbs: float | None
    machine_speed: float | None
    speed_index: float | None
    throttled: bool
    handoff_ns: float | None
    apart: bool
    probes: dict[str, dict[str, ProbeBlock]]  # "before" and "after" the visit, by probe key
    settle_s: float
    contention: WindowBlock | None
    process: int
    offsets: dict[str, int]
    kept: bool


class ProcessBlock(TypedDict):
    """One worker process's share of a case's rounds (--processes; sampling.by_process)."""

    process: int
    median_s: float
    rounds: int
    n_samples: int
    rel_spread: float


class CombinedBlock(TypedDict, total=False):
    """What measure.combine adds to the kept rounds' samples: how the rounds and processes agree, and how
    the case was timed (`method`)."""

    rounds: int
    rel_iqr_within: float
    rel_spread_rounds: float
    dropped_rounds: int
    per_round: list[RoundBlock]
    settle_s: float
    interval_s: list[float]
    interval_over: str
    processes: int
    per_process: list[ProcessBlock]
    between_processes: float
    method: str


class TimeBlock(MeasurementBlock, CombinedBlock):
    """A case's time: the samples of its kept rounds (MeasurementBlock) and how they were combined."""


def _numbers(value: object) -> tuple[float, ...] | None:
    """A list of finite numbers read from a record; None for anything else."""
    if not isinstance(value, list):
        return None
    out = [_number(v) for v in value]
    return None if any(v is None for v in out) else tuple(cast(list[float], out))


def _tables(value: object) -> tuple[dict[str, object], ...] | None:
    """A list of objects (a time block's rounds or processes) read from a record; None for anything else."""
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        return None
    return tuple(value)


@dataclass(frozen=True, kw_only=True)
class Time:
    """A case's time: the samples of its kept rounds (measurement.Measurement), how the rounds and processes
    were combined (measure.combine: rounds, spreads, each visit in per_round, the interval of the median
    over processes or rounds, each process in per_process) and how the case was timed (`method`). Fields a
    record lacks (files before a schema gave them, or a block built from a median alone) are None."""

    n_samples: int | None = None
    loops: int | None = None
    median_s: float
    iqr_s: float | None = None
    min_s: float | None = None
    mean_s: float | None = None
    std_s: float | None = None
    rel_iqr: float | None = None
    stability: str | None = None
    single_sample: bool | None = None
    cold_cache: bool | None = None
    first_call: bool | None = None
    samples_s: tuple[float, ...] | None = None
    rounds: int | None = None
    rel_iqr_within: float | None = None
    rel_spread_rounds: float | None = None
    dropped_rounds: int | None = None
    per_round: tuple[RoundBlock, ...] | None = None
    settle_s: float | None = None
    interval_s: tuple[float, ...] | None = None
    interval_over: str | None = None
    processes: int | None = None
    per_process: tuple[ProcessBlock, ...] | None = None
    between_processes: float | None = None
    method: str | None = None

    def to_block(self) -> TimeBlock:
        """The record's block: every field it has, in the layout's order (lists for tuples)."""
        out: dict[str, object] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return cast(TimeBlock, out)

    @classmethod
    def of(cls, block: TimeBlock) -> Time:
        """A time block this version wrote (measure.combine), as it is."""
        tuples = {"samples_s", "interval_s", "per_round", "per_process"}
        return cls(**{k: tuple(v) if k in tuples else v for k, v in block.items()})  # type: ignore[arg-type]

    @classmethod
    def from_block(cls, block: object) -> Time | None:
        """A record's time block; None where there is none or it has no median. A field of the wrong type
        reads as absent."""
        if not isinstance(block, dict) or (median := _number(block.get("median_s"))) is None:
            return None
        get = block.get
        return cls(
            n_samples=_of(get("n_samples"), int),
            loops=_of(get("loops"), int),
            median_s=median,
            iqr_s=_number(get("iqr_s")),
            min_s=_number(get("min_s")),
            mean_s=_number(get("mean_s")),
            std_s=_number(get("std_s")),
            rel_iqr=_number(get("rel_iqr")),
            stability=_of(get("stability"), str),
            single_sample=_of(get("single_sample"), bool),
            cold_cache=_of(get("cold_cache"), bool),
            first_call=_of(get("first_call"), bool),
            samples_s=_numbers(get("samples_s")),
            rounds=_of(get("rounds"), int),
            rel_iqr_within=_number(get("rel_iqr_within")),
            rel_spread_rounds=_number(get("rel_spread_rounds")),
            dropped_rounds=_of(get("dropped_rounds"), int),
            per_round=cast("tuple[RoundBlock, ...] | None", _tables(get("per_round"))),
            settle_s=_number(get("settle_s")),
            interval_s=_numbers(get("interval_s")),
            interval_over=_of(get("interval_over"), str),
            processes=_of(get("processes"), int),
            per_process=cast("tuple[ProcessBlock, ...] | None", _tables(get("per_process"))),
            between_processes=_number(get("between_processes")),
            method=_of(get("method"), str),
        )


class SensitivityBlock(TypedDict, total=False):
    """How far a group's speed follows the machine's speed index (sampling.sensitivity): the slope
    `estimate` with its standard error, the `value` used (shrunk towards the prior, clipped to [0, 1]),
    over how many visits and cases."""

    value: float | None
    estimate: float | None
    se: float | None
    weight: float
    visits: int
    probe_spread: float
    prior: float
    over: str
    used: float


class ReferenceBlock(TypedDict, total=False):
    """The in-run reference beside a case: its probes' medians over the kept rounds and how its
    utilization was corrected (caseresult.corrected_peak)."""

    basis: str | None
    fma_gflops: float | None
    triad_gbs: float | None
    handoff_ns: float | None
    fma_speed: float | None
    cache_gbs: float | None
    cache_speed: float | None
    speed_index: float | None
    fma_best_gflops: float
    sensitivity: SensitivityBlock
    utilization_beside: float
    utilization_best: float


@dataclass(frozen=True, kw_only=True)
class Sensitivity:
    """How far a group's speed follows the machine's speed index (sampling.sensitivity, in a Reference):
    the slope `estimate` with its standard error, the `value` used (shrunk towards the prior, clipped to
    [0, 1]), over how many visits and cases, and the exponent a case's rounds were corrected with (`used`).
    A case timed before the run's end has only value (None), visits (0), over and used (prior is None)."""

    value: float | None = None
    estimate: float | None = None
    se: float | None = None
    weight: float | None = None
    visits: int | None = None
    probe_spread: float | None = None
    prior: float | None = None
    over: str | None = None
    used: float | None = None

    def to_block(self) -> SensitivityBlock:
        out: SensitivityBlock = {"value": self.value}
        if self.prior is not None:
            out["estimate"], out["se"] = self.estimate, self.se
            if self.weight is not None:
                out["weight"] = self.weight
        if self.visits is not None:
            out["visits"] = self.visits
        if self.prior is not None:
            if self.probe_spread is not None:
                out["probe_spread"] = self.probe_spread
            out["prior"] = self.prior
        if self.over is not None:
            out["over"] = self.over
        if self.used is not None:
            out["used"] = self.used
        return out

    @classmethod
    def from_block(cls, block: object) -> Sensitivity | None:
        if not isinstance(block, dict):
            return None
        get = block.get
        return cls(
            value=_number(get("value")),
            estimate=_number(get("estimate")),
            se=_number(get("se")),
            weight=_number(get("weight")),
            visits=_of(get("visits"), int),
            probe_spread=_number(get("probe_spread")),
            prior=_number(get("prior")),
            over=_of(get("over"), str),
            used=_number(get("used")),
        )


# The in-run reference's measured fields, which a record carries whenever it has one (null where no probe
# of that kind was taken).
_MEASURED = ("basis", "fma_gflops", "triad_gbs", "handoff_ns", "fma_speed", "cache_gbs", "cache_speed",
             "speed_index")  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Reference:
    """The in-run reference beside a case (measure.combine): what the utilization is against (`basis`: the
    FMA probe, or triad for a memory-bound case), its probes' medians over the kept rounds and their speeds
    against the machine's best; where the utilization was corrected by the probe beside each round
    (caseresult.corrected_peak), the best FMA probe and the sensitivity used, and the utilization against
    the probe beside the case and against the best."""

    basis: str | None = None
    fma_gflops: float | None = None
    triad_gbs: float | None = None
    handoff_ns: float | None = None
    fma_speed: float | None = None
    cache_gbs: float | None = None
    cache_speed: float | None = None
    speed_index: float | None = None
    fma_best_gflops: float | None = None
    sensitivity: Sensitivity | None = None
    utilization_beside: float | None = None
    utilization_best: float | None = None

    def to_block(self) -> ReferenceBlock:
        out = cast(ReferenceBlock, {k: getattr(self, k) for k in _MEASURED})
        if self.fma_best_gflops is not None:
            out["fma_best_gflops"] = self.fma_best_gflops
            if self.sensitivity is not None:
                out["sensitivity"] = self.sensitivity.to_block()
        if self.utilization_beside is not None:
            out["utilization_beside"] = self.utilization_beside
            if self.utilization_best is not None:
                out["utilization_best"] = self.utilization_best
        return out

    @classmethod
    def from_block(cls, block: object) -> Reference | None:
        """A record's reference block (or measure.combine's, with caseresult's corrections); None where
        there is none. A field of the wrong type reads as absent."""
        if not isinstance(block, dict):
            return None
        get = block.get
        return cls(
            basis=_of(get("basis"), str),
            fma_gflops=_number(get("fma_gflops")),
            triad_gbs=_number(get("triad_gbs")),
            handoff_ns=_number(get("handoff_ns")),
            fma_speed=_number(get("fma_speed")),
            cache_gbs=_number(get("cache_gbs")),
            cache_speed=_number(get("cache_speed")),
            speed_index=_number(get("speed_index")),
            fma_best_gflops=_number(get("fma_best_gflops")),
            sensitivity=Sensitivity.from_block(get("sensitivity")),
            utilization_beside=_number(get("utilization_beside")),
            utilization_best=_number(get("utilization_best")),
        )


class PeakBlock(TypedDict):
    """A record's peak block (Peak.to_block)."""

    gflops: float
    source: str
    name: str


@dataclass(frozen=True)
class Peak:
    """The peak a case's utilization is against: its GFLOPS, where it came from (in-run, a cached
    measurement, a datasheet) and its name."""

    gflops: float
    source: str
    name: str

    def to_block(self) -> PeakBlock:
        return {"gflops": self.gflops, "source": self.source, "name": self.name}

    @classmethod
    def from_block(cls, block: object) -> Peak | None:
        """A record's peak block; None where there is none or it is not one (a positive finite number and
        two strings)."""
        if not isinstance(block, dict):
            return None
        gflops, source, name = (
            _number(block.get("gflops")),
            _of(block.get("source"), str),
            _of(block.get("name"), str),
        )
        if gflops is None or gflops <= 0 or source is None or name is None:
            return None
        return cls(gflops, source, name)


class TimedCheckBlock(TypedDict, total=False):
    """The check of one visit's timed output (sweep/caserun.TimedCheck)."""

    round: int
    ok: bool
    max_err_ratio: float | None
    inputs: str
    checked: str | None
    reason: str
    skipped: str


class VerifyBlock(TypedDict, total=False):
    """The float64 check of a case's first call (ops.numerics.compare and the assumption it was checked
    under), or why it was skipped, and the checks of its timed calls."""

    ok: bool
    reason: str
    max_err_ratio: float | None
    max_rel_err: float | None
    worst: str
    accumulate_assumed: str
    skipped: str
    timed: list[TimedCheckBlock]


class GuardsBlock(TypedDict, total=False):
    """A record's guards block (Guards.to_block)."""

    zero_fraction: float | None
    expected_zero_fraction: float
    useful_flops: int
    useful_gflops: float | None
    reasons: list[str]
    peer: str
    peer_speedup: float | None


@dataclass(frozen=True)
class Guards:
    """What the too-good-to-be-true checks saw (guards.py): the share of exact zeros in the first output
    against the share the inputs give (counted after the first call: expected_zero_fraction is None until
    then, and zero_fraction is None for an output that holds no array); the necessary work's FLOPs and
    GFLOPS (against a peak); the reasons they give (None before the case was timed); the best other backend
    on the case and how many times faster this one is."""

    zero_fraction: float | None = None
    expected_zero_fraction: float | None = None
    useful_flops: int | None = None
    useful_gflops: float | None = None
    reasons: tuple[str, ...] | None = None
    peer: str | None = None
    peer_speedup: float | None = None

    def to_block(self) -> GuardsBlock:
        """The record's block: each check's keys where it ran."""
        out: GuardsBlock = {}
        if self.expected_zero_fraction is not None:
            out["zero_fraction"] = self.zero_fraction
            out["expected_zero_fraction"] = self.expected_zero_fraction
        if self.useful_flops is not None:
            out["useful_flops"] = self.useful_flops
            out["useful_gflops"] = self.useful_gflops
        if self.reasons is not None:
            out["reasons"] = list(self.reasons)
        if self.peer is not None:
            out["peer"] = self.peer
            out["peer_speedup"] = self.peer_speedup
        return out

    @classmethod
    def from_block(cls, block: object) -> Guards | None:
        """A record's guards block; None where there is none. A field of the wrong type reads as absent."""
        if not isinstance(block, dict):
            return None
        reasons = block.get("reasons")
        return cls(
            zero_fraction=_number(block.get("zero_fraction")),
            expected_zero_fraction=_number(block.get("expected_zero_fraction")),
            useful_flops=_of(block.get("useful_flops"), int),
            useful_gflops=_number(block.get("useful_gflops")),
            reasons=tuple(r for r in reasons if isinstance(r, str)) if isinstance(reasons, list) else None,
            peer=_of(block.get("peer"), str),
            peer_speedup=_number(block.get("peer_speedup")),
        )


@dataclass(frozen=True)
class TimedCheck:
    """One visit's check of the output of its timed calls (sweep/verification.py check_timed): skipped (why),
    or whether it was right, its largest error against the bound, on which values (`inputs`), what was
    recomputed (`checked`: the op's spot part) and why it is wrong."""

    round: int
    skipped: str | None = None  # over --verify-max-gflop: not checked
    ok: bool | None = None
    max_err_ratio: float | None = None
    inputs: str | None = None  # new values, or the first ones where the backend cannot rewrite them
    checked: str | None = None
    reason: str | None = None

    def to_block(self) -> TimedCheckBlock:
        return cast(
            TimedCheckBlock, {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}
        )

    @classmethod
    def from_block(cls, block: object) -> TimedCheck | None:
        """A record's check of one visit; None where it is not one (no round number)."""
        if not isinstance(block, dict) or (round_ := _of(block.get("round"), int)) is None:
            return None
        get = block.get
        return cls(
            round_,
            skipped=_of(get("skipped"), str),
            ok=_of(get("ok"), bool),
            max_err_ratio=_number(get("max_err_ratio")),
            inputs=_of(get("inputs"), str),
            checked=_of(get("checked"), str),
            reason=_of(get("reason"), str),
        )


@dataclass(frozen=True, kw_only=True)
class Verify:
    """The float64 check of a case's first call (ops.numerics.compare: whether it passed, why not, its
    largest error against the bound and relative to the largest reference value, which output, and what
    its sums were assumed to be in), or why it was skipped; and the checks of its timed calls."""

    ok: bool | None = None  # None: the first call was not checked (`skipped` says why)
    reason: str | None = None
    max_err_ratio: float | None = None  # None where the output could not be compared (reason)
    max_rel_err: float | None = None
    worst: str | None = None
    accumulate_assumed: str | None = None
    skipped: str | None = None
    timed: tuple[TimedCheck, ...] | None = None

    @classmethod
    def checked(cls, result: VerifyBlock, accumulate: str) -> Verify:
        """A check's answer (Op.check) under the assumption it was made with."""
        return cls(
            ok=bool(result["ok"]),
            reason=result.get("reason"),
            max_err_ratio=result.get("max_err_ratio"),
            max_rel_err=result.get("max_rel_err"),
            worst=result.get("worst"),
            accumulate_assumed=accumulate,
        )

    def to_block(self) -> VerifyBlock:
        """The record's block: a checked first call's errors (null where they could not be taken) and the
        fields it has, in the layout's order."""
        out: VerifyBlock = {}
        if self.ok is not None:
            out["ok"] = self.ok
        if self.reason is not None:
            out["reason"] = self.reason
        if self.ok is not None:
            out["max_err_ratio"] = self.max_err_ratio
            out["max_rel_err"] = self.max_rel_err
        if self.worst is not None:
            out["worst"] = self.worst
        if self.accumulate_assumed is not None:
            out["accumulate_assumed"] = self.accumulate_assumed
        if self.skipped is not None:
            out["skipped"] = self.skipped
        if self.timed is not None:
            out["timed"] = [t.to_block() for t in self.timed]
        return out

    @classmethod
    def from_block(cls, block: object) -> Verify | None:
        """A record's verify block; None where there is none. A field of the wrong type reads as absent."""
        if not isinstance(block, dict):
            return None
        get, timed = block.get, block.get("timed")
        return cls(
            ok=_of(get("ok"), bool),
            reason=_of(get("reason"), str),
            max_err_ratio=_number(get("max_err_ratio")),
            max_rel_err=_number(get("max_rel_err")),
            worst=_of(get("worst"), str),
            accumulate_assumed=_of(get("accumulate_assumed"), str),
            skipped=_of(get("skipped"), str),
            timed=tuple(t for x in timed if (t := TimedCheck.from_block(x)))
            if isinstance(timed, list)
            else None,
        )


@dataclass(frozen=True)
class Details:
    """What a backend says a case ran with, by its own names (a plug-in's as well as ours), in the order it
    gave them: frozen when the case's Result is made, so that nothing the sweep does later changes it.
    Values are the backend's (numbers, strings, tables of them)."""

    items: tuple[tuple[str, object], ...] = ()

    @classmethod
    def of(cls, mapping: object) -> Details:
        """A backend's details (or a record's block; anything but a table reads as none)."""
        return cls(tuple((str(k), v) for k, v in mapping.items())) if isinstance(mapping, dict) else cls()

    def to_block(self) -> dict[str, object]:
        return dict(self.items)

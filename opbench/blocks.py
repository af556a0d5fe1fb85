"""The nested blocks of a result (Time, Peak, Reference, Verify, Guards, Details) and a sweep's
Environment: small frozen dataclasses. to_block gives a block's record layout (record_blocks.py:
case.Result.to_record); from_block reads one back from any readable file, a field of the wrong type as
absent (case.Result.from_record). They are built by the measurement path (time, reference, contention)
and the sweep (peak, verify, guards); Details keeps the backend's own names for what it ran with."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields, replace
from typing import TYPE_CHECKING, TypeVar, cast

from opbench.record_blocks import (
    EnvironmentBlock,
    GuardsBlock,
    PeakBlock,
    ProcessBlock,
    ProcessUseBlock,
    ReferenceBlock,
    ReferenceSummary,
    RoundBlock,
    SensitivityBlock,
    SnapshotBlock,
    TimeBlock,
    TimedCheckBlock,
    VerifyBlock,
    WindowBlock,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_T = TypeVar("_T")
_B = TypeVar("_B")


def _number(value: object) -> float | None:
    """A finite number read from a record; None for anything else (a bool, a string, NaN)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _of(value: object, kind: type[_T]) -> _T | None:
    """`value` if it is a `kind` (a bool is no int), else None: a record's field read back."""
    return value if isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool) else None


def _numbers(value: object) -> tuple[float, ...] | None:
    """A list of finite numbers read from a record; None for anything else."""
    if not isinstance(value, list):
        return None
    out = [_number(v) for v in value]
    return None if any(v is None for v in out) else tuple(cast(list[float], out))


def _tables(value: object) -> tuple[dict[str, object], ...] | None:
    """A list of objects (a time block's rounds or processes) read from a record; None for anything else."""
    return tuple(value) if isinstance(value, list) and all(isinstance(v, dict) for v in value) else None


def _texts(value: object) -> tuple[str, ...] | None:
    """A list's strings (a guard's reasons); None for anything but a list."""
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else None


def _checks(value: object) -> tuple[TimedCheck, ...] | None:
    """A list's readable timed checks; None for anything but a list."""
    return tuple(c for v in value if (c := TimedCheck.from_block(v))) if isinstance(value, list) else None


# How a block's field is read back from a record, by its annotation (without "| None"): a value of another
# type reads as absent.
_READERS: dict[str, Callable[[object], object]] = {
    "float": _number,
    "int": lambda v: _of(v, int),
    "str": lambda v: _of(v, str),
    "bool": lambda v: _of(v, bool),
    "tuple[float, ...]": _numbers,
    "tuple[str, ...]": _texts,
    "tuple[RoundBlock, ...]": _tables,
    "tuple[ProcessBlock, ...]": _tables,
    "tuple[TimedCheck, ...]": _checks,
    "Sensitivity": lambda v: Sensitivity.from_block(v),
}


def _read(cls: Callable[..., _B], block: object) -> _B | None:
    """The block dataclass `cls` read from a record's block, field by field (_READERS: a value of another
    type reads as absent); None where the block is not a table or lacks a field `cls` requires."""
    if not isinstance(block, dict):
        return None
    kinds = {f.name: (f.type, f.default is MISSING) for f in fields(cast("type[DataclassInstance]", cls))}
    values = {
        name: _READERS[str(kind).removesuffix(" | None")](block.get(name))
        for name, (kind, _) in kinds.items()
    }
    if any(values[name] is None for name, (_, required) in kinds.items() if required):
        return None
    return cls(**values)


def _set_fields(block: DataclassInstance) -> dict[str, object]:
    """A block's fields that are set (not None), in declaration order, tuples as lists: the layout of a
    block whose absent fields are simply left out."""
    out: dict[str, object] = {}
    for f in fields(block):
        value = getattr(block, f.name)
        if value is not None:
            out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


class _Block:
    """What every block dataclass reads back by: from_block (_read)."""

    @classmethod
    def from_block(cls: type[_B], block: object) -> _B | None:
        """A record's block of this kind; None where there is none or it lacks a field the kind requires.
        A field of the wrong type reads as absent."""
        return _read(cls, block)


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


@dataclass(frozen=True, kw_only=True)
class Time(_Block):
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
        return cast(TimeBlock, _set_fields(self))

    @classmethod
    def of(cls, block: TimeBlock) -> Time:
        """A time block this version wrote (measure.combine), as it is."""
        tuples = {"samples_s", "interval_s", "per_round", "per_process"}
        return cls(**{k: tuple(v) if k in tuples else v for k, v in block.items()})  # type: ignore[arg-type]


@dataclass(frozen=True, kw_only=True)
class Sensitivity(_Block):
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


# The in-run reference's measured fields, which a record carries whenever it has one (null where no probe
# of that kind was taken).
_MEASURED = ("basis", "fma_gflops", "triad_gbs", "handoff_ns", "fma_speed", "cache_gbs", "cache_speed",
             "speed_index")  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Reference(_Block):
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
        peak = _read(cls, block)
        return peak if peak is not None and peak.gflops > 0 else None


@dataclass(frozen=True)
class Guards(_Block):
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


@dataclass(frozen=True)
class TimedCheck(_Block):
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
        return cast(TimedCheckBlock, _set_fields(self))


@dataclass(frozen=True, kw_only=True)
class Verify(_Block):
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

"""The record layout of each nested block of a result and of the results header's environment block: the
file's own JSON (schema v13), declared as TypedDicts so that mypy checks every key written or read. What a
Result holds is blocks.py's frozen dataclasses; each becomes its layout here (to_block) and is read back
from it (from_block). The measurement path computes in some of these layouts directly (measurement.py,
measure.combine, contention.py, sampling.py), and the record readers that work on raw files
(results.csv_row, history.py, display/) read them."""

from __future__ import annotations

from typing import TypedDict


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


class PeakBlock(TypedDict):
    """A record's peak block (Peak.to_block)."""

    gflops: float
    source: str
    name: str


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

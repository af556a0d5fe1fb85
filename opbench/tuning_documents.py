"""The tuner's documents, typed: what a tuning worker is sent and answers, what a study tells its caller
as it runs, its confirmation, the rows its history and the report show, and the tuned records file
(tuned.py). Each is the layout written (a study's user attributes, the records file), declared as a
TypedDict as documents.py declares the results file's."""

from __future__ import annotations

from typing import TypedDict

from opbench.documents import Identity, KernelRanOn, Params, Scalar, UserKernelDict
from opbench.record_blocks import MeasurementBlock, RoundBlock, VerifyBlock

# A timer's settings by TimerConfig field (tune/config.py's TRIAL_TIMER, CONFIRM_TIMER).
TimerDict = dict[str, float]


class WorkerInit(TypedDict):
    """The problem a tuning worker serves (its first line: tune/worker.py)."""

    op: str
    shape: dict[str, Scalar]
    dtype: str
    threads: int
    seed: int
    timer: TimerDict
    verify: bool
    kernel: UserKernelDict | None


class WorkerRequest(TypedDict, total=False):
    """One candidate to measure: our kernel's tiles and ISA, or a user kernel's parameters; the timer's
    settings that differ from the trials' (the confirmation's)."""

    tiles: Params | None
    isa: str
    params: Params
    timer: TimerDict


class TrialVerify(TypedDict, total=False):
    """A wrong answer of a trial's timed calls: their spot check (ops/spot.SpotResult) marked `timed`."""

    ok: bool
    reason: str
    max_err_ratio: float | None
    max_rel_err: float | None
    worst: str
    checked: str
    timed: bool


class WorkerAnswer(TypedDict, total=False):
    """A worker's answer: `ready` once started, then per request its status (a failure's reason), the
    time, the check, the machine's speed and flags, the round's probes and the tiles that ran."""

    ready: bool
    pid: int
    status: str
    reason: str
    time: MeasurementBlock
    verify: VerifyBlock | TrialVerify | None
    machine_speed: float | None
    flags: list[str]
    round: RoundBlock
    tiles: Params


class SpaceEvent(TypedDict, total=False):
    """A study's space as it starts ('space'), or that every valid point is measured ('exhausted')."""

    valid_points: int
    space_file: str
    params: dict[str, list[Scalar]]
    constraints: list[str]
    already: int


class TrialEvent(TypedDict, total=False):
    """A trial as it finishes: its tiles and GFLOPS (and error), its failure, or the trial it reused (with
    that trial's user attributes)."""

    number: int
    tiles: Params | None
    params: Params
    key: str
    gflops: float
    median_s: float
    rel_iqr: float
    machine_speed: float | None
    flags: list[str]
    max_rel_err: float | None
    max_err_ratio: float | None
    failure: str
    reused_from: int


class ConfirmationRow(TypedDict, total=False):
    """A candidate re-measured by the confirmation (or why it could not be)."""

    name: str
    tiles: Params | None
    failure: str
    n_samples: int
    median_s: float
    gflops: float
    gflops_ci: list[float]
    machine_speed: float | None
    flags: list[str]
    processes: int
    process_medians_s: list[float]


class Confirmation(TypedDict, total=False):
    """The top candidates and the baseline re-measured in interleaved rounds (tune/confirmation.confirm)."""

    rows: list[ConfirmationRow]
    best: ConfirmationRow | None
    default: ConfirmationRow
    baseline_name: str
    speedup: float


class ParetoRow(TypedDict):
    number: int
    tiles: Params | None
    gflops: float
    max_rel_err: float


class TuneSummary(TypedDict, total=False):
    """What `opbench tune` did (tune/study.run): the study, its points and trials, the accuracy/speed
    front or the confirmation, and the record saved (or why not)."""

    study: str
    storage: str
    valid_points: int
    measured_points: int
    trials: int
    pareto: list[ParetoRow]
    confirmation: Confirmation | None
    record_verdict: str | None
    record: str
    record_warning: str


class TrialRow(TypedDict, total=False):
    """One trial of a study, for the history table and the report (tune/study.trial_rows)."""

    number: int
    state: str
    tiles: Params | None
    gflops: float | None
    max_rel_err: float | None
    failure: str | None
    reused_from: int | None
    retry_of: int | None
    params: dict[str, int]


class StudyRow(TypedDict):
    """A study in a storage (tune/study.list_studies)."""

    name: str
    trials: int
    directions: list[str]
    shape: dict[str, Scalar] | None
    label: str | None
    dtype: str | None
    threads: int | None
    best_value: float | None
    best_tiles: Params | None
    started: str | None


class TunedMachine(KernelRanOn):
    """The machine a tuned records file belongs to (tuned.machine)."""

    identity: Identity


class TunedRecord(TypedDict, total=False):
    """A tuned tiling (tuned.py's records file): the problem, our kernel's tiles and ISA or a user kernel's
    parameters, the confirmed speed and speed-up, and where it came from."""

    op: str
    dtype: str
    shape: dict[str, int]
    threads: int
    tiles: dict[str, int | str]  # tile sizes and thresholds; conv_path a string
    isa: str
    user_kernel: dict[str, str]
    params: Params
    gflops: float
    gflops_ci: list[float]
    default_gflops: float | None
    speedup: float | None
    study: str
    portfolio: dict[str, str | int]  # name, member, members: a portfolio's member for this shape
    command: list[str]
    opbench_version: str
    created_utc: str


class StudyFingerprint(TypedDict, total=False):
    """What a study belongs to (tune/config.fingerprint): machine.fingerprint's keys, the problem, the
    objectives and the space searched; a user kernel's identity in place of our kernel's description."""

    machine: Identity
    cpu_model: str
    logical_cpus: int
    isa: str
    kernel: str | dict[str, str | None]
    opbench_version: str
    threads: int
    op: str
    shape: dict[str, Scalar]
    dtype: str
    objectives: list[str]
    space: dict[str, list[Scalar]]


class StudyDoc(TypedDict):
    """A tuning study as plain data (report/inputs.load_studies): its fingerprint, trials and confirmation."""

    name: str
    fingerprint: StudyFingerprint
    valid_points: int | None
    confirmation: Confirmation | None
    directions: list[str]
    trials: list[TrialRow]
    importances: dict[str, float]


class PortfolioShape(TypedDict, total=False):
    """One shape of a portfolio (tune/portfolio_run.py): its fields and count, whether the search saw it,
    the member the rule gives it, and its relative speeds (its own best's time over each tiling's) as the
    search measured them and as the confirmation's interleaved rounds did."""

    shape: dict[str, int]
    label: str
    count: float
    held_out: bool
    member: int | None  # index into PortfolioDoc.members (None: no member runs it)
    fallback: bool  # its member was not confirmed faster than the default: the default serves it
    own_tiles: Params | None
    speed: float  # the member's, on the search's measurements
    default_speed: float
    confirmed: dict[str, float]  # portfolio_speed, default_speed (own best = 1), and their rounds' spread
    study: str


class PortfolioDoc(TypedDict, total=False):
    """A portfolio of tilings and its rule, as saved with its study and exported (`--export json`)."""

    name: str
    op: str
    dtype: str
    threads: int
    isa: str
    kernel: dict[str, str] | None
    k: int
    members: list[Params | None]  # the K tilings (None: the cache-model default), and the default where a
    # shape falls back to it (PortfolioShape.fallback)
    shapes: list[PortfolioShape]
    # k, speed (weighted geomean over the searched shapes, a cell not measured estimated; 0: one failed)
    curve: list[dict[str, float]]
    speed: float
    default_speed: float
    holdout_speed: float | None
    holdout_default_speed: float | None
    confirmed: dict[str, float]  # speed, default_speed (and holdout_*): the confirmation's geomeans
    measurements: int  # cells the searched shapes' studies hold (trials and cross-measurements, reused ones
    # not; a portfolio of another K over the same shapes shares them)
    grid_cells: int  # searched shapes x the tilings chosen among: measuring all of them is the cost to beat
    # tilings (labels), speeds (shape x tiling, 0: failed, None: not measured)
    heat: dict[str, list[list[float | None]] | list[str]]
    command: list[str]
    created_utc: str


# What tune/study.run tells its caller as it goes: 'space' and 'exhausted' a SpaceEvent, 'trial' a
# TrialEvent, 'confirm' the Confirmation.
TuneEvent = SpaceEvent | TrialEvent | Confirmation

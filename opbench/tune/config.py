"""What a tuning run is: its configuration, search space, fingerprint and sampler."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opbench import kernels
from opbench.errors import UsageError
from opbench.machine import fingerprint as machine_fingerprint
from opbench.ops import gemm
from opbench.ops.base import Op, Shape
from opbench.tune.space import TileSpace, load_space
from opbench.tuning_documents import StudyFingerprint, WorkerInit
from opbench.userkernel import KernelRef

if TYPE_CHECKING:  # the opbench[tune] extra, imported where a study is opened
    import optuna

SAMPLERS = ("tpe", "gp", "cmaes", "random", "grid")
TUNABLE_OPS = ("gemm", "conv", "rnn", "gru", "lstm")
OBJECTIVES = ("gflops", "error")
TRIAL_TIMER = {
    "min_sample_s": 0.005,
    "min_samples": 5,
    "max_samples": 30,
    "max_time_s": 0.5,
    "target_rel_iqr": 0.03,
    "warmup_s": 0.02,
    "call_budget_s": 5.0,
}


def trial_timer(time_s: float) -> dict[str, float | int]:
    """The trials' timer with a sampling cap of time_s seconds (tune --trial-time-s; TRIAL_TIMER at 0.5). A
    shorter cap also shortens the warm-up and the shortest sample, so that a trial still takes several
    samples within it."""
    return {
        **TRIAL_TIMER,
        "max_time_s": time_s,
        "min_sample_s": min(TRIAL_TIMER["min_sample_s"], time_s / 50),
        "warmup_s": min(TRIAL_TIMER["warmup_s"], time_s / 10),
    }


CONFIRM_TIMER = {
    "min_sample_s": 0.01,
    "min_samples": 10,
    "max_samples": 60,
    "max_time_s": 1.5,
    "target_rel_iqr": 0.01,
}


@dataclass(frozen=True)
class TuneConfig:
    shape: Shape  # the op's shape (ops/<op>.py)
    dtype: str
    threads: int
    study_name: str
    storage_url: str
    trials: int | None = 50
    timeout_s: float | None = None
    sampler: str = "tpe"
    seed: int | None = None
    space: str | None = None
    params: tuple[str, ...] | None = None  # tuned parameters; the others stay at the cache model's value
    cache_fit: bool = False
    isa: str | None = None
    objectives: tuple[str, ...] = ("gflops",)
    trial_timeout_s: float = 60.0
    trial_time_s: float = TRIAL_TIMER["max_time_s"]  # each trial's sampling cap (trial_timer)
    confirm_top: int = 3
    confirm_rounds: int = 3
    # fresh worker processes the confirmation's rounds run in (round r in process r mod N), each with a
    # randomized layout: a record is saved only for a tiling that beats the default across processes
    confirm_processes: int = 3
    force: bool = False
    heartbeat_s: int = 5
    grace_s: int = 15
    input_seed: int = 0
    command: tuple[str, ...] = ()  # the command line, credentials masked (recorded with the study and record)
    # The Op of TUNABLE_OPS tuned (gemm, or gemm:bwd with --pass bwd): its plan runs the tiles.
    op: Op[Any] = field(default_factory=lambda: gemm.OP)
    kernel: KernelRef | None = None  # the user's own kernel instead (userkernel.py), with `space`
    baseline_params: tuple[tuple[str, Any], ...] | None = None  # the user kernel's reference point


def worker_init(cfg: TuneConfig) -> WorkerInit:
    """The problem the isolated worker serves (tune/worker.py's first line), timed with the trials' timer."""
    return {
        "op": cfg.op.key,
        "shape": dict(cfg.shape.to_dict()),
        "dtype": cfg.dtype,
        "threads": cfg.threads,
        "seed": cfg.input_seed,
        "timer": trial_timer(cfg.trial_time_s),
        "verify": True,
        "kernel": cfg.kernel.to_dict() if cfg.kernel is not None else None,
    }


def _names(cfg: TuneConfig) -> dict[str, int]:
    """What the space file's rules may name: the op's register tile and blocked dimensions
    (ops.<op>.tile_names) for our kernels, the problem's shape fields for a user kernel (gemm: m, n, k),
    and this CPU's caches."""
    caches = kernels.cpu_info()["caches"]
    problem = (
        {k: v for k, v in cfg.shape.to_dict().items() if isinstance(v, int)}
        if cfg.kernel
        else cfg.op.tile_names(cfg.shape, cfg.isa, cfg.dtype)
    )
    return {
        **problem,
        "l1_bytes": caches["l1d"]["size_bytes"],
        "l2_bytes": caches["l2"]["size_bytes"],
        "l3_bytes": caches["l3"]["size_bytes"],
    }


def default_study_name(
    op: str, shape: Shape, dtype: str, threads: int, suffix: str = "", kernel: KernelRef | None = None
) -> str:
    """gemm-64x64x64-fp32-t2, conv-N4_C32_28_K32_f3_p1-fp32-t2 (the shape's label without spaces); a user
    kernel's name follows the op: gemm-my_gemm-64x64x64-fp32-t2."""
    who = f"{kernel.name}-" if kernel else ""
    return f"{op.replace(':', '-')}-{who}{shape.label().replace(' ', '_')}-{dtype}-t{threads}{suffix}"


def build_space(cfg: TuneConfig) -> tuple[TileSpace, str]:
    if cfg.op.name not in TUNABLE_OPS:
        raise UsageError(f"opbench tune supports {', '.join(TUNABLE_OPS)} (got '{cfg.op.name}')")
    if cfg.kernel is not None and not cfg.space:
        raise UsageError("--kernel needs --space SPACE.toml (the parameters FUNC takes and their values)")
    space, path = load_space(
        cfg.op.key,
        _names(cfg),
        cfg.cache_fit,
        cfg.space or cfg.op.space,
        enforce_all=cfg.kernel is not None,
    )
    if cfg.params:
        unknown = set(cfg.params) - set(space.param_names)
        if unknown:
            raise UsageError(
                f"--params: unknown parameter(s) {', '.join(sorted(unknown))} "
                f"(the space has {', '.join(space.param_names)})"
            )
        space = TileSpace(
            tuple(p for p in space.params if p[0] in cfg.params), space.constraints, space.names
        )
    return space, path


def fingerprint(cfg: TuneConfig, space: TileSpace) -> StudyFingerprint:
    return {
        **machine_fingerprint(cfg.threads),
        "op": cfg.op.key,
        "shape": dict(cfg.shape.to_dict()),
        "dtype": cfg.dtype,
        "objectives": list(cfg.objectives),
        "space": {name: list(v) for name, v in space.params},
        **(
            {"kernel": {k: cfg.kernel.to_dict()[k] for k in ("func", "path", "module", "sha256")}}
            if cfg.kernel
            else {}
        ),
    }


def _sampler(cfg: TuneConfig, space: TileSpace) -> optuna.samplers.BaseSampler:
    # optuna is the opbench[tune] extra: imported where a study is opened (errors.missing_dependency)
    import optuna

    s = cfg.sampler
    if s == "tpe":
        return optuna.samplers.TPESampler(seed=cfg.seed, multivariate=True, constant_liar=True)
    if s == "gp":
        return optuna.samplers.GPSampler(seed=cfg.seed, deterministic_objective=False)
    if s == "cmaes":
        if len(cfg.objectives) > 1:
            raise UsageError("--sampler cmaes cannot optimise several objectives (use tpe, gp or random)")
        return optuna.samplers.CmaEsSampler(seed=cfg.seed, warn_independent_sampling=False)
    if s == "random":
        return optuna.samplers.RandomSampler(seed=cfg.seed)
    grid = {f"{name}_i": list(range(len(values))) for name, values in space.params}
    return optuna.samplers.GridSampler(grid, seed=cfg.seed)

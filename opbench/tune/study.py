"""The Optuna bridge: one study per (problem, objectives), trials measured by an isolated worker, every
distinct tiling measured once, failures recorded with their reason, the winner confirmed and recorded.

Who calls what: `opbench tune` (cli/tune.py) builds a TuneConfig and calls run(); `opbench tune --show` reads
the study with load_existing(); `opbench studies` calls list_studies(). Optuna calls `Objective.__call__`
once per trial.

This module opens, runs and reads studies; its parts live one per job: config.py (TuneConfig, the space,
fingerprint and sampler), objective.py (one trial) and confirmation.py (re-measuring the winners).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opbench import tuned as records
from opbench.documents import int_fields
from opbench.errors import UsageError
from opbench.ops import shape_label
from opbench.tiles import record_tiles
from opbench.tune.config import (
    CONFIRM_TIMER,
    OBJECTIVES,
    SAMPLERS,
    TRIAL_TIMER,
    TuneConfig,
    _sampler,
    build_space,
    fingerprint,
    worker_init,
)
from opbench.tune.confirmation import _measured_keys, baseline, confirm, record_verdict
from opbench.tune.isolation import IsolatedRunner
from opbench.tune.objective import CandidateFailed, Objective, _key
from opbench.tune.space import TileSpace
from opbench.tune.storage import mask, open_storage
from opbench.tuning_documents import StudyRow, TrialRow, TunedRecord, TuneEvent, TuneSummary

if TYPE_CHECKING:  # the opbench[tune] extra, imported where a study is opened
    import optuna

__all__ = [
    # the tuner's parts, one module per job (config, objective, confirmation), reachable from here
    "CONFIRM_TIMER",
    "OBJECTIVES",
    "SAMPLERS",
    "TRIAL_TIMER",
    "CandidateFailed",
    "Objective",
    "TuneConfig",
    "_key",
    "_sampler",
    "build_space",
    "confirm",
    "fingerprint",
    "list_studies",
    "load_existing",
    "mask",
    "open_study",
    "record_verdict",
    "run",
    "trial_rows",
]


class _FailedTrialEcho(logging.Filter):
    """Drops Optuna's own warnings about a trial that failed with a CandidateFailed (its traceback, then
    "failed with value None"): the trial table already prints the failure in one line with its reason."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, CandidateFailed):
            return False
        message = record.getMessage()
        return not (message.startswith("Trial ") and message.endswith("failed with value None."))


def open_study(
    cfg: TuneConfig, space: TileSpace, space_path: str, storage: optuna.storages.RDBStorage | None = None
) -> optuna.Study:
    """Create or resume the study; refuse to resume one recorded for a different machine or problem.
    `storage`: one already open on cfg.storage_url (a portfolio's studies share one, and its connections)."""
    # optuna is the opbench[tune] extra: imported where a study is opened (errors.missing_dependency)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for handler in logging.getLogger("optuna").handlers:  # Optuna's own (its modules' records reach it)
        if not any(isinstance(f, _FailedTrialEcho) for f in handler.filters):
            handler.addFilter(_FailedTrialEcho())
    storage = storage or open_storage(cfg.storage_url, cfg.heartbeat_s, cfg.grace_s)
    directions: list[Any] = ["maximize" if o == "gflops" else "minimize" for o in cfg.objectives]
    fp = fingerprint(cfg, space)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        try:
            study = optuna.create_study(
                study_name=cfg.study_name,
                storage=storage,
                sampler=_sampler(cfg, space),
                directions=directions,
                load_if_exists=True,
            )
        except ValueError as e:  # e.g. an existing study with other directions
            raise UsageError(f"study '{cfg.study_name}': {e}") from None
    recorded = study.user_attrs.get("fingerprint")
    if recorded is None:
        study.set_user_attr("fingerprint", fp)
        study.set_user_attr("space_file", space_path)
        study.set_user_attr("valid_points", len(space.enumerate()))
        study.set_user_attr("command", list(cfg.command))
    elif recorded != fp and not cfg.force:
        diff = sorted(k for k in set(fp) | set(recorded) if fp.get(k) != recorded.get(k))
        details = "; ".join(f"{k}: recorded {recorded.get(k)!r}, now {fp.get(k)!r}" for k in diff[:3])
        raise UsageError(
            f"study '{cfg.study_name}' in {mask(cfg.storage_url)} was recorded for a different "
            f"machine or problem ({details}); use another --study, or --force to continue it"
        )
    return study


def run(cfg: TuneConfig, on_event: Callable[[str, TuneEvent], None]) -> TuneSummary:
    """Tune: open/resume the study, run trials, confirm the winner, save the record. Events go to on_event
    ('space', 'trial', 'exhausted', 'confirm'); returns a summary."""
    # optuna is the opbench[tune] extra: imported where a study is opened (errors.missing_dependency)
    import optuna

    if cfg.sampler not in SAMPLERS:
        raise UsageError(f"unknown sampler '{cfg.sampler}' (available: {', '.join(SAMPLERS)})")
    space, space_path = build_space(cfg)
    baseline(cfg, space)  # a --baseline-params point outside the space is refused before any trial
    points = space.enumerate()
    study = open_study(cfg, space, space_path)
    on_event(
        "space",
        {
            "valid_points": len(points),
            "space_file": space_path,
            "params": {n: list(v) for n, v in space.params},
            "constraints": [c.name for c in space.constraints],
            "already": len(_measured_keys(study)),
        },
    )
    runner = IsolatedRunner(worker_init(cfg))
    total = len(points)

    def stop_when_exhausted(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if len(_measured_keys(study)) >= total:
            on_event("exhausted", {"valid_points": total})
            study.stop()

    try:
        objective = Objective(cfg, space, runner, lambda info: on_event("trial", info))
        if len(_measured_keys(study)) < total:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                warnings.simplefilter(
                    "ignore", UserWarning
                )  # GridSampler's "all grids evaluated" and the like
                study.optimize(
                    objective,
                    n_trials=cfg.trials,
                    timeout=cfg.timeout_s,
                    catch=(CandidateFailed,),
                    callbacks=[stop_when_exhausted],
                )
        else:
            on_event("exhausted", {"valid_points": total})
        summary: TuneSummary = {
            "study": cfg.study_name,
            "storage": mask(cfg.storage_url),
            "valid_points": total,
            "measured_points": len(_measured_keys(study)),
            "trials": len(study.trials),
        }
        if len(cfg.objectives) > 1:
            summary["pareto"] = [
                {
                    "number": t.number,
                    "tiles": t.user_attrs.get("tiles"),
                    "gflops": t.values[0],
                    "max_rel_err": t.values[1],
                }
                for t in study.best_trials
            ]
            return summary
        if not any(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials):
            summary["confirmation"] = None
            return summary
        confirmation = confirm(cfg, study, runner, space)
        study.set_user_attr("confirmation", confirmation)
        summary["confirmation"] = confirmation
        on_event("confirm", confirmation)
        best = confirmation.get("best")
        verdict = record_verdict(confirmation)
        summary["record_verdict"] = verdict
        if best is not None and verdict is None:
            who: TunedRecord = {"tiles": record_tiles(best["tiles"] or {}), "isa": cfg.isa or ""}
            if cfg.kernel is not None:  # a user kernel's record: its parameters, keyed by name and content
                kernel = {k: cfg.kernel.to_dict()[k] for k in ("func", "spec", "sha256")}
                who = {"user_kernel": kernel, "params": best["tiles"] or {}}
            rec: TunedRecord = {
                "op": cfg.op.key,
                "dtype": cfg.dtype,
                "shape": int_fields(cfg.shape.to_dict()),
                "threads": cfg.threads,
                **who,
                "gflops": best["gflops"],
                "gflops_ci": best["gflops_ci"],
                "default_gflops": confirmation["default"].get("gflops"),
                "speedup": confirmation.get("speedup"),
                "study": cfg.study_name,
                "command": list(cfg.command),
                "opbench_version": study.user_attrs["fingerprint"]["opbench_version"],
            }
            path, warning = records.save(rec)
            summary["record"] = str(path)
            if warning:
                summary["record_warning"] = warning
        return summary
    finally:
        runner.close()


def trial_rows(study: optuna.Study) -> list[TrialRow]:
    """History of a study for display: number, state, tiles, value(s), reason."""
    rows: list[TrialRow] = []
    for t in study.trials:
        rows.append(
            {
                "number": t.number,
                "state": t.state.name,
                "tiles": t.user_attrs.get("tiles"),
                "gflops": t.user_attrs.get("gflops"),
                "max_rel_err": t.user_attrs.get("max_rel_err"),
                "failure": t.user_attrs.get("failure"),
                "reused_from": t.user_attrs.get("reused_from"),
                "retry_of": t.system_attrs.get("failed_trial"),
            }
        )
    return rows


def _existing_storage(storage_url: str) -> optuna.storages.RDBStorage:
    """Open a storage only to read it: a SQLite file that is not there is an error, never created."""
    # optuna is the opbench[tune] extra: imported where a study is opened (errors.missing_dependency)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if storage_url.startswith("sqlite:///"):
        path = Path(storage_url[len("sqlite:///") :])
        if not path.is_file():
            raise UsageError(f"no study storage at {path} (run opbench tune first, or give --storage)")
    return open_storage(storage_url, 5, 15)


def load_existing(name: str, storage_url: str) -> optuna.Study:
    # optuna is the opbench[tune] extra: imported where a study is opened (errors.missing_dependency)
    import optuna

    storage = _existing_storage(storage_url)
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        raise UsageError(f"no study '{name}' in {mask(storage_url)}") from None


def list_studies(storage_url: str) -> list[StudyRow]:
    # optuna is the opbench[tune] extra: imported where a study is opened (errors.missing_dependency)
    import optuna

    storage = _existing_storage(storage_url)
    out: list[StudyRow] = []
    for s in optuna.get_all_study_summaries(storage, include_best_trial=True):
        fp = s.user_attrs.get("fingerprint", {})
        best = s.best_trial
        out.append(
            {
                "name": s.study_name,
                "trials": s.n_trials,
                "directions": [d.name.lower() for d in s.directions],
                "shape": fp.get("shape"),
                "label": shape_label(fp.get("op") or "gemm", fp.get("shape")) if fp.get("shape") else None,
                "dtype": fp.get("dtype"),
                "threads": fp.get("threads"),
                "best_value": best.value if best is not None and len(s.directions) == 1 else None,
                "best_tiles": best.user_attrs.get("tiles") if best is not None else None,
                "started": s.datetime_start.isoformat(timespec="seconds") if s.datetime_start else None,
            }
        )
    return out

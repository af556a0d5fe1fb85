"""The Optuna bridge: one study per (problem, objectives), trials measured by an isolated worker, every
distinct tiling measured once, failures recorded with their reason, the winner confirmed and recorded.

Who calls what: `opbench tune` (cli/tune.py) builds a TuneConfig and calls run(); `opbench tune --show` reads
the study with load_existing(); `opbench studies` calls list_studies(). Optuna calls `Objective.__call__`
once per trial.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opbench.errors import UsageError
from opbench.measurement import median_ci
from opbench.ops import gemm as gemm_op
from opbench.tune.isolation import IsolatedRunner
from opbench.tune.space import TileSpace, load_space
from opbench.tune.storage import mask, open_storage

__all__ = [
    "CandidateFailed",
    "TuneConfig",
    "confirm",
    "list_studies",
    "load_existing",
    "mask",
    "run",
    "trial_rows",
]

SAMPLERS = ("tpe", "gp", "cmaes", "random", "grid")
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
CONFIRM_TIMER = {
    "min_sample_s": 0.01,
    "min_samples": 10,
    "max_samples": 60,
    "max_time_s": 1.5,
    "target_rel_iqr": 0.01,
}


class CandidateFailed(Exception):
    """A candidate that crashed, hung, failed or gave a wrong answer: the trial fails, the study goes on."""


@dataclass(frozen=True)
class TuneConfig:
    shape: gemm_op.GemmShape
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
    confirm_top: int = 3
    confirm_rounds: int = 3
    force: bool = False
    heartbeat_s: int = 5
    grace_s: int = 15
    input_seed: int = 0
    command: tuple[str, ...] = ()  # the command line, credentials masked (recorded with the study and record)


def _names(cfg: TuneConfig) -> dict[str, int]:
    from opbench import kernels

    info = kernels.default_tiles(cfg.isa, cfg.shape.n)
    caches = kernels.cpu_info()["caches"]
    s = cfg.shape
    return {
        "mr": info["mr"],
        "nr": info["nr"],
        "m": s.m,
        "n": s.n,
        "k": s.k,
        "l1_bytes": caches["l1d"]["size_bytes"],
        "l2_bytes": caches["l2"]["size_bytes"],
        "l3_bytes": caches["l3"]["size_bytes"],
    }


def build_space(cfg: TuneConfig) -> tuple[TileSpace, str]:
    space, path = load_space("gemm", _names(cfg), cfg.cache_fit, cfg.space)
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


def fingerprint(cfg: TuneConfig, space: TileSpace) -> dict[str, Any]:
    from opbench.machine import fingerprint as machine_fingerprint

    return {
        **machine_fingerprint(cfg.threads),
        "op": "gemm",
        "shape": cfg.shape.to_dict(),
        "dtype": cfg.dtype,
        "objectives": list(cfg.objectives),
        "space": {name: list(v) for name, v in space.params},
    }


def _sampler(cfg: TuneConfig, space: TileSpace) -> Any:
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


def _key(tiles: dict[str, int], isa: str) -> str:
    return json.dumps({"tiles": tiles, "isa": isa}, sort_keys=True)


class Objective:
    """Optuna calls this per trial. Suggests ordinal indices, maps them to a valid tiling, reuses the value
    of a tiling this study already measured (or its failure), else measures it in the isolated worker."""

    def __init__(
        self,
        cfg: TuneConfig,
        space: TileSpace,
        runner: IsolatedRunner,
        on_trial: Callable[[dict[str, Any]], None],
    ) -> None:
        self.cfg, self.space, self.runner, self.on_trial = cfg, space, runner, on_trial
        self.flops = gemm_op.flops(cfg.shape)

    def _previous(self, trial: Any, key: str) -> Any | None:
        import optuna

        for t in trial.study.get_trials(deepcopy=False):
            if t.number == trial.number or t.user_attrs.get("key") != key:
                continue
            if t.state == optuna.trial.TrialState.COMPLETE or (
                t.state == optuna.trial.TrialState.FAIL and "failure" in t.user_attrs
            ):
                return t
        return None

    def __call__(self, trial: Any) -> Any:
        indices = {
            name: trial.suggest_int(f"{name}_i", 0, len(values) - 1) for name, values in self.space.params
        }
        tiles = self.space.from_indices(indices)
        if tiles is None:
            trial.set_user_attr("failure", "constraints: no valid value")
            raise CandidateFailed("constraints")
        isa = self.cfg.isa or ""
        key = _key(tiles, isa)
        trial.set_user_attr("key", key)
        trial.set_user_attr("tiles", tiles)
        previous = self._previous(trial, key)
        if previous is not None:
            trial.set_user_attr("reused_from", previous.number)
            for attr in ("gflops", "median_s", "rel_iqr", "max_rel_err", "failure"):
                if attr in previous.user_attrs:
                    trial.set_user_attr(attr, previous.user_attrs[attr])
            self.on_trial(
                {
                    "number": trial.number,
                    "tiles": tiles,
                    "reused_from": previous.number,
                    **previous.user_attrs,
                }
            )
            if "failure" in previous.user_attrs:
                raise CandidateFailed(previous.user_attrs["failure"])
            return previous.values if len(self.cfg.objectives) > 1 else previous.value
        answer = self.runner.run({"tiles": tiles, "isa": isa}, self.cfg.trial_timeout_s)
        status = answer["status"]
        if status != "ok":
            reason = "wrong_answer" if status == "wrong_answer" else answer.get("reason", status)
            trial.set_user_attr("failure", reason)
            if answer.get("verify"):
                trial.set_user_attr("max_err_ratio", answer["verify"].get("max_err_ratio"))
            self.on_trial({"number": trial.number, "tiles": tiles, "failure": reason})
            raise CandidateFailed(reason)
        median = answer["time"]["median_s"]
        gflops = self.flops / median / 1e9
        error = (answer.get("verify") or {}).get("max_rel_err")
        trial.set_user_attr("gflops", gflops)
        trial.set_user_attr("median_s", median)
        trial.set_user_attr("rel_iqr", answer["time"]["rel_iqr"])
        trial.set_user_attr("machine_speed", answer.get("machine_speed"))
        trial.set_user_attr("flags", answer.get("flags") or [])
        if error is not None:
            trial.set_user_attr("max_rel_err", error)
        self.on_trial({"number": trial.number, "tiles": tiles, "gflops": gflops, "max_rel_err": error})
        if len(self.cfg.objectives) > 1:
            if error is None:
                raise UsageError("--objectives gflops,error needs verification (do not pass --no-verify)")
            return gflops, error
        return gflops


def open_study(cfg: TuneConfig, space: TileSpace, space_path: str) -> Any:
    """Create or resume the study; refuse to resume one recorded for a different machine or problem."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(cfg.storage_url, cfg.heartbeat_s, cfg.grace_s)
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


def _measured_keys(study: Any) -> set[str]:
    import optuna

    return {
        t.user_attrs["key"]
        for t in study.get_trials(deepcopy=False)
        if "key" in t.user_attrs
        and (t.state == optuna.trial.TrialState.COMPLETE or "failure" in t.user_attrs)
    }


def confirm(cfg: TuneConfig, study: Any, runner: IsolatedRunner) -> dict[str, Any]:
    """Re-measure the top-k distinct tilings and the cache-model default, interleaved over rounds with a
    stricter timer; medians with 95% bootstrap intervals, and the best's speed-up over the default."""
    import optuna

    done = [
        t
        for t in study.get_trials(deepcopy=False)
        if t.state == optuna.trial.TrialState.COMPLETE and "gflops" in t.user_attrs
    ]
    ranked: dict[str, dict[str, int]] = {}
    for t in sorted(done, key=lambda t: -t.user_attrs["gflops"]):
        ranked.setdefault(t.user_attrs["key"], t.user_attrs["tiles"])
        if len(ranked) == cfg.confirm_top:
            break
    candidates: list[tuple[str, dict[str, int] | None]] = [("default", None)]
    candidates += [(f"#{i + 1}", tiles) for i, tiles in enumerate(ranked.values())]
    samples: dict[str, list[float]] = {name: [] for name, _ in candidates}
    speeds: dict[str, list[float]] = {name: [] for name, _ in candidates}
    flags: dict[str, set[str]] = {name: set() for name, _ in candidates}
    failures: dict[str, str] = {}
    for _ in range(cfg.confirm_rounds):
        for name, tiles in candidates:
            if name in failures:
                continue
            answer = runner.run(
                {"tiles": tiles, "isa": cfg.isa or "", "timer": CONFIRM_TIMER},
                max(cfg.trial_timeout_s, 120.0),
            )
            if answer["status"] != "ok":
                failures[name] = answer.get("reason", answer["status"])
                continue
            samples[name].extend(answer["time"]["samples_s"])
            if answer.get("machine_speed") is not None:
                speeds[name].append(answer["machine_speed"])
            flags[name].update(answer.get("flags") or [])
    flops = gemm_op.flops(cfg.shape)
    rows: list[dict[str, Any]] = []
    for name, tiles in candidates:
        if name in failures or not samples[name]:
            rows.append({"name": name, "tiles": tiles, "failure": failures.get(name, "no samples")})
            continue
        s = sorted(samples[name])
        median = s[len(s) // 2] if len(s) % 2 else 0.5 * (s[len(s) // 2 - 1] + s[len(s) // 2])
        lo, hi = median_ci(s)
        rows.append(
            {
                "name": name,
                "tiles": tiles,
                "n_samples": len(s),
                "median_s": median,
                "gflops": flops / median / 1e9,
                "gflops_ci": [flops / hi / 1e9, flops / lo / 1e9],
                # The in-run reference of its rounds: how fast the machine ran while this row was measured.
                "machine_speed": sorted(speeds[name])[len(speeds[name]) // 2] if speeds[name] else None,
                "flags": sorted(flags[name]),
            }
        )
    from opbench import kernels

    info = kernels.default_tiles(cfg.isa, cfg.shape.n)
    default_tiles = {"tile_m": info["tile_m"], "tile_n": info["tile_n"], "tile_k": info["tile_k"]}
    for r in rows:
        if r["name"] == "default":
            r["tiles"] = default_tiles
    measured = [r for r in rows if "gflops" in r and r["name"] != "default"]
    default = next(r for r in rows if r["name"] == "default")
    best = max(measured, key=lambda r: r["gflops"]) if measured else None
    result = {"rows": rows, "best": best, "default": default}
    if best is not None and "gflops" in default:
        result["speedup"] = best["gflops"] / default["gflops"]
    return result


def record_verdict(confirmation: dict[str, Any]) -> str | None:
    """None when the confirmed best may be saved as the tuned record: it was measured faster than the
    cache-model default beyond both 95% confidence intervals (or the default itself failed). Otherwise why
    the default stays."""
    best, default = confirmation.get("best"), confirmation.get("default") or {}
    if best is None:
        return "no candidate was confirmed"
    if "gflops_ci" not in default:
        return None  # the default failed: any confirmed tiling that works is better
    if best["gflops_ci"][0] > default["gflops_ci"][1]:
        return None
    return (
        f"the best tiling ({best['gflops']:.1f} GFLOPS, 95% CI {best['gflops_ci'][0]:.1f}-"
        f"{best['gflops_ci'][1]:.1f}) is not faster than the cache-model default ({default['gflops']:.1f}, "
        f"95% CI {default['gflops_ci'][0]:.1f}-{default['gflops_ci'][1]:.1f}) beyond the confidence intervals"
    )


def run(cfg: TuneConfig, on_event: Callable[[str, dict[str, Any]], None]) -> dict[str, Any]:
    """Tune: open/resume the study, run trials, confirm the winner, save the record. Events go to on_event
    ('space', 'trial', 'exhausted', 'confirm'); returns a summary."""
    import optuna

    if cfg.sampler not in SAMPLERS:
        raise UsageError(f"unknown sampler '{cfg.sampler}' (available: {', '.join(SAMPLERS)})")
    space, space_path = build_space(cfg)
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
    init = {
        "op": "gemm",
        "shape": cfg.shape.to_dict(),
        "dtype": cfg.dtype,
        "threads": cfg.threads,
        "seed": cfg.input_seed,
        "timer": TRIAL_TIMER,
        "verify": True,
    }
    runner = IsolatedRunner(init)
    total = len(points)

    def stop_when_exhausted(study: Any, trial: Any) -> None:
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
        summary: dict[str, Any] = {
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
        confirmation = confirm(cfg, study, runner)
        study.set_user_attr("confirmation", confirmation)
        summary["confirmation"] = confirmation
        on_event("confirm", confirmation)
        best = confirmation.get("best")
        verdict = record_verdict(confirmation)
        summary["record_verdict"] = verdict
        if best is not None and verdict is None:
            from opbench.tune import records

            rec = {
                "op": "gemm",
                "dtype": cfg.dtype,
                "shape": cfg.shape.to_dict(),
                "threads": cfg.threads,
                "tiles": best["tiles"],
                "isa": cfg.isa or "",
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


def trial_rows(study: Any) -> list[dict[str, Any]]:
    """History of a study for display: number, state, tiles, value(s), reason."""
    rows = []
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


def _existing_storage(storage_url: str) -> Any:
    """Open a storage only to read it: a SQLite file that is not there is an error, never created."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if storage_url.startswith("sqlite:///"):
        path = Path(storage_url[len("sqlite:///") :])
        if not path.is_file():
            raise UsageError(f"no study storage at {path} (run opbench tune first, or give --storage)")
    return open_storage(storage_url, 5, 15)


def load_existing(name: str, storage_url: str) -> Any:
    import optuna

    storage = _existing_storage(storage_url)
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        raise UsageError(f"no study '{name}' in {mask(storage_url)}") from None


def list_studies(storage_url: str) -> list[dict[str, Any]]:
    import optuna

    storage = _existing_storage(storage_url)
    out = []
    for s in optuna.get_all_study_summaries(storage, include_best_trial=True):
        fp = s.user_attrs.get("fingerprint", {})
        best = s.best_trial
        out.append(
            {
                "name": s.study_name,
                "trials": s.n_trials,
                "directions": [d.name.lower() for d in s.directions],
                "shape": fp.get("shape"),
                "dtype": fp.get("dtype"),
                "threads": fp.get("threads"),
                "best_value": best.value if best is not None and len(s.directions) == 1 else None,
                "best_tiles": best.user_attrs.get("tiles") if best is not None else None,
                "started": s.datetime_start.isoformat(timespec="seconds") if s.datetime_start else None,
            }
        )
    return out

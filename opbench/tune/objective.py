"""One trial: Optuna suggests indices, the Objective maps them to a valid tiling and measures it once in
the isolated worker (a repeat is answered from the study; a failure is a failed trial, never a dead study)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

from opbench.case import Outcome
from opbench.documents import Params
from opbench.errors import UsageError
from opbench.tune.config import TuneConfig
from opbench.tune.isolation import Runner
from opbench.tune.space import TileSpace
from opbench.tuning_documents import TrialEvent, WorkerRequest

if TYPE_CHECKING:  # the opbench[tune] extra, imported where a study is opened
    import optuna


class CandidateFailed(Exception):
    """A candidate that crashed, hung, failed or gave a wrong answer: the trial fails, the study goes on."""


def _key(tiles: Params, isa: str) -> str:
    return json.dumps({"tiles": tiles, "isa": isa}, sort_keys=True)


def request(cfg: TuneConfig, point: Params | None) -> tuple[WorkerRequest, str]:
    """What the worker is asked to measure for a point of the space, and the key that names the point in
    the study: our kernel's tiles (and ISA), or the user kernel's parameters."""
    if cfg.kernel is not None:
        return {"params": point or {}}, json.dumps({"params": point}, sort_keys=True)
    isa = cfg.isa or ""
    return {"tiles": point, "isa": isa}, _key(point or {}, isa)


def measure_point(cfg: TuneConfig, runner: Runner, point: Params | None) -> tuple[TrialEvent, str | None]:
    """Measure one point of the space (None: the cache-model default) in the isolated worker: what a trial
    records of it (gflops, median_s, rel_iqr, machine_speed, flags, max_rel_err; or failure and
    max_err_ratio) and the failure's reason ("wrong_answer", "crash: SIGSEGV", ...) or None."""
    asked, _ = request(cfg, point)
    answer = runner.run(asked, cfg.trial_timeout_s)
    outcome = Outcome.of(answer["status"], answer.get("reason"))
    if not outcome.ok:
        reason = str(outcome.text)
        failed: TrialEvent = {"failure": reason}
        if verify := answer.get("verify"):
            failed["max_err_ratio"] = verify.get("max_err_ratio")
        return failed, reason
    median = answer["time"]["median_s"]
    attrs: TrialEvent = {
        "gflops": cfg.op.flops(cfg.shape) / median / 1e9,
        "median_s": median,
        "rel_iqr": answer["time"]["rel_iqr"],
        "machine_speed": answer.get("machine_speed"),
        "flags": answer.get("flags") or [],
    }
    error = (answer.get("verify") or {}).get("max_rel_err")
    if error is not None:
        attrs["max_rel_err"] = error
    return attrs, None


class Objective:
    """Optuna calls this per trial. Suggests ordinal indices, maps them to a valid tiling, reuses the value
    of a tiling this study already measured (or its failure), else measures it in the isolated worker."""

    def __init__(
        self,
        cfg: TuneConfig,
        space: TileSpace,
        runner: Runner,
        on_trial: Callable[[TrialEvent], None],
    ) -> None:
        self.cfg, self.space, self.runner, self.on_trial = cfg, space, runner, on_trial
        self.flops = cfg.op.flops(cfg.shape)

    def _previous(self, trial: optuna.Trial, key: str) -> optuna.trial.FrozenTrial | None:
        # optuna is the opbench[tune] extra: imported where a study is opened (errors.missing_dependency)
        import optuna

        for t in trial.study.get_trials(deepcopy=False):
            if t.number == trial.number or t.user_attrs.get("key") != key:
                continue
            if t.state == optuna.trial.TrialState.COMPLETE or (
                t.state == optuna.trial.TrialState.FAIL and "failure" in t.user_attrs
            ):
                return t
        return None

    def __call__(self, trial: optuna.Trial) -> float | Sequence[float]:
        indices = {
            name: trial.suggest_int(f"{name}_i", 0, len(values) - 1) for name, values in self.space.params
        }
        tiles = self.space.from_indices(indices)
        if tiles is None:
            trial.set_user_attr("failure", "constraints: no valid value")
            raise CandidateFailed("constraints")
        _, key = request(self.cfg, tiles)
        trial.set_user_attr("key", key)
        # our kernels' tiles are "tiles"; a user kernel's search parameters are "params"
        trial.set_user_attr("params" if self.cfg.kernel is not None else "tiles", tiles)
        previous = self._previous(trial, key)
        if previous is not None:
            trial.set_user_attr("reused_from", previous.number)
            for attr in ("gflops", "median_s", "rel_iqr", "max_rel_err", "failure"):
                if attr in previous.user_attrs:
                    trial.set_user_attr(attr, previous.user_attrs[attr])
            reused = {
                "number": trial.number,
                "tiles": tiles,
                "reused_from": previous.number,
                **previous.user_attrs,
            }
            self.on_trial(cast(TrialEvent, reused))  # the attributes this module set on the trial it reuses
            if "failure" in previous.user_attrs:
                raise CandidateFailed(previous.user_attrs["failure"])
            if len(self.cfg.objectives) > 1:
                return previous.values
            assert previous.value is not None  # a complete trial: a failed one raised above
            return previous.value
        attrs, failure = measure_point(self.cfg, self.runner, tiles)
        for name, value in attrs.items():
            trial.set_user_attr(name, value)
        if failure is not None:
            self.on_trial({"number": trial.number, "tiles": tiles, "failure": failure})
            raise CandidateFailed(failure)
        gflops, error = attrs["gflops"], attrs.get("max_rel_err")
        self.on_trial({"number": trial.number, "tiles": tiles, "gflops": gflops, "max_rel_err": error})
        if len(self.cfg.objectives) > 1:
            if error is None:
                raise UsageError("--objectives gflops,error needs verification (do not pass --no-verify)")
            return gflops, error
        return gflops

"""The tuner's samplers on ReplayRunner (a table of made-up measurements instead of the isolated worker):
the Objective and every sampler run without hardware, deterministically. A failing tiling is a failed
trial and the study goes on, a tiling is never measured twice, and the samplers find a table's best."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from conftest import import_or_skip

optuna = import_or_skip("optuna")

from opbench.ops.gemm import GemmShape, flops  # noqa: E402
from opbench.tune import study as tuner  # noqa: E402
from opbench.tune.replay import ReplayRunner  # noqa: E402

SHAPE = GemmShape(512, 512, 512)


def _cfg(sampler: str, seed: int = 0) -> tuner.TuneConfig:
    return tuner.TuneConfig(
        shape=SHAPE, dtype="fp32", threads=1, study_name="replay", storage_url="", sampler=sampler, seed=seed
    )


def _table(space: Any) -> tuple[dict[str, float | None], str]:
    """A smooth landscape over the space's valid tilings, peaking at one of them; every seventh tiling
    fails (as a crash or wrong answer would)."""
    points = space.enumerate()
    assert len(points) > 20
    target = points[len(points) // 3]
    table: dict[str, float | None] = {}
    for i, tiles in enumerate(points):
        distance = sum(
            abs(space.values(name).index(tiles[name]) - space.values(name).index(target[name]))
            for name in space.param_names
        )
        table[tuner._key(tiles, "")] = None if i % 7 == 3 else 100.0 / (1.0 + distance)
    table[tuner._key(target, "")] = 100.0
    return table, tuner._key(target, "")


def _run(sampler: str, trials: int, seed: int = 0) -> tuple[ReplayRunner, Any, dict[str, float | None], str]:
    cfg = _cfg(sampler, seed)
    space, _ = tuner.build_space(cfg)
    table, best_key = _table(space)
    runner = ReplayRunner(table, flops(SHAPE))
    objective = tuner.Objective(cfg, space, runner, lambda info: None)  # type: ignore[arg-type]
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study = optuna.create_study(direction="maximize", sampler=tuner._sampler(cfg, space))
        study.optimize(objective, n_trials=trials, catch=(tuner.CandidateFailed,))
    return runner, study, table, best_key


@pytest.mark.parametrize("sampler", ["tpe", "random", "cmaes", "grid"])
def test_a_failing_tiling_is_a_failed_trial_and_none_is_measured_twice(sampler: str) -> None:
    runner, study, table, _ = _run(sampler, 60)
    states = {t.state.name for t in study.trials}
    assert len(study.trials) == 60 and states <= {"COMPLETE", "FAIL"}
    failed = [t for t in study.trials if t.state.name == "FAIL"]
    assert failed and all("failure" in t.user_attrs for t in failed)
    assert len(runner.measured) == len(set(runner.measured))  # a repeat is answered from the study
    assert all(key in table for key in runner.measured)
    for t in study.trials:
        if t.state.name == "COMPLETE":
            assert t.value == pytest.approx(table[t.user_attrs["key"]], rel=1e-9)


def test_the_grid_sampler_finds_the_best_tiling_once_it_has_seen_the_grid() -> None:
    cfg = _cfg("grid")
    space, _ = tuner.build_space(cfg)
    indices = 1
    for _, values in space.params:
        indices *= len(values)
    runner, study, table, best_key = _run("grid", indices)
    assert best_key in runner.measured
    assert study.best_trial.user_attrs["key"] == best_key
    assert study.best_value == pytest.approx(100.0)


def test_tpe_finds_near_the_best_in_fewer_measurements_than_random_search_on_average() -> None:
    """On a smooth landscape a model-based sampler should beat random search; over 3 seeds, at 40 trials."""
    tpe = [_run("tpe", 40, seed)[1].best_value for seed in range(3)]
    rnd = [_run("random", 40, seed)[1].best_value for seed in range(3)]
    assert sum(tpe) / 3 >= sum(rnd) / 3
    assert max(tpe) >= 50.0  # within one index step of the peak

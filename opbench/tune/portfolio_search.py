"""Searching a portfolio (`opbench tune OP --batch-file FILE --portfolio K`): the shapes' grid measured in
part and the portfolio chosen on it (portfolio.py); portfolio_run.py judges the held-out shapes, confirms
the choice and saves it.

Every shape has a study of its own in the storage, named `<prefix>:<its default study name>`, so a kill
loses at most the measurement in flight and a rerun (or a second machine on the same PostgreSQL storage)
continues where the studies stand:
1. **Each shape explores** (`--trials` per shape): its cache-model default is measured, then half its
   trials (TRANSFER) go to the tilings the shapes explored before it transfer to it, most promising first
   (portfolio.ranked: their relative speeds on those shapes, weighted by nearness: a shape-aware model),
   and TPE, seeded apart for each shape, spends the rest.
2. **The grid is filled where the choice rests** (portfolio.next_cells): among each shape's POOL best
   tilings and the default, the portfolio is chosen on the grid with its unmeasured cells estimated from
   nearby shapes; on each shape, the members within FILL_MARGIN of its fastest member and not yet
   measured there are measured (a study attribute per cell, `cell:<hash>`), and the choice is made again,
   until every shape's member is measured.
3. **Held-out shapes** (`--holdout F`) are kept out of 1 and 2. Each gets the rule's tiling (its nearest
   searched shape's member), the default, and a study of its own explored as in 1, whose best is what the
   rule's loss is measured against.
4. **Confirmation**: on every shape, its own best, its member and the default re-measured in interleaved
   rounds (tune/confirmation.confirm_points), the speeds the portfolio reports beside the search's.
The result (tuning_documents.PortfolioDoc) is kept in a study named after the portfolio, which holds no
trials (`tune --show`, `report --study` and `--export` read it).
"""

from __future__ import annotations

import hashlib
import math
import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from opbench.documents import Params, int_fields
from opbench.ops.base import Shape
from opbench.tune import portfolio as pf
from opbench.tune.config import TuneConfig, build_space, default_study_name, worker_init
from opbench.tune.confirmation import baseline
from opbench.tune.isolation import IsolatedRunner, Runner
from opbench.tune.objective import CandidateFailed, Objective, measure_point, request
from opbench.tune.space import TileSpace
from opbench.tune.storage import open_storage
from opbench.tune.study import open_study
from opbench.tuning_documents import TrialEvent, WorkerInit

if TYPE_CHECKING:  # the opbench[tune] extra, imported where a study is opened
    import optuna

WARM = 3  # points a study is warm-started with by default (Search.explore)
TRANSFER = 0.5  # the share of a searched shape's trials spent on the tilings the shapes before it transfer
POOL = 3  # each shape's best tilings the portfolio is chosen among (with the default)
OUTSIDE = "outside this shape's space: one of its constraints fails"  # a cell not run
RunnerFor = Callable[[int, WorkerInit], Runner]  # shape index, its problem -> the worker measuring it


@dataclass(frozen=True)
class PortfolioConfig:
    base: TuneConfig  # the run's settings; study_name names the portfolio, trials are per shape
    shapes: tuple[Shape, ...]
    weights: tuple[float, ...]  # counts
    k: int
    holdout: float = 0.0  # share of the shapes kept out of the search
    holdout_seed: int = 0
    # what the shapes' studies are named after (default: the portfolio): portfolios of another K over the
    # same shapes share them, and with them every cell measured
    prefix: str = ""


@dataclass
class _Shape:
    cfg: TuneConfig
    space: TileSpace
    study: optuna.Study
    default: Params | None  # the baseline point: None (the cache model) for our kernels


def split(n: int, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(searched, held out): round(fraction * n) shapes held out, drawn by `seed`, at least one searched."""
    held = min(n - 1, round(fraction * n)) if fraction > 0 else 0
    out = sorted(random.Random(seed).sample(range(n), held))
    return [i for i in range(n) if i not in out], out


class Search:
    """One portfolio's run: its shapes' studies, the grid of the searched shapes and the points by key."""

    def __init__(self, cfg: PortfolioConfig, on_event: Callable[[str, dict[str, object]], None],
                 runner_for: RunnerFor | None = None) -> None:  # fmt: skip
        self.cfg, self.on_event = cfg, on_event
        self.runner_for = runner_for or (lambda i, init: IsolatedRunner(init))
        self.fields = [int_fields(s.to_dict()) for s in cfg.shapes]
        self.searched, self.held = split(len(cfg.shapes), cfg.holdout, cfg.holdout_seed)
        self.grid = pf.Grid([self.fields[i] for i in self.searched], [cfg.weights[i] for i in self.searched])
        self.points: dict[str, Params | None] = {}
        self.states: dict[int, _Shape] = {}
        self._storage: optuna.storages.RDBStorage | None = None

    def storage(self) -> optuna.storages.RDBStorage:
        """The storage every study of the run is opened in, once (a pool of connections, not one a shape)."""
        if self._storage is None:
            base = self.cfg.base
            self._storage = open_storage(base.storage_url, base.heartbeat_s, base.grace_s)
        return self._storage

    # --- one shape's study and cells
    def state(self, i: int) -> _Shape:
        if i not in self.states:
            base = self.cfg.base
            own = default_study_name(base.op.key, self.cfg.shapes[i], base.dtype, base.threads)
            name = f"{self.cfg.prefix or base.study_name}:{own}"
            # each shape's sampler its own seed: with one seed, every study would draw the same points
            seed = None if base.seed is None else base.seed + i
            cfg = replace(base, shape=self.cfg.shapes[i], study_name=name, seed=seed)
            space, path = build_space(cfg)
            study = open_study(cfg, space, path, self.storage())
            self.states[i] = _Shape(cfg, space, study, baseline(cfg, space)[0])
        return self.states[i]

    def key(self, st: _Shape, point: Params | None) -> str:
        key = request(st.cfg, point)[1]
        self.points.setdefault(key, point)
        return key

    def cells(self, i: int) -> dict[str, float]:
        """What shape i's study holds: tiling key -> seconds (pf.FAILED for a failure)."""
        st, out = self.state(i), {}
        point_attr = "params" if st.cfg.kernel is not None else "tiles"
        for t in st.study.get_trials(deepcopy=False):
            if "key" not in t.user_attrs or "reused_from" in t.user_attrs:
                continue
            self.points.setdefault(t.user_attrs["key"], t.user_attrs.get(point_attr))
            if t.state.name == "COMPLETE" and "median_s" in t.user_attrs:
                out[t.user_attrs["key"]] = float(t.user_attrs["median_s"])
            elif "failure" in t.user_attrs:
                out.setdefault(t.user_attrs["key"], pf.FAILED)
        for name, value in st.study.user_attrs.items():
            if name.startswith("cell:"):
                self.points.setdefault(value["key"], value["point"])
                out[value["key"]] = float(value["median_s"]) if "median_s" in value else pf.FAILED
        return out

    def measured_in(self, i: int) -> int:
        """The measurements shape i's study holds: trials that measured or failed with a reason (a reused
        one cost nothing) and cells, whichever process or run made them."""
        st = self.state(i)
        trials = sum(
            "key" in t.user_attrs
            and "reused_from" not in t.user_attrs
            and (t.state.name == "COMPLETE" or "failure" in t.user_attrs)
            for t in st.study.get_trials(deepcopy=False)
        )
        return trials + sum(
            name.startswith("cell:") and value.get("failure") != OUTSIDE  # not run: cost nothing
            for name, value in st.study.user_attrs.items()
        )

    def measure(self, i: int, runner: Runner, point: Params | None) -> float:
        """One cell measured and kept as an attribute of shape i's study. A point that breaks one of the
        shape's own space constraints (a user's space file says what is valid for a problem) is a failed
        cell, not run: a member never serves a shape its space rules it out for."""
        st = self.state(i)
        key = self.key(st, point)
        outside = point is not None and not st.space.valid(point)
        attrs: TrialEvent = {"failure": OUTSIDE} if outside else measure_point(st.cfg, runner, point)[0]
        cell = {"key": key, "point": point, **attrs}
        st.study.set_user_attr(f"cell:{hashlib.sha256(key.encode()).hexdigest()[:16]}", cell)
        self.on_event("cell", {"shape": st.cfg.shape.label(), "point": point, **attrs})
        return pf.FAILED if "failure" in attrs else float(attrs["median_s"])

    def explore(
        self, i: int, warm: list[Params | None], trials: int, transfer: int = WARM
    ) -> dict[str, float]:
        """Shape i's study: its default measured, the first `transfer` points of `warm` that are in its space
        and not yet measured enqueued, then TPE, up to `trials` trials in all."""
        import optuna  # the opbench[tune] extra (errors.missing_dependency)

        st = self.state(i)
        have = self.cells(i)
        runner = self.runner_for(i, worker_init(st.cfg))
        try:
            if self.key(st, st.default) not in have:
                have[self.key(st, st.default)] = self.measure(i, runner, st.default)
            # the budget counts trials that measured or failed with a reason; one a kill left running (the
            # heartbeat fails it, without a reason) is retried instead
            trials_now = st.study.get_trials(deepcopy=False)
            done = [
                t
                for t in trials_now
                if t.state == optuna.trial.TrialState.COMPLETE
                or (t.state == optuna.trial.TrialState.FAIL and "failure" in t.user_attrs)
            ]
            left = trials - len(done)
            if left <= 0:
                return self.cells(i)
            # at most `transfer` enqueued in the study's life (a rerun counts those of the runs before it)
            enqueued = sum("warm" in t.user_attrs for t in trials_now)
            waiting = sum(t.state == optuna.trial.TrialState.WAITING for t in trials_now)
            seen = set(have)  # measured, or enqueued below: not enqueued (again) from `warm`
            for point in warm:
                if enqueued >= transfer or waiting >= left:
                    break
                indices, key = _indices(st.space, point), self.key(st, point)
                if indices is not None and key not in seen:
                    seen.add(key)
                    st.study.enqueue_trial(indices, user_attrs={"warm": True}, skip_if_exists=True)
                    enqueued, waiting = enqueued + 1, waiting + 1

            def on_trial(event: TrialEvent) -> None:
                self.on_event("trial", {"shape": st.cfg.shape.label(), **event})

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                warnings.simplefilter("ignore", UserWarning)
                st.study.optimize(Objective(st.cfg, st.space, runner, on_trial), n_trials=left,
                                  catch=(CandidateFailed,))  # fmt: skip
        finally:
            runner.close()
        return self.cells(i)

    def fill(self, i: int, points: list[Params | None]) -> None:
        """Shape i's cells of `points` that its study does not hold, measured."""
        st = self.state(i)
        have = self.cells(i)
        todo = [p for p in points if self.key(st, p) not in have]
        if not todo:
            return
        runner = self.runner_for(i, worker_init(st.cfg))
        try:
            for p in todo:
                self.measure(i, runner, p)
        finally:
            runner.close()


def _indices(space: TileSpace, point: Params | None) -> dict[str, int] | None:
    """A point as the study's ordinal parameters, None where a value is not among the space's."""
    if not point:
        return None
    out = {}
    for name, values in space.params:
        if name not in point or point[name] not in values:
            return None
        out[f"{name}_i"] = [v == point[name] for v in values].index(True)
    return out


def transferred(s: Search, i: int) -> list[Params | None]:
    """The tilings the searched shapes measured so far transfer to shape i, most promising first
    (portfolio.ranked)."""
    return [s.points[s.grid.tilings[j]] for j in pf.ranked(s.grid, s.fields[i])]


def explore_budget(trials: int) -> int:
    """How many of a shape's `trials` go to transferred tilings (the rest to its own sampler)."""
    return math.ceil(TRANSFER * trials)


def _pool(grid: pf.Grid, default_key: str) -> list[int]:
    """Each shape's POOL fastest tilings and the default."""
    out = [grid.add_tiling(default_key)]
    for i in range(len(grid.shapes)):
        cells = sorted((t, j) for (ii, j), t in grid.times.items() if ii == i and t < pf.FAILED)
        out += [j for _, j in cells[:POOL]]
    return list(dict.fromkeys(out))


def search(cfg: PortfolioConfig, on_event: Callable[[str, dict[str, object]], None],
           runner_for: RunnerFor | None = None) -> tuple[Search, list[int], list[int], str]:  # fmt: skip
    """Steps 1 and 2: the search, its pool of tilings, the members chosen (grid indices) and the default's
    key."""
    s = Search(cfg, on_event, runner_for)
    grid = s.grid
    for g, i in enumerate(s.searched):  # 1. each shape explores, warm-started by the nearest explored ones
        trials = cfg.base.trials or 0
        for key, seconds in s.explore(i, transferred(s, i), trials, explore_budget(trials)).items():
            grid.put(g, key, seconds)
    first = s.state(s.searched[0])
    default_key = s.key(first, first.default)
    pool = _pool(grid, default_key)
    while True:  # 2. the grid filled where the choice rests
        chosen, missing = pf.next_cells(grid, cfg.k, pool)
        if not missing:
            return s, pool, chosen, default_key
        for g in sorted({g for g, _ in missing}):
            s.fill(s.searched[g], [s.points[grid.tilings[j]] for gg, j in missing if gg == g])
            for key, seconds in s.cells(s.searched[g]).items():
                grid.put(g, key, seconds)

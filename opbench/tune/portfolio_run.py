"""Searching a portfolio (`opbench tune OP --batch-file FILE --portfolio K`): the shapes' grid measured in
part, the portfolio chosen on it (portfolio.py), held-out shapes judged, the choice confirmed, saved.

Every shape has a study of its own in the storage, named `<portfolio>:<its default study name>`, so a kill
loses at most the measurement in flight and a rerun (or a second machine on the same PostgreSQL storage)
continues where the studies stand:
1. **Each shape explores** (`--trials` per shape): its cache-model default is measured, then its study is
   warm-started with the best tilings of the nearest shapes explored before it (WARM), then TPE goes on.
2. **The grid is filled where the choice rests** (portfolio.next_cells): among each shape's POOL best
   tilings and the default, the portfolio is chosen on the grid with its unmeasured cells estimated from
   nearby shapes, those of its members' cells not yet measured are measured (a study attribute per cell,
   `cell:<hash>`), and the choice is made again, until it rests on measurements alone.
3. **Held-out shapes** (`--holdout F`) are kept out of 1 and 2. Each gets the rule's tiling (its nearest
   searched shape's member), the default, and a study of its own warm-started with them, whose best is
   what the rule's loss is measured against.
4. **Confirmation**: on every shape, its own best, its member and the default re-measured in interleaved
   rounds (tune/confirmation.confirm_points), the speeds the portfolio reports beside the search's.
The result (tuning_documents.PortfolioDoc) is kept in a study named after the portfolio, which holds no
trials (`tune --show`, `report --study` and `--export` read it).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from opbench.documents import Params, int_fields
from opbench.machine import utc_now
from opbench.ops.base import Shape
from opbench.tiles import record_tiles
from opbench.tune import portfolio as pf
from opbench.tune.config import TRIAL_TIMER, TuneConfig, build_space, default_study_name
from opbench.tune.confirmation import baseline, confirm_points
from opbench.tune.isolation import IsolatedRunner, Runner
from opbench.tune.objective import CandidateFailed, Objective, measure_point, request
from opbench.tune.space import TileSpace
from opbench.tune.storage import open_storage
from opbench.tune.study import open_study
from opbench.tuned import save as save_record
from opbench.tuned import shape_distance
from opbench.tuning_documents import PortfolioDoc, PortfolioShape, TrialEvent, WorkerInit

if TYPE_CHECKING:  # the opbench[tune] extra, imported where a study is opened
    import optuna

WARM = 3  # nearest explored shapes whose best tilings a shape's study starts with
POOL = 3  # each shape's best tilings the portfolio is chosen among (with the default)
RunnerFor = Callable[[int, WorkerInit], Runner]  # shape index, its problem -> the worker measuring it


@dataclass(frozen=True)
class PortfolioConfig:
    base: TuneConfig  # the run's settings; study_name names the portfolio, trials are per shape
    shapes: tuple[Shape, ...]
    weights: tuple[float, ...]  # counts
    k: int
    holdout: float = 0.0  # share of the shapes kept out of the search
    holdout_seed: int = 0


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


def _init(cfg: TuneConfig) -> WorkerInit:
    return {
        "op": cfg.op.key,
        "shape": dict(cfg.shape.to_dict()),
        "dtype": cfg.dtype,
        "threads": cfg.threads,
        "seed": cfg.input_seed,
        "timer": TRIAL_TIMER,
        "verify": True,
        "kernel": cfg.kernel.to_dict() if cfg.kernel is not None else None,
    }


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
        self.measured = 0

    # --- one shape's study and cells
    def state(self, i: int) -> _Shape:
        if i not in self.states:
            base = self.cfg.base
            own = default_study_name(base.op.key, self.cfg.shapes[i], base.dtype, base.threads)
            name = f"{base.study_name}:{own}"
            cfg = replace(base, shape=self.cfg.shapes[i], study_name=name)
            space, path = build_space(cfg)
            self.states[i] = _Shape(cfg, space, open_study(cfg, space, path), baseline(cfg, space)[0])
        return self.states[i]

    def key(self, st: _Shape, point: Params | None) -> str:
        key = request(st.cfg, point)[1]
        self.points.setdefault(key, point)
        return key

    def cells(self, i: int) -> dict[str, float]:
        """What shape i's study holds: tiling key -> seconds (pf.FAILED for a failure)."""
        import optuna  # the opbench[tune] extra (errors.missing_dependency)

        st, out = self.state(i), {}
        point_attr = "params" if st.cfg.kernel is not None else "tiles"
        for t in st.study.get_trials(deepcopy=False):
            if "key" not in t.user_attrs or "reused_from" in t.user_attrs:
                continue
            self.points.setdefault(t.user_attrs["key"], t.user_attrs.get(point_attr))
            if t.state == optuna.trial.TrialState.COMPLETE and "median_s" in t.user_attrs:
                out[t.user_attrs["key"]] = float(t.user_attrs["median_s"])
            elif "failure" in t.user_attrs:
                out.setdefault(t.user_attrs["key"], pf.FAILED)
        for name, value in st.study.user_attrs.items():
            if name.startswith("cell:"):
                self.points.setdefault(value["key"], value["point"])
                out[value["key"]] = float(value["median_s"]) if "median_s" in value else pf.FAILED
        return out

    def measure(self, i: int, runner: Runner, point: Params | None) -> float:
        """One cell measured and kept as an attribute of shape i's study."""
        st = self.state(i)
        key = self.key(st, point)
        attrs, failure = measure_point(st.cfg, runner, point)
        self.measured += 1
        cell = {"key": key, "point": point, **attrs}
        st.study.set_user_attr(f"cell:{hashlib.sha256(key.encode()).hexdigest()[:16]}", cell)
        self.on_event("cell", {"shape": st.cfg.shape.label(), "point": point, **attrs})
        return pf.FAILED if failure is not None else float(attrs["median_s"])

    def explore(self, i: int, warm: list[Params | None], trials: int) -> dict[str, float]:
        """Shape i's study: its default measured, `warm` enqueued, TPE up to `trials` trials in all."""
        import optuna  # the opbench[tune] extra (errors.missing_dependency)

        st = self.state(i)
        have = self.cells(i)
        runner = self.runner_for(i, _init(st.cfg))
        try:
            if self.key(st, st.default) not in have:
                have[self.key(st, st.default)] = self.measure(i, runner, st.default)
            for point in warm:
                indices = _indices(st.space, point)
                if indices is not None and self.key(st, point) not in have:
                    st.study.enqueue_trial(indices, skip_if_exists=True)
            done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)
            left = trials - len(st.study.get_trials(deepcopy=False, states=done))
            if left > 0:
                before = len(st.study.trials)

                def on_trial(event: TrialEvent) -> None:
                    self.on_event("trial", {"shape": st.cfg.shape.label(), **event})

                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    warnings.simplefilter("ignore", UserWarning)
                    st.study.optimize(Objective(st.cfg, st.space, runner, on_trial), n_trials=left,
                                      catch=(CandidateFailed,))  # fmt: skip
                new = st.study.get_trials(deepcopy=False)[before:]
                self.measured += sum("reused_from" not in t.user_attrs and "key" in t.user_attrs for t in new)
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
        runner = self.runner_for(i, _init(st.cfg))
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


def run(cfg: PortfolioConfig, on_event: Callable[[str, dict[str, object]], None],
        runner_for: RunnerFor | None = None) -> PortfolioDoc:  # fmt: skip
    """Search, choose, judge the held-out shapes, confirm; the portfolio's document, saved in its study."""
    s = Search(cfg, on_event, runner_for)
    grid = s.grid
    # 1. each searched shape explores, warm-started by the nearest shapes explored before it
    for g, i in enumerate(s.searched):
        warm = _warm(s, g)
        for key, seconds in s.explore(i, warm, cfg.base.trials or 0).items():
            grid.put(g, key, seconds)
    default_key = s.key(s.state(s.searched[0]), s.state(s.searched[0]).default)
    # 2. the grid filled where the choice rests
    pool = _pool(grid, default_key)
    while True:
        chosen, missing = pf.next_cells(grid, cfg.k, pool)
        if not missing:
            break
        for g in sorted({g for g, _ in missing}):
            points = [s.points[grid.tilings[j]] for gg, j in missing if gg == g]
            s.fill(s.searched[g], points)
            for key, seconds in s.cells(s.searched[g]).items():
                grid.put(g, key, seconds)
    assigned = pf.assign(grid, chosen)
    members = [s.points[grid.tilings[j]] for j in chosen]
    return _document(s, pool, chosen, assigned, members, default_key)


def _warm(s: Search, g: int) -> list[Params | None]:
    """The best tilings of the WARM searched shapes nearest shape g among those explored before it."""
    near = []
    for h in range(g):
        d = shape_distance(s.grid.shapes[g], s.grid.shapes[h])
        best = s.grid.best_tiling(h)
        if d is not None and best is not None:
            near.append((d, h, best))
    keys = dict.fromkeys(s.grid.tilings[j] for _, _, j in sorted(near)[:WARM])
    return [s.points[key] for key in keys]


def _pool(grid: pf.Grid, default_key: str) -> list[int]:
    """Each shape's POOL fastest tilings and the default."""
    out = [grid.add_tiling(default_key)]
    for i in range(len(grid.shapes)):
        cells = sorted((t, j) for (ii, j), t in grid.times.items() if ii == i and t < pf.FAILED)
        out += [j for _, j in cells[:POOL]]
    return list(dict.fromkeys(out))


def _document(
    s: Search, pool: list[int], chosen: list[int], assigned: list[int], members: list[Params | None],
    default_key: str,
) -> PortfolioDoc:  # fmt: skip
    cfg, grid = s.cfg, s.grid
    search_cost = s.measured
    full = [j for j in pool if j in grid.measured_on_all()]
    curve = []
    for k in range(1, cfg.k + 1):
        speed = pf.score(grid, pf.select(grid, k, full))
        curve.append({"k": float(k), "speed": speed, "loss": pf.loss(speed)})
    dj = grid.tilings.index(default_key)
    member_of = [chosen.index(a) for a in assigned]
    rows: list[PortfolioShape] = []
    for g, i in enumerate(s.searched):
        own = grid.best_tiling(g)
        rows.append(_row(s, i, member_of[g], s.points[grid.tilings[own]] if own is not None else None,
                         grid.speed(g, assigned[g], {}), grid.speed(g, dj, {}), False))  # fmt: skip
    for i in s.held:
        m = pf.rule(grid.shapes, member_of, s.fields[i])
        st = s.state(i)
        mine = [members[m]] if m is not None else []
        s.explore(i, mine, cfg.base.trials or 0)
        s.fill(i, mine)
        cells = s.cells(i)
        best = min(cells.values(), default=pf.FAILED)
        own_key = min(cells, key=lambda k: cells[k]) if cells else None
        member_t = cells.get(s.key(st, members[m]), pf.FAILED) if m is not None else pf.FAILED
        default_t = cells.get(s.key(st, st.default), pf.FAILED)
        rows.append(_row(s, i, m, s.points.get(own_key) if own_key else None, _ratio(best, member_t),
                         _ratio(best, default_t), True))  # fmt: skip
    if cfg.base.confirm_rounds > 0:
        for row, i in zip(rows, [*s.searched, *s.held], strict=True):
            index = row.get("member")
            member = members[index] if index is not None else None
            row["confirmed"] = _confirm(s, i, row.get("own_tiles"), member)
    searched = [r for r in rows if not r["held_out"]]
    held = [r for r in rows if r["held_out"]]
    base = cfg.base
    doc: PortfolioDoc = {
        "name": base.study_name,
        "op": base.op.key,
        "dtype": base.dtype,
        "threads": base.threads,
        "isa": base.isa or "",
        "kernel": {k: base.kernel.to_dict()[k] for k in ("func", "spec", "sha256")} if base.kernel else None,
        "k": cfg.k,
        "members": members,
        "shapes": rows,
        "curve": curve,
        "speed": _geomean(searched, "speed"),
        "default_speed": _geomean(searched, "default_speed"),
        "holdout_speed": _geomean(held, "speed") if held else None,
        "holdout_default_speed": _geomean(held, "default_speed") if held else None,
        "measurements": search_cost,
        "grid_cells": len(grid.shapes) * len(pool),
        "heat": {
            "tilings": [_label(s.points[grid.tilings[j]]) for j in full],
            "speeds": [[grid.speed(g, j, {}) for j in full] for g in range(len(grid.shapes))],
        },
        "command": list(base.command),
        "created_utc": utc_now(),
    }
    _save(s, doc)
    return doc


def _ratio(best: float, t: float) -> float:
    return 0.0 if t == pf.FAILED or best == pf.FAILED else min(1.0, best / t)


def _label(point: Params | None) -> str:
    return "default" if not point else ",".join(f"{k}={v}" for k, v in point.items())


def _row(s: Search, i: int, member: int | None, own: Params | None, speed: float, default_speed: float,
         held_out: bool) -> PortfolioShape:  # fmt: skip
    return {
        "shape": s.fields[i],
        "label": s.cfg.shapes[i].label(),
        "count": s.cfg.weights[i],
        "held_out": held_out,
        "member": member,
        "own_tiles": own,
        "speed": speed,
        "default_speed": default_speed,
        "study": s.state(i).cfg.study_name,
    }


def _geomean(rows: list[PortfolioShape], field: str) -> float:
    total = sum(r["count"] for r in rows)
    speeds = [(r["count"], float(r["speed"] if field == "speed" else r["default_speed"])) for r in rows]
    if total <= 0 or any(v <= 0 for _, v in speeds):
        return 0.0
    return math.exp(sum(w * math.log(v) for w, v in speeds) / total)


def _confirm(s: Search, i: int, own: Params | None, member: Params | None) -> dict[str, float]:
    """Shape i's own best, its member and the default re-measured in interleaved rounds (kept in its
    study, so that a rerun reuses them): the member's and the default's speed against the own best."""
    st = s.state(i)
    named = {"own": own, "portfolio": member}
    keys = {n: s.key(st, p) for n, p in named.items()}
    attr = "confirmed:" + hashlib.sha256(json.dumps([s.cfg.base.study_name, keys]).encode()).hexdigest()[:16]
    if attr in st.study.user_attrs:
        return dict(st.study.user_attrs[attr])
    default_key = s.key(st, st.default)
    distinct = {key: n for n, key in keys.items() if key != default_key}
    candidates = [("default", st.default), *[(n, named[n]) for n in dict.fromkeys(distinct.values())]]
    runner = s.runner_for(i, _init(st.cfg))
    try:
        conf = confirm_points(st.cfg, runner, candidates, "the cache-model default")
    finally:
        runner.close()
    medians = {r["name"]: r.get("median_s", pf.FAILED) for r in conf["rows"]}
    medians.update({n: medians[distinct.get(key, "default")] for n, key in keys.items()})
    best = min(medians.values())
    out = {
        "own_speed": _ratio(best, medians["own"]),
        "portfolio_speed": _ratio(best, medians["portfolio"]),
        "default_speed": _ratio(best, medians["default"]),
        "rounds": float(st.cfg.confirm_rounds),
    }
    st.study.set_user_attr(attr, out)
    return out


def _save(s: Search, doc: PortfolioDoc) -> None:
    """The document, in a study named after the portfolio (no trials); and the tuned records: each
    searched shape's member, saying which portfolio and member it is (sweep --tuned uses them; a shape not
    listed takes its nearest listed shape's, which is the rule)."""
    import optuna  # the opbench[tune] extra (errors.missing_dependency)

    base = s.cfg.base
    storage = open_storage(base.storage_url, base.heartbeat_s, base.grace_s)
    study = optuna.create_study(study_name=base.study_name, storage=storage, load_if_exists=True)
    study.set_user_attr("portfolio", doc)
    if base.kernel is not None:
        return  # a user kernel's portfolio is its document and export; records hold our kernels' tiles
    for row in doc["shapes"]:
        if row["held_out"] or row.get("member") is None:
            continue
        member = row["member"]
        assert member is not None
        save_record({
            "op": base.op.key,
            "dtype": base.dtype,
            "shape": row["shape"],
            "threads": base.threads,
            "tiles": record_tiles(doc["members"][member] or {}),
            "isa": base.isa or "",
            "study": base.study_name,
            "portfolio": {"name": base.study_name, "member": member, "members": len(doc["members"])},
            "command": list(base.command),
        })  # fmt: skip

"""A portfolio's run (`opbench tune OP --batch-file FILE --portfolio K`): the search (portfolio_search.py),
then the held-out shapes judged, every shape confirmed, the document saved with its study and the records
written."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable

from opbench.documents import Params
from opbench.machine import utc_now
from opbench.texts import point_label
from opbench.tiles import record_tiles
from opbench.tune import portfolio as pf
from opbench.tune.config import worker_init
from opbench.tune.confirmation import AS_DEFAULT, confirm_points
from opbench.tune.portfolio_search import (
    PortfolioConfig,
    RunnerFor,
    Search,
    explore_budget,
    search,
    transferred,
)
from opbench.tuned import save as save_record
from opbench.tuning_documents import PortfolioDoc, PortfolioShape

__all__ = ["PortfolioConfig", "run"]

CURVE_TO = 8  # the loss-against-K curve goes at least this far


def run(cfg: PortfolioConfig, on_event: Callable[[str, dict[str, object]], None],
        runner_for: RunnerFor | None = None) -> PortfolioDoc:  # fmt: skip
    """Search, choose, judge the held-out shapes, confirm; the portfolio's document, saved in its study."""
    s, pool, chosen, default_key = search(cfg, on_event, runner_for)
    assigned = pf.assign(s.grid, chosen)
    members = [s.points[s.grid.tilings[j]] for j in chosen]
    return _document(s, pool, chosen, assigned, members, default_key)


def _document(
    s: Search, pool: list[int], chosen: list[int], assigned: list[int], members: list[Params | None],
    default_key: str,
) -> PortfolioDoc:  # fmt: skip
    cfg, grid = s.cfg, s.grid
    search_cost = sum(s.measured_in(i) for i in s.searched)  # this run's and any earlier one's
    shown = [j for j in pool if any((g, j) in grid.times for g in range(len(grid.shapes)))]
    est = pf.estimate(grid)  # the curve's cells not measured (the search measures where the choice rests)
    curve = []
    for k in range(1, max(cfg.k, CURVE_TO) + 1):  # among the pool the members were chosen in
        curve.append({"k": float(k), "speed": pf.score(grid, pf.select(grid, k, pool, est), est)})
    dj = grid.tilings.index(default_key)
    member_of = [chosen.index(a) for a in assigned]
    rows: list[PortfolioShape] = []
    for g, i in enumerate(s.searched):
        own = grid.best_tiling(g)
        rows.append(_row(s, i, member_of[g], s.points[grid.tilings[own]] if own is not None else None,
                         grid.speed(g, assigned[g], {}), grid.speed(g, dj, {}), False))  # fmt: skip
        if cfg.base.confirm_rounds > 0:
            _confirm_or_fall_back(s, i, rows[-1], members, grid.speed(g, dj, {}))
    member_of = [r.get("member") or 0 for r in rows]  # after the fallbacks: what the rule hands out
    for i in s.held:
        m = pf.rule(grid.shapes, member_of, s.fields[i])
        st = s.state(i)
        mine = [members[m]] if m is not None else []
        trials = cfg.base.trials or 0  # its own best found as a searched shape's, its member measured apart
        s.explore(i, transferred(s, i), trials, explore_budget(trials))
        s.fill(i, mine)
        cells = s.cells(i)
        best = min(cells.values(), default=pf.FAILED)
        own_key = min(cells, key=lambda k: cells[k]) if cells else None
        member_t = cells.get(s.key(st, members[m]), pf.FAILED) if m is not None else pf.FAILED
        default_t = cells.get(s.key(st, st.default), pf.FAILED)
        rows.append(_row(s, i, m, s.points.get(own_key) if own_key else None, _ratio(best, member_t),
                         _ratio(best, default_t), True))  # fmt: skip
    if cfg.base.confirm_rounds > 0:
        for row, i in zip(rows[len(s.searched) :], s.held, strict=True):
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
        "confirmed": {
            "speed": _geomean(searched, "confirmed:portfolio_speed"),
            "default_speed": _geomean(searched, "confirmed:default_speed"),
            **(
                {
                    "holdout_speed": _geomean(held, "confirmed:portfolio_speed"),
                    "holdout_default_speed": _geomean(held, "confirmed:default_speed"),
                }
                if held
                else {}
            ),
        }
        if cfg.base.confirm_rounds > 0
        else {},
        "measurements": search_cost,
        "grid_cells": len(grid.shapes) * len(pool),
        "heat": {  # the pool's tilings measured on some searched shape; None: not measured there
            "tilings": [point_label(s.points[grid.tilings[j]]) for j in shown],
            "speeds": [
                [grid.speed(g, j, {}) if (g, j) in grid.times else None for j in shown]
                for g in range(len(grid.shapes))
            ],
        },
        "command": list(base.command),
        "created_utc": utc_now(),
    }
    _save(s, doc)
    return doc


def _ratio(best: float, t: float) -> float:
    return 0.0 if t == pf.FAILED or best == pf.FAILED else min(1.0, best / t)


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
    """The count-weighted geomean of a speed of the rows: `speed`, `default_speed`, or a confirmed one
    (`confirmed:portfolio_speed`, `confirmed:default_speed`); 0 where one is 0 or missing."""
    total = sum(r["count"] for r in rows)
    if field.startswith("confirmed:"):
        speeds = [(r["count"], (r.get("confirmed") or {}).get(field[10:], 0.0)) for r in rows]
    else:
        speeds = [(r["count"], float(r["speed"] if field == "speed" else r["default_speed"])) for r in rows]
    if total <= 0 or any(v <= 0 for _, v in speeds):
        return 0.0
    return math.exp(sum(w * math.log(v) for w, v in speeds) / total)


def _confirm_or_fall_back(
    s: Search, i: int, row: PortfolioShape, members: list[Params | None], default_speed: float
) -> None:
    """Confirm a searched shape's member; where it was not faster than the cache-model default beyond both
    95% intervals, the shape falls back to the default (a member of its own, beside the K tilings), as a
    single shape's tuner keeps the default unless its winner beats it so."""
    index = row.get("member")
    member = members[index] if index is not None else None
    row["confirmed"] = _confirm(s, i, row.get("own_tiles"), member)
    st = s.state(i)  # the default: None (the cache model) for our kernels, a user kernel's baseline point
    if s.key(st, member) == s.key(st, st.default) or row["confirmed"].get("member_faster", 0.0) > 0:
        return
    if st.default not in members:
        members.append(st.default)
    row["member"] = members.index(st.default)
    row["fallback"] = True
    row["speed"] = default_speed
    row["confirmed"]["portfolio_speed"] = row["confirmed"]["default_speed"]


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
    runner = s.runner_for(i, worker_init(st.cfg))
    try:
        conf = confirm_points(st.cfg, runner, candidates, "the cache-model default")
    finally:
        runner.close()
    medians = {r["name"]: r.get("median_s", pf.FAILED) for r in conf["rows"]}
    medians.update({n: medians[distinct.get(key, "default")] for n, key in keys.items()})
    ci = {r["name"]: r.get("gflops_ci") for r in conf["rows"]}
    member_row = distinct.get(keys["portfolio"], "default")
    mine, base = ci.get(member_row), ci.get("default")
    as_default = any(AS_DEFAULT in (r.get("flags") or []) for r in conf["rows"] if r["name"] == member_row)
    # the member beats the default beyond both intervals (or the default failed and the member ran), and is
    # not the default's own blocking under other tile values (confirmation.AS_DEFAULT)
    faster = (
        mine is not None
        and (base is None or mine[0] > base[1])
        and keys["portfolio"] != default_key
        and not as_default
    )
    best = min(medians.values())
    out = {
        "own_speed": _ratio(best, medians["own"]),
        "portfolio_speed": _ratio(best, medians["portfolio"]),
        "default_speed": _ratio(best, medians["default"]),
        "member_faster": float(faster),
        "rounds": float(st.cfg.confirm_rounds),
    }
    st.study.set_user_attr(attr, out)
    return out


def _save(s: Search, doc: PortfolioDoc) -> None:
    """The document, in a study named after the portfolio (no trials); and, once confirmed, the tuned
    records: each searched shape's member, saying which portfolio and member it is (sweep --tuned uses them;
    a shape not listed takes its nearest listed shape's, which is the rule). An unconfirmed portfolio (no
    confirmation rounds: the API's, a benchmark's) saves no record, as a single shape's tuner saves none
    unconfirmed."""
    import optuna  # the opbench[tune] extra (errors.missing_dependency)

    base = s.cfg.base
    study = optuna.create_study(study_name=base.study_name, storage=s.storage(), load_if_exists=True)
    study.set_user_attr("portfolio", doc)
    if base.kernel is not None or not doc["confirmed"]:
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

"""Portfolios of tilings (tune/portfolio.py, tune/portfolio_run.py): the objective, selection and rule on
small grids worked by hand, then the whole search on a replayed grid (tune/replay.py's ReplayRunner: a
table of made-up measurements per shape), with held-out shapes, records and a rerun that measures nothing."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from opbench import tuned
from opbench.ops import gemm
from opbench.ops.gemm import GemmShape
from opbench.tune import portfolio as pf
from opbench.tune import portfolio_run
from opbench.tune.config import TuneConfig, build_space
from opbench.tune.objective import _key
from opbench.tune.replay import ReplayRunner

optuna = pytest.importorskip("optuna")


def _grid(speeds: list[list[float]], weights: list[float] | None = None) -> pf.Grid:
    """A full grid from relative speeds (shape x tiling; 0: failed; each row's best 1), its best at 1 s."""
    shapes = [{"m": 2**i, "n": 64, "k": 64} for i in range(len(speeds))]
    grid = pf.Grid(shapes, weights or [1.0] * len(speeds))
    for i, row in enumerate(speeds):
        for j, s in enumerate(row):
            grid.put(i, f"t{j}", pf.FAILED if s == 0 else 1.0 / s)
    return grid


def test_the_score_is_the_count_weighted_geomean_of_each_shapes_best_member() -> None:
    grid = _grid([[1.0, 0.5, 0.2], [0.25, 1.0, 0.2], [0.8, 0.4, 1.0]], weights=[1.0, 2.0, 1.0])
    assert pf.score(grid, [0]) == pytest.approx((1.0 * 0.25**2 * 0.8) ** 0.25)
    assert pf.score(grid, [1]) == pytest.approx((0.5 * 1.0 * 0.4) ** 0.25)
    assert pf.score(grid, [0, 1]) == pytest.approx((1.0 * 1.0 * 0.8) ** 0.25)
    assert pf.assign(grid, [0, 1]) == [0, 1, 0]
    assert pf.loss(pf.score(grid, [0, 1])) == pytest.approx(0.8**-0.25 - 1)
    assert pf.score(_grid([[1.0, 0.0], [0.0, 1.0]]), [0]) == 0.0  # a shape its member fails on


def test_the_counts_decide_which_single_tiling_serves_best() -> None:
    speeds = [[1.0, 0.6], [0.5, 1.0]]
    assert pf.select(_grid(speeds, [3.0, 1.0]), 1) == [0]
    assert pf.select(_grid(speeds, [1.0, 3.0]), 1) == [1]


def test_swaps_find_the_pair_greedy_additions_miss() -> None:
    """t0 is the best single tiling, so greedy takes it first; but t1 and t2 together serve every shape at
    its best, which only a swap finds."""
    speeds = [[0.9, 1.0, 0.3], [0.9, 0.3, 1.0], [0.9, 1.0, 0.3], [0.9, 0.3, 1.0]]
    grid = _grid(speeds)
    assert pf.select(grid, 1) == [0]
    assert sorted(pf.select(grid, 2)) == [1, 2]
    assert pf.score(grid, pf.select(grid, 2)) == pytest.approx(1.0)
    assert len(pf.select(grid, 3)) == 2  # a third member adds nothing: none is taken


def test_the_rule_is_the_nearest_listed_shapes_member() -> None:
    listed = [{"m": 16, "n": 64, "k": 64}, {"m": 1024, "n": 64, "k": 64}]
    assert pf.rule(listed, [0, 1], {"m": 32, "n": 64, "k": 64}) == 0
    assert pf.rule(listed, [0, 1], {"m": 512, "n": 64, "k": 64}) == 1
    assert pf.rule(listed, [0, 1], {"m": 128, "n": 64, "k": 64}) == 0  # a tie: the earlier listed
    batched = {"m": 16, "n": 64, "k": 64, "batch": 8}  # another product count: no nearness
    assert pf.rule(listed, [0, 1], batched) is None


def test_an_unmeasured_cell_is_estimated_from_the_tilings_speed_on_nearby_shapes() -> None:
    grid = _grid([[1.0, 0.5], [1.0, 0.5], [1.0, 0.5]])
    del grid.times[(1, 1)]
    est = pf.estimate(grid)
    assert est == {(1, 1): pytest.approx(2.0)}  # its neighbours' relative speed, 0.5
    chosen, missing = pf.next_cells(grid, 2)
    assert missing == ([(1, 1)] if 1 in chosen else [])


# --- the whole search, replayed

SHAPES = [GemmShape(m, 256, 256) for m in (8, 16, 64, 256, 1024, 2048)]


def _cfg(tmp_path: Path, name: str = "pf", **kw: Any) -> TuneConfig:
    return TuneConfig(
        shape=SHAPES[0], dtype="fp32", threads=1, study_name=name, storage_url=f"sqlite:///{tmp_path}/s.db",
        trials=6, seed=1, confirm_rounds=1, confirm_processes=1, op=gemm.OP, **kw,
    )  # fmt: skip


def _landscape(cfg: TuneConfig) -> dict[str, float | None]:
    """A shape's made-up GFLOPS per valid tiling: best where tile_m is near m and tile_n near 256, a few
    failing; the cache-model default ({} tiles) at 60% of the best."""
    space, _ = build_space(cfg)
    m = cfg.shape.to_dict()["m"]
    table: dict[str, float | None] = {}
    for n, tiles in enumerate(space.enumerate()):
        off = abs(math.log2(int(tiles["tile_m"]) / min(m, 256))) + 0.5 * abs(
            math.log2(int(tiles["tile_n"]) / 256)
        )
        table[_key(tiles, "")] = None if n % 11 == 5 else 100.0 / (1.0 + off)
    table[_key({}, "")] = 0.6 * max(v for v in table.values() if v)
    return table


class Replays:
    def __init__(self, tmp_path: Path) -> None:
        self.tables: dict[int, dict[str, float | None]] = {}
        self.runners: list[ReplayRunner] = []
        self.tmp_path = tmp_path

    def __call__(self, i: int, init: Any) -> ReplayRunner:
        shape = GemmShape(**init["shape"])
        if i not in self.tables:
            self.tables[i] = _landscape(replace(_cfg(self.tmp_path), shape=shape))
        runner = ReplayRunner(self.tables[i], gemm.OP.flops(shape))
        self.runners.append(runner)
        return runner

    @property
    def measured(self) -> int:
        return sum(len(r.measured) for r in self.runners)


@pytest.fixture(autouse=True)
def _own_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPBENCH_RECORDS_DIR", str(tmp_path / "records"))


def _portfolio(tmp_path: Path, replays: Replays, k: int = 2, holdout: float = 0.0) -> Any:
    cfg = portfolio_run.PortfolioConfig(
        _cfg(tmp_path), tuple(SHAPES), (1.0, 1.0, 2.0, 2.0, 1.0, 1.0), k, holdout
    )
    return portfolio_run.run(cfg, lambda kind, event: None, replays)


def test_a_portfolio_rests_on_measurements_and_costs_less_than_the_grid(tmp_path: Path) -> None:
    replays = Replays(tmp_path)
    doc = _portfolio(tmp_path, replays)
    assert 1 <= len(doc["members"]) <= 2
    searched = [r for r in doc["shapes"] if not r["held_out"]]
    assert len(searched) == len(SHAPES)
    # every shape's member was measured on it: its speed is the table's, against the best measured there
    for i, row in enumerate(searched):
        table = replays.tables[i]
        member = doc["members"][row["member"]]
        assert table[_key(member or {}, "")] is not None and row["speed"] > 0
    # the search measured a fraction of the grid of every shape's valid tilings
    full = sum(len(t) for t in replays.tables.values())
    assert doc["measurements"] < full / 4
    assert doc["curve"][0]["speed"] <= doc["curve"][-1]["speed"] + 1e-12
    assert doc["speed"] == pytest.approx(doc["curve"][-1]["speed"])
    assert doc["default_speed"] < doc["speed"]
    # a rerun on the same storage measures nothing new and chooses the same
    again = Replays(tmp_path)
    assert _portfolio(tmp_path, again)["members"] == doc["members"]
    assert again.measured == 0


def test_held_out_shapes_get_the_rules_member_and_records_say_which(tmp_path: Path) -> None:
    replays = Replays(tmp_path)
    doc = _portfolio(tmp_path, replays, holdout=0.34)
    held = [r for r in doc["shapes"] if r["held_out"]]
    searched = [r for r in doc["shapes"] if not r["held_out"]]
    assert len(held) == 2 and doc["holdout_speed"] is not None
    for row in held:
        member = pf.rule([r["shape"] for r in searched], [r["member"] for r in searched], row["shape"])
        assert row["member"] == member
        assert 0 < row["speed"] <= 1 and "portfolio_speed" in row["confirmed"]
    listed = searched[0]
    found = tuned.lookup("gemm", "fp32", listed["shape"], 1)
    assert found is not None and "listed for this shape" in found[1]
    assert found[0]["tiles"] == (doc["members"][listed["member"]] or {})
    unlisted = tuned.lookup("gemm", "fp32", held[0]["shape"], 1)
    assert unlisted is not None and "by its rule" in unlisted[1]

"""Portfolios of tilings (tune/portfolio.py, tune/portfolio_run.py): the objective, selection and rule on
small grids worked by hand, then the whole search on a replayed grid (tune/replay.py's ReplayRunner: a
table of made-up measurements per shape), with held-out shapes, records and a rerun that measures nothing."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import FAST_TRIALS

from opbench import tuned
from opbench.ops import gemm
from opbench.ops.gemm import GemmShape
from opbench.tune import portfolio as pf
from opbench.tune import portfolio_run, portfolio_search
from opbench.tune.config import TuneConfig, build_space
from opbench.tune.confirmation import baseline
from opbench.tune.objective import _key, request
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


def test_a_member_is_measured_where_it_may_serve_and_not_where_it_is_estimated_well_behind() -> None:
    # m = 1, 2, 4: t0 serves the first two, t1 the third; t1 on m = 2 is unmeasured, estimated from its
    # neighbours at sqrt(0.5 * 1.0) = 0.71 of that shape's best, which t0 reaches there (measured)
    grid = _grid([[1.0, 0.5], [1.0, 0.5], [0.5, 1.0]])
    del grid.times[(1, 1)]
    chosen, missing = pf.next_cells(grid, 2)
    assert sorted(chosen) == [0, 1] and missing == []  # 0.71 is more than FILL_MARGIN behind
    assert pf.next_cells(grid, 2, margin=0.5)[1] == [(1, 1)]  # within a wider margin: measured
    ahead = _grid([[0.5, 1.0], [0.5, 1.0], [0.5, 1.0]])  # t1 estimated ahead of t0 on m = 2: measured
    del ahead.times[(1, 1)]
    assert pf.next_cells(ahead, 2) == ([1], [(1, 1)])


def test_tilings_transfer_to_a_new_shape_from_its_near_neighbours_first() -> None:
    # shapes m = 1, 2, 4, 8: t0 is best on the two small ones, t1 on m = 8 only, t2 on m = 4 only
    grid = _grid([[1.0, 0.3, 0.6], [1.0, 0.3, 0.6], [0.5, 0.5, 1.0], [0.2, 1.0, 0.5]])
    assert pf.ranked(grid, {"m": 2, "n": 64, "k": 64}) == [0, 2, 1]
    assert pf.ranked(grid, {"m": 16, "n": 64, "k": 64})[0] == 1  # its nearest shape's best
    # a tiling measured only on a far shape is shrunk towards the prior: the near shapes' agreement wins
    far = pf.Grid([*grid.shapes, {"m": 4096, "n": 64, "k": 64}], [1.0] * 5, grid.tilings[:], dict(grid.times))
    far.put(4, "t3", 1.0)
    assert pf.ranked(far, {"m": 2, "n": 64, "k": 64})[:2] == [0, 2]  # t3 (index 3) near the prior, 0.5
    assert pf.ranked(far, {"m": 2, "n": 64, "k": 64}, prior=0.0)[0] == 3  # unshrunk, its lone 1 ranks first
    assert pf.ranked(grid, {"m": 2, "n": 64, "k": 64, "batch": 4}) == [0, 1, 2]  # no nearness: the prior


# --- the whole search, replayed

SHAPES = [GemmShape(m, 256, 256) for m in (8, 16, 64, 256, 1024, 2048)]


def _cfg(tmp_path: Path, name: str = "pf", **kw: Any) -> TuneConfig:
    return TuneConfig(
        shape=SHAPES[0], dtype="fp32", threads=1, study_name=name, storage_url=f"sqlite:///{tmp_path}/s.db",
        trials=6, seed=1, confirm_processes=1, op=gemm.OP, **{"confirm_rounds": 1, **kw},
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
    cfg = portfolio_search.PortfolioConfig(
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
    assert doc["speed"] == pytest.approx(doc["curve"][1]["speed"])  # the curve at K = 2 is the portfolio
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


# --- the dispatch table, exported


def _doc(op: str, shapes: list[dict[str, int]], members: list[dict[str, Any] | None], of: list[int]) -> Any:
    return {
        "name": "test-portfolio",
        "op": op,
        "dtype": "fp32",
        "threads": 2,
        "isa": "",
        "members": members,
        "speed": 0.97,
        "default_speed": 0.8,
        "shapes": [
            {"shape": s, "label": str(s), "count": 1.0, "held_out": False, "member": m}
            for s, m in zip(shapes, of, strict=True)
        ],
    }


GEMMS = [
    {"m": 16, "n": 768, "k": 768},
    {"m": 2048, "n": 768, "k": 768},
    {"m": 64, "n": 64, "k": 64, "batch": 96},
]
CONVS = [
    {"n": 2, "c": 64, "h": 56, "w": 56, "k": 64, "r": 3, "s": 3, "stride_h": 1, "stride_w": 1, "pad_h": 1,
     "pad_w": 1, "dil_h": 1, "dil_w": 1, "groups": 1},
    {"n": 2, "c": 256, "h": 14, "w": 14, "k": 256, "r": 1, "s": 1, "stride_h": 1, "stride_w": 1, "pad_h": 0,
     "pad_w": 0, "dil_h": 1, "dil_w": 1, "groups": 1},
]  # fmt: skip
PROGRAM = """#include <cstdio>
#include "portfolio.hpp"
namespace p = opbench_portfolio::test_portfolio;
int main() {
    long long shape[p::kFields];
    while (true) {
        for (std::size_t f = 0; f < p::kFields; ++f)
            if (std::scanf("%lld", &shape[f]) != 1) return 0;
        std::printf("%d\\n", p::lookup(shape));
    }
}
"""


@pytest.mark.parametrize(
    ("op", "listed", "members", "of", "queries"),
    [
        ("gemm", GEMMS, [{"tile_m": 12, "tile_n": 256, "tile_k": 128}, None], [0, 1, 0],
         [GEMMS[0], GEMMS[1], {"m": 100, "n": 768, "k": 768}, {"m": 1000, "n": 768, "k": 768},
          {"m": 64, "n": 64, "k": 64, "batch": 96}, {"m": 70, "n": 64, "k": 64, "batch": 96},
          {"m": 64, "n": 64, "k": 64, "batch": 12}]),
        ("conv", CONVS, [{"tile_m": 64, "conv_path": "pixels_as_rows"}, {"tile_k": 32}], [1, 0],
         [CONVS[0], CONVS[1], {**CONVS[0], "h": 28, "w": 28}, {**CONVS[1], "c": 512}, {**CONVS[0], "r": 5}]),
    ],
)  # fmt: skip
def test_the_exported_header_compiles_and_looks_up_as_the_rule_does(
    op: str, listed: list[dict[str, int]], members: list[Any], of: list[int], queries: list[dict[str, int]],
    tmp_path: Path,
) -> None:  # fmt: skip
    import dataclasses
    import json
    import subprocess

    from opbench.documents import int_fields
    from opbench.ops import OPS
    from opbench.tune import export

    doc = _doc(op, listed, members, of)
    (tmp_path / "portfolio.hpp").write_text(export.to_cpp(doc))
    (tmp_path / "main.cpp").write_text(PROGRAM)
    build = subprocess.run(["c++", "-std=c++17", "-Wall", "-Werror", "-o", str(tmp_path / "lookup"),
                            str(tmp_path / "main.cpp")], capture_output=True, text=True)  # fmt: skip
    assert build.returncode == 0, build.stderr
    table = json.loads(export.to_json(doc))
    fields = table["fields"]
    full = [int_fields(dataclasses.asdict(OPS[op].shape_from_case(q))) for q in queries]
    stdin = "\n".join(" ".join(str(q[f]) for f in fields) for q in full)
    got = subprocess.run(
        [str(tmp_path / "lookup")], input=stdin, capture_output=True, text=True
    ).stdout.split()
    want = [pf.rule(listed, of, q) for q in queries]
    assert [int(g) for g in got] == [-1 if w is None else w for w in want]
    assert -1 in [int(g) for g in got] and len(set(want) - {None}) == 2  # every member and no match occur
    assert table["members"][of[0]] == (members[of[0]] or {})
    if op == "conv":
        assert '"pixels_as_rows"' in (tmp_path / "portfolio.hpp").read_text()


# --- the command line


BATCH = "--matmul\n8x32:32x32 # count=3\n16x32:32x32\n64x32:32x32 # count=2\n"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--portfolio", "2"], "--portfolio needs the shapes: --batch-file FILE or --suite NAME"),
        (["--batch-file", "B"], "give --portfolio K"),
        (["--batch-file", "B", "--portfolio", "2", "--m", "8"], "--m names one shape"),
        (["--batch-file", "B", "--suite", "resnet50", "--portfolio", "2"], "(one of them)"),
        (["--batch-file", "C", "--portfolio", "2"], "C: no gemm problem opbench runs"),
        (["--batch-file", "B", "--portfolio", "2", "--objectives", "gflops,error"], "speed alone"),
        (["--batch-file", "B", "--portfolio", "0"], "must be >= 1"),
        (["--batch-file", "B", "--portfolio", "2", "--holdout", "0.95"], "must be in [0, 0.9]"),
        (["--batch-file", "B", "--portfolio", "2", "--export", "xml"], "expected json, cpp or json,cpp"),
    ],
)
def test_portfolio_usage_errors_are_one_line(
    extra: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from opbench import cli

    (tmp_path / "B").write_text(BATCH)
    (tmp_path / "C").write_text("--conv\nmb2ic8ih8oc8kh3ph1\n")
    files = {"B": str(tmp_path / "B"), "C": str(tmp_path / "C")}
    argv = ["tune", "gemm", *[files.get(e, e) for e in extra], "--out", str(tmp_path)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_a_killed_portfolio_resumes_without_measuring_a_cell_twice(tmp_path: Path) -> None:
    """kill -9 in the middle of the second shape's study; the rerun finishes from what the studies hold."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from sqlalchemy import exc as sqlalchemy_exc

    (tmp_path / "B").write_text(BATCH)
    storage = f"sqlite:///{tmp_path}/tuning/studies.db"
    args = [sys.executable, "-m", "opbench", "tune", "gemm", "--batch-file", str(tmp_path / "B"),
            "--portfolio", "2", "--trials", "4", "--threads", "1", "--seed", "3", "--confirm-rounds", "1",
            "--confirm-processes", "1", "--heartbeat-s", "1", "--grace-s", "2", "--out", str(tmp_path),
            "--study", "pk", *FAST_TRIALS]  # fmt: skip
    second = "pk:gemm-16x32x32-fp32-t1"
    log = tmp_path / "first.log"
    proc = subprocess.Popen(args, stdout=log.open("w"), stderr=subprocess.STDOUT, env=os.environ.copy())
    before: dict[str, list[tuple[int, str]]] = {}
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            time.sleep(0.2)
            try:
                trials = optuna.load_study(study_name=second, storage=storage).trials
            except (KeyError, sqlalchemy_exc.SQLAlchemyError):
                continue
            if any(t.state.name == "COMPLETE" for t in trials):
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        for name in optuna.get_all_study_names(storage):
            kept = optuna.load_study(study_name=name, storage=storage).trials
            before[name] = [
                (t.number, t.user_attrs.get("key", "")) for t in kept if t.state.name == "COMPLETE"
            ]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert before.get(second), f"the second shape never completed a trial: {log.read_text()[-2000:]}"
    assert "pk" not in before  # killed before the portfolio was chosen
    time.sleep(3)  # past the grace period: the killed process's running trial is stale
    rerun = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    doc = optuna.load_study(study_name="pk", storage=storage).user_attrs["portfolio"]
    # at most K tilings, and the default beside them where a shape's member was not confirmed faster
    tilings = [m for m in doc["members"] if m is not None]
    assert len(doc["shapes"]) == 3 and len(tilings) <= 2 and len(doc["members"]) <= 3
    for name, kept in before.items():
        study = optuna.load_study(study_name=name, storage=storage)
        now = {t.number: t.user_attrs.get("key", "") for t in study.trials if t.state.name == "COMPLETE"}
        assert all(now.get(n) == key for n, key in kept), f"{name}: a completed trial was lost or changed"
    for name in optuna.get_all_study_names(storage):
        if name == "pk":
            continue
        study = optuna.load_study(study_name=name, storage=storage)
        keys = [t.user_attrs["key"] for t in study.trials
                if "key" in t.user_attrs and "reused_from" not in t.user_attrs
                and (t.state.name == "COMPLETE" or "failure" in t.user_attrs)]  # fmt: skip
        keys += [v["key"] for k, v in study.user_attrs.items() if k.startswith("cell:")]
        assert len(keys) == len(set(keys)), f"{name}: a cell was measured twice"
        measured = [t for t in study.trials if t.state.name == "COMPLETE" or "failure" in t.user_attrs]
        assert len(measured) == 4, f"{name}: {len(measured)} trials, not the 4 asked"


def test_the_report_shows_the_portfolio_with_its_heat_map_losses_and_curve(tmp_path: Path) -> None:
    import json

    from opbench import cli

    doc = _portfolio(tmp_path, Replays(tmp_path), holdout=0.34)
    assert [int(c["k"]) for c in doc["curve"]] == list(range(1, 9))
    out = tmp_path / "report"
    argv = ["report", "--study", "pf", "--storage", f"sqlite:///{tmp_path}/s.db", "--out", str(out)]
    assert cli.main(argv) == 0
    text = (out / "report.md").read_text()
    assert "## Portfolio: pf" in text
    images = sorted(p.name for p in (out / "images").iterdir())
    assert images == ["portfolio0-curve.png", "portfolio0-heat.png", "portfolio0-loss.png"]
    for row in doc["shapes"]:  # every shape's row, with the speeds the document holds
        label = row["label"] + (" (held out)" if row["held_out"] else "")
        line = next(ln for ln in text.splitlines() if ln.startswith(f"| {label} |"))
        assert f"{row['speed']:.3f}" in line
    model = json.loads((out / "report.json").read_text())
    assert model["portfolios"][0]["members"] == doc["members"]
    html = (out / "report.html").read_text()
    assert 'id="portfolios"' in html and html.count("<figure>") == 3


class CursedReplays(Replays):
    """The winner's curse: the search's short trials see the landscape, the confirmation's rounds (a
    request with the confirmation's timer) see every tiling 5% slower than the default."""

    def __call__(self, i: int, init: Any) -> ReplayRunner:
        runner = super().__call__(i, init)
        default = runner.table[_key({}, "")]
        assert default is not None
        return _cursed(runner, lambda asked: _key(asked["tiles"], "") if asked.get("tiles") else None,
                       default / 1.05)  # fmt: skip


def _cursed(runner: ReplayRunner, key_of: Callable[[Any], str | None], gflops: float) -> ReplayRunner:
    """A replay whose confirmation requests (those with a timer) of the points `key_of` names (None: not
    that one) answer at `gflops`."""
    table, measure = runner.table, runner.run

    def run(asked: Any, timeout_s: float) -> Any:
        key = key_of(asked) if "timer" in asked else None
        if key is not None:
            runner.table = {**table, key: gflops}
        try:
            return measure(asked, timeout_s)
        finally:
            runner.table = table

    runner.run = run  # type: ignore[method-assign]
    return runner


def test_a_member_not_confirmed_faster_than_the_default_falls_back_to_it(tmp_path: Path) -> None:
    doc = _portfolio(tmp_path, CursedReplays(tmp_path), holdout=0.34)
    searched = [r for r in doc["shapes"] if not r["held_out"]]
    assert None in doc["members"]
    for row in searched:
        member = doc["members"][row["member"]]
        assert member is None  # every tiling lost to the default in the confirmation
        assert row["confirmed"]["portfolio_speed"] == row["confirmed"]["default_speed"]
    assert any(row.get("fallback") for row in searched)  # a member the search chose was sent back
    found = tuned.lookup("gemm", "fp32", searched[0]["shape"], 1)
    assert found is not None and found[0]["tiles"] == {}  # the record ships the default
    for row in doc["shapes"]:
        if row["held_out"]:  # the rule hands out what the listed shapes ship: the default
            assert doc["members"][row["member"]] is None


class TwinReplays(Replays):
    """Every confirmation answer says it ran the same tiles: each member runs as the default does (its tiles
    past the shape's dimensions clamped, confirmation.AS_DEFAULT), however much faster the table has it."""

    def __call__(self, i: int, init: Any) -> ReplayRunner:
        runner = super().__call__(i, init)
        measure = runner.run

        def run(asked: Any, timeout_s: float) -> Any:
            answer = measure(asked, timeout_s)
            if "timer" in asked and answer["status"] == "ok":
                answer = {**answer, "tiles": {"tile_m": 2048, "tile_n": 256, "tile_k": 256}}
            return answer

        runner.run = run  # type: ignore[method-assign]
        return runner


def test_a_member_that_runs_as_the_default_is_never_confirmed_faster(tmp_path: Path) -> None:
    doc = _portfolio(tmp_path, TwinReplays(tmp_path))
    searched = [r for r in doc["shapes"] if not r["held_out"]]
    assert searched and all(doc["members"][row["member"]] is None for row in searched)
    assert all(row["confirmed"]["member_faster"] == 0.0 for row in searched if "confirmed" in row)


def test_portfolios_of_another_k_share_the_shapes_studies(tmp_path: Path) -> None:
    """`--portfolio 1` then `--portfolio 3` over the same shapes: the second explores nothing again (the
    CLI names the shapes' studies without K); it measures only the cells its larger choice rests on."""
    first, second = Replays(tmp_path), Replays(tmp_path)
    one = portfolio_search.PortfolioConfig(
        _cfg(tmp_path, "pf-k1"), tuple(SHAPES), (1.0,) * len(SHAPES), 1, prefix="pf"
    )
    three = replace(one, base=_cfg(tmp_path, "pf-k3"), k=3)
    doc1 = portfolio_run.run(one, lambda kind, event: None, first)
    doc3 = portfolio_run.run(three, lambda kind, event: None, second)
    assert len(doc1["members"]) == 1 and len(doc3["members"]) >= 2
    assert second.measured < first.measured / 3  # no trial again: the default and trials are in the studies
    names = optuna.get_all_study_names(f"sqlite:///{tmp_path}/s.db")
    assert sorted(n for n in names if ":" not in n) == ["pf-k1", "pf-k3"]
    assert len([n for n in names if n.startswith("pf:")]) == len(SHAPES)
    assert doc3["speed"] >= doc1["speed"]


def test_an_unconfirmed_portfolio_saves_no_record(tmp_path: Path) -> None:
    cfg = portfolio_search.PortfolioConfig(
        _cfg(tmp_path, confirm_rounds=0), tuple(SHAPES[:3]), (1.0, 1.0, 1.0), 2
    )
    doc = portfolio_run.run(cfg, lambda kind, event: None, Replays(tmp_path))
    assert doc["confirmed"] == {} and doc["members"]
    assert tuned.lookup("gemm", "fp32", doc["shapes"][0]["shape"], 1) is None


def test_a_shape_spends_its_transfer_share_once_and_samples_with_a_seed_of_its_own(tmp_path: Path) -> None:
    s = portfolio_search.Search(
        portfolio_search.PortfolioConfig(_cfg(tmp_path), tuple(SHAPES), (1.0,) * len(SHAPES), 2),
        lambda kind, event: None, Replays(tmp_path),
    )  # fmt: skip
    st = s.state(1)
    points: list[Any] = list(st.space.enumerate())[:5]
    s.explore(1, points, 4, 2)
    warm = [t.user_attrs["key"] for t in st.study.trials if "warm" in t.user_attrs]
    assert warm == [s.key(st, p) for p in points[:2]]  # the first two, in their order
    assert len(st.study.trials) == 4
    s.explore(1, points, 6, 2)  # a rerun with a larger budget: the sampler's, no third transfer
    assert sum("warm" in t.user_attrs for t in st.study.trials) == 2 and len(st.study.trials) == 6
    assert len({s.state(i).cfg.seed for i in range(len(SHAPES))}) == len(SHAPES)


class UserKernelReplays:
    """examples/blocked_gemm.py's space on made-up speeds (block_m near 64 and depth-first best, the
    baseline point slowest); `cursed`: the confirmation's rounds see every point but the baseline 5% slower
    than the baseline."""

    def __init__(self, cfg: TuneConfig, cursed: bool, depth: float = 32.0) -> None:
        self.cfg, self.cursed, self.depth = cfg, cursed, depth
        self.runners: list[tuple[GemmShape, ReplayRunner]] = []

    def __call__(self, i: int, init: Any) -> ReplayRunner:
        shape = GemmShape(**init["shape"])
        cfg = replace(self.cfg, shape=shape)
        space, _ = build_space(cfg)
        table: dict[str, float | None] = {}
        for p in space.enumerate():
            off = abs(math.log2(int(p["block_m"]) / 64)) + (p["order"] == "rows-first")
            table[request(cfg, p)[1]] = 100.0 / (1.0 + off + self.depth / int(p["block_k"]))
        base_key = request(cfg, baseline(cfg, space)[0])[1]
        table[base_key] = 10.0
        runner = ReplayRunner(table, gemm.OP.flops(shape))
        self.runners.append((shape, runner))
        if not self.cursed:
            return runner
        return _cursed(runner, lambda asked: key if (key := request(cfg, asked["params"])[1]) != base_key
                       else None, 10.0 / 1.05)  # fmt: skip


@pytest.mark.parametrize("cursed", [False, True])
def test_a_user_kernels_portfolio_serves_its_points_and_falls_back_to_its_baseline(
    tmp_path: Path, cursed: bool
) -> None:
    from opbench.tune import export
    from opbench.userkernel import parse_kernel

    root = Path(__file__).resolve().parent.parent
    kernel = parse_kernel(f"{root / 'examples/blocked_gemm.py'}:blocked_gemm")
    cfg = replace(_cfg(tmp_path, kernel=kernel, space=str(root / "examples/blocked_gemm.toml")), trials=5)
    shapes = tuple(GemmShape(m, 128, 512) for m in (64, 96, 256))
    doc = portfolio_run.run(
        portfolio_search.PortfolioConfig(cfg, shapes, (1.0, 1.0, 1.0), 2),
        lambda kind, event: None, UserKernelReplays(cfg, cursed),
    )  # fmt: skip
    space, _ = build_space(replace(cfg, shape=shapes[0]))
    base = baseline(cfg, space)[0]
    assert None not in doc["members"]  # a user kernel's default is its baseline point, never None
    for row in doc["shapes"]:
        member = doc["members"][row["member"]]
        assert member is not None and dict(space.params).keys() == member.keys()
        if cursed:  # every point lost to the baseline in the confirmation: each shape runs the baseline
            assert member == base and row.get("fallback")  # the search, slowest there, never chose it
        else:
            assert member != base and not row.get("fallback")
    assert export.table(doc)["members"] == doc["members"]


def test_a_member_never_runs_on_a_shape_whose_space_rules_it_out(tmp_path: Path) -> None:
    import json

    from opbench.userkernel import parse_kernel

    root = Path(__file__).resolve().parent.parent
    space = tmp_path / "space.toml"
    space.write_text(
        'op = "gemm"\n[params.block_m]\nvalues = [16, 64, 256]\n[params.block_k]\nstart = 32\nstep = "x2"\n'
        'stop = "k"\n[params.order]\nvalues = ["rows-first", "depth-first"]\n'
        '[[constraints]]\nname = "within k"\nrule = "block_k <= k"\n'
    )
    kernel = parse_kernel(f"{root / 'examples/blocked_gemm.py'}:blocked_gemm")
    cfg = replace(_cfg(tmp_path, kernel=kernel, space=str(space)), trials=10)
    shapes = (GemmShape(64, 128, 1024), GemmShape(96, 128, 1024), GemmShape(64, 128, 128))
    replays = UserKernelReplays(cfg, cursed=False, depth=2048.0)  # the deeper block_k, the faster
    cfg_p = portfolio_search.PortfolioConfig(cfg, shapes, (1.0, 1.0, 1.0), 2)
    doc = portfolio_run.run(cfg_p, lambda kind, event: None, replays)
    for row in doc["shapes"]:
        member = doc["members"][row["member"]]
        assert member is not None and int(member["block_k"]) <= row["shape"]["k"]
    for shape, runner in replays.runners:  # nothing past the shape's K was run on it
        assert all(json.loads(key)["params"]["block_k"] <= shape.k for key in runner.measured)
    study = portfolio_search.Search(cfg_p, lambda kind, event: None).state(2).study
    outside = [v for k, v in study.user_attrs.items() if k.startswith("cell:") and "failure" in v]
    assert outside and all(v["failure"] == portfolio_search.OUTSIDE for v in outside)  # a fill, not run

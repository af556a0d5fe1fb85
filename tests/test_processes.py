"""Each case measured across processes (issue 39): the bootstrap over processes, rounds and samples; the
process_dependent flag; compare, ab and history judging by the process-level spread; the sensitivity of a
case to the in-run probe and the utilization it corrects; a real sweep in two worker processes with
randomized layouts."""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_cli

from opbench import history, layout, overhead, sampling
from opbench.blocks import Time
from opbench.measure import Visit, combine
from opbench.measurement import Measurement
from opbench.report import ab
from opbench.report.compare import compare
from opbench.sweep.caseresult import corrected_peak


def visit(samples: list[float], process: int | None) -> Visit:
    v = Visit(Measurement(tuple(samples), 1))
    v.process = process
    return v


def tight(center: float, n: int = 6, rel: float = 0.005, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [center * (1 + rel * rng.uniform(-1, 1)) for _ in range(n)]


# --- the bootstrap over processes


def test_the_interval_spans_the_processes_not_only_the_samples() -> None:
    # three processes whose rounds agree within 0.5% but whose medians sit at 1.0, 1.1 and 1.2
    groups = [[tight(c, seed=i), tight(c, seed=i + 9)] for i, c in enumerate((1.0, 1.1, 1.2))]
    lo, hi = sampling.interval(groups)
    assert lo <= 1.0 + 0.01 and hi >= 1.2 - 0.01  # any one process could be the answer
    # the same samples pooled as if independent (one round of one process): a much narrower interval
    flat = [[[x for g in groups for r in g for x in r]]]
    f_lo, f_hi = sampling.interval(flat)
    assert f_hi - f_lo < 0.5 * (hi - lo)
    # a wrong interval fails: one that ignored a process would miss its median
    only_two = sampling.interval(groups[:2])
    assert only_two[1] < 1.2 - 0.05


def test_identical_processes_give_a_tight_interval_around_the_median() -> None:
    groups = [[tight(1.0, seed=i)] for i in range(4)]
    lo, hi = sampling.interval(groups)
    assert 0.99 < lo <= 1.0 <= hi < 1.01


def test_processes_that_disagree_beyond_their_spread_are_process_dependent() -> None:
    visits = [visit(tight(c, seed=i), i % 2) for i, c in enumerate((1.0, 1.2, 1.0, 1.2))]
    c = combine(visits)
    assert "process_dependent" in c.flags and "drifting" not in c.flags  # each process's rounds agree
    assert c.time["processes"] == 2 and c.time["between_processes"] > 0.15
    assert [p["rounds"] for p in c.time["per_process"]] == [2, 2]
    assert c.time["interval_over"] == "processes"
    assert c.time["interval_s"][0] < 1.02 and c.time["interval_s"][1] > 1.18
    assert [r["process"] for r in c.time["per_round"]] == [0, 1, 0, 1]


def test_processes_that_agree_are_not_flagged_and_rounds_can_still_drift() -> None:
    same = combine([visit(tight(1.0, seed=i), i % 3) for i in range(6)])
    assert "process_dependent" not in same.flags and "drifting" not in same.flags
    # within process 0 the rounds moved by 20%: that is drift, not the process
    moved = combine([visit(tight(1.0), 0), visit(tight(1.0, seed=1), 1), visit(tight(1.2, seed=2), 0)])
    assert "drifting" in moved.flags
    # in one process (no process field), the rounds are the top level, as before
    alone = combine([visit(tight(1.0), None), visit(tight(1.0, seed=3), None)])
    assert alone.time["interval_over"] == "rounds" and "processes" not in alone.time


# --- sensitivity and the utilization it corrects


def _points(slope: float, spread: float, cases: int = 4, visits: int = 4) -> list[tuple[float, float, str]]:
    rng = random.Random(1)
    out = []
    for c in range(cases):
        base = 1e-3 * (c + 1)
        for _ in range(visits):
            speed = 1.0 - spread * rng.random()
            out.append((speed, base * speed**-slope * (1 + 0.002 * rng.uniform(-1, 1)), str(c)))
    return out


@pytest.mark.parametrize("slope", [1.0, 0.4, 0.0])
def test_sensitivity_recovers_how_far_speed_follows_the_probe(slope: float) -> None:
    s = sampling.sensitivity(_points(slope, 0.15))
    assert s["estimate"] == pytest.approx(slope, abs=0.05)
    assert s["value"] == pytest.approx(slope, abs=0.08)  # a precise estimate outweighs the prior


def test_sensitivity_keeps_the_prior_where_the_visits_cannot_tell() -> None:
    noisy = sampling.sensitivity(_points(0.0, 0.002, cases=2, visits=3))  # the probe barely moved
    assert noisy["weight"] is not None and noisy["weight"] < 0.5
    assert noisy["value"] > 0.5  # pulled to the prior (1.0), not to the noise's slope
    none = sampling.sensitivity(_points(0.0, 0.15, cases=1, visits=2))  # too few visits
    assert none["estimate"] is None and none["value"] == sampling.SENSITIVITY_PRIOR


def test_each_round_is_corrected_by_its_own_probe() -> None:
    ref = {"fma_gflops": 200.0, "fma_speed": 0.8}  # beside (median): 200, best: 250
    # rounds of 1 ms beside a probe at 100% of the best, and 1.67 ms beside one at 60%: the same speed
    # at equal machine speed when the case follows the probe fully
    slow = 1.0e-3 / 0.6
    rounds = [((1.0e-3, 1.0e-3, 1.0e-3), 1.0), ((slow, slow, slow), 0.6)]
    flops = 1e8
    full = corrected_peak(ref, {"value": 1.0}, rounds)
    none = corrected_peak(ref, {"value": 0.0}, rounds)
    assert full and none
    gflops = flops / statistics.median([1.0e-3] * 3 + [slow] * 3) / 1e9  # the record's, over all samples
    assert gflops / full["gflops"] == pytest.approx(100.0 / 250.0, rel=0.01)  # 100 GFLOPS at best speed
    assert none["gflops"] == pytest.approx(250.0)  # against the best, uncorrected
    assert full["gflops"] <= 250.0 and none["reference"]["fma_best_gflops"] == pytest.approx(250.0)
    assert corrected_peak({"fma_gflops": 200.0, "fma_speed": None}, {"value": 1.0}, rounds) is None
    pending = corrected_peak(ref, None, rounds)  # before the end of the run: the prior
    assert pending and pending["reference"]["sensitivity"]["used"] == 1.0


# --- compare, ab and history judge by the process-level spread


def _record(median: float, per_process: list[float] | None, backend: str = "cpp") -> dict[str, Any]:
    samples = tight(median, n=9, rel=0.003)
    time: dict[str, Any] = {"median_s": median, "samples_s": samples}
    if per_process:
        time.update(
            per_process=[
                {"process": i, "median_s": m, "rounds": 1, "n_samples": 3, "rel_spread": 0.01}
                for i, m in enumerate(per_process)
            ],
            interval_s=[min(per_process), max(per_process)],
        )
    return {
        "op": "gemm", "label": "64x64x64", "dtype": "fp32", "backend": backend, "threads": 1,
        "device": "cpu", "status": "ok", "shape": {"m": 64, "n": 64, "k": 64}, "time": time,
        "flags": [], "notes": [],
    }  # fmt: skip


def _doc(record: dict[str, Any]) -> dict[str, Any]:
    return {"records": [record], "machine": {}, "settings": {"threads": 1}}


def test_compare_calls_a_move_within_the_processes_spread_unchanged() -> None:
    # the old run's processes read 1.0 and 1.25 ms (median 1.1): a new 1.25 ms is one of them
    old = _record(1.1e-3, [1.0e-3, 1.1e-3, 1.25e-3])
    new = _record(1.25e-3, [1.24e-3, 1.25e-3, 1.26e-3])
    row = compare(_doc(old), _doc(new), 0.05)["rows"][0]
    assert row["verdict"] == "unchanged" and "processes" in row["note"]
    # the same medians measured in one process each: the IQRs are apart, a regression
    row = compare(_doc(_record(1.1e-3, None)), _doc(_record(1.25e-3, None)), 0.05)["rows"][0]
    assert row["verdict"] == "regression"
    # and a move past every process of the old run is still one
    far = _record(1.5e-3, [1.49e-3, 1.5e-3, 1.51e-3])
    assert compare(_doc(old), _doc(far), 0.05)["rows"][0]["verdict"] == "regression"


def test_ab_interval_draws_processes_first() -> None:
    rng = np.random.default_rng(0)
    # A steady; B's process 0 ran 15% faster than its process 1, its rounds tight within each process
    a = [1.0 + 0.002 * rng.standard_normal(5) for _ in range(6)]
    b = [(0.85 if r % 2 == 0 else 1.0) + 0.002 * rng.standard_normal(5) for r in range(6)]
    sides = [(r % 2, r % 2) for r in range(6)]
    _, lo_r, hi_r = ab.speedup_interval(list(a), list(b))  # rounds as the top level
    _, lo_p, hi_p = ab.speedup_interval(list(a), list(b), processes=sides)
    assert hi_p - lo_p > hi_r - lo_r
    assert ab.verdict(lo_p, hi_p, 0.03) == "AMBIGUOUS"  # it only moved between processes
    time = Time.from_block({"median_s": 1.0, "per_round": [{"process": 0}, {"process": 1}, {}]})
    assert time is not None and ab.round_processes(time) == [0, 1, None]


def test_history_judges_the_range_of_process_medians(tmp_path: Path) -> None:
    def doc(median: float, per: list[float] | None) -> dict[str, Any]:
        return {"machine": {"identity_key": "m"}, "backends": {}, "records": [_record(median, per, "numpy")]}

    assert history.apply(doc(1.0e-3, [0.9e-3, 1.0e-3, 1.3e-3]), tmp_path) == 0
    # 1.25 ms, 25% slower than the earlier median, but inside its processes' range: not unlike it
    assert history.apply(doc(1.25e-3, [1.2e-3, 1.25e-3, 1.28e-3]), tmp_path) == 0
    # a run whose every process is past every earlier one by more than 15%: unlike
    assert history.apply(doc(2.0e-3, [1.9e-3, 2.0e-3, 2.1e-3]), tmp_path) == 1


# --- layouts, and a real sweep in worker processes


def test_place_puts_a_copy_at_the_offset_asked() -> None:
    a = np.arange(1000, dtype=np.float32).reshape(40, 25)
    for offset in (0, 64, 4032):
        p = layout.place(a, offset)
        assert layout.offset_in_page(p) == offset and np.array_equal(p, a) and p.dtype == a.dtype
    placed, offsets = layout.place_inputs({"a": a, "n": 3}, random.Random(0))
    assert placed["n"] == 3 and offsets["a"] % 64 == 0 and layout.offset_in_page(placed["a"]) == offsets["a"]
    assert layout.place_inputs({"a": a}, None) == ({"a": a}, {})


def test_a_sweep_in_two_processes_records_them(tmp_path: Path) -> None:
    start = time.perf_counter()
    proc = run_cli(
        ["sweep", "gemm", "--m", "17,64", "--n", "33", "--k", "29", "--dtype", "fp32", "--backend",
         "cpp,numpy", "--threads", "1", "--rounds", "4", "--processes", "2", "--min-sample-ms", "1",
         "--max-time-s", "0.1", "--out", str(tmp_path), "--quiet", "--format", "json"]
    )  # fmt: skip
    elapsed = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(Path(proc.stdout.split()[0]).read_text())
    assert doc["schema_version"] == 13 and doc["settings"]["processes"] == 2
    for name in ("cpp", "numpy"):
        layouts = doc["backends"][name]["processes"]
        assert len(layouts) == 2 and layouts[0] != layouts[1]
        # one user's call on the tiny case, timed in the first worker (overhead.py): a time per call that the
        # run's own duration bounds
        assert 0 < doc["backends"][name]["call_overhead_s"] <= elapsed / overhead.SAMPLES
        assert doc["backends"][name]["call_overhead_case"] == "gemm 8x8x8 fp32"
    for r in doc["records"]:
        assert r["status"] == "ok" and r["verify"]["ok"], r
        t = r["time"]
        rounds = t["per_round"]
        # round r in process r mod 2, rounds measured again (throttled, apart) included
        assert [x["process"] for x in rounds] == [i % 2 for i in range(len(rounds))]
        for x in rounds:
            assert all(0 <= o < 4096 and o % 64 == 0 for o in x["offsets"].values())
        assert t["interval_over"] == "processes" and t["interval_s"][0] <= t["median_s"] <= t["interval_s"][1]
        kept = {x["process"] for x in rounds if x["kept"]}
        assert t["processes"] == len(kept) and len(t["per_process"]) == len(kept)
        ref = r["reference"]
        assert ref["sensitivity"]["used"] in (0.0, ref["sensitivity"]["value"])
        assert r["utilization"] == pytest.approx(r["gflops"] / r["peak"]["gflops"])
        assert ref["utilization_beside"] == pytest.approx(r["gflops"] / ref["fma_gflops"])
        assert r["repro"].startswith("opbench sweep gemm")


def test_more_processes_than_rounds_is_a_usage_error(tmp_path: Path) -> None:
    proc = run_cli(["sweep", "gemm", "--rounds", "2", "--processes", "3", "--out", str(tmp_path)])
    assert proc.returncode == 2 and "--processes 3 needs --rounds 3" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = run_cli(["sweep", "gemm", "--processes", "-1", "--out", str(tmp_path)])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


# --- the tuner's confirmation across processes


def test_a_tiling_faster_in_one_process_only_is_not_saved() -> None:
    from opbench.tune.confirmation import record_verdict

    flops = 1e9

    def row(name: str, per_process: list[float]) -> dict[str, Any]:
        groups = [[tight(m, seed=i), tight(m, seed=i + 5)] for i, m in enumerate(per_process)]
        lo, hi = sampling.interval(groups)
        med = float(np.median([x for g in groups for r in g for x in r]))
        return {"name": name, "gflops": flops / med / 1e9, "gflops_ci": [flops / hi / 1e9, flops / lo / 1e9]}

    default = row("default", [1.0, 1.0, 1.0])
    lucky = row("#1", [0.8, 1.0, 1.0])  # 20% faster in one of three processes
    steady = row("#1", [0.8, 0.8, 0.81])
    assert record_verdict({"best": lucky, "default": default}) is not None
    assert record_verdict({"best": steady, "default": default}) is None
    # measured in its lucky process alone (all rounds in one worker), it would have been saved
    assert record_verdict({"best": row("#1", [0.8]), "default": row("default", [1.0])}) is None


def test_the_tuners_confirmation_runs_in_fresh_processes(tmp_path: Path) -> None:
    from opbench.ops.gemm import GemmShape
    from opbench.tune import study as tuner
    from opbench.tune.config import TuneConfig

    cfg = TuneConfig(
        shape=GemmShape(24, 8, 16), dtype="fp32", threads=1, study_name="p",
        storage_url=f"sqlite:///{tmp_path / 's.db'}", trials=2, confirm_top=1, confirm_rounds=2,
        confirm_processes=2, seed=0,
    )  # fmt: skip
    summary = tuner.run(cfg, lambda kind, info: None)
    rows = summary["confirmation"]["rows"]
    assert rows and all(r.get("processes") == 2 and len(r["process_medians_s"]) == 2 for r in rows), rows
    for r in rows:
        assert r["gflops_ci"][0] <= r["gflops"] <= r["gflops_ci"][1]

"""Numbers you can trust on a shared machine: interleaved rounds, the in-run reference, drift, throttle and
contention flags, machine identity, and compare's normalisation. Fake clocks and probes for the logic; one
real busy child process for contention."""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeClock, run_cli

from opbench.contention import CONTENDED_SHARE, MIN_WINDOW_S, CpuTimes, Monitor, pooled, shares
from opbench.measure import DRIFT_MIN_REL, Bench, Visit, combine, drifting, rate
from opbench.measurement import Measurement
from opbench.reference import APART_FACTOR, PROBE_INTERVAL_S, THROTTLED_SPEED, InRunReference
from opbench.sweep.driver import round_timer, visit_order
from opbench.timing import FIRST_CALL_BUDGETS, Timer, TimerConfig


class FakeProber:
    """Returns the queued values in turn (the last one forever), advancing the fake clock by `cost`. The
    cache probe has its own queue (`cache`) and count (`cache_calls`), and costs no time."""

    def __init__(
        self,
        values: list[float],
        clock: FakeClock | None = None,
        cost: float = 0.0,
        handoff: list[float] | None = None,
        cache: list[float] | None = None,
    ) -> None:
        self.values, self.clock, self.cost, self.calls = list(values), clock, cost, 0
        self.handoffs = list(handoff) if handoff is not None else None
        self.caches, self.cache_calls = list(cache or [200.0]), 0

    def fma_key(self, dtype: str) -> str:
        return "fp32"

    def _next(self) -> float:
        self.calls += 1
        if self.clock is not None:
            self.clock.now += self.cost
        return self.values.pop(0) if len(self.values) > 1 else self.values[0]

    def fma(self, dtype: str, threads: int) -> float:
        return self._next()

    def triad(self, threads: int) -> float:
        return self._next()

    def cache(self, threads: int) -> float:
        self.cache_calls += 1
        return self.caches.pop(0) if len(self.caches) > 1 else self.caches[0]

    def can_handoff(self) -> bool:
        return self.handoffs is not None

    def handoff(self) -> float:
        assert self.handoffs is not None, "a hand-off probe taken where the prober has none"
        return self.handoffs.pop(0) if len(self.handoffs) > 1 else self.handoffs[0]


def visit(samples: list[float], speed: float | None = None, contended: bool = False) -> Visit:
    v = Visit(Measurement(tuple(samples), 1), contention={"contended": contended})
    v.machine_speed = speed
    v.basis = "fma" if speed is not None else None
    return v


# --- interleaving


def test_every_case_is_visited_once_per_round_in_a_shuffled_order() -> None:
    groups = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
    order = visit_order(groups, 3, seed=0)
    assert len(order) == 3
    for r in order:
        assert sorted(r) == list(range(12))
    assert order[1] != order[2] and order[1] != list(range(12))
    assert visit_order(groups, 3, seed=0) == order  # seeded
    assert visit_order(groups, 3, seed=1) != order


def test_round_one_keeps_each_groups_backends_together() -> None:
    groups = [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    first = visit_order(groups, 2, seed=5)[0]
    for g in groups:
        positions = sorted(first.index(i) for i in g)
        assert positions == list(range(positions[0], positions[0] + len(g)))
    # some seed shuffles the group order and the order within a group
    assert any(visit_order(groups, 2, seed=s)[0] != list(range(9)) for s in range(5))
    assert visit_order(groups, 1, seed=3) == [list(range(9))]  # one round: the sweep's order


def test_rounds_split_the_sampling_budget() -> None:
    cfg = TimerConfig(max_time_s=1.5, min_samples=5, max_samples=50, warmup_s=0.06)
    r = round_timer(cfg, 3)
    assert r.max_time_s == pytest.approx(0.5) and r.max_samples == 17 and r.min_samples == 2
    assert r.warmup_s == pytest.approx(0.02)
    assert round_timer(cfg, 1) is cfg


# --- drift and stability


def test_rounds_that_disagree_beyond_their_iqrs_are_drifting() -> None:
    a = visit([1.00, 1.01, 1.00, 1.02, 1.01])
    b = visit([1.20, 1.21, 1.19, 1.20, 1.22])
    assert drifting([a, b])
    c = combine([a, b])
    assert "drifting" in c.flags
    assert c.time["rounds"] == 2 and c.time["rel_spread_rounds"] > 0.1
    # the stability class uses the larger spread: tight rounds far apart are not "stable"
    assert c.time["rel_iqr_within"] < 0.02 and c.time["stability"] != "stable"


def test_overlapping_or_close_rounds_are_not_drifting() -> None:
    a = visit([1.00, 1.10, 1.05, 0.95, 1.02])
    b = visit([1.04, 1.12, 0.98, 1.01, 1.06])
    assert not drifting([a, b])
    # apart but closer than DRIFT_MIN_REL: not called drifting
    close = 1 + DRIFT_MIN_REL / 2
    assert not drifting([visit([1.0, 1.0, 1.0]), visit([close] * 3)])
    assert "drifting" not in combine([a, b]).flags


def test_one_round_reports_the_plain_statistics() -> None:
    c = combine([visit([2.0, 2.1, 1.9, 2.0])])
    assert c.time["rounds"] == 1 and c.time["rel_spread_rounds"] == 0.0
    assert c.measurement.median_s == pytest.approx(2.0)


# --- throttling


def test_a_throttled_round_is_dropped_when_others_were_not() -> None:
    good = visit([1.0, 1.0, 1.01], speed=0.98)
    slow = visit([1.6, 1.6, 1.61], speed=THROTTLED_SPEED - 0.2)
    c = combine([good, slow, good])
    assert c.time["dropped_rounds"] == 1 and c.time["rounds"] == 2
    assert "throttled" not in c.flags and "drifting" not in c.flags
    assert c.measurement.median_s == pytest.approx(1.0, rel=0.02)


def test_a_throttled_round_slower_only_by_noise_is_kept() -> None:
    """Dropping it would leave one round of three, its spread unknown."""
    good = visit([1.0, 1.0, 1.01], speed=0.9)
    near = visit([1.02, 1.03, 1.03], speed=THROTTLED_SPEED - 0.02)
    far = visit([1.3, 1.3, 1.31], speed=THROTTLED_SPEED - 0.2)
    c = combine([far, good, near])
    assert c.time["dropped_rounds"] == 1 and c.time["rounds"] == 2
    assert c.time["rel_spread_rounds"] > 0.01


def test_a_throttled_round_that_ran_as_fast_is_kept_and_its_disagreement_shows() -> None:
    fast = visit([5.6, 5.7, 5.7], speed=THROTTLED_SPEED - 0.1)  # the probe said slow; the case was not
    slow = [visit([6.9, 6.95, 6.9], speed=0.93), visit([7.05, 7.1, 7.05], speed=0.94)]
    c = combine([fast, *slow])
    assert c.time["dropped_rounds"] == 0 and c.time["rounds"] == 3
    assert "drifting" in c.flags and c.time["stability"] != "stable"


def test_a_case_with_every_round_throttled_is_flagged() -> None:
    c = combine([visit([1.5] * 3, speed=0.5), visit([1.4] * 3, speed=0.6)])
    assert "throttled" in c.flags and c.time["dropped_rounds"] == 0
    assert c.machine_speed == pytest.approx(0.55)


def test_machine_speed_is_the_probe_over_the_best_this_machine_showed() -> None:
    clock = FakeClock()
    ref = InRunReference(2, prober=FakeProber([50.0], clock), clock=clock, best={"fma/fp32/2": 100.0})
    bench = Bench(Timer(TimerConfig(min_samples=1, max_samples=1), clock=clock), ref, quiet=lambda s: 0.0)
    v = bench.measure(lambda loops: 0.02 * loops)
    assert v.machine_speed == pytest.approx(0.5) and v.throttled
    assert v.reference("fma") == pytest.approx(50.0)


def test_the_speed_index_is_the_geometric_mean_of_the_fma_and_cache_probes() -> None:
    # the cache probe beside the visit reads 60% of its best, the FMA probe 90%: the index the utilization
    # is corrected by is sqrt(0.9 * 0.6); machine_speed (throttling) stays the FMA probe's alone
    clock = FakeClock()
    prober = FakeProber([90.0], clock, cache=[120.0])
    ref = InRunReference(1, prober=prober, clock=clock, best={"fma/fp32/1": 100.0, "cache/1": 200.0})
    bench = Bench(Timer(TimerConfig(min_samples=1, max_samples=1), clock=clock), ref, quiet=lambda s: 0.0)
    v = bench.measure(lambda loops: 0.02 * loops)
    assert prober.cache_calls == 1 and v.reference("cache") == pytest.approx(120.0)
    assert v.cache_speed == pytest.approx(0.6) and v.machine_speed == pytest.approx(0.9)
    assert v.speed_index == pytest.approx(math.sqrt(0.9 * 0.6))
    assert v.to_dict()["cache_gbs"] == pytest.approx(120.0)
    assert combine([v]).reference["speed_index"] == pytest.approx(math.sqrt(0.9 * 0.6))
    v.cache_speed = None  # no cache probe (a record from before it): the FMA probe's speed alone
    assert v.speed_index == pytest.approx(0.9)


def test_the_cache_probe_reads_bandwidth_in_l2() -> None:
    from opbench.reference import NativeProber

    gbs = NativeProber().cache(1)
    assert 1.0 < gbs < 10000.0  # GB/s from arrays in L2: above any DRAM stream of 1 GB/s, below nonsense


def apart_visit(samples: list[float], ratio: float) -> Visit:
    v = visit(samples, speed=1.0)
    v.handoff_ratio = ratio
    return v


def test_a_round_run_with_our_cpus_apart_is_dropped_when_slower_and_flags_the_case_when_alone() -> None:
    near = [apart_visit([1.0] * 5, 1.1), apart_visit([1.02] * 5, 1.0)]
    c = combine([*near, apart_visit([1.6] * 5, APART_FACTOR * 3)])
    assert c.time["dropped_rounds"] == 1 and c.measurement.median_s == pytest.approx(1.0, rel=0.03)
    assert "apart" not in c.flags and "throttled" not in c.flags
    # apart but as fast (a GEMM the placement does not reach): kept, so its rounds still count
    c = combine([*near, apart_visit([1.01] * 5, APART_FACTOR * 3)])
    assert c.time["dropped_rounds"] == 0
    # every round apart: kept, flagged apart (not throttled: the FMA probe read full speed)
    c = combine([apart_visit([1.6] * 5, 8.0), apart_visit([1.58] * 5, 9.0)])
    assert c.flags == ["apart"] and c.time["dropped_rounds"] == 0
    # just under the factor is not apart
    assert not apart_visit([1.0], APART_FACTOR * 0.99).apart and apart_visit([1.0], APART_FACTOR * 1.01).apart


def test_the_handoff_probe_runs_beside_multithreaded_cases_and_its_best_is_the_lowest() -> None:
    clock = FakeClock()
    prober = FakeProber([100.0], clock, handoff=[50.0, 400.0, 45.0])
    ref = InRunReference(2, prober=prober, clock=clock, best={"fma/fp32/2": 100.0})
    assert ref.kinds(False) == ("fma", "cache", "handoff")
    assert ref.kinds(True) == ("fma", "cache", "triad", "handoff")
    assert InRunReference(1, prober=prober, clock=clock).kinds(False) == (
        "fma",
        "cache",
    )  # one thread: no hand-off
    one_cpu = InRunReference(2, prober=FakeProber([100.0]), clock=clock)
    assert one_cpu.kinds(False) == ("fma", "cache")  # one CPU: no hand-off
    bench = Bench(Timer(TimerConfig(min_samples=1, max_samples=1), clock=clock), ref, quiet=lambda s: 0.0)
    near = bench.measure(run_for(clock, 0.01))
    clock.now += PROBE_INTERVAL_S
    apart = bench.measure(run_for(clock, 0.01))  # probes: hand-off 400 ns before it
    clock.now += PROBE_INTERVAL_S
    bench.finish()  # and 45 ns after it: the best so far
    assert ref.best["handoff"] == 45.0 and ref.run_best["handoff"] == 45.0
    # rated when its probe after came (best then 50 ns), and again against the run's best at its end
    assert near.reference("handoff") == pytest.approx(225.0) and near.handoff_ratio == pytest.approx(4.5)
    rate(near, ref)
    assert near.handoff_ratio == pytest.approx(5.0)
    assert near.apart and near.machine_speed == pytest.approx(1.0) and not near.throttled and near.slowed
    assert apart.to_dict()["handoff_ns"] == pytest.approx(222.5) and apart.to_dict()["apart"] is True
    c = combine([near, apart])
    assert c.flags.count("apart") == 1 and c.reference is not None
    assert c.reference["handoff_ns"] == pytest.approx(223.75)
    assert ref.summary()["apart_above"] == APART_FACTOR and ref.summary()["handoff_probe"]


def test_the_cached_best_handoff_is_lowered_never_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opbench import peak

    monkeypatch.setenv("OPBENCH_CACHE_DIR", str(tmp_path))
    peak.record_best_probes({"handoff": 60.0, "fma/fp32/2": 500.0})
    peak.record_best_probes({"handoff": 400.0, "fma/fp32/2": 400.0})
    assert peak.best_probe("handoff") == 60.0 and peak.best_probe("fma/fp32/2") == 500.0
    peak.record_best_probes({"handoff": 45.0, "fma/fp32/2": 550.0})
    assert peak.best_probe("handoff") == 45.0 and peak.best_probe("fma/fp32/2") == 550.0


def test_the_real_handoff_probe_reads_a_latency_and_finishes_on_one_cpu() -> None:
    """Between two CPUs it reads tens to thousands of ns; pinned to one CPU (caller and worker share it)
    it still returns, by yielding, and the reference does not take it there."""
    import subprocess
    import sys

    from opbench import _core
    from opbench.reference import NativeProber

    if NativeProber().can_handoff():
        ns = _core.handoff_ns(200, 3)
        assert 1.0 < ns < 1e6
    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        "from opbench import _core\nfrom opbench.reference import NativeProber\n"
        "assert not NativeProber().can_handoff()\n"
        "ns = _core.handoff_ns(20, 1)\nassert ns > 0, ns\nprint('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_a_sweep_measures_throttled_cases_again_and_flags_them(tmp_path: Path) -> None:
    """A fake prober whose first probe is the machine's best and every later one is half of it: every round
    of every case is throttled, so each case is visited once more after its rounds, then flagged."""
    from opbench.ops import gemm
    from opbench.sweep.config import BackendState, SweepConfig, setup_backends
    from opbench.sweep.driver import make_bench, run_sweep

    shapes = (gemm.GemmShape(8, 8, 8), gemm.GemmShape(9, 7, 5))
    cfg = SweepConfig(
        op=gemm.OP,
        shapes=shapes,
        dtypes=("fp32",),
        backends=("cpp",),
        threads=1,
        rounds=2,
        timer=TimerConfig(min_sample_s=0.001, max_time_s=0.05, warmup_s=0.005),
    )
    states: dict[str, BackendState] = setup_backends(("cpp",), 1, "cpu")
    ticks = iter(range(10**6))  # a clock a second further at every reading: no probe is ever reused
    prober = FakeProber([100.0, 50.0], cache=[200.0, 100.0])
    ref = InRunReference(1, prober=prober, clock=lambda: float(next(ticks)), share=1e9)
    bench = make_bench(cfg, [0], ref)
    records: dict[int, dict[str, Any]] = {}
    run_sweep(cfg, states, {}, lambda rs: records.update((i, r.to_record()) for i, r in rs), bench=bench)
    assert sorted(records) == [0, 1]
    # two rounds each, and one more for at most a quarter of the cases (rounded up)
    assert sorted(len(r["time"]["per_round"]) for r in records.values()) == [2, 3]
    for rec in records.values():
        assert rec["status"] == "ok"
        assert "throttled" in rec["flags"]
        # beside probes that read half their best or all of it: each round's time is brought to the best
        # by its own speed index (the geometric mean of the FMA and cache probes' speeds) to the power of
        # the sensitivity used (estimated from these real timings against the fake probes, so its value
        # varies), and the peak lies between the best times the slowest and the fastest round's index to
        # that power
        used = rec["reference"]["sensitivity"]["used"]
        kept = [r for r in rec["time"]["per_round"] if r["kept"]]
        for r in kept:
            assert r["speed_index"] == pytest.approx(
                math.sqrt(r["fma_gflops"] / 100.0 * r["cache_gbs"] / 200.0)
            )
        speeds = [r["speed_index"] for r in kept]
        assert min(speeds) < 1.0
        assert 0.0 <= used <= 1.0 and rec["reference"]["fma_best_gflops"] == pytest.approx(100.0)
        assert rec["peak"]["source"] == "in-run"
        assert (
            100.0 * min(speeds) ** used * 0.999
            <= rec["peak"]["gflops"]
            <= 100.0 * max(speeds) ** used * 1.001
        )
        assert rec["reference"]["utilization_best"] <= rec["utilization"] * 1.001
        assert rec["machine_speed"] < THROTTLED_SPEED


def test_probes_stay_within_their_share_of_the_run() -> None:
    clock = FakeClock()
    # each visit outlasts the probe interval, and a probe costs 20% of a visit: over the 10% share
    prober = FakeProber([100.0], clock, cost=0.2 * PROBE_INTERVAL_S)
    ref = InRunReference(1, prober=prober, clock=clock, share=0.10)
    taken = 0
    for _ in range(200):
        clock.now += 1.2 * PROBE_INTERVAL_S  # a visit
        before = prober.calls
        p = ref.take("fma", "fp32")
        taken += prober.calls - before
        assert p.value == 100.0
    assert ref.probe_s <= 0.10 * clock.now + 0.01
    assert 0 < taken < 200 and ref.reused > 0


def test_a_probe_just_taken_serves_the_next_visit() -> None:
    clock = FakeClock()
    prober = FakeProber([100.0], clock)
    ref = InRunReference(1, prober=prober, clock=clock)
    ref.take("fma", "fp32")
    ref.take("fma", "fp32")
    assert prober.calls == 1
    clock.now += 0.001
    ref.take("fma", "fp32", not_before=clock.now)  # a probe after a visit that ended now: a new one
    assert prober.calls == 2


class CountingQuiet:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, max_wait_s: float) -> float:
        self.calls += 1
        return 0.0


def timed_bench(values: list[float]) -> tuple[Bench, FakeClock, FakeProber, CountingQuiet]:
    clock = FakeClock()
    prober = FakeProber(values, clock, cost=0.01)
    ref = InRunReference(2, prober=prober, clock=clock, best={"fma/fp32/2": 100.0})
    quiet = CountingQuiet()
    return (
        Bench(Timer(TimerConfig(min_samples=1, max_samples=1), clock=clock), ref, quiet=quiet),
        clock,
        prober,
        quiet,
    )


def run_for(clock: FakeClock, seconds: float) -> Any:
    def run(loops: int) -> float:
        clock.now += seconds * loops
        return seconds * loops

    return run


def test_visits_between_two_probes_share_them_and_get_their_probe_after_from_the_next() -> None:
    bench, clock, prober, _ = timed_bench([80.0, 60.0])
    short = run_for(clock, PROBE_INTERVAL_S / 10)
    a = bench.measure(short, owner="x")
    b = bench.measure(short, owner="x")
    assert prober.calls == 1 and a.before["fma"] is b.before["fma"]
    assert not a.after and not b.after  # no probe after them yet
    assert a.machine_speed == pytest.approx(0.8)  # on the probe before, for now
    clock.now += PROBE_INTERVAL_S  # the next visit's probe falls due
    c = bench.measure(short, owner="x")
    assert prober.calls == 2
    for v in (a, b):
        assert v.after["fma"] is c.before["fma"] and v.after["fma"].at_s >= v.ended_s
        assert v.reference("fma") == pytest.approx(70.0) and v.machine_speed == pytest.approx(0.7)
        assert v.to_dict()["probes"]["after"]["fma"]["age_s"] >= 0
    assert not c.after
    bench.finish()  # the end of the run: a probe after for the last visit, taken after it ended
    assert prober.calls == 3 and c.after["fma"].at_s >= c.ended_s


def test_settling_happens_at_a_change_of_owner_or_before_a_probe_not_between_visits_of_one_owner() -> None:
    bench, clock, prober, quiet = timed_bench([100.0])
    # (each measure takes three calls of this: the first, one to calibrate on, one sample)
    short = run_for(clock, PROBE_INTERVAL_S / 20)
    bench.measure(short, owner="torch")  # first visit: settles and probes
    assert quiet.calls == 1
    bench.measure(short, owner="torch")
    bench.measure(short, owner="torch")
    assert quiet.calls == 1  # the pool still spinning is the one these visits use
    bench.measure(short, owner="mindspore")
    assert quiet.calls == 2  # another framework: wait for torch's pool to go quiet
    bench.measure(short, owner=None)
    bench.measure(short, owner=None)
    assert quiet.calls == 4  # no owner: always settle
    clock.now += PROBE_INTERVAL_S
    bench.measure(short, owner=None)
    bench.measure(short, owner="mindspore")
    clock.now += PROBE_INTERVAL_S
    calls = quiet.calls
    bench.measure(short, owner="mindspore")  # same owner, but a probe is due: settle before it
    assert quiet.calls == calls + 1 and prober.calls == 3


def test_later_rounds_visit_one_backends_cases_after_anothers() -> None:
    groups = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
    owners = ["cpp", "torch", "tf"] * 4
    order = visit_order(groups, 3, seed=2, owners=owners)
    for r in order[1:]:
        assert sorted(r) == list(range(12))
        runs = [owners[i] for i in r]
        switches = sum(a != b for a, b in itertools.pairwise(runs))
        assert switches == 2  # three blocks
    assert order[1] != order[2]
    assert [owners[i] for i in order[0]] != [owners[i] for i in order[1]]


# --- contention


def test_other_processes_cpu_time_makes_a_window_contended() -> None:
    start = CpuTimes(busy_s=10.0, steal_s=0.0, own_s=5.0, wall_s=100.0)
    quiet = CpuTimes(busy_s=10.98, steal_s=0.0, own_s=5.95, wall_s=100.5)  # ours: 0.95 s, others 0.03 s
    busy = CpuTimes(busy_s=11.0, steal_s=0.0, own_s=5.5, wall_s=100.5)  # others used 0.5 of 1.0 CPU-s
    stolen = CpuTimes(busy_s=10.5, steal_s=0.3, own_s=5.5, wall_s=100.5)
    assert not shares(start, quiet, 2)["contended"]
    assert shares(start, busy, 2)["others_share"] == pytest.approx(0.5)
    assert shares(start, busy, 2)["contended"]
    assert shares(start, stolen, 2)["steal_share"] == pytest.approx(0.3)
    assert CONTENDED_SHARE <= 0.3
    assert shares(start, stolen, 2)["contended"]
    # too short a window to judge from clock ticks
    assert not shares(start, CpuTimes(11.0, 0.0, 5.0, 100.01), 2)["contended"]


def test_the_monitor_warns_in_the_header_when_a_window_was_contended() -> None:
    readings = iter(
        [
            CpuTimes(0.0, 0.0, 0.0, 0.0),  # run start
            CpuTimes(0.0, 0.0, 0.0, 0.0),
            CpuTimes(1.0, 0.0, 0.4, 1.0),  # a window where others used 0.6 of 2 CPU-s
            CpuTimes(1.0, 0.0, 0.4, 1.0),
        ]
    )
    mon = Monitor([0, 1], read=lambda cpus: next(readings))
    w = mon.end(mon.begin())
    assert w["contended"] and w["others_share"] == pytest.approx(0.3)
    env = mon.finish()
    assert len(env.warnings) == 1 and "contended" in env.warnings[0]


def test_visits_too_short_to_judge_alone_are_judged_together() -> None:
    short = {"wall_s": 0.038, "others_share": 0.45, "steal_share": 0.0, "contended": False}
    quiet = {"wall_s": 0.038, "others_share": 0.02, "steal_share": 0.0, "contended": False}
    assert MIN_WINDOW_S > 0.038
    together = pooled([short, short, short])
    assert together is not None and together["contended"] and together["others_share"] == pytest.approx(0.45)
    pooled_quiet = pooled([quiet, quiet, quiet])
    assert pooled_quiet is not None and not pooled_quiet["contended"]
    assert pooled([{"available": False}]) is None
    rounds = [visit([1.0, 1.01]) for _ in range(3)]
    for v in rounds:
        v.contention = dict(short)
    assert "contended" in combine(rounds).flags
    mon = Monitor([0, 1], read=lambda cpus: CpuTimes(0.0, 0.0, 0.0, 0.0))
    warning = mon.finish(contended_cases=3).warnings[0]
    assert "3 case(s) flagged contended" in warning and "other processes used our CPUs" in warning


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_a_sweep_beside_a_busy_process_is_flagged_contended(tmp_path: Path) -> None:
    """A real competitor: a child process spinning on the first CPU this process may use, for the whole
    sweep, which runs on that CPU too."""
    cpu = sorted(os.sched_getaffinity(0))[0]
    child = subprocess.Popen(
        [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"]
    )
    try:
        time.sleep(0.3)  # let it start spinning
        out = tmp_path / "out"
        # --threads 1 pins the sweep to the first CPU it may use: the child's
        proc = run_cli([
            "sweep", "gemm", "--m", "96,128", "--n", "128", "--k", "128", "--backend", "cpp",
            "--dtype", "fp32", "--threads", "1", "--rounds", "2", "--max-time-s", "0.4",
            "--out", str(out), "--quiet", "--no-verify",
        ])  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    finally:
        child.kill()
        child.wait()
    doc = json.loads(next(out.glob("*.json")).read_text())
    recs = [r for r in doc["records"] if r["status"] == "ok"]
    assert recs and all("contended" in r["flags"] for r in recs)
    env = doc["environment"]
    assert env["warnings"] and "other processes used our CPUs" in env["warnings"][0]
    assert any(p["pid"] == child.pid for p in env["other_processes"])
    assert all(v["contention"]["others_share"] > 0.2 for r in recs for v in r["time"]["per_round"])


# --- the first call of a very slow case


def test_a_first_call_far_over_the_budget_is_the_only_sample() -> None:
    calls = []

    def run(loops: int) -> float:
        calls.append(loops)
        return 6.0 * loops

    m = Timer(TimerConfig(call_budget_s=1.0)).measure(run)
    assert FIRST_CALL_BUDGETS * 1.0 <= 6.0
    assert calls == [1] and m.single_sample and m.first_call and m.samples_s == (6.0,)


# --- machine identity


@pytest.mark.parametrize(
    ("vendor", "family", "model", "name", "per_cycle"),
    [
        ("AuthenticAMD", 0x19, 0x11, "Zen 4", 32),
        ("AuthenticAMD", 0x19, 0x01, "Zen 3", 32),
        ("AuthenticAMD", 0x1A, 0x02, "Zen 5", 64),
        ("GenuineIntel", 6, 0x8F, "Sapphire Rapids", 64),
    ],
)
def test_the_microarch_table_tells_zen4_from_zen5(
    vendor: str, family: int, model: int, name: str, per_cycle: int
) -> None:
    from opbench import microarch

    arch = microarch.lookup(vendor, family, model)
    assert arch is not None and arch.name == name
    per = microarch.flop_per_cycle(arch, "fp32", "AMD EPYC", "fp32")
    assert per is not None and per[0] == per_cycle and arch.source in per[1]


def test_no_datasheet_guess_for_an_unlisted_cpu_or_an_unknown_sku() -> None:
    from opbench import microarch

    assert microarch.lookup("AuthenticAMD", 0x1A, 0x24) is None  # Zen 5 mobile: 256-bit pipes, not listed
    assert microarch.lookup("HygonGenuine", 0x18, 0x00) is None
    sky = microarch.lookup("GenuineIntel", 6, 0x55)
    assert sky is not None
    assert microarch.flop_per_cycle(sky, "fp32", "Intel Xeon Processor (Skylake)", "fp32") is None
    assert microarch.flop_per_cycle(sky, "fp32", "Intel(R) Xeon(R) Gold 6148 CPU", "fp32")[0] == 64  # type: ignore[index]
    assert microarch.flop_per_cycle(sky, "fp32", "Intel(R) Xeon(R) Silver 4114 CPU", "fp32")[0] == 32  # type: ignore[index]


def test_the_bf16_datasheet_is_the_amx_tiles_only_where_they_run() -> None:
    from opbench import microarch

    emr = microarch.lookup("GenuineIntel", 6, 0xCF)
    assert emr is not None
    per = microarch.flop_per_cycle(emr, "bf16", "Intel Xeon", "bf16", amx=True)
    assert per is not None and per[0] == 1024 and "tdpbf16ps" in per[1]
    # no AMX (OS refused, build without it): no AVX512-BF16 figure for Intel either; fp32 unchanged
    assert microarch.flop_per_cycle(emr, "bf16", "Intel Xeon", "bf16", amx=False) is None
    assert microarch.flop_per_cycle(emr, "fp32", "Intel Xeon", "fp32", amx=True)[0] == 64  # type: ignore[index]
    zen4 = microarch.lookup("AuthenticAMD", 0x19, 0x11)
    assert zen4 is not None and microarch.flop_per_cycle(zen4, "bf16", "AMD EPYC", "bf16", amx=True)[0] == 64  # type: ignore[index]


def test_the_identity_names_family_model_and_hypervisor() -> None:
    from opbench.machine import identity, identity_key

    ident = identity()
    assert {"vendor", "family", "model", "stepping", "caches", "isa_flags", "hypervisor"} <= set(ident)
    assert isinstance(ident["family"], int) and ident["family"] > 0
    assert len(identity_key()) == 16


def test_records_tuned_on_another_machine_are_not_applied(tmp_path: Path, monkeypatch: Any) -> None:
    from opbench import tuned as records

    monkeypatch.setenv("OPBENCH_RECORDS_DIR", str(tmp_path))
    other = {
        **records.machine(),
        "identity": {**records.machine()["identity"], "family": 0x19, "model": 0x11, "microarch": "Zen 4"},
    }
    rec = {"op": "gemm", "dtype": "fp32", "shape": {"m": 64, "n": 64, "k": 64}, "threads": 1,
           "tiles": {"tile_m": 8, "tile_n": 16, "tile_k": 8}, "study": "s"}  # fmt: skip
    (tmp_path / "other.json").write_text(
        json.dumps({"schema_version": records.SCHEMA_VERSION, "machine": other, "records": [rec]})
    )
    tiles, note = records.tuned_tiles(64, 64, 64, "fp32", 1)
    assert tiles.record() == {} and tiles.record() != rec["tiles"]
    assert "not applied to another machine" in note and "Zen 4" in note


# --- compare


def _doc(median: float, fma: float, util: float) -> dict[str, Any]:
    samples = [median * f for f in (0.99, 1.0, 1.0, 1.01, 1.0)]
    return {
        "machine": {"cpu_model": "x"},
        "settings": {"threads": 2},
        "records": [
            {
                "op": "gemm", "label": "64x64x64", "dtype": "fp32", "backend": "cpp", "status": "ok",
                "time": {"median_s": median, "samples_s": samples},
                "utilization": util, "flags": [],
                "reference": {"basis": "fma", "fma_gflops": fma, "triad_gbs": None},
            }
        ],
    }  # fmt: skip


def test_compare_does_not_call_a_machine_slowdown_a_regression() -> None:
    from opbench.report.compare import compare

    # 30% slower, and the machine's own probe 30% slower too: the code did not change
    res = compare(_doc(1.0, 200.0, 0.5), _doc(1.3, 200.0 / 1.3, 0.5), 0.05)
    row = res["rows"][0]
    assert row["verdict"] == "unchanged" and "moved by as much" in row["note"]
    assert row["normalised_time_ratio"] == pytest.approx(1.0)
    assert any("different speeds" in w for w in res["warnings"])
    assert res["machine_speed_ratio"] == pytest.approx(1 / 1.3)


def test_compare_still_finds_a_regression_on_a_steady_machine() -> None:
    from opbench.report.compare import compare

    res = compare(_doc(1.0, 200.0, 0.5), _doc(1.3, 199.0, 0.38), 0.05)
    row = res["rows"][0]
    assert row["verdict"] == "regression" and not res["warnings"]
    assert (row["old_utilization"], row["new_utilization"]) == (0.5, 0.38)
    # a slowdown beyond the machine's: still a regression
    res = compare(_doc(1.0, 200.0, 0.5), _doc(1.6, 200.0 / 1.2, 0.3), 0.05)
    assert res["rows"][0]["verdict"] == "regression"


def test_compare_does_not_call_a_change_of_cpu_placement_a_regression() -> None:
    from opbench.report.compare import compare

    new = _doc(1.5, 200.0, 0.33)
    new["records"][0]["flags"] = ["apart"]
    row = compare(_doc(1.0, 200.0, 0.5), new, 0.05)["rows"][0]
    assert row["verdict"] == "not comparable" and "apart in the new run" in row["note"]
    old = _doc(1.0, 200.0, 0.5)
    old["records"][0]["flags"] = ["apart"]
    assert compare(old, new, 0.05)["rows"][0]["verdict"] == "regression"  # both apart: comparable


# --- earlier runs (history.py)


def _history_doc(median: float, flags: list[str] | None = None, tiles: int = 32) -> dict[str, Any]:
    return {
        "machine": {"identity_key": "m1"},
        "backends": {"cpp": {"version": "0.1.0"}},
        "records": [
            {
                "op": "conv", "label": "N16 C32 28 K32 f3 p1", "dtype": "fp16", "backend": "cpp",
                "threads": 2, "device": "cpu", "status": "ok", "flags": list(flags or []), "notes": [],
                "time": {"median_s": median, "cold_cache": False},
                "details": {"tiles_effective": {"tile_m": tiles}},
            }
        ],
    }  # fmt: skip


def test_a_median_unlike_an_earlier_runs_is_flagged_with_the_earlier_value(tmp_path: Path) -> None:
    from opbench import history

    assert history.apply(_history_doc(0.623e-3), tmp_path) == 0  # nothing to compare with yet
    assert history.apply(_history_doc(0.650e-3), tmp_path) == 0  # within 15%
    doc = _history_doc(0.732e-3)  # seen: 0.62, 0.73, 0.62 ms in three processes, each run stable
    assert history.apply(doc, tmp_path) == 1
    rec = doc["records"][0]
    assert rec["flags"] == [history.FLAG]
    assert "17% slower than an earlier run" in rec["notes"][0] and "0.623 ms" in rec["notes"][0]
    # and the third run, back at 0.62, is flagged against the second
    doc = _history_doc(0.619e-3)
    assert history.apply(doc, tmp_path) == 1 and "faster" in doc["records"][0]["notes"][0]
    assert "15%" in history.warning(1)


def test_history_keeps_cases_apart_and_skips_disturbed_runs(tmp_path: Path) -> None:
    from opbench import history

    history.apply(_history_doc(1e-3), tmp_path)
    assert history.apply(_history_doc(2e-3, tiles=64), tmp_path) == 0  # other tiles: another case
    assert history.apply(_history_doc(2e-3, flags=["contended"]), tmp_path) == 0  # explains itself
    assert history.apply(_history_doc(1.05e-3), tmp_path) == 0  # the contended 2 ms was not kept
    other = _history_doc(2e-3)
    other["machine"]["identity_key"] = "m2"
    assert history.apply(other, tmp_path) == 0  # another machine
    stored = json.loads((tmp_path / "history.json").read_text())
    assert sorted(stored) == ["m1", "m2"] and len(stored["m1"]) == 2
    for _ in range(history.HISTORY_KEEP + 3):
        history.apply(_history_doc(1e-3), tmp_path)
    assert all(len(v) <= history.HISTORY_KEEP for v in stored_cases(tmp_path, "m1"))


def stored_cases(path: Path, machine: str) -> list[list[Any]]:
    return list(json.loads((path / "history.json").read_text())[machine].values())


def test_history_survives_a_corrupt_file(tmp_path: Path) -> None:
    from opbench import history

    (tmp_path / "history.json").write_text("{ not json")
    assert history.apply(_history_doc(1e-3), tmp_path) == 0
    assert history.apply(_history_doc(1.5e-3), tmp_path) == 1


def test_a_second_identical_sweep_compares_with_the_first(tmp_path: Path) -> None:
    """Two real sweeps of one tiny case into a fresh cache: the history file holds the case after the
    first; the second's records are judged against it (flagged only if 15% apart) and its header says so
    when they are."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "OPBENCH_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "opbench", "sweep", "gemm", "--m", "64", "--n", "64", "--k", "64",
           "--backend", "cpp", "--dtype", "fp32", "--rounds", "1", "--quiet"]  # fmt: skip
    docs = []
    for i in range(2):
        out = subprocess.run(
            [*cmd, "--out", str(tmp_path / f"r{i}")], capture_output=True, text=True, env=env
        )
        assert out.returncode == 0, out.stderr[-2000:]
        docs.append(json.loads(Path(out.stdout.split()[0]).read_text()))
    # A run disturbed by a busy machine (contended, throttled, apart) is neither judged nor kept.
    from opbench.history import DISTURBED

    a, b = (d["records"][0] for d in docs)
    kept = [r for r in (a, b) if not DISTURBED & set(r["flags"])]
    stored = json.loads((tmp_path / "cache" / "history.json").read_text()).get(
        docs[0]["machine"]["identity_key"], {}
    )
    assert sum(len(v) for v in stored.values()) == len(kept)
    if len(kept) == 2:
        apart = abs(b["time"]["median_s"] / a["time"]["median_s"] - 1) > 0.15
        assert ("unlike_earlier_runs" in b["flags"]) == apart
        assert any("earlier run" in w for w in docs[1]["environment"]["warnings"]) == apart

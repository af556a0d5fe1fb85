"""The Timer's warm-up, calibration, adaptive stopping, caps and statistics, driven by a fake clock."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from conftest import FakeClock

from opbench.measurement import Measurement
from opbench.timing import Timer, TimerConfig


class ScriptedRun:
    """run(loops): every call takes per_call(i) seconds (i = call index); advances the fake clock."""

    def __init__(self, clock: FakeClock, per_call: Callable[[int], float]) -> None:
        self.clock, self.per_call = clock, per_call
        self.calls = 0
        self.loops_seen: list[int] = []

    def __call__(self, loops: int) -> float:
        total = 0.0
        for _ in range(loops):
            total += self.per_call(self.calls)
            self.calls += 1
        self.loops_seen.append(loops)
        self.clock.now += total
        return total


def make(per_call: Callable[[int], float], **cfg: object) -> tuple[Timer, ScriptedRun]:
    clock = FakeClock()
    return Timer(TimerConfig(**cfg), clock=clock), ScriptedRun(clock, per_call)  # type: ignore[arg-type]


def test_constant_times_stop_at_min_samples_with_calibrated_loops() -> None:
    timer, run = make(lambda i: 1e-3, min_sample_s=0.01, min_samples=5, warmup_s=0.05)
    m = timer.measure(run)
    assert m.loops == 10  # 10 ms per sample / 1 ms per call
    assert m.n == 5
    assert m.median_s == pytest.approx(1e-3) and m.iqr_s == pytest.approx(0)
    assert m.stability == "stable" and not m.single_sample


def test_warmup_is_excluded() -> None:
    # The first 20 calls are slow (cold): none of them may reach the samples.
    timer, run = make(lambda i: 0.004 if i < 20 else 0.001, warmup_s=0.1, min_sample_s=0.005)
    m = timer.measure(run)
    assert max(m.samples_s) == pytest.approx(0.001)
    assert sum(run.loops_seen) - m.n * m.loops >= 20


def test_a_slow_first_call_does_not_set_the_loops() -> None:
    # A first call of 0.3 s (a library's lazy start) then 6.6 us calls: calibrated on the first call, every
    # sample would be one call (on a CUDA device, one eager launch where graph replays were meant).
    timer, run = make(lambda i: 0.3 if i == 0 else 6.6e-6, warmup_s=0.05, min_sample_s=0.01)
    m = timer.measure(run)
    assert m.loops == math.ceil(0.01 / 6.6e-6)
    assert m.median_s == pytest.approx(6.6e-6)


def test_noisy_runs_stop_at_the_time_cap_and_are_flagged() -> None:
    timer, run = make(
        lambda i: 0.001 if (i // 10) % 2 else 0.003,
        min_sample_s=0.01,
        max_time_s=0.5,
        max_samples=1000,
        warmup_s=0.01,
    )
    m = timer.measure(run)
    assert 3 <= m.n < 1000
    assert m.n * m.loops * 0.002 == pytest.approx(0.5, rel=0.3)  # about max_time_s of sampling
    assert m.stability == "noisy"


def test_max_samples_caps_a_run_that_never_settles() -> None:
    timer, run = make(lambda i: 0.001 * (1 + (i % 3)), min_sample_s=0.0005, max_samples=12, max_time_s=100)
    assert timer.measure(run).n == 12


def test_a_call_over_budget_gets_one_flagged_sample() -> None:
    timer, run = make(lambda i: 2.0, call_budget_s=1.0)
    m = timer.measure(run)
    assert m.single_sample and m.n == 1 and m.loops == 1
    assert run.calls == 2  # the warm-up call is still excluded
    assert m.stability == "noisy"  # one sample cannot show stability


def test_cold_cache_flushes_before_every_sample_one_call_each() -> None:
    clock = FakeClock()
    events: list[str] = []

    def run(loops: int) -> float:
        events.append(f"run{loops}")
        clock.now += 0.001 * loops
        return 0.001 * loops

    timer = Timer(
        TimerConfig(cold_cache=True, warmup_s=0.001), clock=clock, flush=lambda: events.append("flush")
    )
    m = timer.measure(run)
    assert m.loops == 1 and m.cold_cache
    sampled = events[events.index("flush") :]
    assert sampled == ["flush", "run1"] * m.n


def test_a_devices_own_flush_replaces_the_hosts() -> None:
    # A backend on a device with its own caches (a GPU's L2) passes its flush per measurement.
    clock = FakeClock()
    events: list[str] = []

    def run(loops: int) -> float:
        clock.now += 0.001 * loops
        return 0.001 * loops

    timer = Timer(
        TimerConfig(cold_cache=True, warmup_s=0.001), clock=clock, flush=lambda: events.append("host")
    )
    m = timer.measure(run, flush=lambda: events.append("device"))
    assert events == ["device"] * m.n


def test_cold_cache_requires_a_flush_function() -> None:
    with pytest.raises(ValueError, match="flush"):
        Timer(TimerConfig(cold_cache=True))


@pytest.mark.parametrize("field", ["min_sample_s", "max_time_s", "warmup_s", "call_budget_s"])
def test_config_rejects_non_positive_times(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        TimerConfig(**{field: 0.0})


def test_measurement_statistics() -> None:
    m = Measurement((1.0, 2.0, 3.0, 4.0, 5.0), loops=3)
    assert (m.n, m.median_s, m.iqr_s, m.min_s, m.mean_s) == (5, 3.0, 2.0, 1.0, 3.0)
    assert m.std_s == pytest.approx(math.sqrt(2.5))
    assert m.rel_iqr == pytest.approx(2 / 3)
    d = m.to_dict()
    assert d["samples_s"] == [1.0, 2.0, 3.0, 4.0, 5.0] and d["loops"] == 3 and d["stability"] == "noisy"


@pytest.mark.parametrize(
    ("samples", "flag"),
    [
        ((1.0, 1.01, 1.02, 1.0, 1.05), "stable"),
        ((1.0, 1.15, 1.0, 1.12, 1.05), "unstable"),  # IQR/median between 10% and 25%
        ((1.0, 1.5, 1.0, 1.4, 1.2), "noisy"),
        ((1.0, 1.0), "noisy"),  # too few samples to judge
    ],
)
def test_stability_thresholds(samples: tuple[float, ...], flag: str) -> None:
    m = Measurement(samples, loops=1)
    q25, q50, q75 = np.percentile(samples, [25, 50, 75])
    assert m.rel_iqr == pytest.approx((q75 - q25) / q50)
    assert m.stability == flag


@pytest.mark.parametrize("cap", [0.5, 0.05, 0.005])
def test_tune_trial_time_caps_each_trials_sampling(cap: float) -> None:
    # `opbench tune --trial-time-s`: the worker times every trial with trial_timer(cap). Calls of 1 ms in
    # every other run(loops) and 3 ms in the rest never settle: sampling ends at the cap (the tuner's
    # default cap of 0.5 s at its 30 samples first), and no later than one sample past it.
    from opbench.ops.gemm import GemmShape
    from opbench.tune.config import TRIAL_TIMER, TuneConfig, trial_timer, worker_init

    shape = GemmShape(m=8, n=8, k=8)
    cfg = TuneConfig(shape=shape, dtype="fp32", threads=1, study_name="s", storage_url="", trial_time_s=cap)
    settings = worker_init(cfg)["timer"]
    assert settings == trial_timer(cap) and settings["max_time_s"] == cap
    assert trial_timer(TRIAL_TIMER["max_time_s"]) == TRIAL_TIMER  # the default is the tuner's timer
    clock, seen = FakeClock(), []

    def alternating(loops: int) -> float:
        t = loops * (0.001 if len(seen) % 2 else 0.003)
        seen.append(loops)
        clock.now += t
        return t

    m = Timer(TimerConfig(**settings), clock=clock).measure(alternating)
    assert m.stability == "noisy" and m.n >= 3
    assert clock.now >= cap or m.n == TRIAL_TIMER["max_samples"]
    one_sample = m.loops * 0.003
    assert clock.now <= 2 * settings["warmup_s"] + 2 * 0.003 + cap + one_sample

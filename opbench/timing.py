"""Timer: warm-up, loop calibration, adaptive sampling with a time cap, optional cache flushing.

The contract with backends is pyperf's: a run function takes a loop count, performs that many calls back
to back (synchronizing before it stops its clock) and returns the total seconds. The timer divides.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from opbench.measurement import Measurement, rel_iqr

RunFn = Callable[[int], float]


# A first call over this many --call-budget-s is itself the one sample: a warm-up call of several seconds
# would cost as much again for effects (first touch, lazy initialisation) far below the call's noise.
FIRST_CALL_BUDGETS = 5.0
# Calls per sample, at most: the C++ timed loops refuse more (limits.hpp), and more is a hang, not a sample.
MAX_LOOPS = 10_000_000


@dataclass(frozen=True)
class TimerConfig:
    warmup_s: float = 0.05  # warm-up calls (never recorded) run for at least this long, at least one call
    min_sample_s: float = 0.01  # loops are calibrated so one sample lasts at least this long
    min_samples: int = 5
    max_samples: int = 50
    max_time_s: float = 1.0  # stop sampling after this much wall time (once 3 samples exist)
    target_rel_iqr: float = 0.05  # stop early once IQR/median is this small (after min_samples)
    call_budget_s: float = 1.0  # a single call slower than this gets one timed sample, flagged
    cold_cache: bool = False  # flush caches before every sample; one call per sample

    def __post_init__(self) -> None:
        for name in ("warmup_s", "min_sample_s", "max_time_s", "target_rel_iqr", "call_budget_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.min_samples < 1 or self.max_samples < self.min_samples:
            raise ValueError("need 1 <= min_samples <= max_samples")


class Timer:
    """Times one run function. `clock` measures the harness's own budget (tests pass a fake one);
    `flush` is called before each sample in cold-cache mode."""

    def __init__(
        self,
        config: TimerConfig | None = None,
        *,
        clock: Callable[[], float] = time.perf_counter,
        flush: Callable[[], None] | None = None,
    ) -> None:
        self.config = config or TimerConfig()
        self._clock = clock
        self._flush = flush
        if self.config.cold_cache and flush is None:
            raise ValueError("cold_cache needs a flush function")

    @property
    def flush(self) -> Callable[[], None] | None:
        return self._flush

    def _sample(self, run: RunFn, loops: int, flush: Callable[[], None] | None) -> float:
        if self.config.cold_cache:
            assert flush is not None
            flush()
        return run(loops)

    def measure(self, run: RunFn, flush: Callable[[], None] | None = None) -> Measurement:
        """`flush`, when given, replaces the timer's own in cold-cache mode (a device's cache flush)."""
        cfg = self.config
        flush = flush or self._flush
        cold = cfg.cold_cache

        # Warm-up, excluded from the result: doubling loop counts until warmup_s of calls have run.
        first_s = run(1)
        if first_s >= FIRST_CALL_BUDGETS * cfg.call_budget_s and not cold:
            return Measurement((first_s,), 1, single_sample=True, first_call=True)
        if first_s >= cfg.call_budget_s:
            return Measurement((self._sample(run, 1, flush),), 1, single_sample=True, cold_cache=cold)
        # The first call may carry one-time costs (a library's lazy start, a device context, the first touch
        # of the output) that later calls do not: the loops are calibrated on the calls after it. Calibrated
        # on a first call of a few hundred ms, one process of three in `opbench sweep gemm --device cuda` on
        # an H200 sampled single eager launches (25-38 us) where the others replayed graphs (6.6 us).
        after_first_s = run(1)
        warm_s, per_call_s, loops = first_s + after_first_s, after_first_s, 1
        while warm_s < cfg.warmup_s:
            loops = min(
                loops * 2, MAX_LOOPS, max(1, math.ceil((cfg.warmup_s - warm_s) / max(per_call_s, 1e-9)))
            )
            t = run(loops)
            warm_s += t
            per_call_s = t / loops

        loops = 1 if cold else min(MAX_LOOPS, max(1, math.ceil(cfg.min_sample_s / max(per_call_s, 1e-9))))
        samples: list[float] = []
        start = self._clock()
        while True:
            samples.append(self._sample(run, loops, flush) / loops)
            n = len(samples)
            if n >= cfg.max_samples:
                break
            if n >= cfg.min_samples and rel_iqr(samples) <= cfg.target_rel_iqr:
                break
            if self._clock() - start >= cfg.max_time_s and n >= min(3, cfg.min_samples):
                break
        return Measurement(tuple(samples), loops, cold_cache=cold)

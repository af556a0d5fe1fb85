"""Measurement: the immutable raw samples of one timed case and the statistics derived from them."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from opbench.record_blocks import MeasurementBlock

# Relative IQR (IQR / median) above which a result is flagged, as torch.utils.benchmark warns.
UNSTABLE_REL_IQR = 0.10
NOISY_REL_IQR = 0.25
# Fewer samples than this cannot show a spread, so they are never called stable.
MIN_SAMPLES_FOR_STABILITY = 3


def stability_class(spread: float, n: int) -> str:
    """'stable' (spread <= 10%), 'unstable' (<= 25%) or 'noisy' (more, or under 3 samples), where spread is a
    relative IQR (or the larger of it and a between-round spread)."""
    if n < MIN_SAMPLES_FOR_STABILITY or spread > NOISY_REL_IQR:
        return "noisy"
    return "unstable" if spread > UNSTABLE_REL_IQR else "stable"


def rel_iqr(samples_s: list[float] | tuple[float, ...]) -> float:
    """IQR / median of per-call times (numpy's linear quantiles); inf when the median is 0."""
    q25, q50, q75 = np.percentile(np.asarray(samples_s, dtype=np.float64), [25, 50, 75])
    return float((q75 - q25) / q50) if q50 > 0 else math.inf


@dataclass(frozen=True)
class Measurement:
    """Per-call times of each sample (each sample ran `loops` calls back to back and was divided by loops)."""

    samples_s: tuple[float, ...]
    loops: int
    single_sample: bool = False  # one call exceeded the per-call budget, so only one sample was taken
    cold_cache: bool = False  # caches were flushed before every sample (loops is then 1)
    first_call: bool = False  # the only sample is the first call (it took over FIRST_CALL_BUDGETS)

    def __post_init__(self) -> None:
        if not self.samples_s:
            raise ValueError("a Measurement needs at least one sample")
        if self.loops < 1:
            raise ValueError("loops must be >= 1")

    @property
    def n(self) -> int:
        return len(self.samples_s)

    def _quantiles(self) -> tuple[float, float, float]:
        q25, q50, q75 = np.percentile(np.asarray(self.samples_s, dtype=np.float64), [25, 50, 75])
        return float(q25), float(q50), float(q75)

    @property
    def median_s(self) -> float:
        return self._quantiles()[1]

    @property
    def iqr_s(self) -> float:
        q25, _, q75 = self._quantiles()
        return q75 - q25

    @property
    def min_s(self) -> float:
        return min(self.samples_s)

    @property
    def mean_s(self) -> float:
        return float(np.mean(self.samples_s))

    @property
    def std_s(self) -> float:
        return float(np.std(self.samples_s, ddof=1)) if self.n > 1 else 0.0

    @property
    def rel_iqr(self) -> float:
        return rel_iqr(self.samples_s)

    @property
    def stability(self) -> str:
        """stability_class of IQR/median over the samples."""
        return stability_class(self.rel_iqr, self.n)

    def to_dict(self) -> MeasurementBlock:
        return {
            "n_samples": self.n,
            "loops": self.loops,
            "median_s": self.median_s,
            "iqr_s": self.iqr_s,
            "min_s": self.min_s,
            "mean_s": self.mean_s,
            "std_s": self.std_s,
            "rel_iqr": self.rel_iqr,
            "stability": self.stability,
            "single_sample": self.single_sample,
            "cold_cache": self.cold_cache,
            "first_call": self.first_call,
            "samples_s": list(self.samples_s),
        }

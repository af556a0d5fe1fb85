"""Statistics over a case's processes, rounds and samples (issue 39). A case measured with `--processes N`
ran its rounds in N fresh worker processes (backends/processes.py). Its samples are nested: samples within
a round, rounds within a process. A process carries state for its whole life (where its memory landed, how
its pools came up), so its rounds agree with each other more than with another process's. Pooling every
sample as if independent would give an interval that a fresh run falls outside of.

- `interval()`: a hierarchical bootstrap of the median (Davison and Hinkley, 1997: resample the top level
  first). It draws processes with replacement, then rounds within each drawn process, then samples within
  each drawn round. One process, or none: the rounds are the top level.
- `by_process()`: each process's median, rounds and within-process spread.
- `apart()`: two groups whose interquartile ranges do not overlap and whose medians differ by more than
  a floor. This is how rounds are called drifting and processes `process_dependent`.
- `sensitivity()`: how far a case's speed follows the machine's speed index (the in-run FMA and cache
  probes, measure.Visit.speed_index) across its visits (sweep/caseresult.py corrects each round's utilization
  by that much only).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

import numpy as np

from opbench.record_blocks import ProcessBlock, SensitivityBlock

BOOTSTRAP_DRAWS = 1000
LEVEL = 0.95
# A case's sensitivity to the speed index starts from the prior that the index explains it fully (1.0, what
# utilization assumed until schema 10) and moves by what its visits show, weighted by the estimate's
# precision: w = PRIOR_SD^2 / (PRIOR_SD^2 + se^2). On the 2-vCPU Zen 4 VM on 2026-11-26 the estimates of
# one backend, op and dtype ranged 0.1-1.1 between three runs of the same sweep (docs/benchmarks.md,
# "Reproducibility across processes"): a visit's probes carry noise of their own, so the slope within a run
# is biased low and moves from run to run. Recomputed from the same three runs, utilization agreed within
# 5 points for 79.2% of cases with the prior alone, 77.9% at PRIOR_SD 0.05 and 75.2% at 0.15 (with the FMA
# probe alone, in three earlier runs: 75.2% with the prior, 71.7% at 0.15). So the prior is held very
# firmly: the run's estimate moves the correction only where it is precise.
SENSITIVITY_PRIOR = 1.0
SENSITIVITY_PRIOR_SD = 0.05
SENSITIVITY_MIN_VISITS = 3


def interval(
    groups: Sequence[Sequence[Sequence[float]]], draws: int = BOOTSTRAP_DRAWS, seed: int = 0
) -> tuple[float, float]:
    """The LEVEL interval of the median of every sample. `groups[p][r]`: the samples of round r in
    process p. Vectorized: each draw is a weight per round (how often its process and then it was drawn)
    over resampled samples, and the weighted median of each draw is read off the sorted values."""
    rounds = [np.asarray(r, dtype=np.float64) for g in groups for r in g if len(r)]
    owner = [p for p, g in enumerate(groups) for r in g if len(r)]
    if not rounds:
        raise ValueError("interval() needs samples")
    rng = np.random.default_rng(seed)
    tops = sorted(set(owner))
    weights = np.zeros((draws, len(rounds)))
    picks = rng.integers(0, len(tops), size=(draws, len(tops)))
    for k, top in enumerate(tops):
        members = [j for j, o in enumerate(owner) if o == top]
        times = (picks == k).sum(axis=1) * len(members)  # rounds drawn from this process, per draw
        weights[:, members] = rng.multinomial(times, [1.0 / len(members)] * len(members))
    values = np.concatenate([r[rng.integers(0, len(r), size=(draws, len(r)))] for r in rounds], axis=1)
    w = np.concatenate([np.repeat(weights[:, [j]], len(r), axis=1) for j, r in enumerate(rounds)], axis=1)
    order = np.argsort(values, axis=1)
    v = np.take_along_axis(values, order, axis=1)
    cw = np.cumsum(np.take_along_axis(w, order, axis=1), axis=1)
    half = cw[:, -1:] / 2.0
    lo_i = np.argmax(cw >= half, axis=1)  # the lower median and the next value past half
    hi_i = np.argmax(cw > half, axis=1)
    rows = np.arange(draws)
    medians = (v[rows, lo_i] + v[rows, hi_i]) / 2.0
    tail = 100 * (1 - LEVEL) / 2
    lo, hi = np.percentile(medians, [tail, 100 - tail])
    return float(lo), float(hi)


def quartiles(samples: Sequence[float]) -> tuple[float, float, float]:
    s = sorted(samples)
    if len(s) < 2:
        return (s[0], s[0], s[0])
    q = statistics.quantiles(s, n=4, method="inclusive")
    return (q[0], q[1], q[2])


def apart(groups: Sequence[Sequence[float]], floor: float) -> bool:
    """Whether two groups of samples disagree beyond their IQRs (and their medians by more than `floor`)."""
    quarts = [quartiles(g) for g in groups if len(g) >= 2]
    for i, a in enumerate(quarts):
        for b in quarts[i + 1 :]:
            disjoint = a[2] < b[0] or b[2] < a[0]
            if disjoint and abs(a[1] - b[1]) / min(a[1], b[1]) > floor:
                return True
    return False


def by_process(groups: Mapping[int, Sequence[Sequence[float]]]) -> list[ProcessBlock]:
    """Per process: its median over its rounds' samples, its rounds, and its spread (the larger of the
    relative IQR of its samples and the relative spread of its round medians)."""
    out: list[ProcessBlock] = []
    for p in sorted(groups):
        rounds = [r for r in groups[p] if len(r)]
        pooled = [x for r in rounds for x in r]
        q = quartiles(pooled)
        medians = [statistics.median(r) for r in rounds]
        rel = (q[2] - q[0]) / q[1] if q[1] > 0 else 0.0
        between = (max(medians) - min(medians)) / q[1] if len(medians) > 1 and q[1] > 0 else 0.0
        out.append(
            {"process": p, "median_s": q[1], "rounds": len(rounds), "n_samples": len(pooled),
             "rel_spread": max(rel, between)}
        )  # fmt: skip
    return out


def sensitivity(points: Sequence[tuple[float, float, str]]) -> SensitivityBlock:
    """How far speed follows the probe: `points` are (probe speed against its best, time, case) per
    visit; each case's values are taken relative to its own mean (in logs), so that the cases of a group
    pool. `estimate`: the slope of -log(time) on log(probe speed) (1 for a case that slows exactly as much
    as the index, 0 for one that does not follow it), with its standard error `se`; `value`: the
    estimate shrunk towards SENSITIVITY_PRIOR by its precision, clipped to [0, 1] (the prior alone where
    there is no estimate: too few visits, or a probe that never moved)."""
    by_case: dict[str, list[tuple[float, float]]] = {}
    for speed, t, case in points:
        if speed and speed > 0 and t > 0:
            by_case.setdefault(case, []).append((math.log(speed), math.log(t)))
    xs, ys = [], []
    for pairs in by_case.values():
        if len(pairs) < 2:
            continue
        mx = statistics.fmean(p[0] for p in pairs)
        my = statistics.fmean(p[1] for p in pairs)
        xs += [p[0] - mx for p in pairs]
        ys += [p[1] - my for p in pairs]
    n = len(xs)
    sxx = sum(x * x for x in xs)
    out: SensitivityBlock = {
        "value": SENSITIVITY_PRIOR, "estimate": None, "se": None, "weight": 0.0, "visits": n,
        "probe_spread": math.sqrt(sxx / n) if n else 0.0, "prior": SENSITIVITY_PRIOR,
    }  # fmt: skip
    if n < SENSITIVITY_MIN_VISITS or sxx <= 0:
        return out
    slope = -sum(x * y for x, y in zip(xs, ys, strict=True)) / sxx
    resid = [y + slope * x for x, y in zip(xs, ys, strict=True)]
    se = math.sqrt(sum(r * r for r in resid) / max(1, n - 2) / sxx)
    weight = SENSITIVITY_PRIOR_SD**2 / (SENSITIVITY_PRIOR_SD**2 + se**2)
    value = weight * slope + (1 - weight) * SENSITIVITY_PRIOR
    out["estimate"], out["se"], out["weight"] = slope, se, weight
    out["value"] = min(1.0, max(0.0, value))
    return out

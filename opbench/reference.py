"""The in-run reference: short calibrated probes of the machine's own speed, taken right before and after
each measured visit of a case, so that a figure can be read against what the machine could do at that
moment rather than against a peak cached on another day.

- Probes are taken on a quiet machine (measure.Bench settles first), at most every PROBE_INTERVAL_S per
  probe: the visits between two probes share them, the earlier as their probe before and the later as
  their probe after (taken when the next probe falls due, or when the run ends).
- The FMA probe is the FMA-throughput loop of the peak measurement (csrc/peak), for the case's dtype and
  thread count, a few milliseconds long. fp16 uses the native fp16 loop where the CPU has one, else the
  fp32 loop (fp16 GEMMs compute on the fp32 units there), so both dtypes share that probe.
- The cache probe is the same triad on arrays that stay in each core's L2 (CACHE_PROBE_ELEMENTS_PER_THREAD
  doubles per array and thread: 192 KiB a thread), the best of CACHE_PROBE_PASSES passes of a few
  microseconds, each including our pool's dispatch; the median of CACHE_PROBE_REPEATS. It runs beside every
  visit. Over 5 minutes on the 2-vCPU Zen 4 VM on 2026-11-26 (benchmarks/probe_tracking.py: 624 rounds of
  7 cases), the cases' speed, smoothed over 20 rounds, followed it (correlation 0.81-0.93) more than the
  FMA probe (0.39-0.71); the geometric mean of the two (measure.Visit.speed_index) cut the spread between
  the medians of 40-s stretches from 7-20% (FMA probe alone) to 0.9-8%. The FMA loop is register-bound; what
  slows a case on a shared host (a neighbour in the caches, a slower hand-off between our threads) shows
  in the cache probe as well.
- The triad probe (a = b + s*c) runs beside cases that are memory-bound by their arithmetic intensity
  (below the machine balance: best FMA GFLOPS / best triad GB/s) and whose operands exceed the last-level
  cache.
- machine_speed = the probe / the best value of the same probe this machine has shown (cached per machine
  by peak.py, raised at the end of every run). A visit below THROTTLED_SPEED is measured again later in
  the run, or flagged `throttled`.
- The hand-off probe (threads > 1, two CPUs or more) times a cache line's round trip between the caller
  and our pool's worker on another CPU. Lower is better; its best is the lowest. A visit whose hand-off
  took more than APART_FACTOR x the best ran while the hypervisor had placed our vCPUs apart (other CCDs
  or sockets): on a 2-vCPU Zen 5 guest the round trip read ~50 ns or 400-1000 ns for tens of seconds at a
  time, and an LSTM ran 1.3-2x slower in the second state while the FMA probe read no lower (over 150 s,
  the LSTMs' speed correlated 0.36-0.48 with the FMA probe, 0.49-0.75 with the hand-off). Such a visit is
  treated as a throttled one (dropped when over 5% slower than the case's other rounds, measured again
  later when every round was) and its case flagged `apart` when every round was.
- Probes cost at most PROBE_SHARE of the run's wall time: when a new probe would exceed it, the last value
  of that probe is reused (its age is recorded).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from opbench import kernels
from opbench.machine import allowed_cpus
from opbench.record_blocks import ProbeBlock, ReferenceSummary

# A visit whose probe ran below this share of the best probe this machine has shown ran on a slow machine.
THROTTLED_SPEED = 0.85
# A visit whose hand-off probe took more than this many times the best one ran with our CPUs placed apart.
APART_FACTOR = 3.0
HANDOFF_ROUND_TRIPS = 2000  # per block: 0.1 ms near, ~1-2 ms apart
HANDOFF_REPEATS = 3  # median of
# Probes whose best is the lowest value (a latency), not the highest.
LOWER_IS_BETTER = frozenset({"handoff"})
# Probes may take at most this share of the run's wall time.
PROBE_SHARE = 0.10
FMA_PROBE_MIN_S = 0.004  # one repeat of the FMA loop
FMA_PROBE_REPEATS = 3  # median of
TRIAD_PROBE_REPEATS = 2
TRIAD_PROBE_MIN_ELEMENTS = 1 << 21
TRIAD_PROBE_MAX_ELEMENTS = 1 << 23
CACHE_PROBE_ELEMENTS_PER_THREAD = 8192  # 3 arrays x 64 KiB a thread: inside any L2 of 256 KiB or more
CACHE_PROBE_PASSES = 20  # best of, per repeat
CACHE_PROBE_REPEATS = 5  # median of
# A probe this recent serves the next visit too: visits between two probes share them. The machine's speed
# moves over seconds (a 512^3 GEMM and the FMA probe moved together, 114-231 GFLOPS, over 40 s), so this
# tracks it while a sweep's 0.1-0.3 s visits cost a probe (and the settling before it) every few visits.
PROBE_INTERVAL_S = 0.5


class Prober(Protocol):
    """What takes a probe: tests pass a fake one."""

    def fma(self, dtype: str, threads: int) -> float: ...  # GFLOPS

    def triad(self, threads: int) -> float: ...  # GB/s

    def cache(self, threads: int) -> float: ...  # GB/s, arrays in L2

    def fma_key(self, dtype: str) -> str: ...  # which loop a dtype's FMA probe runs

    def handoff(self) -> float: ...  # ns per round trip between two of our CPUs

    def can_handoff(self) -> bool: ...  # whether the process has two CPUs to pass a line between


class NativeProber:
    """Probes with the C++ loops of the peak measurement, shortened."""

    def fma_key(self, dtype: str) -> str:
        return kernels.compute_unit(dtype)

    def fma(self, dtype: str, threads: int) -> float:
        """The median of FMA_PROBE_REPEATS short loops. Not the best: on a VM that loses a vCPU in bursts,
        4 ms windows read 540 or 270 GFLOPS by turns; the best said "full speed" while a case ran at half
        (a 12 ms window read 270)."""
        key = self.fma_key(dtype)
        values = [kernels.fma_peak(key, threads, FMA_PROBE_MIN_S, 1)[0] for _ in range(FMA_PROBE_REPEATS)]
        return float(statistics.median(values))

    def triad(self, threads: int) -> float:
        elements = min(TRIAD_PROBE_MAX_ELEMENTS, max(TRIAD_PROBE_MIN_ELEMENTS, 2 * kernels.l3_bytes() // 8))
        return kernels.stream_triad(threads, elements, TRIAD_PROBE_REPEATS)

    def cache(self, threads: int) -> float:
        elements = CACHE_PROBE_ELEMENTS_PER_THREAD * max(1, threads)
        values = [
            kernels.stream_triad(threads, elements, CACHE_PROBE_PASSES) for _ in range(CACHE_PROBE_REPEATS)
        ]
        return float(statistics.median(values))

    def handoff(self) -> float:
        return kernels.handoff_ns(HANDOFF_ROUND_TRIPS, HANDOFF_REPEATS)

    def can_handoff(self) -> bool:
        return len(allowed_cpus()) >= 2


@dataclass
class Probe:
    kind: str  # "fma", "cache", "triad" or "handoff"
    key: str  # e.g. "fma/fp32/2"
    value: float  # GFLOPS (fma), GB/s (cache, triad) or ns per round trip (handoff)
    at_s: float  # clock time it was taken
    reused: bool = False  # an earlier probe's value, reused to keep probes under PROBE_SHARE

    def to_dict(self, visit_s: float, before: bool) -> ProbeBlock:
        """age_s: seconds from this probe to the start of the visit it precedes (before), or from the end of
        the visit it follows to this probe (after)."""
        age = visit_s - self.at_s if before else self.at_s - visit_s
        return {"value": self.value, "age_s": round(age, 4), "reused": self.reused}


@dataclass
class InRunReference:
    """Takes and remembers this run's probes. `best` holds the best value of each probe this machine has
    shown before the run (peak.best_probe), raised by every probe of the run."""

    threads: int
    prober: Prober = field(default_factory=NativeProber)
    clock: Callable[[], float] = time.perf_counter
    best: dict[str, float] = field(default_factory=dict)
    load_best: Callable[[str], float | None] | None = None
    share: float = PROBE_SHARE

    def __post_init__(self) -> None:
        self.started_s = self.clock()
        self.probe_s = 0.0  # wall time spent probing
        self.probes = 0
        self.reused = 0
        self.last: dict[str, Probe] = {}
        self.history: list[Probe] = []  # every probe taken (not reused), in order
        self.run_best: dict[str, float] = {}
        self._handoff = self.prober.can_handoff()

    def key(self, kind: str, dtype: str) -> str:
        if kind == "fma":
            return f"fma/{self.prober.fma_key(dtype)}/{self.threads}"
        return "handoff" if kind == "handoff" else f"{kind}/{self.threads}"

    def kinds(self, memory_bound: bool) -> tuple[str, ...]:
        """The probes a visit takes: the FMA loop and the cache triad, the triad where memory-bound, the
        hand-off where the case runs on more than one thread and the process has two CPUs."""
        kinds: tuple[str, ...] = ("fma", "cache", "triad") if memory_bound else ("fma", "cache")
        if self.threads > 1 and self._handoff:
            kinds += ("handoff",)
        return kinds

    @staticmethod
    def better(key: str, value: float, than: float | None) -> bool:
        if than is None:
            return True
        return value < than if key in LOWER_IS_BETTER else value > than

    def _best_known(self, key: str) -> float | None:
        if key not in self.best and self.load_best is not None:
            cached = self.load_best(key)
            if cached is not None:
                self.best[key] = cached
        return self.best.get(key)

    def _fresh(self, key: str, not_before: float | None) -> Probe | None:
        last = self.last.get(key)
        if last is None or self.clock() - last.at_s > PROBE_INTERVAL_S:
            return None
        return last if not_before is None or last.at_s >= not_before else None

    def due(self, kinds: tuple[str, ...], dtype: str) -> bool:
        """Whether take() would run a new probe of any of `kinds` now (none recent enough, and the share of
        the run allows one): the caller settles the machine first."""
        for kind in kinds:
            key = self.key(kind, dtype)
            if self._fresh(key, None) is None and not self._over_share(key):
                return True
        return False

    def _over_share(self, key: str) -> bool:
        if key not in self.last or not self.probes:
            return False
        mean_cost = self.probe_s / self.probes
        return self.probe_s + mean_cost > self.share * (self.clock() - self.started_s)

    def take(self, kind: str, dtype: str, not_before: float | None = None) -> Probe:
        """A probe: the last one of its kind when it is recent (PROBE_INTERVAL_S) and not older than
        `not_before`, else a new one, unless that would push probes over their share of the run (then the
        last value again, marked reused)."""
        key = self.key(kind, dtype)
        fresh = self._fresh(key, not_before)
        if fresh is not None:
            return fresh
        last = self.last.get(key)
        if last is not None and self._over_share(key):
            self.reused += 1
            return Probe(kind, key, last.value, last.at_s, reused=True)
        t0 = self.clock()
        if kind == "fma":
            value = self.prober.fma(key.split("/")[1], self.threads)  # fma/<unit>/<threads>
        elif kind == "handoff":
            value = self.prober.handoff()
        elif kind == "cache":
            value = self.prober.cache(self.threads)
        else:
            value = self.prober.triad(self.threads)
        t1 = self.clock()
        self.probe_s += t1 - t0
        self.probes += 1
        probe = Probe(kind, key, float(value), t1)
        self.last[key] = probe
        self.history.append(probe)
        self._best_known(key)
        if self.better(key, value, self.best.get(key)):
            self.best[key] = float(value)
        if self.better(key, value, self.run_best.get(key)):
            self.run_best[key] = float(value)
        return probe

    def speed(self, key: str, value: float) -> float | None:
        """A value of probe `key` against the best of its kind, 1.0 at the best and lower when slower."""
        best = self._best_known(key)
        if not best or value <= 0:
            return None
        return best / value if key in LOWER_IS_BETTER else value / best

    def memory_bound(self, arithmetic_intensity: float, min_bytes: int, l3_bytes: int, dtype: str) -> bool:
        """Whether a case is memory-bound by its arithmetic intensity (below the machine balance) and its
        operands leave the last-level cache. Needs both probes' bests; without them, False."""
        fma = self._best_known(self.key("fma", dtype))
        triad = self._best_known(self.key("triad", dtype))
        if not fma or not triad or min_bytes <= l3_bytes:
            return False
        return arithmetic_intensity < fma / triad

    def apart_probes(self) -> tuple[int, int]:
        """(hand-off probes over APART_FACTOR x the best, hand-off probes taken) in this run."""
        best = self.best.get("handoff")
        seen = [p.value for p in self.history if p.kind == "handoff"]
        return sum(1 for v in seen if best and v > APART_FACTOR * best), len(seen)

    def summary(self) -> ReferenceSummary:
        elapsed = self.clock() - self.started_s
        return {
            "probes": self.probes,
            "reused": self.reused,
            "probe_s": round(self.probe_s, 4),
            "share_of_run": round(self.probe_s / elapsed, 4) if elapsed > 0 else None,
            "best": dict(self.best),
            "best_this_run": dict(self.run_best),
            "throttled_below": THROTTLED_SPEED,
            "fma_probe": f"FMA loop, median of {FMA_PROBE_REPEATS} x {FMA_PROBE_MIN_S * 1e3:g} ms",
            "cache_probe": f"triad in L2, {CACHE_PROBE_ELEMENTS_PER_THREAD} doubles per array and thread, "
            f"median of {CACHE_PROBE_REPEATS} x best of {CACHE_PROBE_PASSES} passes",
            "triad_probe": f"triad, best of {TRIAD_PROBE_REPEATS}, 2 x L3 per array "
            f"({TRIAD_PROBE_MIN_ELEMENTS}..{TRIAD_PROBE_MAX_ELEMENTS} doubles)",
            "handoff_probe": (
                f"cache-line round trip between the caller and the pool's worker on another CPU, median of "
                f"{HANDOFF_REPEATS} x {HANDOFF_ROUND_TRIPS}"
                if self.threads > 1 and self._handoff
                else None
            ),
            "apart_above": APART_FACTOR,
            "handoff_apart": dict(zip(("probes_apart", "probes"), self.apart_probes(), strict=True)),
        }


def apart_warning(cases: int, ref: InRunReference) -> str:
    """The header's line for `cases` flagged `apart`, with the hand-off this run saw and its best."""
    slow, seen = ref.apart_probes()
    best = ref.best.get("handoff")
    told = f"{slow} of {seen} hand-off probes" if seen else "its hand-off probes"
    return (
        f"{cases} case(s) measured only while our CPUs sat apart ({told} over {APART_FACTOR:g}x the best, "
        f"{best:.0f} ns: the hypervisor placed our vCPUs on distant cores): flagged apart; cases that pass "
        "data between threads often (recurrences, small parallel ops) run slower there"
        if best
        else f"{cases} case(s) measured only while our CPUs sat apart: flagged apart"
    )

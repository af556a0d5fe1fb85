"""The one measurement path. Everything that times something (sweep cases, tuning trials and the tuner's
confirmation, GPU peaks) calls `Bench.measure(run)`, which

1. waits for this process's other threads to go quiet, when the visit's code differs from the last
   visit's (`owner`: another framework's pool may still be spinning) or a probe is due,
2. probes the machine's speed (reference.py) when no probe is recent, and gives that probe, as their
   probe *after*, to the earlier visits still waiting for one,
3. times `run` with the Timer (timing.py) while contention.py watches the CPUs,

and returns a `Visit`. Its probe after comes with the next probe (or `finish()`), always taken on a quiet
machine: a probe taken right after a visit ran beside the framework's still-spinning pool and read up to
half the machine's speed (MindSpore, in 10% of visits), inflating that case's utilization.

A case visited over several interleaved rounds gets one Visit per round; `combine()` turns them into the
record's time block, reference, machine_speed and flags:

- `drifting`: two kept rounds whose interquartile ranges do not overlap and whose medians differ by more
  than DRIFT_MIN_REL.
- `throttled`: every round ran below reference.THROTTLED_SPEED of the machine's best (a throttled round is
  dropped when the case has rounds that were not and it ran more than DRIFT_MIN_REL slower than they did,
  and measured again later in the run when it has none).
- `apart`: every round ran while our CPUs' hand-off took more than reference.APART_FACTOR x its best (the
  hypervisor had placed our vCPUs apart); such rounds are dropped and retried as throttled ones are.
- `contended`: another process (or the hypervisor, as steal) used at least contention.CONTENDED_SHARE of
  our CPUs during a kept round, or during the kept rounds together (contention.pooled: rounds too short
  to judge alone).
- the stability class (stable / unstable / noisy) uses the larger of the within-round IQR and the
  between-round spread.

With --processes, each visit names the worker process it ran in (`process`, and its input buffers'
`offsets` in their pages). `drifting` then compares the rounds of one process, `process_dependent` flags
processes whose pooled samples disagree the same way (IQRs apart, medians more than DRIFT_MIN_REL), and the
time block gains the processes' medians, their relative spread (`between_processes`) and the interval of
the median from a bootstrap over processes, then rounds, then samples (sampling.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from opbench import sampling
from opbench.contention import Monitor, pooled
from opbench.machine import wait_until_quiet
from opbench.measurement import Measurement, stability_class
from opbench.record_blocks import CombinedBlock, ReferenceBlock, RoundBlock, TimeBlock, WindowBlock
from opbench.reference import APART_FACTOR, THROTTLED_SPEED, InRunReference, Probe
from opbench.timing import RunFn, Timer

# Before timing, wait at most this long for other threads of the process (BLAS or framework pools still
# spinning after their last call, e.g. the float64 reference's OpenBLAS) to go quiet.
QUIET_MAX_WAIT_S = 1.0
# Rounds whose IQRs do not overlap are called drifting only when their medians differ by more than this.
DRIFT_MIN_REL = 0.05


@dataclass
class Visit:
    """One timed visit of a case: its samples, the probes around it and what else ran meanwhile."""

    measurement: Measurement
    settle_s: float = 0.0
    before: dict[str, Probe] = field(default_factory=dict)
    after: dict[str, Probe] = field(default_factory=dict)
    basis: str | None = None  # which probe machine_speed rests on: "fma" or "triad"
    machine_speed: float | None = None
    handoff_ratio: float | None = None  # the hand-off probe over its best (>= 1; None without that probe)
    contention: WindowBlock = field(default_factory=WindowBlock)
    started_s: float = 0.0  # the reference clock when timing began and ended (for probe ages)
    ended_s: float = 0.0
    dtype: str = "fp32"
    fma_speed: float | None = None  # the FMA probe beside the visit against its best (1.0 at the best)
    cache_speed: float | None = None  # the cache probe beside the visit against its best
    process: int | None = None  # the worker process it ran in (--processes); None: the sweep's own
    offsets: dict[str, int] = field(default_factory=dict)  # each input buffer's offset in its page there

    def reference(self, kind: str) -> float | None:
        """The mean of the probes of `kind` before and after the visit."""
        values = [p[kind].value for p in (self.before, self.after) if kind in p]
        return sum(values) / len(values) if values else None

    @property
    def speed_index(self) -> float | None:
        """The machine's speed beside the visit that a case's speed is corrected by (sweep/caseresult.py): the
        geometric mean of the FMA and cache probes' speeds against their bests (reference.py says why), or
        the FMA probe's alone where no cache probe was taken."""
        if self.fma_speed is None or self.cache_speed is None:
            return self.fma_speed
        return math.sqrt(self.fma_speed * self.cache_speed)

    @property
    def throttled(self) -> bool:
        return self.machine_speed is not None and self.machine_speed < THROTTLED_SPEED

    @property
    def apart(self) -> bool:
        return self.handoff_ratio is not None and self.handoff_ratio > APART_FACTOR

    @property
    def slowed(self) -> bool:
        """Ran on a machine below its best: throttled, or with our CPUs apart."""
        return self.throttled or self.apart

    @property
    def contended(self) -> bool:
        return bool(self.contention.get("contended"))

    def to_dict(self) -> RoundBlock:
        m = self.measurement
        return {
            "n_samples": m.n,
            "loops": m.loops,
            "median_s": m.median_s,
            "rel_iqr": m.rel_iqr,
            "fma_gflops": self.reference("fma"),
            "cache_gbs": self.reference("cache"),
            "triad_gbs": self.reference("triad"),
            "machine_speed": self.machine_speed,
            "speed_index": self.speed_index,
            "throttled": self.throttled,
            "handoff_ns": self.reference("handoff"),
            "apart": self.apart,
            # age_s: how long before the visit began (before) or after it ended (after) the probe ran
            "probes": {
                "before": {k: p.to_dict(self.started_s, before=True) for k, p in self.before.items()},
                "after": {k: p.to_dict(self.ended_s, before=False) for k, p in self.after.items()},
            },
            "settle_s": self.settle_s,
            "contention": self.contention,
            **({"process": self.process, "offsets": self.offsets} if self.process is not None else {}),
        }


class Bench:
    """Timer + in-run reference + contention monitor. `reference` is None where no probe applies (a GPU
    device, or a caller that only wants the timer); `monitor` is None where /proc is not watched."""

    def __init__(
        self,
        timer: Timer,
        reference: InRunReference | None = None,
        monitor: Monitor | None = None,
        quiet: Callable[[float], float] = wait_until_quiet,
    ) -> None:
        self.timer, self.reference, self.monitor, self._quiet = timer, reference, monitor, quiet
        self._owner: str | None = None
        self._pending: list[Visit] = []  # visits whose probe after is still to come

    def measure(
        self,
        run: RunFn,
        *,
        dtype: str = "fp32",
        memory_bound: bool = False,
        flush: Callable[[], None] | None = None,
        timer: Timer | None = None,
        owner: str | None = None,
    ) -> Visit:
        """Time `run`. `owner` names the code it runs (a backend): consecutive visits of one owner skip the
        settling between them (a pool still spinning is the one the next visit uses); None always settles."""
        ref = self.reference
        kinds = ref.kinds(memory_bound) if ref is not None else ()
        due = ref is not None and ref.due(kinds, dtype)
        settle_s = 0.0
        if owner is None or owner != self._owner or due:
            # A framework pool still spinning from the previous visit would slow the probe and the timing.
            settle_s = self._quiet(QUIET_MAX_WAIT_S)
        before = {k: ref.take(k, dtype) for k in kinds} if ref else {}
        self._complete()
        window = self.monitor.begin() if self.monitor else None
        started = ref.clock() if ref else 0.0
        m = (timer or self.timer).measure(run, flush)
        ended = ref.clock() if ref else 0.0
        contention = self.monitor.end(window) if self.monitor else WindowBlock()
        visit = Visit(
            m, settle_s, before, contention=contention, started_s=started, ended_s=ended, dtype=dtype
        )
        if ref is not None:
            visit.basis = "triad" if memory_bound else "fma"
            rate(visit, ref)  # on the probe before, until the probe after comes
            self._pending.append(visit)
        self._owner = owner
        return visit

    def finish(self) -> None:
        """Settle and take the probe after of the visits still waiting for one (the end of a sweep, or a
        caller that needs a visit's reference at once)."""
        ref = self.reference
        if ref is None or not self._pending:
            return
        self._quiet(QUIET_MAX_WAIT_S)
        for v in self._pending:
            for kind in v.before:
                ref.take(kind, v.dtype, not_before=v.ended_s)
        self._complete()
        self._pending = []  # a probe held back by the probe share: those visits keep their probe before
        self._owner = None

    def _complete(self) -> None:
        ref = self.reference
        if ref is None:
            return
        waiting = []
        for v in self._pending:
            probes = {k: ref.last.get(ref.key(k, v.dtype)) for k in v.before}
            if all(p is not None and p.at_s >= v.ended_s for p in probes.values()):
                v.after = {k: p for k, p in probes.items() if p is not None}
                rate(v, ref)
            else:
                waiting.append(v)
        self._pending = waiting


def rate(visit: Visit, ref: InRunReference) -> None:
    """Set the visit's machine_speed and hand-off ratio against the best probes this machine has shown
    (now: at the end of a run, against the best of the whole run)."""
    visit.machine_speed = _against_best(visit, visit.basis, ref)
    visit.fma_speed = _against_best(visit, "fma", ref)
    visit.cache_speed = _against_best(visit, "cache", ref)
    speed = _against_best(visit, "handoff", ref)
    visit.handoff_ratio = 1.0 / speed if speed else None


def _against_best(visit: Visit, kind: str | None, ref: InRunReference) -> float | None:
    """The mean of the visit's probes of `kind` against the best of that probe: 1.0 at the best."""
    if kind is None:
        return None
    value = visit.reference(kind)
    probe = visit.after.get(kind) or visit.before.get(kind)
    if value is None or probe is None:
        return None
    return ref.speed(probe.key, value)


def drifting(visits: list[Visit]) -> bool:
    """Whether two visits disagree beyond their IQRs (and by more than DRIFT_MIN_REL)."""
    return sampling.apart([v.measurement.samples_s for v in visits], DRIFT_MIN_REL)


def _processes(kept: list[Visit], median_s: float) -> CombinedBlock:
    """The time block's process fields (sampling.py): the interval of the median over processes, then
    rounds, then samples (rounds, then samples, without processes), and with several processes, each one's
    median and the relative spread between them."""
    groups: dict[int, list[tuple[float, ...]]] = {}
    for i, v in enumerate(kept):
        groups.setdefault(v.process if v.process is not None else -1 - i, []).append(v.measurement.samples_s)
    lo, hi = sampling.interval(list(groups.values()))
    named = {p: g for p, g in groups.items() if p >= 0}
    out: CombinedBlock = {"interval_s": [lo, hi], "interval_over": "processes" if named else "rounds"}
    if named:
        per = sampling.by_process(named)
        medians = [float(x["median_s"]) for x in per]
        out["processes"] = len(per)
        out["per_process"] = per
        out["between_processes"] = (max(medians) - min(medians)) / median_s if median_s > 0 else 0.0
    return out


@dataclass
class Combined:
    """What the rounds of a case add up to."""

    measurement: Measurement
    time: TimeBlock  # the record's time block
    flags: list[str]
    machine_speed: float | None
    reference: ReferenceBlock | None  # in-run reference values (None without probes)
    kept: list[Visit] = field(default_factory=list)  # the rounds whose samples it holds


def combine(visits: list[Visit]) -> Combined:
    if not visits:
        raise ValueError("combine() needs at least one visit")
    fine = [v for v in visits if not v.slowed]
    kept = fine or visits
    if fine:
        # A throttled (or apart) round is dropped only when it also ran slower than the others, by more than
        # DRIFT_MIN_REL: one that ran as fast says the slowdown the probe saw did not reach this case, and
        # dropping it would hide how far the case's rounds disagree (seen: 5.7 ms on a "75%" round, 6.9 and
        # 7.1 ms on "93%" rounds). Dropping every slowed round slower by any amount left 83 of 497 cases
        # of one run with one round of three, its spread unknown: a MindSpore LSTM kept a 4.33 ms round
        # beside a dropped 4.44 ms one, called itself stable, and the next runs read 3.56 and 3.66 ms.
        typical = statistics.median(v.measurement.median_s for v in fine)
        kept = [v for v in visits if not v.slowed or v.measurement.median_s <= typical * (1 + DRIFT_MIN_REL)]
    samples = tuple(s for v in kept for s in v.measurement.samples_s)
    first = kept[0].measurement
    m = Measurement(
        samples,
        min(v.measurement.loops for v in kept),
        single_sample=all(v.measurement.single_sample for v in kept),
        cold_cache=first.cold_cache,
    )
    medians = [v.measurement.median_s for v in kept]
    within = statistics.median(v.measurement.rel_iqr for v in kept)
    spread = (max(medians) - min(medians)) / m.median_s if len(kept) > 1 and m.median_s > 0 else 0.0
    time: TimeBlock = {
        **m.to_dict(),
        "rounds": len(kept),
        "rel_iqr_within": within,
        "rel_spread_rounds": spread,
        "stability": stability_class(max(within, spread), m.n),
        "dropped_rounds": len(visits) - len(kept),
        "per_round": [{**v.to_dict(), "kept": any(v is k for k in kept)} for v in visits],
        "settle_s": max(v.settle_s for v in kept),
    }
    flags: list[str] = []
    if m.single_sample:
        flags.append("single_sample")
    elif time["stability"] != "stable":
        flags.append(time["stability"])
    procs = _processes(kept, m.median_s)
    time.update(procs)
    # Rounds drift within a process; processes that disagree beyond their spread are process-dependent.
    by_process: dict[int | None, list[Visit]] = {}
    for v in kept:
        by_process.setdefault(v.process, []).append(v)
    if any(len(g) > 1 and drifting(g) for g in by_process.values()):
        flags.append("drifting")
    if procs.get("processes", 0) > 1:
        pooled_samples = [[x for v in g for x in v.measurement.samples_s] for g in by_process.values()]
        if sampling.apart(pooled_samples, DRIFT_MIN_REL):
            flags.append("process_dependent")
    if not fine and any(v.throttled for v in kept):
        flags.append("throttled")
    if not fine and any(v.apart for v in kept):
        flags.append("apart")
    together = pooled([v.contention for v in kept])
    if any(v.contended for v in kept) or (together is not None and together["contended"]):
        flags.append("contended")
    speeds = [v.machine_speed for v in kept if v.machine_speed is not None]
    fma_speeds = [v.fma_speed for v in kept if v.fma_speed is not None]
    cache_speeds = [v.cache_speed for v in kept if v.cache_speed is not None]
    indices = [x for v in kept if (x := v.speed_index) is not None]
    reference: ReferenceBlock | None = None
    if any(v.basis for v in kept):
        fma = [x for v in kept if (x := v.reference("fma")) is not None]
        triad = [x for v in kept if (x := v.reference("triad")) is not None]
        cache = [x for v in kept if (x := v.reference("cache")) is not None]
        handoff = [x for v in kept if (x := v.reference("handoff")) is not None]
        reference = {
            "basis": kept[0].basis,
            "fma_gflops": statistics.median(fma) if fma else None,
            "triad_gbs": statistics.median(triad) if triad else None,
            "handoff_ns": statistics.median(handoff) if handoff else None,
            # the FMA probe beside the case against the machine's best (1.0 at the best)
            "fma_speed": statistics.median(fma_speeds) if fma_speeds else None,
            "cache_gbs": statistics.median(cache) if cache else None,
            "cache_speed": statistics.median(cache_speeds) if cache_speeds else None,
            "speed_index": statistics.median(indices) if indices else None,
        }
    return Combined(m, time, flags, statistics.median(speeds) if speeds else None, reference, kept)

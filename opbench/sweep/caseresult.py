"""A case's Result (case.py) from its visits (sweep/caserun.py: CaseRun): the rounds combined
(measure.combine), the notes that explain them, the guards, and the utilization: each round's against the
machine's best in-run FMA probe, slowed by the machine's speed beside that round (its speed index: the
geometric mean of the FMA and cache probes' speeds, measure.Visit.speed_index) only as far as the case's
speed follows that index (its sensitivity, sampling.sensitivity; issue 39), and their median; the
utilization against the FMA probe beside the case (its median over rounds) and against the best stay in
the record."""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import TypedDict

from opbench.blocks import Details, Guards, Peak, Reference, Time, Verify
from opbench.case import Result
from opbench.documents import PeakDict
from opbench.guards import peak_guard
from opbench.measure import QUIET_MAX_WAIT_S, combine
from opbench.peak import UNIT_PEAKS, why_fp32_units
from opbench.record_blocks import ReferenceBlock, SensitivityBlock
from opbench.reference import APART_FACTOR, THROTTLED_SPEED
from opbench.sweep.caserun import CaseRun

# Utilization below this is flagged: the backend leaves the hardware nearly idle (e.g. no fp16 kernel).
SLOW_UTILIZATION = 0.01


def _probe_name(key: str, dtype: str) -> str:
    """What an in-run FMA probe (key fma/<unit>/<threads>) measured: its unit's peak, by name, and why where a
    2-byte dtype is held to the fp32 units'."""
    unit = key.split("/")[1] if key.count("/") == 2 else ""
    if unit not in UNIT_PEAKS:
        return f"in-run FMA probe ({key})"
    why = f" ({why_fp32_units(dtype)})" if unit == "fp32" and dtype in ("fp16", "bf16") else ""
    return f"in-run FMA probe ({key}): {UNIT_PEAKS[unit]}{why}"


class CorrectedPeak(TypedDict):
    """corrected_peak's answer: the peak's GFLOPS, how it was found, and what it adds to the reference."""

    gflops: float
    how: str
    reference: ReferenceBlock


def case_result(case: CaseRun, peak: PeakDict | None, sensitivity: SensitivityBlock | None = None) -> Result:
    """The Result of a case from its first visit and all its visits. `peak` is the fallback peak (a GPU's
    datasheet) used where no in-run reference was taken. `sensitivity` (sampling.sensitivity, over the
    visits of the case's backend, op and dtype) says how far its speed follows the in-run FMA probe: its
    utilization is against the machine's best probe, slowed by the probe beside it only that far."""
    notes, flags = list(case.notes), []
    guards = case.guards
    reasons = list(guards.reasons or ())
    verify = case.verify
    if case.timed:
        verify = replace(
            verify or Verify(skipped="no float64 check of the first call"), timed=tuple(case.timed)
        )
    base = {"verify": verify, "details": Details.of(case.details), "repro": case.repro}
    if any(r.startswith("mistrusted") for r in reasons):
        flags.append("mistrusted")
    if not case.visits:
        return Result.of(case.case, case.outcome, notes=tuple(notes + reasons), flags=tuple(flags),
                         guards=None if guards == Guards() else guards, **base)  # fmt: skip
    c = combine(case.visits)
    m = c.measurement
    time = Time.of({**c.time, "method": case.method})
    if (time.settle_s or 0.0) >= QUIET_MAX_WAIT_S:
        notes.append(
            f"other threads of this process were still busy after {QUIET_MAX_WAIT_S:g} s; "
            "the timing may be disturbed"
        )
    if m.first_call:
        notes.append(
            "the first call is the only sample: it took over 5x --call-budget-s, so no warm-up call was made"
        )
    if case.slow:
        notes.append(
            "measured in one round: a call takes too large a share of the sampling budget to repeat it "
            "over rounds (more time: --max-time-s)"
        )
    if c.time["dropped_rounds"]:
        notes.append(
            f"slower rounds measured while the machine ran below {100 * THROTTLED_SPEED:.0f}% of its best "
            f"in-run probe, or while our CPUs sat apart (hand-off over {APART_FACTOR:g}x its best), were "
            "dropped (time.dropped_rounds)"
        )
    flops = case.case.flops
    gflops = flops / m.median_s / 1e9 if m.median_s > 0 else None
    gflops_best = flops / m.min_s / 1e9 if m.min_s > 0 else None
    flags += c.flags
    # (a peak table's entry holds more than the record names)
    used = beside = None if peak is None else Peak(peak["gflops"], peak["source"], peak["name"])
    reference = c.reference
    if reference is not None and reference["fma_gflops"]:
        name = _probe_name(case.visits[0].before["fma"].key, case.case.dtype)
        beside = used = Peak(reference["fma_gflops"], "in-run", name)
        rounds = [(v.measurement.samples_s, v.speed_index) for v in c.kept]
        corrected = corrected_peak(reference, sensitivity, rounds)
        if corrected is not None:
            reference = {**reference, **corrected["reference"]}
            used = Peak(corrected["gflops"], "in-run", f"{name}; {corrected['how']}")
    peak_used, utilization = None, None
    if used is not None and beside is not None and gflops is not None:
        peak_used = used
        utilization = gflops / used.gflops
        if reference is not None and reference is not c.reference:
            reference["utilization_beside"] = gflops / beside.gflops
            reference["utilization_best"] = gflops / reference["fma_best_gflops"]
        if utilization < SLOW_UTILIZATION:
            flags.append("slow")
        guards, suspect = peak_guard(case.case, m.median_s, beside, guards)
        reasons += suspect
        if reasons and reasons[-1].startswith("suspect"):
            flags.append("suspect")
    guards = replace(guards, reasons=tuple(reasons))
    notes += reasons
    return Result.of(
        case.case,
        case.outcome,
        time=time,
        gflops=gflops,
        gflops_best=gflops_best,
        peak=peak_used,
        utilization=utilization,
        machine_speed=c.machine_speed,
        reference=Reference.from_block(reference),
        notes=tuple(notes),
        flags=tuple(flags),
        guards=guards,
        **base,
    )


def corrected_peak(
    reference: ReferenceBlock,
    sensitivity: SensitivityBlock | None,
    rounds: list[tuple[tuple[float, ...], float | None]],
) -> CorrectedPeak | None:
    """The peak a case's utilization is against. Every sample of a kept round (`rounds`: its samples, and
    the speed index beside it, 1.0 with both probes at the machine's best) is brought to the machine's best
    speed: its time times that round's index raised to the case's sensitivity (1: a case that follows the
    index; 0: not at all, as a case the probes do not explain). The utilization is the GFLOPS of their
    median against the best probe: a round on a slow machine is corrected by its own probe, not by the
    run's median one. Returned as the peak that gives that utilization for the case's GFLOPS (at most the
    best: a probe is never faster than its best). None without an FMA probe beside it."""
    speed, beside = reference.get("fma_speed"), reference.get("fma_gflops")
    if not speed or not beside:
        return None
    best = beside / speed
    known = sensitivity is not None
    sens: SensitivityBlock = sensitivity or {"value": None, "visits": 0, "over": "not yet estimated"}
    s = float(v) if (v := sens.get("value")) is not None else 1.0
    raw = [(t, sp) for samples, sp in rounds if sp for t in samples]
    median = statistics.median(t for t, _ in raw) if raw else 0.0
    if median <= 0:
        return None
    at_best = [t * min(1.0, sp) ** s for t, sp in raw]
    how = (
        f"the machine's best ({best:.4g} GFLOPS), each round's time brought to it by the speed index beside "
        f"that round (FMA and cache probes) to the power {s:.2f}, the sensitivity of {sens.get('over')}"
        if known
        else "each round's probe beside the case (the sensitivity is estimated at the end of the run)"
    )
    return {
        "gflops": best * statistics.median(at_best) / median,
        "how": how,
        "reference": {"fma_best_gflops": best, "sensitivity": {**sens, "used": s}},
    }

"""Guards against results too good to be true, after benchdnn (MISTRUSTED: too many zeros in an output) and
KernelBench (speed-ups that are too large are suspect). sweep/visits.py applies the first two to each case,
sweep/driver.py the third across the backends of a case once every round is done; the flags `mistrusted` and
`suspect`, with the reasons in the record's notes and `guards`, show in tables, reports, compare and ab (where
a suspect or mistrusted B is never counted FASTER).

- zeros_guard: an output with more than MISTRUST_ZEROS exact zeros over the share the op's random inputs
  give (0 for all but a ReLU RNN: ops.rnn.expected_zero_fraction) is `mistrusted`. A kernel that skipped
  work, or wrote part of its output, can still pass a loose error bound, and with verification off or
  over its cost cap nothing else looks at the output.
- peak_guard: a result whose necessary work (useful_flops: a conv's padded taps need not be multiplied)
  ran faster than the peak of the unit it is measured against is `suspect`.
- peer_guard: a result more than SUSPECT_PEER_SPEEDUP times faster than the best other backend on the same
  case is `suspect`. A peer flagged `slow` (under 1% of its peak: a framework with no real kernel for the
  case, such as torch's or our bf16 depthwise conv) is no measure of what is plausible and is not counted.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from opbench.blocks import Guards, Peak
from opbench.case import Case, Result, Status
from opbench.dtypes import Output
from opbench.ops import pass_of

MISTRUST_ZEROS = 0.30
SUSPECT_PEER_SPEEDUP = 10.0
# The flags these guards set: a case flagged so is never counted as faster (compare, ab).
DISTRUST_FLAGS = ("suspect", "mistrusted")


def zero_fraction(output: Output) -> float | None:
    """The share of exact zeros in an output (arrays, or tuples, lists and dicts of them); None if it holds
    no array."""
    zeros, size = 0, 0
    stack = [output]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (tuple, list)):
            stack.extend(item)
        elif item is not None:
            a = np.asarray(item)
            if a.dtype.kind in "fciu" or a.dtype.name == "bfloat16":
                zeros += int(a.size - np.count_nonzero(a))
                size += a.size
    return zeros / size if size else None


def zeros_guard(case: Case, output: Output) -> Guards:
    """The output's zeros counted, with a reason starting 'mistrusted' when there are too many."""
    fraction = zero_fraction(output)
    expected_of = case.op.expected_zero_fraction
    expected = float(expected_of(case.shape)) if expected_of else 0.0
    reasons = None
    if fraction is not None and fraction > expected + MISTRUST_ZEROS:
        reasons = (
            f"mistrusted: {100 * fraction:.0f}% of the output is exactly zero, where the inputs give "
            f"about {100 * expected:.0f}%",
        )
    return Guards(zero_fraction=fraction, expected_zero_fraction=expected, reasons=reasons)


def useful_flops(case: Case) -> int:
    """The FLOPs of `case` that a kernel cannot skip: all of them, but for a conv's padded taps
    (ops/conv.py useful_flops, in the same share for its backward pass)."""
    forward = pass_of(case.op, "fwd")
    if forward.useful_flops is None:
        return case.flops
    return round(case.flops * forward.useful_flops(case.shape) / forward.flops(case.shape))


def peak_guard(case: Case, median_s: float, peak: Peak, guards: Guards) -> tuple[Guards, list[str]]:
    """`guards` with the necessary work's FLOPs and GFLOPS, and a 'suspect' reason when it is above `peak`
    (the unit's, as utilization uses it: name, gflops)."""
    useful = useful_flops(case)
    useful_gflops = useful / median_s / 1e9
    guards = replace(guards, useful_flops=useful, useful_gflops=useful_gflops)
    if useful_gflops <= peak.gflops:
        return guards, []
    return guards, [
        f"suspect: {useful_gflops:.4g} GFLOPS of necessary work is "
        f"{100 * useful_gflops / peak.gflops:.0f}% of the {peak.name} ({peak.gflops:.4g} GFLOPS): "
        "the peak, the timing or the output is wrong (a peak cached while the machine was busy: opbench peak "
        "--refresh)"
    ]


def peer_guard(results: list[Result]) -> list[Result]:
    """Flag suspect a result more than SUSPECT_PEER_SPEEDUP times faster than the best other backend
    measured on the same case (op, shape, pass, dtype), peers flagged slow left out; `guards` names that
    peer and the ratio."""
    timed: dict[tuple[str, str, str], list[tuple[float, str]]] = {}
    for r in results:
        if r.status is Status.OK and r.time and "slow" not in r.flags:
            timed.setdefault((r.case.op.name, r.case.label, r.case.dtype), []).append(
                (r.time.median_s, r.case.backend)
            )
    out = []
    for r in results:
        group = timed.get((r.case.op.name, r.case.label, r.case.dtype), [])
        peers = [p for p in group if p[1] != r.case.backend]
        if r.status is not Status.OK or not r.time or not peers:
            out.append(r)
            continue
        peer_s, peer = min(peers)
        speedup = peer_s / r.time.median_s
        guards = replace(r.guards or Guards(), peer=peer, peer_speedup=speedup)
        if speedup > SUSPECT_PEER_SPEEDUP:
            reason = (
                f"suspect: {speedup:.0f}x faster than {peer}, the best other backend on this case (over "
                f"{SUSPECT_PEER_SPEEDUP:g}x: check the output and the timing)"
            )
            guards = replace(guards, reasons=(*(guards.reasons or ()), reason))
            flags = r.flags if "suspect" in r.flags else (*r.flags, "suspect")
            r = replace(r, flags=flags, notes=(*r.notes, reason))
        out.append(replace(r, guards=guards))
    return out

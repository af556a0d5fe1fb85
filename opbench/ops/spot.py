"""What the ops' spot checks share: the inputs of each timed visit, and the seeded part of an output that a
spot check recomputes in float64.

A sweep verifies a case's first call against the full float64 reference, then, before every timed visit,
gives the case's inputs new values (`refreshed`, written in place by Prepared.refill) and checks the output
of the visit's timed calls on them (each op's `spot_check`). New values catch a kernel that remembers an
earlier answer; checking the timed calls catches one that answers differently once warm. The new values are
the old ones moved: every array rotated by a seeded offset, the first one negated, so the data's
distribution (its magnitudes, zeros and subnormals, what a kernel's speed may depend on) is unchanged while
every output changes, a one-element input included. A spot check recomputes a few seeded rows, images,
filters or batch rows (SPOT_ROWS of each) of the output, with the full check's bound: its cost is a small
part of the full reference, and a whole-output fault (stale, scaled, shifted, noise) shows in any row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from opbench.dtypes import Array, Inputs, Output
from opbench.ops.numerics import compare
from opbench.record_blocks import VerifyBlock

S = TypeVar("S")
# Which part of an output a spot check takes: rows (an index array), or per dimension an index array or all.
Index = Array | tuple[Array | slice, ...]


class SpotResult(VerifyBlock, total=False):
    """A spot check's comparison (numerics.compare, or why the output's shape is wrong) and what it
    recomputed, in words."""

    checked: str


# Rows (images, filters, batch rows) a spot check recomputes in float64.
SPOT_ROWS = 2


def refreshed(inputs: dict[str, Array], seed: int) -> dict[str, Array]:
    """New arrays with the inputs' values moved: each rotated (flattened) by a seeded offset, the first input
    negated."""
    rng = np.random.default_rng(seed)
    out: dict[str, Array] = {}
    for i, (name, values) in enumerate(inputs.items()):
        flat = np.ascontiguousarray(values).reshape(-1)
        moved = np.roll(flat, int(rng.integers(1, max(2, flat.size)))).reshape(values.shape)
        out[name] = np.negative(moved) if i == 0 else moved
    return out


def pick(size: int, seed: int, count: int = SPOT_ROWS) -> Array:
    """`count` distinct indices below `size` (all of them when fewer), sorted, drawn with `seed`."""
    if size <= count:
        return np.arange(size)
    return np.sort(np.random.default_rng(seed).choice(size, size=count, replace=False))


@dataclass(frozen=True)
class Part:
    """What a spot check compares the output of timed calls with (an op's spot_part): per named output, its
    whole shape, the index of the part recomputed, that part's float64 reference and bound; and what was
    recomputed, in words. It depends on the inputs, the seed and the accumulation alone, so the backends of
    one case can share it (sweep/verification.py)."""

    shapes: Mapping[str, tuple[int, ...]]
    index: Mapping[str, Index]
    refs: dict[str, Array]
    bounds: dict[str, Array]
    checked: str

    def compare(self, outputs: Mapping[str, Output], dtype: str) -> SpotResult:
        """numerics.compare on the part of each output, after checking the whole output's shape."""
        taken = {}
        for name, shape in self.shapes.items():
            arr = np.asarray(outputs[name])
            if arr.shape != tuple(shape):
                return {
                    "ok": False,
                    "reason": f"{name} has shape {arr.shape}, expected {tuple(shape)}",
                    "max_err_ratio": None,
                    "max_rel_err": None,
                    "checked": self.checked,
                }
            taken[name] = arr[self.index[name]]
        return {**compare(taken, self.refs, self.bounds, dtype), "checked": self.checked}


# An op's spot_part(shape, inputs, dtype, accumulate, seed) and spot_check(shape, output, inputs, dtype,
# accumulate, seed).
PartOf = Callable[[S, Inputs, str, str, int], Part]
SpotCheck = Callable[[S, Output, Inputs, str, str, int], SpotResult]


def checker(part: PartOf[S], named: Callable[[S, Output], dict[str, Output]]) -> SpotCheck[S]:
    """An op's spot_check(shape, output, inputs, dtype, accumulate, seed) from its spot_part and
    named_outputs: the output's named arrays compared with the part."""

    def spot_check(
        shape: S, output: Output, inputs: Inputs, dtype: str, accumulate: str, seed: int
    ) -> SpotResult:
        return part(shape, inputs, dtype, accumulate, seed).compare(named(shape, output), dtype)

    return spot_check


def rows_text(what: str, picked: Array, total: int) -> str:
    """'rows 3, 17 of 1024' (what a spot check recomputed)."""
    return f"{what} {', '.join(str(int(i)) for i in picked)} of {total}"

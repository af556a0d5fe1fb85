"""Sweep spaces: axes of an operator (lists of values) around a base point, expanded into shapes either one
factor at a time (as the operator study varies them) or as a full cross product."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import TypeVar

from opbench.documents import Fields, Scalar
from opbench.ops.base import Op

S = TypeVar("S")

MODES = ("one-factor", "product")
MAX_SHAPES = 10_000  # per sweep: the command line's axes, and each [[sweep]] of a spec or suite


def count(axes: Mapping[str, Sequence[Scalar]], mode: str) -> int:
    """How many points expand() would visit, computed without expanding (duplicates included)."""
    if mode == "one-factor":
        return 1 + sum(len(v) for v in axes.values() if len(v) > 1)
    n = 1
    for v in axes.values():
        n *= len(v)
    return n


def expand(
    op: Op[S], axes: Mapping[str, Sequence[Scalar]], base: Fields, params: Fields, mode: str
) -> list[S]:
    """Shapes for `axes` (a subset of op.axes) around `base` (every axis set) with fixed `params`.

    one-factor: the base point, then each axis's values with every other axis at its base value; an axis
    given a single value is not varied but moves the base point (so `--input-size 6` fixes it).
    product: every combination; axes not given stay at their base value.
    Order is kept and duplicates dropped. An invalid point raises ValueError naming it."""
    if mode not in MODES:
        raise ValueError(f"unknown mode '{mode}' (expected {' or '.join(MODES)})")
    points_needed = count(axes, mode)
    if points_needed > MAX_SHAPES:
        raise ValueError(f"the axes expand to {points_needed} shapes (limit {MAX_SHAPES})")
    if mode == "one-factor":
        base = {**base, **{a: v[0] for a, v in axes.items() if len(v) == 1}}
        axes = {a: v for a, v in axes.items() if len(v) > 1}
    order = [a for a in op.axes if a in axes]
    points: list[dict[str, Scalar]] = []
    if mode == "one-factor":
        points.append(dict(base))
        for axis in order:
            points.extend({**base, axis: v} for v in axes[axis])
    else:
        for combo in itertools.product(*(axes[a] for a in order)):
            points.append({**base, **dict(zip(order, combo, strict=True))})
    shapes: list[S] = []
    seen: set[S] = set()
    for point in points:
        try:
            shape = op.make_shape({**params, **point})
        except ValueError as e:
            described = ", ".join(f"{k}={v}" for k, v in point.items())
            raise ValueError(f"{op.name} point ({described}): {e}") from None
        if shape not in seen:
            seen.add(shape)
            shapes.append(shape)
    return shapes


def scale_shapes(op: Op[S], shapes: Sequence[S], factor: float) -> tuple[list[S], list[S]]:
    """Shrink batch and input size of every shape by factor (op.scale). Returns the scaled shapes, duplicates
    dropped, and beside each the shape it came from (the first, where two shrink to the same)."""
    scaled: list[S] = []
    origins: list[S] = []
    for shape in shapes:
        s = op.scale(shape, factor)
        if s not in scaled:
            scaled.append(s)
            origins.append(shape)
    return scaled, origins

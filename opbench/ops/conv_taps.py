"""Which filter taps of a conv reach the image, and what follows from it: the FLOPs a kernel that skips the
padding must still do (useful_flops, for the too-good-to-be-true guard) and the outputs and gradients that
are zero whatever the inputs (expected_zero_fraction, for the mistrusted-output guard). Part of ops.conv's
interface; conv_bwd reads axis_hits."""

from __future__ import annotations

import functools

from opbench.ops.conv_shape import ConvShape


@functools.lru_cache(maxsize=1024)  # asked after every visit of a case (guards.peak_guard, zeros_guard)
def _axis_hits(size: int, out: int, taps: int, stride: int, pad: int, dil: int) -> tuple[int, int, int, int]:
    """Along one axis: the (output position, filter tap) pairs whose input lies inside the image, the output
    positions whose window reaches the image, the image positions some window reaches, and the filter taps
    that reach the image from some output position."""
    pairs = [(o, t, o * stride - pad + t * dil) for o in range(out) for t in range(taps)]
    inside = [(o, t, i) for o, t, i in pairs if 0 <= i < size]
    outputs = {o for o, _, _ in inside}
    return len(inside), len(outputs), len({i for _, _, i in inside}), len({t for _, t, _ in inside})


def axis_hits(shape: ConvShape) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int]]:
    """_axis_hits for the height and for the width."""
    return (
        _axis_hits(shape.h, shape.out_h, shape.r, shape.stride_h, shape.pad_h, shape.dil_h),
        _axis_hits(shape.w, shape.out_w, shape.s, shape.stride_w, shape.pad_w, shape.dil_w),
    )


def expected_zero_fraction(shape: ConvShape) -> float:
    """The share of the output that is exactly zero whatever the inputs: outputs whose window lies wholly in
    the padding (benchdnn's padding larger than the filter; the mistrusted-output guard allows for them)."""
    (_, rows, _, _), (_, cols, _, _) = axis_hits(shape)
    return 1.0 - rows * cols / (shape.out_h * shape.out_w)


def useful_flops(shape: ConvShape) -> int:
    """The FLOPs a kernel that skips the padding must still do: flops() counts every tap, and a kernel that
    never multiplies the padded zeros reaches more counted GFLOPS than its unit's peak without any error
    (the too-good-to-be-true guard compares this with the peak instead)."""
    (inside_h, _, _, _), (inside_w, _, _, _) = axis_hits(shape)
    return 2 * shape.n * shape.k * (shape.c // shape.groups) * inside_h * inside_w

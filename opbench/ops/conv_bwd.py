"""Conv2d backward (the op key `conv:bwd`, `--pass bwd`): for y = conv2d(x, w) and an upstream gradient dy
(the shape of y), dx (the shape of x) and dw (the shape of w), timed as one unit. The shapes, axes and
parameters are the forward's (ops/conv.py, re-exported); FLOPs, inputs, reference, check and our kernel are
this pass's own.

FLOPs = 2x the forward's: the data gradient and the weight gradient each cost one forward (benchdnn's
BWD_D + BWD_W)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from opbench import kernels
from opbench.dtypes import ITEMSIZE, NUMPY_DTYPES, Array, Inputs, Output
from opbench.ops import conv, spot
from opbench.ops.base import Op, backward_of
from opbench.ops.conv import filters_of, padded64, spot_pick
from opbench.ops.conv import flops as forward_flops
from opbench.ops.conv import make_inputs as forward_inputs
from opbench.ops.conv_shape import ConvShape
from opbench.ops.conv_taps import axis_hits
from opbench.ops.numerics import checker, dot_bound, squares_bound
from opbench.tiles import Tiles

SPACE = "conv_bwd"  # tuning/spaces/conv_bwd.toml
FLOP_NOTE = (
    "Conv2d backward FLOPs = 2x the forward's (data gradient and weight gradient, one forward's FLOPs each; "
    "the forward is not included)"
)


def flops(shape: ConvShape) -> int:
    return 2 * forward_flops(shape)


def expected_zero_fraction(shape: ConvShape) -> float:
    """The share of (dx, dw) that is exactly zero whatever the inputs: image positions no window reaches
    (a stride longer than the filter, rows past the last window) have no gradient, nor do filter taps that
    only ever meet the padding."""
    (_, _, rows, taps_h), (_, _, cols, taps_w) = axis_hits(shape)
    x = shape.n * shape.c * shape.h * shape.w
    w = shape.k * (shape.c // shape.groups) * shape.r * shape.s
    zeros = x * (1.0 - rows * cols / (shape.h * shape.w)) + w * (1.0 - taps_h * taps_w / (shape.r * shape.s))
    return zeros / (x + w)


def _elems(shape: ConvShape) -> int:
    x = shape.n * shape.c * shape.h * shape.w
    w = shape.k * (shape.c // shape.groups) * shape.r * shape.s
    y = shape.n * shape.k * shape.out_h * shape.out_w
    return 2 * (x + w) + y  # x, w, dy read; dx, dw written


def min_bytes(shape: ConvShape, dtype: str) -> int:
    """Compulsory traffic: x, w and dy read once, dx and dw written once."""
    return ITEMSIZE[dtype] * _elems(shape)


def memory_bytes(shape: ConvShape, dtype: str, reference: bool = True) -> int:
    """Arrays in dtype (x3 copies), our fp32 copies and tile, and, when verifying, the float64 operands,
    gradients, magnitudes and one image's im2col matrix at a time."""
    col = (shape.c // shape.groups) * shape.r * shape.s * shape.out_h * shape.out_w
    padded = shape.n * shape.c * shape.padded_h * shape.padded_w
    ref = 8 * (4 * col + 6 * _elems(shape) + 2 * padded) if reference else 0
    return 3 * ITEMSIZE[dtype] * _elems(shape) + 4 * (_elems(shape) + (1 << 18)) + ref


def verify_cost_flops(shape: ConvShape) -> int:
    """Both float64 gradients and their magnitudes."""
    return 2 * flops(shape)


def make_inputs(shape: ConvShape, dtype: str, seed: int) -> dict[str, Array]:
    """The forward's x and w (the same values for the same seed) and dy, uniform in [-1, 1)."""
    inputs = forward_inputs(shape, dtype, seed)
    rng = np.random.default_rng([seed, 1])
    dy_shape = (shape.n, shape.k, shape.out_h, shape.out_w)
    inputs["dy"] = rng.uniform(-1.0, 1.0, size=dy_shape).astype(NUMPY_DTYPES[dtype])
    return inputs


def gradients64(shape: ConvShape, x: Array, w: Array, dy: Array) -> tuple[Array, Array]:
    """float64 (dx, dw) by im2col, one image and group at a time: dW_g += dY_g cols, and the columns'
    gradient dY_g^T W_g scattered back tap by tap into a zero-padded dx."""
    s = shape
    x = padded64(s, x)
    w, dy = w.astype(np.float64), dy.astype(np.float64)
    eh, ew = s.dil_h * (s.r - 1) + 1, s.dil_w * (s.s - 1) + 1
    win = np.lib.stride_tricks.sliding_window_view(x, (eh, ew), axis=(2, 3))  # type: ignore[call-overload]
    win = win[:, :, :: s.stride_h, :: s.stride_w, :: s.dil_h, :: s.dil_w][:, :, : s.out_h, : s.out_w]
    g, cg, kg, pq = s.groups, s.c // s.groups, s.k // s.groups, s.out_h * s.out_w
    dx = np.zeros_like(x)
    dw = np.zeros(w.shape)
    h_end, w_end = s.stride_h * (s.out_h - 1) + 1, s.stride_w * (s.out_w - 1) + 1
    for img in range(s.n):
        for gi in range(g):
            chans = slice(gi * cg, (gi + 1) * cg)
            outs = slice(gi * kg, (gi + 1) * kg)
            cols = win[img, chans].transpose(1, 2, 0, 3, 4).reshape(pq, cg * s.r * s.s)
            dy_g = dy[img, outs].reshape(kg, pq)
            dw[outs] += (dy_g @ cols).reshape(kg, cg, s.r, s.s)
            dcols = (dy_g.T @ w[outs].reshape(kg, -1)).reshape(s.out_h, s.out_w, cg, s.r, s.s)
            for r in range(s.r):
                for t in range(s.s):
                    h0, w0 = r * s.dil_h, t * s.dil_w
                    dx[img, chans, h0 : h0 + h_end : s.stride_h, w0 : w0 + w_end : s.stride_w] += dcols[
                        :, :, :, r, t
                    ].transpose(2, 0, 1)
    return dx[:, :, s.pad_h : s.pad_h + s.h, s.pad_w : s.pad_w + s.w], dw


def reference(shape: ConvShape, inputs: dict[str, Array]) -> dict[str, Array]:
    dx, dw = gradients64(shape, inputs["x"], inputs["w"], inputs["dy"])
    return {"dx": dx, "dw": dw}


def gradient_bounds(
    shape: ConvShape, inputs: dict[str, Array], ref: dict[str, Array], accumulate: str, dtype: str
) -> dict[str, Array]:
    """The dot-product bounds of dx (at most (K/groups) x R x S products per element) and dw (N x P x Q),
    over the gradients of |x|, |w| and |dy|; squares bounded by the largest operands: |dy| of each image and
    |w| for dx, |dy| of each filter and |x| for dw."""
    abs_x, abs_w, abs_dy = (np.abs(inputs[n].astype(np.float64)) for n in ("x", "w", "dy"))
    mag_dx, mag_dw = gradients64(shape, abs_x, abs_w, abs_dy)
    dy_image = abs_dy.max(axis=(1, 2, 3), initial=0.0)[:, None, None, None]
    dy_filter = abs_dy.max(axis=(0, 2, 3), initial=0.0)[:, None, None, None]
    w_max, x_max = float(abs_w.max(initial=0.0)), float(abs_x.max(initial=0.0))
    k_dx = shape.k // shape.groups * shape.r * shape.s
    k_dw = shape.n * shape.out_h * shape.out_w
    return {
        "dx": dot_bound(ref["dx"], mag_dx, squares_bound(dy_image, w_max, mag_dx), k_dx, accumulate, dtype),
        "dw": dot_bound(ref["dw"], mag_dw, squares_bound(dy_filter, x_max, mag_dw), k_dw, accumulate, dtype),
    }


def error_bounds(
    shape: ConvShape, inputs: dict[str, Array], ref: dict[str, Array], dtype: str, accumulate: str
) -> dict[str, Array]:
    """What check() compares with (gradient_bounds; verification.Expected computes it once)."""
    return gradient_bounds(shape, inputs, ref, accumulate, dtype)


def spot_cost_flops(shape: ConvShape) -> int:
    """float64 work of a spot check: the gradients of SPOT_ROWS images, and of SPOT_ROWS filters of one
    group."""
    kg = shape.k // shape.groups
    by_filter = replace(shape, c=shape.c // shape.groups, k=min(kg, spot.SPOT_ROWS), groups=1)
    return verify_cost_flops(replace(shape, n=min(shape.n, spot.SPOT_ROWS))) + verify_cost_flops(by_filter)


def spot_part(
    shape: ConvShape, inputs: dict[str, Array], dtype: str, accumulate: str, seed: int
) -> spot.Part:
    """Seeded images of dx (their gradients alone) and seeded filters of one group of dw (the gradients of
    that group's channels for those filters alone), ops/spot.py."""
    images, group, filters = spot_pick(shape, seed)
    by_image = replace(shape, n=len(images))
    part_n = {"x": inputs["x"][images], "w": inputs["w"], "dy": inputs["dy"][images]}
    dx_ref, dw_images = gradients64(by_image, part_n["x"], part_n["w"], part_n["dy"])
    cg = shape.c // shape.groups
    by_filter = filters_of(shape, group, filters)
    part_k = {
        "x": inputs["x"][:, group * cg : (group + 1) * cg],
        "w": inputs["w"][filters],
        "dy": inputs["dy"][:, filters],
    }
    dx_filters, dw_ref = gradients64(by_filter, part_k["x"], part_k["w"], part_k["dy"])
    bounds = {
        "dx": gradient_bounds(by_image, part_n, {"dx": dx_ref, "dw": dw_images}, accumulate, dtype)["dx"],
        "dw": gradient_bounds(by_filter, part_k, {"dx": dx_filters, "dw": dw_ref}, accumulate, dtype)["dw"],
    }
    by_what = (spot.rows_text("images", images, shape.n), spot.rows_text("filters", filters, shape.k))
    shapes = {"dx": (shape.n, shape.c, shape.h, shape.w), "dw": (shape.k, cg, shape.r, shape.s)}
    refs = {"dx": dx_ref, "dw": dw_ref}
    checked = f"{by_what[0]} of dx, {by_what[1]} of dw"
    return spot.Part(shapes, {"dx": images, "dw": filters}, refs, bounds, checked)


def named_outputs(shape: ConvShape, output: Output) -> dict[str, Output]:
    return dict(zip(("dx", "dw"), output, strict=True))


check = checker(error_bounds, named_outputs, lambda ref: ref)


spot_check = spot.checker(spot_part, named_outputs)


def plan(shape: ConvShape, inputs: Inputs, tiles: Tiles, accumulate: str = "fp32") -> kernels.Plan:
    """Our conv backward prepared for this case (kernels.Plan): its two products use the tiles."""
    if accumulate != "fp32":
        raise ValueError("the conv backward accumulates in fp32 only")
    return kernels.prepare_conv2d_backward(
        inputs["x"],
        inputs["w"],
        inputs["dy"],
        stride=(shape.stride_h, shape.stride_w),
        padding=shape.padding,
        dilation=(shape.dil_h, shape.dil_w),
        groups=shape.groups,
        tiles=tiles,
    )


def tile_names(shape: ConvShape, isa: str | None, dtype: str = "fp32") -> dict[str, int]:
    """What the tuning space's rules may name: the register tile (and elem_bytes, as gemm.tile_names), m =
    C/groups x R x S (the im2col tile's rows, the weight-gradient product's M) and n = k = P x Q (the pixels
    a block and a rank-k update take at most)."""
    pixels = shape.out_h * shape.out_w
    return {
        **kernels.register_tile(isa, dtype),
        "m": shape.c // shape.groups * shape.r * shape.s,
        "n": pixels,
        "k": pixels,
    }


import opbench.ops.conv_bwd as this  # noqa: E402  (the module binds itself: mypy checks it as a PassModule)

OP: Op[ConvShape] = backward_of(conv.OP, this)

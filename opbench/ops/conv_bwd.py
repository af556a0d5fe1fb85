"""Conv2d backward (the op key `conv:bwd`, `--pass bwd`): for y = conv2d(x, w) and an upstream gradient dy
(the shape of y), dx (the shape of x) and dw (the shape of w), timed as one unit. The shapes, axes and
parameters are the forward's (ops/conv.py, re-exported); FLOPs, inputs, reference, check and our kernel are
this pass's own.

FLOPs = 2x the forward's: the data gradient and the weight gradient each cost one forward (benchdnn's
BWD_D + BWD_W)."""

from __future__ import annotations

from typing import Any

import numpy as np

from opbench.dtypes import ITEMSIZE, NUMPY_DTYPES
from opbench.ops.conv import (  # noqa: F401  (the forward's shape interface, shared)
    AXES,
    BASE,
    BATCH_FIELDS,
    DEFAULT_AXES,
    DEFAULT_BACKENDS,
    DEFAULT_MODE,
    NAME,
    PARAMS,
    SHAPE_FIELDS,
    SPATIAL_FIELDS,
    ConvShape,
    default_cases,
    factors,
    make_shape,
    scale,
    shape_from_case,
)
from opbench.ops.conv import flops as forward_flops
from opbench.ops.conv import make_inputs as forward_inputs
from opbench.ops.numerics import compare, dot_bound

PASS = "bwd"
SPACE = "conv_bwd"  # tuning/spaces/conv_bwd.toml
FLOP_NOTE = (
    "Conv2d backward FLOPs = 2x the forward's (data gradient and weight gradient, one forward's FLOPs each; "
    "the forward is not included)"
)


def flops(shape: ConvShape) -> int:
    return 2 * forward_flops(shape)


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
    padded = shape.n * shape.c * (shape.h + 2 * shape.pad_h) * (shape.w + 2 * shape.pad_w)
    ref = 8 * (4 * col + 6 * _elems(shape) + 2 * padded) if reference else 0
    return 3 * ITEMSIZE[dtype] * _elems(shape) + 4 * (_elems(shape) + (1 << 18)) + ref


def verify_cost_flops(shape: ConvShape) -> int:
    """Both float64 gradients and their magnitudes."""
    return 2 * flops(shape)


def make_inputs(shape: ConvShape, dtype: str, seed: int) -> dict[str, np.ndarray]:
    """The forward's x and w (the same values for the same seed) and dy, uniform in [-1, 1)."""
    inputs = forward_inputs(shape, dtype, seed)
    rng = np.random.default_rng([seed, 1])
    dy_shape = (shape.n, shape.k, shape.out_h, shape.out_w)
    inputs["dy"] = rng.uniform(-1.0, 1.0, size=dy_shape).astype(NUMPY_DTYPES[dtype])
    return inputs


def gradients64(
    shape: ConvShape, x: np.ndarray, w: np.ndarray, dy: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """float64 (dx, dw) by im2col, one image and group at a time: dW_g += dY_g cols, and the columns'
    gradient dY_g^T W_g scattered back tap by tap into a zero-padded dx."""
    s = shape
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (s.pad_h, s.pad_h), (s.pad_w, s.pad_w)))
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


def reference(shape: ConvShape, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    dx, dw = gradients64(shape, inputs["x"], inputs["w"], inputs["dy"])
    return {"dx": dx, "dw": dw}


def check(
    shape: ConvShape,
    output: Any,
    inputs: dict[str, np.ndarray],
    ref: dict[str, np.ndarray],
    dtype: str,
    accumulate: str,
) -> dict[str, Any]:
    """output = (dx, dw). dx sums at most (K/groups) x R x S products per element, dw N x P x Q; the bounds
    are the dot-product bound with those lengths over the gradients of |x|, |w| and |dy|."""
    dx, dw = output
    mag_dx, mag_dw = gradients64(shape, np.abs(inputs["x"]), np.abs(inputs["w"]), np.abs(inputs["dy"]))
    kg = shape.k // shape.groups
    bounds = {
        "dx": dot_bound(mag_dx, kg * shape.r * shape.s, accumulate, dtype),
        "dw": dot_bound(mag_dw, shape.n * shape.out_h * shape.out_w, accumulate, dtype),
    }
    return compare({"dx": np.asarray(dx), "dw": np.asarray(dw)}, ref, bounds, dtype)


def plan(
    shape: ConvShape,
    inputs: dict[str, np.ndarray],
    tiles: dict[str, int | None],
    threads: int,
    isa: str | None = None,
    accumulate: str = "fp32",
) -> Any:
    """Our conv backward prepared for this case (kernels.Plan): its two products use the tiles."""
    from opbench import kernels

    if accumulate != "fp32":
        raise ValueError("the conv backward accumulates in fp32 only")
    return kernels.prepare_conv2d_backward(
        inputs["x"],
        inputs["w"],
        inputs["dy"],
        stride=(shape.stride_h, shape.stride_w),
        padding=(shape.pad_h, shape.pad_w),
        dilation=(shape.dil_h, shape.dil_w),
        groups=shape.groups,
        tile_m=tiles.get("tile_m"),
        tile_n=tiles.get("tile_n"),
        tile_k=tiles.get("tile_k"),
        threads=threads,
        isa=isa,
    )


def tile_names(shape: ConvShape, isa: str | None, dtype: str = "fp32") -> dict[str, int]:
    """What the tuning space's rules may name: the register tile (and elem_bytes, as gemm.tile_names), m =
    C/groups x R x S (the im2col tile's rows, the weight-gradient product's M) and n = k = P x Q (the pixels
    a block and a rank-k update take at most)."""
    from opbench import kernels

    pixels = shape.out_h * shape.out_w
    return {
        **kernels.register_tile(isa, dtype),
        "m": shape.c // shape.groups * shape.r * shape.s,
        "n": pixels,
        "k": pixels,
    }

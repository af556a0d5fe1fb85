"""Conv2d forward, NCHW input and KCRS weights (PyTorch's layout): shapes, FLOPs, inputs, float64
reference and error bound."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from opbench import kernels
from opbench.documents import Fields, Scalar
from opbench.dtypes import ITEMSIZE, NUMPY_DTYPES, Array, Inputs, Output
from opbench.ops import spot
from opbench.ops.base import Op, bind
from opbench.ops.conv_shape import SHAPE_FIELDS, ConvShape

# the conv's optional Op fields, kept with the tap arithmetic they come from
from opbench.ops.conv_taps import expected_zero_fraction as expected_zero_fraction
from opbench.ops.conv_taps import useful_flops as useful_flops
from opbench.ops.fields import int_field, reject_unknown
from opbench.ops.numerics import checker, dot_bound, squares_bound
from opbench.ops.space import expand
from opbench.tiles import Tiles

NAME = "conv"
FLOP_NOTE = (
    "Conv2d FLOPs = 2*N*C_out*H_out*W_out*(C_in/groups)*K_h*K_w, "
    "H_out = floor((H + p_top + p_bottom - d(K-1) - 1)/s) + 1 (FLOPs, not MACs; no bias)"
)


# Sweep axes (the operator study's factors) and the shape fields each sets.
AXES: dict[str, tuple[str, ...]] = {
    "batch": ("n",),
    "input_size": ("h", "w"),
    "in_channels": ("c",),
    "out_channels": ("k",),
    "filter_size": ("r", "s"),
}
# Fixed parameters of a sweep; padding "same" keeps H_out = H at stride 1 for every filter size.
PARAMS: dict[str, Scalar] = {"stride": 1, "padding": "same", "dilation": 1, "groups": 1}
BASE = {"batch": 4, "input_size": 28, "in_channels": 32, "out_channels": 32, "filter_size": 3}
DEFAULT_AXES = {
    "batch": [1, 2, 4, 8, 16],
    "input_size": [14, 28, 56],
    "in_channels": [16, 32, 64],
    "out_channels": [16, 32, 64],
    "filter_size": [1, 3, 5],
}
DEFAULT_MODE = "one-factor"
DEFAULT_BACKENDS = ("cpp", "torch", "mindspore", "tensorflow")
BATCH_FIELDS = ("n",)
SPATIAL_FIELDS = ("h", "w")


def shape_from_case(fields: Fields) -> ConvShape:
    """From explicit shape fields (n, c, h, w, k, r, s required; stride_h ... groups optional)."""
    reject_unknown(fields, SHAPE_FIELDS, NAME)
    values = {f: int_field(fields, f) for f in ("n", "c", "h", "w", "k", "r", "s")}
    for f, default, minimum in (
        ("stride_h", 1, 1),
        ("stride_w", 1, 1),
        ("pad_h", 0, 0),
        ("pad_w", 0, 0),
        ("dil_h", 1, 1),
        ("dil_w", 1, 1),
        ("groups", 1, 1),
        ("pad_h_end", -1, 0),
        ("pad_w_end", -1, 0),
    ):
        values[f] = int_field(fields, f, minimum) if f in fields else default
    shape = ConvShape(**values)
    if shape.c % shape.groups or shape.k % shape.groups:
        raise ValueError(f"groups={shape.groups} must divide in and out channels ({shape.c}, {shape.k})")
    if shape.out_h < 1 or shape.out_w < 1:
        raise ValueError(f"output of {shape.label()} would be empty")
    return shape


def make_shape(point: Fields) -> ConvShape:
    """From a sweep point: the axes plus stride, padding ('same', an integer, or (top, bottom, left, right)),
    dilation and groups."""
    r = s = point["filter_size"]
    dil = point.get("dilation", 1)
    padding = point.get("padding", "same")
    pad: Scalar = padding
    if padding == "same":  # a filter size or dilation that is no integer: shape_from_case names it
        pad = dil * (r - 1) // 2 if isinstance(r, int) and isinstance(dil, int) else None
    if isinstance(pad, (tuple, list)):
        top, bottom, left, right = pad
        pad, ends = top, {"pad_w": left, "pad_h_end": bottom, "pad_w_end": right}
    else:
        ends = {}
    return shape_from_case(
        {
            "n": point["batch"],
            "c": point["in_channels"],
            "h": point["input_size"],
            "w": point["input_size"],
            "k": point["out_channels"],
            "r": r,
            "s": s,
            "stride_h": point.get("stride", 1),
            "stride_w": point.get("stride", 1),
            "pad_h": pad,
            "pad_w": pad,
            "dil_h": dil,
            "dil_w": dil,
            "groups": point.get("groups", 1),
            **ends,
        }
    )


def factors(shape: ConvShape) -> dict[str, Scalar]:
    """The sweep axes' values for this shape (an 'HxW' string where height and width differ)."""

    def pair(a: int, b: int) -> int | str:
        return a if a == b else f"{a}x{b}"

    return {
        "batch": shape.n,
        "input_size": pair(shape.h, shape.w),
        "in_channels": shape.c,
        "out_channels": shape.k,
        "filter_size": pair(shape.r, shape.s),
    }


def scale(shape: ConvShape, factor: float) -> ConvShape:
    """Shrink batch and input size by factor (at least 1, and never below the filter's extent)."""
    n = max(1, round(shape.n * factor))
    h = max(1, round(shape.h * factor), shape.dil_h * (shape.r - 1) + 1 - 2 * shape.pad_h)
    w = max(1, round(shape.w * factor), shape.dil_w * (shape.s - 1) + 1 - 2 * shape.pad_w)
    return replace(shape, n=n, h=h, w=w)


def default_cases() -> list[ConvShape]:
    return expand(OP, DEFAULT_AXES, dict(BASE), dict(PARAMS), DEFAULT_MODE)


def flops(shape: ConvShape) -> int:
    return 2 * shape.n * shape.k * shape.out_h * shape.out_w * (shape.c // shape.groups) * shape.r * shape.s


def _elems(shape: ConvShape) -> tuple[int, int, int]:
    x = shape.n * shape.c * shape.h * shape.w
    w = shape.k * (shape.c // shape.groups) * shape.r * shape.s
    y = shape.n * shape.k * shape.out_h * shape.out_w
    return x, w, y


def min_bytes(shape: ConvShape, dtype: str) -> int:
    """Compulsory traffic: read input and weights once, write the output once."""
    return ITEMSIZE[dtype] * sum(_elems(shape))


def memory_bytes(shape: ConvShape, dtype: str, reference: bool = True) -> int:
    """Inputs and output in dtype (x3 copies), and our kernel's scratch: the zero-padded fp32 copy of the
    input and the packed fp32 weights (bf16: its NHWC copy and reordered weights, less than those, and a chunk
    of patch rows and of Y^T: csrc/conv/conv2d_bf16.cpp, 8 MiB of patches or at least 1024 rows); when
    verifying, the float64 operands, output and bound, and one image's im2col matrix at a time."""
    x, w, y = _elems(shape)
    pixels = shape.out_h * shape.out_w
    crs = (shape.c // shape.groups) * shape.r * shape.s
    col = crs * pixels
    padded = shape.n * shape.c * shape.padded_h * shape.padded_w
    ref = 8 * (2 * col + 4 * (x + w + y)) if reference else 0
    chunk = 0
    if dtype == "bf16":
        rows = min(shape.n * pixels, max(1024, (8 << 20) // (2 * crs)))
        chunk = 2 * rows * (crs + 1 + shape.k)
    return 3 * ITEMSIZE[dtype] * (x + w + y) + 4 * (padded + w) + chunk + ref


def verify_cost_flops(shape: ConvShape) -> int:
    return 2 * flops(shape)


def make_inputs(shape: ConvShape, dtype: str, seed: int) -> dict[str, Array]:
    rng = np.random.default_rng(seed)
    np_dtype = NUMPY_DTYPES[dtype]
    x = rng.uniform(-1.0, 1.0, size=(shape.n, shape.c, shape.h, shape.w)).astype(np_dtype)
    w = rng.uniform(-1.0, 1.0, size=(shape.k, shape.c // shape.groups, shape.r, shape.s)).astype(np_dtype)
    return {"x": x, "w": w}


def padded64(shape: ConvShape, x: Array) -> Array:
    """x in float64, zero-padded on each side by the shape's padding."""
    t, b, left, right = shape.padding
    return np.pad(x.astype(np.float64), ((0, 0), (0, 0), (t, b), (left, right)))


def conv64(shape: ConvShape, x: Array, w: Array) -> Array:
    """float64 conv2d by im2col: a strided window view, one matrix product per group."""
    x = padded64(shape, x)
    w = w.astype(np.float64)
    eh, ew = shape.dil_h * (shape.r - 1) + 1, shape.dil_w * (shape.s - 1) + 1
    win = np.lib.stride_tricks.sliding_window_view(x, (eh, ew), axis=(2, 3))  # type: ignore[call-overload]
    win = win[:, :, :: shape.stride_h, :: shape.stride_w, :: shape.dil_h, :: shape.dil_w]
    win = win[:, :, : shape.out_h, : shape.out_w]  # n, c, P, Q, r, s
    g, cg, kg = shape.groups, shape.c // shape.groups, shape.k // shape.groups
    out = np.empty((shape.n, shape.k, shape.out_h, shape.out_w))
    for img in range(shape.n):  # one image at a time bounds the im2col copy
        for gi in range(g):
            cols = (
                win[img, gi * cg : (gi + 1) * cg].transpose(1, 2, 0, 3, 4).reshape(-1, cg * shape.r * shape.s)
            )
            wg = w[gi * kg : (gi + 1) * kg].reshape(kg, -1)
            res = (cols @ wg.T).reshape(shape.out_h, shape.out_w, kg)
            out[img, gi * kg : (gi + 1) * kg] = res.transpose(2, 0, 1)
    return out


def reference(shape: ConvShape, inputs: dict[str, Array]) -> Array:
    return conv64(shape, inputs["x"], inputs["w"])


def error_bound(
    shape: ConvShape, inputs: dict[str, Array], ref: Array, accumulate: str, output_dtype: str
) -> Array:
    """The dot-product bound (ops/numerics.py) of each output, a sum of (C/groups) x R x S products: the
    conv of |x| and |w| is the magnitude; the largest |x| of each image times the largest |w| of each
    filter bounds the squares."""
    abs_x, abs_w = np.abs(inputs["x"].astype(np.float64)), np.abs(inputs["w"].astype(np.float64))
    magnitude = conv64(shape, abs_x, abs_w)
    squares = squares_bound(
        abs_x.max(axis=(1, 2, 3), initial=0.0)[:, None, None, None],
        abs_w.max(axis=(1, 2, 3), initial=0.0)[None, :, None, None],
        magnitude,
    )
    k = (shape.c // shape.groups) * shape.r * shape.s
    return dot_bound(ref, magnitude, squares, k, accumulate, output_dtype)


def error_bounds(
    shape: ConvShape, inputs: dict[str, Array], ref: Array, dtype: str, accumulate: str
) -> dict[str, Array]:
    """What check() compares with, per output (verification.Expected computes it once for every backend)."""
    return {"y": error_bound(shape, inputs, ref, accumulate, dtype)}


def spot_pick(shape: ConvShape, seed: int) -> tuple[Array, int, Array]:
    """What a spot check recomputes (ops/spot.py): seeded images, and seeded filters of one seeded group."""
    kg = shape.k // shape.groups
    group = int(np.random.default_rng(seed + 1).integers(shape.groups))
    return spot.pick(shape.n, seed), group, group * kg + spot.pick(kg, seed + 2)


def filters_of(shape: ConvShape, group: int, filters: Array) -> ConvShape:
    """The shape of the conv of one group's input channels with `filters` of that group alone."""
    return replace(shape, c=shape.c // shape.groups, k=len(filters), groups=1)


def spot_cost_flops(shape: ConvShape) -> int:
    """float64 work of a spot check: SPOT_ROWS images by SPOT_ROWS filters of one group."""
    kg = shape.k // shape.groups
    part = replace(
        shape, n=min(shape.n, spot.SPOT_ROWS), c=shape.c // shape.groups, k=min(kg, spot.SPOT_ROWS)
    )
    return verify_cost_flops(replace(part, groups=1))


def spot_part(
    shape: ConvShape, inputs: dict[str, Array], dtype: str, accumulate: str, seed: int
) -> spot.Part:
    """Seeded images and filters of the output (ops/spot.py), with the same bound."""
    images, group, filters = spot_pick(shape, seed)
    cg = shape.c // shape.groups
    sub = replace(filters_of(shape, group, filters), n=len(images))
    part = {"x": inputs["x"][images][:, group * cg : (group + 1) * cg], "w": inputs["w"][filters]}
    ref = conv64(sub, part["x"], part["w"])
    checked = f"{spot.rows_text('images', images, shape.n)}, {spot.rows_text('filters', filters, shape.k)}"
    return spot.Part(
        {"y": (shape.n, shape.k, shape.out_h, shape.out_w)}, {"y": np.ix_(images, filters)}, {"y": ref},
        {"y": error_bound(sub, part, ref, accumulate, dtype)}, checked,
    )  # fmt: skip


def named_outputs(shape: ConvShape, output: Output) -> dict[str, Output]:
    return {"y": output}


check = checker(error_bounds, named_outputs, lambda ref: {"y": ref})


spot_check = spot.checker(spot_part, named_outputs)


# --- opbench's own kernel for this op (the cpp backend and the tuner) ---------------------------------------


def plan(shape: ConvShape, inputs: Inputs, tiles: Tiles, accumulate: str = "fp32") -> kernels.Plan:
    """Our implicit-GEMM conv prepared for this case (kernels.Plan; tiles left None are derived)."""
    return kernels.prepare_conv2d(
        inputs["x"],
        inputs["w"],
        stride=(shape.stride_h, shape.stride_w),
        padding=shape.padding,
        dilation=(shape.dil_h, shape.dil_w),
        groups=shape.groups,
        tiles=tiles,
    )


def tile_names(shape: ConvShape, isa: str | None, dtype: str = "fp32") -> dict[str, int]:
    """What the tuning space's rules may name: the register tile (mr, nr) conv2d runs for this geometry and
    dtype, elem_bytes (as gemm.tile_names), and the GEMM that tile_m, tile_n and tile_k block, as the C++
    side reports it: fp32 and fp16, the implicit GEMM of one image and group (m output channels per group,
    n GEMM columns: output pixels, over the padded width at stride 1; k = C/groups x R x S); bf16, the GEMM
    its way runs (csrc/conv/conv2d_bf16.cpp: pixels of all images as rows, or W * x)."""
    dt = NUMPY_DTYPES[dtype]
    one = replace(shape, n=1) if dtype != "bf16" else shape  # bf16's GEMM spans the images
    x = np.zeros((one.n, shape.c, shape.h, shape.w), dt)
    w = np.zeros((shape.k, shape.c // shape.groups, shape.r, shape.s), dt)
    t = plan(one, {"x": x, "w": w}, Tiles(threads=1, isa=isa)).tiles()
    elem = kernels.register_tile(isa, dtype)["elem_bytes"]
    return {
        "mr": t["mr"],
        "nr": t["nr"],
        "elem_bytes": elem,
        "m": t["gemm_m"],
        "n": t["gemm_n"],
        "k": t["gemm_k"],
    }


import opbench.ops.conv as this  # noqa: E402  (the module binds itself: mypy checks it as an OpModule)

OP: Op[ConvShape] = bind(this)

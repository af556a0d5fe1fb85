"""GEMM backward (the op key `gemm:bwd`, `--pass bwd`): for C = A @ B and an upstream gradient dC (M x N),
dA = dC @ B^T (M x K) and dB = A^T @ dC (K x N), timed as one unit. The shapes, axes and sweep parameters
are the forward's (ops/gemm.py, re-exported); FLOPs, inputs, reference, check and our kernel are this
pass's own.

FLOPs = 4*M*N*K: two products of 2*M*N*K each (the convention of DeepBench and benchdnn's BWD_D + BWD_W)."""

from __future__ import annotations

import numpy as np

from opbench import kernels
from opbench.dtypes import ITEMSIZE, NUMPY_DTYPES, Array, Inputs, Output
from opbench.ops import gemm, spot
from opbench.ops.base import Op, backward_of
from opbench.ops.gemm import GemmShape, product_bound
from opbench.ops.gemm import make_inputs as forward_inputs
from opbench.ops.numerics import checker
from opbench.tiles import Tiles

SPACE = "gemm_bwd"  # tuning/spaces/gemm_bwd.toml
FLOP_NOTE = (
    "GEMM backward FLOPs = 4*M*N*K (dA = dC B^T and dB = A^T dC, 2*M*N*K each; the forward is not included)"
)
OUTPUTS = ("da", "db")


def flops(shape: GemmShape) -> int:
    return 4 * shape.m * shape.n * shape.k


def _elems(shape: GemmShape) -> int:
    m, n, k = shape.m, shape.n, shape.k
    return 2 * (m * k + k * n) + m * n  # A, B, dC read; dA, dB written


def min_bytes(shape: GemmShape, dtype: str) -> int:
    """Compulsory traffic: A, B and dC read once, dA and dB written once."""
    return ITEMSIZE[dtype] * _elems(shape)


def memory_bytes(shape: GemmShape, dtype: str, reference: bool = True) -> int:
    """Inputs and gradients (x3 copies, as the forward) and, when verifying, the float64 references with
    their magnitudes and bounds."""
    elems = _elems(shape)
    return 3 * ITEMSIZE[dtype] * elems + (3 * 8 * elems if reference else 0)


def verify_cost_flops(shape: GemmShape) -> int:
    """Both float64 products and their magnitudes."""
    return 2 * flops(shape)


def make_inputs(shape: GemmShape, dtype: str, seed: int) -> dict[str, Array]:
    """The forward's a and b (the same values for the same seed) and dc, uniform in [-1, 1)."""
    inputs = forward_inputs(shape, dtype, seed)
    rng = np.random.default_rng([seed, 1])
    inputs["dc"] = rng.uniform(-1.0, 1.0, size=(shape.m, shape.n)).astype(NUMPY_DTYPES[dtype])
    return inputs


def _f64(inputs: dict[str, Array]) -> tuple[Array, Array, Array]:
    return tuple(inputs[k].astype(np.float64) for k in ("a", "b", "dc"))  # type: ignore[return-value]


def reference(shape: GemmShape, inputs: dict[str, Array]) -> dict[str, Array]:
    a, b, dc = _f64(inputs)
    return {"da": dc @ b.T, "db": a.T @ dc}


def error_bounds(
    shape: GemmShape, inputs: dict[str, Array], ref: dict[str, Array], dtype: str, accumulate: str
) -> dict[str, Array]:
    """Each gradient is a GEMM: dA sums N products per element, dB sums M; the bound is the forward's
    dot-product bound with that length and those magnitudes."""
    a, b, dc = _f64(inputs)
    return {
        "da": product_bound(dc, b.T, ref["da"], accumulate, dtype),
        "db": product_bound(a.T, dc, ref["db"], accumulate, dtype),
    }


def spot_cost_flops(shape: GemmShape) -> int:
    """float64 work of a spot check: SPOT_ROWS rows of dA and columns of dB, with their magnitudes."""
    rows, cols = min(shape.m, spot.SPOT_ROWS), min(shape.n, spot.SPOT_ROWS)
    return 4 * shape.k * (rows * shape.n + shape.m * cols)


def spot_part(
    shape: GemmShape, inputs: dict[str, Array], dtype: str, accumulate: str, seed: int
) -> spot.Part:
    """Seeded rows of dA (dC[rows] B^T) and columns of dB (A^T dC[:, cols]), ops/spot.py."""
    a, b, dc = _f64(inputs)
    rows, cols = spot.pick(shape.m, seed), spot.pick(shape.n, seed + 1)
    refs = {"da": dc[rows] @ b.T, "db": a.T @ dc[:, cols]}
    bounds = {
        "da": product_bound(dc[rows], b.T, refs["da"], accumulate, dtype),
        "db": product_bound(a.T, dc[:, cols], refs["db"], accumulate, dtype),
    }
    by_what = (spot.rows_text("rows", rows, shape.m), spot.rows_text("columns", cols, shape.n))
    shapes = {"da": (shape.m, shape.k), "db": (shape.k, shape.n)}
    index: dict[str, spot.Index] = {"da": rows, "db": (slice(None), cols)}
    return spot.Part(shapes, index, refs, bounds, f"{by_what[0]} of dA, {by_what[1]} of dB")


def unsupported(shape: GemmShape) -> str | None:
    """Why no backend runs this shape's pass (the sweep skips it before making inputs), else None."""
    if shape.batch > 1:
        return "the backward of a batched GEMM is not measured by opbench yet (its forward is)"
    return None


def named_outputs(shape: GemmShape, output: Output) -> dict[str, Output]:
    return dict(zip(OUTPUTS, output, strict=True))


check = checker(error_bounds, named_outputs, lambda ref: ref)


spot_check = spot.checker(spot_part, named_outputs)


def plan(shape: GemmShape, inputs: Inputs, tiles: Tiles, accumulate: str = "fp32") -> kernels.Plan:
    """Our backward prepared for this case (kernels.Plan): both products use the tiles."""
    if accumulate != "fp32":
        raise ValueError("the GEMM backward accumulates in fp32 only")
    return kernels.prepare_gemm_backward(inputs["a"], inputs["b"], inputs["dc"], tiles=tiles)


def tile_names(shape: GemmShape, isa: str | None, dtype: str = "fp32") -> dict[str, int]:
    """What the tuning space's rules may name: the register tile (and elem_bytes, as gemm.tile_names) and the
    largest of the two products' dimensions the tiles block: dA is M x K deep N, dB K x N deep M."""
    m, n, k = shape.m, shape.n, shape.k
    return {**kernels.register_tile(isa, dtype), "m": max(m, k), "n": max(k, n), "k": max(n, m)}


import opbench.ops.gemm_bwd as this  # noqa: E402  (the module binds itself: mypy checks it as a PassModule)

OP: Op[GemmShape] = backward_of(gemm.OP, this)

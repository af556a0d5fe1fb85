"""GEMM C[M,N] = A[M,K] @ B[K,N], and its batched form (C_i = A_i @ B_i for i < batch: A is batch x M x K,
B batch x K x N; attention's QK^T and WV products): shapes, FLOP count, seeded inputs, float64 reference
and error bound."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from opbench import kernels
from opbench.documents import Fields, Scalar
from opbench.dtypes import ITEMSIZE, NUMPY_DTYPES, Array, Inputs, Output
from opbench.ops import spot
from opbench.ops.base import Op, bind
from opbench.ops.fields import int_field, reject_unknown
from opbench.ops.numerics import checker, dot_bound, squares_bound
from opbench.tiles import Tiles

NAME = "gemm"
FLOP_NOTE = "GEMM FLOPs = 2*batch*M*N*K (one multiply and one add per term; FLOPs, not MACs)"


@dataclass(frozen=True, order=True)
class GemmShape:
    m: int
    n: int
    k: int
    batch: int = 1  # products in a batched GEMM (1: a plain GEMM, 2-D operands)

    def label(self) -> str:
        mnk = f"{self.m}x{self.n}x{self.k}"
        return mnk if self.batch == 1 else f"{mnk} b{self.batch}"

    def to_dict(self) -> dict[str, int]:
        """m, n, k, and batch where it is over 1 (a plain GEMM's record is as it was before batches)."""
        out = {"m": self.m, "n": self.n, "k": self.k}
        return out if self.batch == 1 else {**out, "batch": self.batch}

    @property
    def operands(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """The shapes of A, B and C: 2-D for a plain GEMM, batch x ... for a batched one."""
        lead = () if self.batch == 1 else (self.batch,)
        return (*lead, self.m, self.k), (*lead, self.k, self.n), (*lead, self.m, self.n)


SHAPE_FIELDS = ("m", "n", "k", "batch")
AXES: dict[str, tuple[str, ...]] = {"m": ("m",), "n": ("n",), "k": ("k",), "batch_count": ("batch",)}
PARAMS: dict[str, Scalar] = {}
BASE = {"m": 1024, "n": 1024, "k": 1024, "batch_count": 1}
DEFAULT_MODE = "product"  # GEMM sizes are given as a grid, as in the CUTLASS profiler
DEFAULT_BACKENDS = ("cpp", "torch", "mindspore", "tensorflow", "numpy")
BATCH_FIELDS = ("m",)  # what --scale shrinks: the batch dimension of a fully-connected layer
SPATIAL_FIELDS: tuple[str, ...] = ()

# The default sweep: square sizes and the skinny shapes of small-batch fully-connected layers
# (batch 16 forward, and its transpose as in a weight-gradient-like tall-skinny product).
DEFAULT_SHAPES: tuple[GemmShape, ...] = (
    GemmShape(256, 256, 256),
    GemmShape(512, 512, 512),
    GemmShape(1024, 1024, 1024),
    GemmShape(16, 4096, 1024),
    GemmShape(4096, 16, 1024),
)


def default_cases() -> list[GemmShape]:
    return list(DEFAULT_SHAPES)


def make_shape(point: Fields) -> GemmShape:
    """From a sweep point (m, n, k set; batch_count 1 unless given); sizes must be >= 1."""
    fields = {f: point[f] for f in ("m", "n", "k")}
    return shape_from_case({**fields, "batch": point.get("batch_count", 1)})


def shape_from_case(fields: Fields) -> GemmShape:
    """From explicit shape fields (m, n, k required; batch optional, 1 unless given)."""
    reject_unknown(fields, SHAPE_FIELDS, NAME)
    batch = int_field(fields, "batch") if "batch" in fields else 1
    return GemmShape(int_field(fields, "m"), int_field(fields, "n"), int_field(fields, "k"), batch)


def factors(shape: GemmShape) -> dict[str, int]:
    """The sweep axes' values for this shape (batch_count only for a batched GEMM)."""
    out = {"m": shape.m, "n": shape.n, "k": shape.k}
    return out if shape.batch == 1 else {**out, "batch_count": shape.batch}


def scale(shape: GemmShape, factor: float) -> GemmShape:
    """Shrink the batch dimension M by factor (at least 1); the product count is kept."""
    return replace(shape, m=max(1, round(shape.m * factor)))


def flops(shape: GemmShape) -> int:
    return 2 * shape.batch * shape.m * shape.n * shape.k


def _elems(shape: GemmShape) -> int:
    return shape.batch * (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n)


def min_bytes(shape: GemmShape, dtype: str) -> int:
    """Compulsory traffic: read A and B once, write C once (for arithmetic intensity)."""
    return ITEMSIZE[dtype] * _elems(shape)


def memory_bytes(shape: GemmShape, dtype: str, reference: bool = True) -> int:
    """What a sweep case holds at once: inputs and output in dtype (x3: ours, a framework copy, its output)
    plus, when verifying, the float64 reference, its absolute-value operands and the error bound."""
    elems = _elems(shape)
    return 3 * ITEMSIZE[dtype] * elems + (3 * 8 * elems if reference else 0)


def verify_cost_flops(shape: GemmShape) -> int:
    """float64 work of verification: the reference and the |A| @ |B| magnitude."""
    return 2 * flops(shape)


def make_inputs(shape: GemmShape, dtype: str, seed: int) -> dict[str, Array]:
    """Uniform values in [-1, 1) (never zeros, which flatter some hardware), rounded to dtype."""
    rng = np.random.default_rng(seed)
    np_dtype = NUMPY_DTYPES[dtype]
    a_shape, b_shape, _ = shape.operands
    a = rng.uniform(-1.0, 1.0, size=a_shape).astype(np_dtype)
    b = rng.uniform(-1.0, 1.0, size=b_shape).astype(np_dtype)
    return {"a": a, "b": b}


def reference(shape: GemmShape, inputs: dict[str, Array]) -> Array:
    """The exact-as-possible answer: float64 product of the (already rounded) inputs (each product of a
    batch)."""
    return np.matmul(inputs["a"].astype(np.float64), inputs["b"].astype(np.float64))


def product_bound(a: Array, b: Array, value: Array, accumulate: str, output_dtype: str) -> Array:
    """The dot-product bound (ops/numerics.py) of a @ b (or of each product of stacks of them), whose exact
    value is `value`: |a| @ |b| is the magnitude, and the largest |a| of each row times the largest |b| of
    each column bounds the squares."""
    abs_a, abs_b = np.abs(np.asarray(a, np.float64)), np.abs(np.asarray(b, np.float64))
    magnitude = np.matmul(abs_a, abs_b)
    squares = squares_bound(
        abs_a.max(axis=-1, initial=0.0)[..., :, None],
        abs_b.max(axis=-2, initial=0.0)[..., None, :],
        magnitude,
    )
    return dot_bound(value, magnitude, squares, a.shape[-1], accumulate, output_dtype)


def error_bound(inputs: dict[str, Array], ref: Array, accumulate: str, output_dtype: str) -> Array:
    return product_bound(inputs["a"], inputs["b"], ref, accumulate, output_dtype)


def error_bounds(
    shape: GemmShape, inputs: dict[str, Array], ref: Array, dtype: str, accumulate: str
) -> dict[str, Array]:
    """What check() compares with, per output (verification.Expected computes it once for every backend)."""
    return {"c": error_bound(inputs, ref, accumulate, dtype)}


def spot_cost_flops(shape: GemmShape) -> int:
    """float64 work of a spot check: the check of SPOT_ROWS rows."""
    return verify_cost_flops(GemmShape(min(shape.m * shape.batch, spot.SPOT_ROWS), shape.n, shape.k))


def spot_part(
    shape: GemmShape, inputs: dict[str, Array], dtype: str, accumulate: str, seed: int
) -> spot.Part:
    """Seeded rows of C (ops/spot.py): C[rows] = A[rows] @ B in float64, the same bound; a batched GEMM's
    rows are drawn from every product's."""
    if shape.batch > 1:
        return _batched_spot_part(shape, inputs, dtype, accumulate, seed)
    rows = spot.pick(shape.m, seed)
    a, b = inputs["a"][rows].astype(np.float64), inputs["b"].astype(np.float64)  # B converted once
    ref = a @ b
    bound = product_bound(a, b, ref, accumulate, dtype)
    checked = spot.rows_text("rows", rows, shape.m)
    return spot.Part({"c": (shape.m, shape.n)}, {"c": rows}, {"c": ref}, {"c": bound}, checked)


def _batched_spot_part(
    shape: GemmShape, inputs: dict[str, Array], dtype: str, accumulate: str, seed: int
) -> spot.Part:
    picked = spot.pick(shape.batch * shape.m, seed)
    products, rows = np.divmod(picked, shape.m)
    a = inputs["a"][products, rows].astype(np.float64)[:, None, :]  # one row of each picked product
    b = inputs["b"][products].astype(np.float64)
    ref = np.matmul(a, b)
    bound = product_bound(a, b, ref, accumulate, dtype)[:, 0]
    checked = ", ".join(f"row {r} of product {p}" for p, r in zip(products, rows, strict=True))
    checked += f" (of {shape.batch} x {shape.m})"
    return spot.Part(
        {"c": shape.operands[2]}, {"c": (products, rows)}, {"c": ref[:, 0]}, {"c": bound}, checked
    )


def named_outputs(shape: GemmShape, output: Output) -> dict[str, Output]:
    return {"c": output}


check = checker(error_bounds, named_outputs, lambda ref: {"c": ref})


spot_check = spot.checker(spot_part, named_outputs)


# --- opbench's own kernel for this op (the cpp backend and the tuner) ---------------------------------------


def plan(shape: GemmShape, inputs: Inputs, tiles: Tiles, accumulate: str = "fp32") -> kernels.Plan:
    """Our GEMM prepared for this case (kernels.Plan; tiles left None come from the cache model)."""
    return kernels.prepare_gemm(inputs["a"], inputs["b"], tiles=tiles, accumulate=accumulate)


def tile_names(shape: GemmShape, isa: str | None, dtype: str = "fp32") -> dict[str, int]:
    """What the tuning space's rules may name: the register tile (mr, nr) that runs for this N and dtype
    (bf16: the bf16 kernels'), the bytes of a packed panel element (elem_bytes: bf16 pairs 2, fp32 panels
    4, fp16 too since it is widened), and the dimensions tile_m, tile_n and tile_k block (m, n, k)."""
    info = kernels.register_tile(isa, dtype, shape.n)
    return {**info, "m": shape.m, "n": shape.n, "k": shape.k}


import opbench.ops.gemm as this  # noqa: E402  (the module binds itself: mypy checks it as an OpModule)

OP: Op[GemmShape] = bind(this)

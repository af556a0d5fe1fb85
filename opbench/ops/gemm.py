"""GEMM C[M,N] = A[M,K] @ B[K,N]: shapes, FLOP count, seeded inputs, float64 reference and error bound."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from opbench.dtypes import ITEMSIZE, NUMPY_DTYPES
from opbench.ops.fields import int_field, reject_unknown
from opbench.ops.numerics import compare, dot_bound

NAME = "gemm"
FLOP_NOTE = "GEMM FLOPs = 2*M*N*K (one multiply and one add per term; FLOPs, not MACs)"


@dataclass(frozen=True, order=True)
class GemmShape:
    m: int
    n: int
    k: int

    def label(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    def to_dict(self) -> dict[str, int]:
        return {"m": self.m, "n": self.n, "k": self.k}


SHAPE_FIELDS = ("m", "n", "k")
AXES: dict[str, tuple[str, ...]] = {"m": ("m",), "n": ("n",), "k": ("k",)}
PARAMS: dict[str, Any] = {}
BASE = {"m": 1024, "n": 1024, "k": 1024}
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


def make_shape(point: dict[str, Any]) -> GemmShape:
    """From a sweep point (every axis set); sizes must be >= 1."""
    return shape_from_case(point)


def shape_from_case(fields: dict[str, Any]) -> GemmShape:
    reject_unknown(fields, SHAPE_FIELDS, NAME)
    return GemmShape(*(int_field(fields, f) for f in SHAPE_FIELDS))


def factors(shape: GemmShape) -> dict[str, int]:
    """The sweep axes' values for this shape."""
    return shape.to_dict()


def scale(shape: GemmShape, factor: float) -> GemmShape:
    """Shrink the batch dimension M by factor (at least 1)."""
    return GemmShape(max(1, round(shape.m * factor)), shape.n, shape.k)


def flops(shape: GemmShape) -> int:
    return 2 * shape.m * shape.n * shape.k


def min_bytes(shape: GemmShape, dtype: str) -> int:
    """Compulsory traffic: read A and B once, write C once (for arithmetic intensity)."""
    return ITEMSIZE[dtype] * (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n)


def memory_bytes(shape: GemmShape, dtype: str, reference: bool = True) -> int:
    """What a sweep case holds at once: inputs and output in dtype (x3: ours, a framework copy, its output)
    plus, when verifying, the float64 reference, its absolute-value operands and the error bound."""
    elems = shape.m * shape.k + shape.k * shape.n + shape.m * shape.n
    return 3 * ITEMSIZE[dtype] * elems + (3 * 8 * elems if reference else 0)


def verify_cost_flops(shape: GemmShape) -> int:
    """float64 work of verification: the reference and the |A| @ |B| magnitude."""
    return 2 * flops(shape)


def make_inputs(shape: GemmShape, dtype: str, seed: int) -> dict[str, np.ndarray]:
    """Uniform values in [-1, 1) (never zeros, which flatter some hardware), rounded to dtype."""
    rng = np.random.default_rng(seed)
    np_dtype = NUMPY_DTYPES[dtype]
    a = rng.uniform(-1.0, 1.0, size=(shape.m, shape.k)).astype(np_dtype)
    b = rng.uniform(-1.0, 1.0, size=(shape.k, shape.n)).astype(np_dtype)
    return {"a": a, "b": b}


def reference(shape: GemmShape, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The exact-as-possible answer: float64 product of the (already rounded) inputs."""
    return inputs["a"].astype(np.float64) @ inputs["b"].astype(np.float64)


def error_bound(inputs: dict[str, np.ndarray], accumulate: str, output_dtype: str) -> np.ndarray:
    magnitude = np.abs(inputs["a"].astype(np.float64)) @ np.abs(inputs["b"].astype(np.float64))
    return dot_bound(magnitude, inputs["a"].shape[1], accumulate, output_dtype)


def check(
    shape: GemmShape, output: Any, inputs: dict[str, np.ndarray], ref: np.ndarray, dtype: str, accumulate: str
) -> dict[str, Any]:
    """Compare an output with the float64 reference against the bound for that accumulation precision."""
    return compare(
        {"c": np.asarray(output)}, {"c": ref}, {"c": error_bound(inputs, accumulate, dtype)}, dtype
    )


# --- opbench's own kernel for this op (the cpp backend and the tuner) ---------------------------------------

# The driver's path thresholds (kernels.gemm's small_m, parallel_flops and stream_m, csrc/gemm/README.md
# "Paths by shape"), which plan() takes among the tiles and a tuned record may carry: 0 is a value (a tile is
# >= 1).
THRESHOLDS = ("small_m", "parallel_flops", "stream_m")


def plan(
    shape: GemmShape,
    inputs: dict[str, np.ndarray],
    tiles: dict[str, int | None],
    threads: int,
    isa: str | None = None,
    accumulate: str = "fp32",
) -> Any:
    """Our GEMM prepared for this case (kernels.Plan; tiles left None come from the cache model)."""
    from opbench import kernels

    return kernels.prepare_gemm(
        inputs["a"],
        inputs["b"],
        tile_m=tiles.get("tile_m"),
        tile_n=tiles.get("tile_n"),
        tile_k=tiles.get("tile_k"),
        threads=threads,
        isa=isa,
        accumulate=accumulate,
        small_m=tiles.get("small_m"),
        parallel_flops=tiles.get("parallel_flops"),
        stream_m=tiles.get("stream_m"),
    )


def tile_names(shape: GemmShape, isa: str | None, dtype: str = "fp32") -> dict[str, int]:
    """What the tuning space's rules may name: the register tile (mr, nr) that runs for this N and dtype
    (bf16: the bf16 kernels'), the bytes of a packed panel element (elem_bytes: bf16 pairs 2, fp32 panels
    4, fp16 too since it is widened), and the dimensions tile_m, tile_n and tile_k block (m, n, k)."""
    from opbench import kernels

    info = kernels.register_tile(isa, dtype, shape.n)
    return {**info, "m": shape.m, "n": shape.n, "k": shape.k}

"""GEMM C[M,N] = A[M,K] @ B[K,N]: shapes, FLOP count, seeded inputs, float64 reference and error bound."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from opbench.dtypes import ITEMSIZE, NUMPY_DTYPES, UNIT_ROUNDOFF

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


# The default sweep: square sizes and the skinny shapes of small-batch fully-connected layers
# (batch 16 forward, and its transpose as in a weight-gradient-like tall-skinny product).
DEFAULT_SHAPES: tuple[GemmShape, ...] = (
    GemmShape(256, 256, 256),
    GemmShape(512, 512, 512),
    GemmShape(1024, 1024, 1024),
    GemmShape(16, 4096, 1024),
    GemmShape(4096, 16, 1024),
)


def flops(shape: GemmShape) -> int:
    return 2 * shape.m * shape.n * shape.k


def min_bytes(shape: GemmShape, dtype: str) -> int:
    """Compulsory traffic: read A and B once, write C once (for arithmetic intensity)."""
    return ITEMSIZE[dtype] * (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n)


def memory_bytes(shape: GemmShape, dtype: str) -> int:
    """What a sweep case holds at once: inputs and output in dtype (x3: ours, a framework copy, its output)
    plus the float64 reference, its absolute-value operands and the error bound."""
    elems = shape.m * shape.k + shape.k * shape.n + shape.m * shape.n
    return 3 * ITEMSIZE[dtype] * elems + 3 * 8 * elems


def make_inputs(shape: GemmShape, dtype: str, seed: int) -> dict[str, np.ndarray]:
    """Uniform values in [-1, 1) (never zeros, which flatter some hardware), rounded to dtype."""
    rng = np.random.default_rng(seed)
    np_dtype = NUMPY_DTYPES[dtype]
    a = rng.uniform(-1.0, 1.0, size=(shape.m, shape.k)).astype(np_dtype)
    b = rng.uniform(-1.0, 1.0, size=(shape.k, shape.n)).astype(np_dtype)
    return {"a": a, "b": b}


def reference(inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The exact-as-possible answer: float64 product of the (already rounded) inputs."""
    return inputs["a"].astype(np.float64) @ inputs["b"].astype(np.float64)


def error_bound(inputs: dict[str, np.ndarray], accumulate_unit: float, output_dtype: str) -> np.ndarray:
    """Componentwise forward-error bound of a dot-product GEMM in any summation order, accumulated with
    unit roundoff u_acc and rounded once to the output format (u_out):
        |C - C_exact| <= (g + u_out * (1 + g)) * (|A| @ |B|) + tiny_out,  g = K*u_acc / (1 - K*u_acc)
    tiny_out is half the output format's smallest subnormal: below the normal range rounding is absolute."""
    k = inputs["a"].shape[1]
    ku = k * accumulate_unit
    gamma = ku / (1.0 - ku) if ku < 0.5 else 1.0
    u_out = UNIT_ROUNDOFF[output_dtype]
    tiny_out = float(np.finfo(NUMPY_DTYPES[output_dtype]).smallest_subnormal) / 2
    magnitude = np.abs(inputs["a"].astype(np.float64)) @ np.abs(inputs["b"].astype(np.float64))
    return (gamma + u_out * (1.0 + gamma)) * magnitude + tiny_out


def check(
    output: np.ndarray, inputs: dict[str, np.ndarray], ref: np.ndarray, dtype: str, accumulate: str
) -> dict[str, Any]:
    """Compare a backend's output with the float64 reference against the bound for the given accumulation
    precision. Returns {'ok', 'max_err_ratio' (max |err| / bound; <= 1 passes), 'max_rel_err'}."""
    if output.shape != ref.shape:
        return {"ok": False, "reason": f"output shape {output.shape} != {ref.shape}"}
    out64 = output.astype(np.float64)
    if not np.all(np.isfinite(out64)):
        return {
            "ok": False,
            "reason": "output contains inf or NaN",
            "max_err_ratio": None,
            "max_rel_err": None,
        }
    bound = error_bound(inputs, UNIT_ROUNDOFF[accumulate], dtype)
    err = np.abs(out64 - ref)
    ratio = float(np.max(err / bound))
    scale = float(np.max(np.abs(ref))) or 1.0
    return {"ok": ratio <= 1.0, "max_err_ratio": ratio, "max_rel_err": float(np.max(err)) / scale}

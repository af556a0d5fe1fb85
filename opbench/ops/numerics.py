"""Error bounds shared by the operators' verification: gamma_K, the dot-product bound, and the comparison
of an output with its float64 reference."""

from __future__ import annotations

from typing import Any

import numpy as np

from opbench.dtypes import NUMPY_DTYPES, UNIT_ROUNDOFF, finfo


def gamma(k: int, unit: float) -> float:
    """gamma_k = k*u / (1 - k*u), the classic bound on k accumulated roundings (capped at 1)."""
    ku = k * unit
    return ku / (1.0 - ku) if ku < 0.5 else 1.0


def tiny(output_dtype: str) -> float:
    """Half the output format's smallest subnormal: below the normal range, rounding error is absolute."""
    return float(finfo(output_dtype).smallest_subnormal) / 2


def accumulation(accumulate: str) -> tuple[str, int | None]:
    """'fp32' or 'fp16' (one precision for the whole sum), or 'fp16:B' (blocks of B products summed in fp16,
    the block sums in fp32: opbench's fp16-accumulating kernel with tile_k = B) -> (precision, B or None)."""
    precision, _, block = accumulate.partition(":")
    if precision not in UNIT_ROUNDOFF or (block and (not block.isdigit() or int(block) < 1)):
        raise ValueError(f"unknown accumulation {accumulate!r} (expected fp32, fp16 or fp16:BLOCK)")
    return precision, int(block) if block else None


def dot_bound(magnitude: np.ndarray, k: int, accumulate: str, output_dtype: str) -> np.ndarray:
    """Componentwise bound of sums of k products in any order, accumulated with unit roundoff u_acc and
    rounded once to the output format (u_out), where magnitude = sum of |products|:
        |C - C_exact| <= (g + u_out * (1 + g)) * magnitude + tiny_out,  g = gamma_k(u_acc).
    Blocked ('fp16:B'): each block of B products in fp16, then ceil(k/B) block sums in fp32:
        g = (1 + gamma_B(u_fp16)) * (1 + gamma_ceil(k/B)(u_fp32)) - 1,
    plus the absolute error of products that underflow fp16 (k * tiny_fp16)."""
    precision, block = accumulation(accumulate)
    if block is None:
        g = gamma(k, UNIT_ROUNDOFF[precision])
        underflow = 0.0
    else:
        b = min(block, k)
        blocks = -(-k // b)
        g = (1.0 + gamma(b, UNIT_ROUNDOFF[precision])) * (1.0 + gamma(blocks, UNIT_ROUNDOFF["fp32"])) - 1.0
        underflow = k * tiny(precision)
    return (g + UNIT_ROUNDOFF[output_dtype] * (1.0 + g)) * magnitude + tiny(output_dtype) + underflow


def compare(
    outputs: dict[str, np.ndarray], refs: dict[str, np.ndarray], bounds: dict[str, np.ndarray], dtype: str
) -> dict[str, Any]:
    """Check each named output against its reference and bound. Returns {'ok', 'max_err_ratio' (largest
    |err| / bound; <= 1 passes), 'max_rel_err' (largest |err| / max |ref|), 'worst' (which output)}.
    Every output must be in the case's dtype: one in another format was computed in another precision (a
    layer that quietly ran in fp32 for a bf16 case), which the bound for this dtype would pass."""
    worst_ratio, worst_rel, worst = 0.0, 0.0, ""
    expected = np.dtype(NUMPY_DTYPES[dtype])
    for name, ref in refs.items():
        out = outputs[name]
        problem = None
        if out.shape != ref.shape:
            problem = f"{name} has shape {out.shape}, expected {ref.shape}"
        elif out.dtype != expected:
            problem = (
                f"{name} came back as {out.dtype}, not {expected} ({dtype}): computed in another precision"
            )
        if problem is not None:
            return {"ok": False, "reason": problem, "max_err_ratio": None, "max_rel_err": None}
        out64 = out.astype(np.float64)
        if not np.all(np.isfinite(out64)):
            return {
                "ok": False,
                "reason": f"{name} contains inf or NaN",
                "max_err_ratio": None,
                "max_rel_err": None,
            }
        err = np.abs(out64 - ref)
        ratio = float(np.max(err / bounds[name]))
        if ratio >= worst_ratio:
            worst_ratio, worst = ratio, name
        worst_rel = max(worst_rel, float(np.max(err)) / (float(np.max(np.abs(ref))) or 1.0))
    return {"ok": worst_ratio <= 1.0, "max_err_ratio": worst_ratio, "max_rel_err": worst_rel, "worst": worst}

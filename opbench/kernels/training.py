"""Backward passes (training) with opbench's kernels: the gradients of the inputs and the weights given an
upstream gradient, on the same kernel sets and tiles as the forward passes. Invalid input raises
ValueError naming the problem."""

from __future__ import annotations

import numpy as np

from opbench import _core
from opbench.kernels._args import Plan, _arrays, _optional_positive, _threads, _tiles


def prepare_gemm_backward(
    a: np.ndarray,
    b: np.ndarray,
    dc: np.ndarray,
    *,
    outs: tuple[np.ndarray, np.ndarray] | None = None,
    tile_m: int | None = None,
    tile_n: int | None = None,
    tile_k: int | None = None,
    threads: int | None = None,
    isa: str | None = None,
) -> Plan:
    """gemm_backward(...) prepared once (see kernels.prepare_gemm); outs = (da, db) are written by every
    call (allocated when None)."""
    _arrays(a=a, b=b, dc=dc)
    if outs is not None and (not isinstance(outs, tuple) or len(outs) != 2):
        raise ValueError(f"outs must be a tuple (da, db), got {outs!r}")
    da, db = outs if outs is not None else (None, None)
    return _core.prepare_gemm_backward(
        a,
        b,
        dc,
        da,
        db,
        _optional_positive(tile_m, "tile_m"),
        _optional_positive(tile_n, "tile_n"),
        _optional_positive(tile_k, "tile_k"),
        _threads(threads),
        isa or "",
    )


def gemm_backward(
    a: np.ndarray,
    b: np.ndarray,
    dc: np.ndarray,
    *,
    tile_m: int | None = None,
    tile_n: int | None = None,
    tile_k: int | None = None,
    threads: int | None = None,
    isa: str | None = None,
    tiles: dict[str, int] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """For C = a @ b and the upstream gradient dc (M x N): (da, db) = (dc @ b.T, a.T @ dc), the two
    products of the blocked GEMM with B^T and A^T read in place (no transposed copies). a (M x K), b
    (K x N) and dc are C-contiguous float32 or float16 of one dtype; fp16 accumulates in fp32 and is
    rounded once. The tiles block both products."""
    tm, tn, tk = _tiles(tiles, tile_m, tile_n, tile_k, "tuned(...)")
    plan = prepare_gemm_backward(a, b, dc, tile_m=tm, tile_n=tn, tile_k=tk, threads=threads, isa=isa)
    da, db = plan.output()
    return da, db

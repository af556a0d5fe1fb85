"""Python facade over opbench._core: the tiled C++ GEMM and what CPU dispatch found."""

from __future__ import annotations

import operator
import os
from typing import Any

import numpy as np

from opbench import _core

__all__ = ["gemm", "cpu_features", "default_tiles", "available_isas", "default_threads"]


def default_threads() -> int:
    """Cores this process may run on (its CPU affinity), the default for every backend."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    try:
        ivalue = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}") from None
    if ivalue < 1:
        raise ValueError(f"{name} must be >= 1, got {ivalue}")
    return ivalue


def _optional_positive(value: Any, name: str) -> int | None:
    return None if value is None else _positive_int(value, name)


def gemm(
    a: np.ndarray,
    b: np.ndarray,
    *,
    tile_m: int | None = None,
    tile_n: int | None = None,
    tile_k: int | None = None,
    threads: int | None = None,
    out: np.ndarray | None = None,
    isa: str | None = None,
) -> np.ndarray:
    """C = A @ B with opbench's tiled C++ kernel.

    a (M x K) and b (K x N) are row-major float32 or float16 arrays of the same dtype; float16 is
    accumulated in float32 and rounded once at the end. tile_m / tile_n / tile_k are the cache-blocking
    sizes (None: derived from this CPU's caches); threads defaults to the cores this process may use.
    isa forces a kernel set ("avx512", "avx2", "ref"; default: the best this CPU runs, or $OPBENCH_ISA).
    Raises ValueError naming the problem for any invalid input.
    """
    for name, arr in (("a", a), ("b", b)):
        if not isinstance(arr, np.ndarray):
            raise ValueError(f"{name} must be a numpy.ndarray, got {type(arr).__name__}")
    if out is not None and not isinstance(out, np.ndarray):
        raise ValueError(f"out must be a numpy.ndarray, got {type(out).__name__}")
    nthreads = default_threads() if threads is None else _positive_int(threads, "threads")
    return _core.gemm(
        a,
        b,
        out,
        _optional_positive(tile_m, "tile_m"),
        _optional_positive(tile_n, "tile_n"),
        _optional_positive(tile_k, "tile_k"),
        nthreads,
        isa or "",
    )


def available_isas() -> list[str]:
    """Kernel sets this CPU can run, best first."""
    return list(_core.cpu_info()["isas"])


def default_tiles(isa: str | None = None) -> dict[str, Any]:
    """Micro-kernel shape (mr, nr) and the cache-model default tiles of a kernel set."""
    return dict(_core.kernel_info(isa or ""))


def cpu_features() -> dict[str, Any]:
    """What run-time dispatch found: vendor, brand, ISA flags, caches, kernel sets and the one chosen."""
    info = dict(_core.cpu_info())
    info["selected_isa"] = _core.kernel_info("")["isa"]
    info["kernel"] = default_tiles()
    return info

"""Argument checks shared by the kernel facade's entry points (no compiled code here): each turns a bad
value into a ValueError naming it before C++ sees it."""

from __future__ import annotations

import operator
import os
from typing import Any, Protocol

import numpy as np


class Plan(Protocol):
    """One prepared call of a kernel (`_core.Plan`): inputs checked, outputs allocated, tiles chosen."""

    def run(self, loops: int) -> float:
        """Call the kernel `loops` times back to back in C++ with the GIL released; the elapsed seconds."""
        ...

    def output(self) -> Any:
        """Call the kernel once and return its outputs (the plan's own arrays, overwritten by later calls)."""
        ...

    def tiles(self) -> dict[str, Any]:
        """What runs: isa, kernel, mr, nr, and tile_m / tile_n / tile_k as used (given or from the model)."""
        ...

    def saved(self) -> dict[str, Any]:
        """A recurrent backward plan's training forward (run once when it was prepared): y, h_n (and c_n)
        and the fp32 activations BPTT reads (gates, state, tanh_c, by cell); empty for other plans."""
        ...


def default_threads() -> int:
    """Cores this process may run on (its CPU affinity), the default for every backend."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# The bounds the C++ entry points enforce (csrc/include/opbench/limits.hpp), checked here first so that an
# integer too large for C++ is a ValueError naming it rather than pybind11's TypeError.
MAX_THREADS = 1024
MAX_TILE = 2**31 - 1
MAX_CONV_PARAM = 2**24
_INT64_MAX = 2**63 - 1


def _int_at_least(
    value: Any, name: str, minimum: int, what: str = "an integer", maximum: int = _INT64_MAX
) -> int:
    """value as an int (not a bool, not a float) in [minimum, maximum], else ValueError naming `name`."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be {what} >= {minimum}, got {value!r}")
    try:
        ivalue = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be {what} >= {minimum}, got {value!r}") from None
    if ivalue < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    if ivalue > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value!r}")
    return ivalue


def _positive_int(value: Any, name: str, maximum: int = _INT64_MAX) -> int:
    return _int_at_least(value, name, 1, maximum=maximum)


def _threads(value: Any) -> int:
    return default_threads() if value is None else _positive_int(value, "threads", MAX_THREADS)


def _optional_positive(value: Any, name: str) -> int | None:
    """A tile: None (from the cache model) or 1..MAX_TILE."""
    return None if value is None else _positive_int(value, name, MAX_TILE)


def _optional_count(value: Any, name: str, maximum: int = _INT64_MAX) -> int | None:
    """A path threshold: None (the default) or 0..maximum."""
    return None if value is None else _int_at_least(value, name, 0, maximum=maximum)


def _call_tail(
    tile_m: Any, tile_n: Any, tile_k: Any, threads: Any, isa: str | None
) -> tuple[int | None, int | None, int | None, int, str]:
    """The arguments every _core.prepare_* ends with, checked: tile_m, tile_n, tile_k, threads, isa."""
    return (
        _optional_positive(tile_m, "tile_m"),
        _optional_positive(tile_n, "tile_n"),
        _optional_positive(tile_k, "tile_k"),
        _threads(threads),
        isa or "",
    )


def _tiles(
    tiles: Any, tile_m: int | None, tile_n: int | None, tile_k: int | None, lookup: str
) -> tuple[int | None, int | None, int | None]:
    """tile_m, tile_n, tile_k from a tiles={...} dict (a tuned record's) or the separate arguments."""
    if tiles is None:
        return tile_m, tile_n, tile_k
    if tile_m is not None or tile_n is not None or tile_k is not None:
        raise ValueError("give tiles=... or tile_m/tile_n/tile_k, not both")
    if tiles == "tuned":
        # The facade does not read the tuner's records (that would make the kernels depend on the tuner);
        # the caller looks them up.
        raise ValueError(f"tiles='tuned': pass tiles=opbench.tune.records.{lookup}[0]")
    if not isinstance(tiles, dict):
        raise ValueError(f"tiles must be a dict of tile_m/tile_n/tile_k, got {tiles!r}")
    unknown = set(tiles) - {"tile_m", "tile_n", "tile_k"}
    if unknown:
        raise ValueError(f"tiles has unknown key(s) {', '.join(sorted(unknown))}")
    return tiles.get("tile_m"), tiles.get("tile_n"), tiles.get("tile_k")


def _pair(value: Any, name: str, minimum: int) -> tuple[int, int]:
    """An int or an (h, w) pair of ints, each >= minimum."""
    items = tuple(value) if isinstance(value, (tuple, list)) else (value, value)
    if len(items) != 2:
        raise ValueError(f"{name} must be an integer or a pair (h, w), got {value!r}")
    h, w = (
        _int_at_least(v, name, minimum, "an integer or a pair (h, w) of integers", MAX_CONV_PARAM)
        for v in items
    )
    return h, w


Padding = int | tuple[int, int] | tuple[int, int, int, int]


def _padding(value: Any) -> tuple[int, int, int, int]:
    """An int, an (h, w) pair (both sides alike) or (top, bottom, left, right): the four sides."""
    if isinstance(value, (tuple, list)) and len(value) == 4:
        sides = tuple(
            _int_at_least(v, "padding", 0, "an integer, (h, w) or (top, bottom, left, right)", MAX_CONV_PARAM)
            for v in value
        )
        return sides[0], sides[1], sides[2], sides[3]
    if isinstance(value, (tuple, list)) and len(value) != 2:
        raise ValueError(f"padding must be an integer, (h, w) or (top, bottom, left, right), got {value!r}")
    h, w = _pair(value, "padding", 0)
    return h, h, w, w


def _arrays(**named: Any) -> None:
    for name, arr in named.items():
        if not isinstance(arr, np.ndarray):
            raise ValueError(f"{name} must be a numpy.ndarray, got {type(arr).__name__}")

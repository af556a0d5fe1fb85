"""Argument checks shared by the kernel facade's entry points: each turns a bad value into a ValueError
naming it before C++ sees it (the compiled extension is touched only to build the checked _core.Tiles)."""

from __future__ import annotations

import operator
import os
from collections.abc import Mapping
from typing import Any, Protocol, SupportsIndex

import numpy as np

from opbench.dtypes import Array
from opbench.kernel_documents import PlanTiles
from opbench.kernels._native import core as _core
from opbench.tiles import AMX_KEYS, Tiles


class Plan(Protocol):
    """One prepared call of a kernel (`_core.Plan`): inputs checked, outputs allocated, tiles chosen."""

    def run(self, loops: int) -> float:
        """Call the kernel `loops` times back to back in C++ with the GIL released; the elapsed seconds."""
        ...

    def output(self) -> Any:
        """Call the kernel once and return its outputs (the plan's own arrays, overwritten by later calls)."""
        ...

    def tiles(self) -> PlanTiles:
        """What runs: isa, kernel, mr, nr, and tile_m / tile_n / tile_k as used (given or from the model)."""
        ...

    def saved(self) -> dict[str, Array]:
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
    value: object, name: str, minimum: int, what: str = "an integer", maximum: int = _INT64_MAX
) -> int:
    """value as an int (not a bool, not a float) in [minimum, maximum], else ValueError naming `name`."""
    if type(value) is int:  # the common case, without the Protocol check below (about 5 us a call)
        ivalue = value
    elif isinstance(value, bool) or not isinstance(value, SupportsIndex):
        raise ValueError(f"{name} must be {what} >= {minimum}, got {value!r}")
    else:
        try:
            ivalue = operator.index(value)
        except TypeError:  # an __index__ that refuses
            raise ValueError(f"{name} must be {what} >= {minimum}, got {value!r}") from None
    if ivalue < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    if ivalue > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value!r}")
    return ivalue


def _positive_int(value: object, name: str, maximum: int = _INT64_MAX) -> int:
    return _int_at_least(value, name, 1, maximum=maximum)


def _threads(value: object) -> int:
    return default_threads() if value is None else _positive_int(value, "threads", MAX_THREADS)


def _optional_positive(value: object, name: str) -> int | None:
    """A tile: None (from the cache model) or 1..MAX_TILE."""
    return None if value is None else _positive_int(value, name, MAX_TILE)


def _optional_count(value: object, name: str, maximum: int = _INT64_MAX) -> int | None:
    """A path threshold: None (the default) or 0..maximum."""
    return None if value is None else _int_at_least(value, name, 0, maximum=maximum)


# The kernels whose bf16 products take an AMX tile layout (Tiles.amx_rows, ...): GEMM ("": the facade's gemm),
# conv2d and the recurrent layers, forward.
AMX_KERNELS = ("", "conv2d", "rnn", "gru", "lstm")

# What the facade's tiles= takes: a Tiles, a record's tile dict ({tile_m, tile_n, tile_k, ...}), or None.
TilesArg = Tiles | Mapping[str, int | str] | None


def _as_tiles(tiles: object, lookup: str) -> Tiles:
    """A Tiles from what tiles= was given: a Tiles, a record's tile dict, or None (every one its default);
    lookup names the records function that finds tuned tiles."""
    if isinstance(tiles, str) and tiles == "tuned":
        # The facade does not read the tuner's records (that would make the kernels depend on the tuner);
        # the caller looks them up.
        raise ValueError(f"tiles='tuned': pass tiles=opbench.tuned.{lookup}[0]")
    if tiles is None:
        return Tiles()
    if isinstance(tiles, Mapping):
        return Tiles.of(tiles)
    if not isinstance(tiles, Tiles):
        raise ValueError(f"tiles must be an opbench.Tiles or a dict of tile_m/tile_n/tile_k, got {tiles!r}")
    return tiles


# The default _core.Tiles per thread count (its fields are read-only): building one through pybind11 took
# longer than the rest of a small GEMM's Python side.
_DEFAULTS: dict[int, _core.Tiles] = {}


def _default_tiles() -> _core.Tiles:
    """Every tile from the cache model, on the cores this process may use now, on the best kernel set."""
    threads = default_threads()
    tiles = _DEFAULTS.get(threads)
    if tiles is None:
        tiles = _DEFAULTS[threads] = _core.Tiles(None, None, None, threads, "")
    return tiles


def _tiles(tiles: object, lookup: str, kernel: str = "") -> _core.Tiles:
    """The _core.Tiles every prepare_* takes, each field checked: tile_m, tile_n, tile_k, threads, isa (see
    _as_tiles). `kernel` names a kernel that takes no GEMM path thresholds (they are then a ValueError)."""
    if tiles is None:  # every default: nothing to check
        return _default_tiles()
    tiles = _as_tiles(tiles, lookup)
    if kernel and tiles.thresholds():
        names = ", ".join(tiles.thresholds())
        raise ValueError(f"{kernel} takes no {names} (GEMM path thresholds; kernels.gemm's tiles only)")
    if kernel not in AMX_KERNELS and tiles.amx():
        names = ", ".join(tiles.amx())
        raise ValueError(f"{kernel} takes no {names} (the AMX tile layout of a forward pass's bf16 GEMMs)")
    if kernel != "conv2d" and tiles.conv_path is not None:
        raise ValueError(f"{kernel or 'gemm'} takes no conv_path (conv2d's way; kernels.conv2d's tiles only)")
    if tiles.isa is not None and not isinstance(tiles.isa, str):
        raise ValueError(f"isa must be a kernel set's name, got {tiles.isa!r}")
    return _core.Tiles(
        _optional_positive(tiles.m, "tile_m"),
        _optional_positive(tiles.n, "tile_n"),
        _optional_positive(tiles.k, "tile_k"),
        _threads(tiles.threads),
        tiles.isa or "",
        *(_optional_positive(getattr(tiles, t), t) for t in AMX_KEYS),
    )


def _conv_path(path: object) -> str:
    """conv2d's Tiles.conv_path as the binding takes it ("model" for None), checked against the compiled
    list."""
    if path is None:
        return "model"
    if not isinstance(path, str) or path not in _core.conv_path_names:
        known = ", ".join(_core.conv_path_names)
        raise ValueError(f"unknown conv_path {path!r} (known: {known})")
    return path


def _pair(value: object, name: str, minimum: int) -> tuple[int, int]:
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


def _padding(value: object) -> tuple[int, int, int, int]:
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


def _arrays(**named: object) -> None:
    for name, arr in named.items():
        if not isinstance(arr, np.ndarray):
            raise ValueError(f"{name} must be a numpy.ndarray, got {type(arr).__name__}")

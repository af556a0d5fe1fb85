"""Python facade over opbench._core: the tiled C++ GEMM and what CPU dispatch found."""

from __future__ import annotations

import operator
import os
from typing import Any, Protocol

import numpy as np

from opbench import _core

__all__ = [
    "Plan",
    "gemm",
    "conv2d",
    "lstm",
    "prepare_gemm",
    "prepare_conv2d",
    "prepare_lstm",
    "fault_injection",
    "cpu_features",
    "default_tiles",
    "available_isas",
    "known_isas",
    "default_threads",
    "cpu_info",
    "l3_bytes",
    "native_fp16_fma",
    "fma_peak",
    "stream_triad",
    "handoff_ns",
    "flush_cache",
    "extension_dir",
    "extension_file",
]


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
    tiles: dict[str, int] | None = None,
    accumulate: str = "fp32",
) -> np.ndarray:
    """C = A @ B with opbench's tiled C++ kernel.

    a (M x K) and b (K x N) are row-major float32 or float16 arrays of the same dtype; float16 is
    accumulated in float32 and rounded once at the end. tile_m / tile_n / tile_k are the cache-blocking
    sizes (None: derived from this CPU's caches); threads defaults to the cores this process may use.
    isa forces a kernel set ("avx512", "avx2", "ref"; default: the best this CPU runs, or $OPBENCH_ISA).
    tiles, a dict {tile_m, tile_n, tile_k}, gives them explicitly: opbench.tune.records.tuned_tiles(m, n, k,
    dtype, threads) returns the ones `opbench tune` recorded for this problem on this machine (or for the
    nearest tuned shape) with a note saying which.
    accumulate="fp16" (float16 inputs only, opt-in) sums each tile_k block of products in fp16 with an
    fp16-accumulating kernel and the blocks in fp32: twice the FMA rate on AVX512-FP16, with an error that
    grows with tile_k (see ops.numerics.dot_bound). It needs AVX512-FP16; isa="ref" emulates it on any CPU
    (slowly), to study the error. default_tiles()["fp16_accumulate"] says whether it can run here.
    Raises ValueError naming the problem for any invalid input.
    """
    _arrays(a=a, b=b, **({} if out is None else {"out": out}))
    _threads(threads)
    tile_m, tile_n, tile_k = _tiles(tiles, tile_m, tile_n, tile_k, "tuned_tiles(m, n, k, dtype, threads)")
    plan = prepare_gemm(
        a,
        b,
        out=out,
        tile_m=tile_m,
        tile_n=tile_n,
        tile_k=tile_k,
        threads=threads,
        isa=isa,
        accumulate=accumulate,
    )
    return plan.output()


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


def prepare_gemm(
    a: np.ndarray,
    b: np.ndarray,
    *,
    out: np.ndarray | None = None,
    tile_m: int | None = None,
    tile_n: int | None = None,
    tile_k: int | None = None,
    threads: int | None = None,
    isa: str | None = None,
    accumulate: str = "fp32",
) -> Plan:
    """gemm(...) prepared once and called many times: `plan.run(loops)` times calls inside C++ (no Python
    between them), `plan.output()` returns C. The same arguments and errors as gemm; out (allocated when
    None) is where every call writes."""
    _arrays(a=a, b=b, **({} if out is None else {"out": out}))
    return _core.prepare_gemm(
        a,
        b,
        out,
        _optional_positive(tile_m, "tile_m"),
        _optional_positive(tile_n, "tile_n"),
        _optional_positive(tile_k, "tile_k"),
        _threads(threads),
        isa or "",
        accumulate,
    )


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


def _arrays(**named: Any) -> None:
    for name, arr in named.items():
        if not isinstance(arr, np.ndarray):
            raise ValueError(f"{name} must be a numpy.ndarray, got {type(arr).__name__}")


def conv2d(
    x: np.ndarray,
    w: np.ndarray,
    *,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    dilation: int | tuple[int, int] = 1,
    groups: int = 1,
    tile_m: int | None = None,
    tile_n: int | None = None,
    tile_k: int | None = None,
    threads: int | None = None,
    out: np.ndarray | None = None,
    isa: str | None = None,
    tiles: dict[str, int] | None = None,
) -> np.ndarray:
    """Conv2d forward with opbench's kernels: x is N x C x H x W, w is K x C/groups x R x S (PyTorch's
    layouts), both C-contiguous float32 or float16; returns N x K x H_out x W_out. Computed as an implicit
    GEMM (Y = W * im2col(x) per image and group, the im2col matrix never written out): tile_m is output
    channels and tile_n output pixels per work unit, tile_k the depth of a rank-k update (None: from the
    cache model; `prepare_conv2d(...).tiles()` reports what is used); fp16 accumulates in fp32. stride,
    padding and dilation are an int or an (h, w) pair. tiles, a dict {tile_m, tile_n, tile_k}, gives them
    explicitly: opbench.tune.records.tuned_conv2d_tiles(x, w, stride, padding, dilation, groups, threads)
    returns the ones `opbench tune conv` recorded (exact or nearest shape) with a note saying which.
    Raises ValueError on invalid input."""
    tile_m, tile_n, tile_k = _tiles(
        tiles, tile_m, tile_n, tile_k, "tuned_conv2d_tiles(x, w, stride, padding, dilation, groups, threads)"
    )
    plan = prepare_conv2d(
        x,
        w,
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
        tile_m=tile_m,
        tile_n=tile_n,
        tile_k=tile_k,
        threads=threads,
        out=out,
        isa=isa,
    )
    return plan.output()


def prepare_conv2d(
    x: np.ndarray,
    w: np.ndarray,
    *,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    dilation: int | tuple[int, int] = 1,
    groups: int = 1,
    tile_m: int | None = None,
    tile_n: int | None = None,
    tile_k: int | None = None,
    threads: int | None = None,
    out: np.ndarray | None = None,
    isa: str | None = None,
) -> Plan:
    """conv2d(...) prepared once (see prepare_gemm); `plan.tiles()` reports the tiles conv2d uses for this
    problem (given ones clamped and rounded to the register tile, the rest derived) and its register tile."""
    _arrays(x=x, w=w, **({} if out is None else {"out": out}))
    return _core.prepare_conv2d(
        x,
        w,
        out,
        _pair(stride, "stride", 1),
        _pair(padding, "padding", 0),
        _pair(dilation, "dilation", 1),
        _positive_int(groups, "groups"),
        _optional_positive(tile_m, "tile_m"),
        _optional_positive(tile_n, "tile_n"),
        _optional_positive(tile_k, "tile_k"),
        _threads(threads),
        isa or "",
    )


def lstm(
    x: np.ndarray,
    w_ih: np.ndarray,
    w_hh: np.ndarray,
    b_ih: np.ndarray,
    b_hh: np.ndarray,
    h0: np.ndarray,
    c0: np.ndarray,
    *,
    threads: int | None = None,
    tile_m: int | None = None,
    tile_n: int | None = None,
    tile_k: int | None = None,
    isa: str | None = None,
    tiles: dict[str, int] | None = None,
) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """One-layer LSTM forward, sequence-first: x is T x B x I; w_ih 4H x I, w_hh 4H x H, b_ih and b_hh 4H
    (PyTorch's layouts and gate order i, f, g, o); h0 and c0 are B x H. Returns (y, (h_n, c_n)) with y
    T x B x H, like torch.nn.LSTM (without its leading num_layers dimension on h and c).

    The input projection of all steps is one GEMM, each step's recurrent product a second GEMM, and the
    gate activations and cell update are fused. All arrays share one dtype (float32 or float16); with
    float16, products accumulate in fp32 and the cell state is carried in fp32 between steps. The tiles
    (tile_m/n/k, or tiles={...}: opbench.tune.records.tuned_lstm_tiles(x, w_hh, threads)[0] for the ones
    `opbench tune lstm` recorded) block both GEMMs."""
    tile_m, tile_n, tile_k = _tiles(tiles, tile_m, tile_n, tile_k, "tuned_lstm_tiles(x, w_hh, threads)")
    plan = prepare_lstm(
        x,
        w_ih,
        w_hh,
        b_ih,
        b_hh,
        h0,
        c0,
        threads=threads,
        tile_m=tile_m,
        tile_n=tile_n,
        tile_k=tile_k,
        isa=isa,
    )
    y, (h_n, c_n) = plan.output()
    return y, (h_n, c_n)


def prepare_lstm(
    x: np.ndarray,
    w_ih: np.ndarray,
    w_hh: np.ndarray,
    b_ih: np.ndarray,
    b_hh: np.ndarray,
    h0: np.ndarray,
    c0: np.ndarray,
    *,
    outs: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    threads: int | None = None,
    tile_m: int | None = None,
    tile_n: int | None = None,
    tile_k: int | None = None,
    isa: str | None = None,
) -> Plan:
    """lstm(...) prepared once (see prepare_gemm); outs = (y, h_n, c_n) are written by every call
    (allocated when None)."""
    _arrays(x=x, w_ih=w_ih, w_hh=w_hh, b_ih=b_ih, b_hh=b_hh, h0=h0, c0=c0)
    y, h_n, c_n = outs if outs is not None else (None, None, None)
    return _core.prepare_lstm(
        x,
        w_ih,
        w_hh,
        b_ih,
        b_hh,
        h0,
        c0,
        y,
        h_n,
        c_n,
        _optional_positive(tile_m, "tile_m"),
        _optional_positive(tile_n, "tile_n"),
        _optional_positive(tile_k, "tile_k"),
        _threads(threads),
        isa or "",
    )


def known_isas() -> tuple[str, ...]:
    """Every kernel set this build knows, best first (the C++ ISA table), whether or not this CPU runs it."""
    return tuple(_core.known_isas())


def available_isas() -> list[str]:
    """Kernel sets this CPU can run, best first."""
    return list(_core.cpu_info()["isas"])


def default_tiles(isa: str | None = None, n: int = 0) -> dict[str, Any]:
    """Micro-kernel shape (mr, nr) and the cache-model default tiles of a kernel set (for a GEMM with n
    columns where given: a narrow n may pick the kernel set's narrow tile)."""
    return dict(_core.kernel_info(isa or "", n))


def cpu_info() -> dict[str, Any]:
    """What the C++ runtime detected: vendor, brand, ISA flags, caches (sizes in bytes), kernel sets."""
    return dict(_core.cpu_info())


def l3_bytes() -> int:
    return int(_core.cpu_info()["caches"]["l3"]["size_bytes"])


def native_fp16_fma() -> bool:
    return bool(_core.cpu_info()["native_fp16_fma"])


def fma_peak(dtype: str, threads: int, min_time_s: float, repeats: int, isa: str = "") -> tuple[float, str]:
    """(GFLOPS, loop name) of the FMA-throughput loop: the best of `repeats` runs of at least min_time_s."""
    gflops, kernel = _core.fma_peak(dtype, isa, threads, min_time_s, repeats)
    return float(gflops), str(kernel)


def stream_triad(threads: int, elements: int, repeats: int) -> float:
    """Best GB/s of a STREAM-like triad over three float64 arrays of `elements`."""
    return float(_core.stream_triad(threads, elements, repeats))


def handoff_ns(round_trips: int, repeats: int) -> float:
    """Median round trip (ns) of a cache line between the caller and the pool's worker on another CPU."""
    return float(_core.handoff_ns(round_trips, repeats))


def flush_cache(nbytes: int) -> None:
    """Write `nbytes` of scratch memory, evicting what the caches held."""
    _core.flush_cache(nbytes)


def fault_injection() -> bool:
    """Whether this build reads OPBENCH_FAULT_* (test builds only: csrc/include/opbench/fault.hpp)."""
    return bool(_core.fault_injection)


def extension_file() -> str:
    """The compiled extension's file (history.py hashes it: a rebuilt kernel is a new case)."""
    return os.path.realpath(_core.__file__)


def extension_dir() -> str:
    """The directory the compiled extension was installed in (packaged data lies beside it)."""
    return os.path.dirname(extension_file())


def cpu_features() -> dict[str, Any]:
    """What run-time dispatch found: vendor, brand, ISA flags, caches, kernel sets and the one chosen."""
    info = dict(_core.cpu_info())
    info["selected_isa"] = _core.kernel_info("")["isa"]
    info["kernel"] = default_tiles()
    return info

"""Python facade over opbench._core: our tiled C++ kernels and what CPU dispatch found. This package is the
only user of the compiled extension, which _native.py loads on first use, so that importing the facade
never needs it (recurrent.py holds the RNN, GRU and LSTM entry points, training.py the backward passes).
load_error() says whether it loads here."""

from __future__ import annotations

import os

import numpy as np

from opbench.dtypes import Array
from opbench.kernel_documents import CpuFeatures, CpuInfo, KernelInfo
from opbench.kernels._args import (
    MAX_CONV_PARAM,
    MAX_THREADS,
    MAX_TILE,
    Padding,
    Plan,
    TilesArg,
    _arrays,
    _as_tiles,
    _conv_path,
    _default_tiles,
    _optional_count,
    _padding,
    _pair,
    _positive_int,
    _tiles,
    default_threads,
)
from opbench.kernels._native import core as _core
from opbench.kernels._native import load_error, unloadable
from opbench.kernels.recurrent import gru, lstm, prepare_gru, prepare_lstm, prepare_rnn, rnn
from opbench.kernels.training import (
    conv2d_backward,
    gemm_backward,
    gru_backward,
    lstm_backward,
    prepare_conv2d_backward,
    prepare_gemm_backward,
    prepare_rnn_backward,
    rnn_backward,
)
from opbench.tiles import Tiles


def __getattr__(name: str) -> int:
    """STREAM_M_MAX, the most rows of A the streaming path takes (Tiles.stream_m), read from the extension
    when first asked for (the facade imports without it)."""
    if name == "STREAM_M_MAX":
        return int(_core.stream_m_max)
    raise AttributeError(f"module 'opbench.kernels' has no attribute {name!r}")


__all__ = [
    "Tiles",
    "register_tile",
    "Plan",
    "gemm",
    "conv2d",
    "rnn",
    "gru",
    "lstm",
    "prepare_gemm",
    "prepare_conv2d",
    "prepare_rnn",
    "prepare_gru",
    "prepare_lstm",
    "gemm_backward",
    "prepare_gemm_backward",
    "conv2d_backward",
    "prepare_conv2d_backward",
    "rnn_backward",
    "gru_backward",
    "lstm_backward",
    "prepare_rnn_backward",
    "MAX_THREADS",
    "MAX_TILE",
    "MAX_CONV_PARAM",
    "STREAM_M_MAX",
    "fault_injection",
    "cpu_features",
    "default_tiles",
    "available_isas",
    "known_isas",
    "default_threads",
    "cpu_info",
    "l3_bytes",
    "native_fp16_fma",
    "compute_unit",
    "fma_peak",
    "stream_triad",
    "handoff_ns",
    "flush_cache",
    "extension_dir",
    "extension_file",
    "load_error",
    "unloadable",
]


def gemm(
    a: Array, b: Array, *, tiles: TilesArg = None, out: Array | None = None, accumulate: str = "fp32"
) -> Array:
    """C = A @ B with opbench's tiled C++ kernel.

    a (M x K) and b (K x N) are row-major float32, float16 or bfloat16 (ml_dtypes.bfloat16) arrays of the
    same dtype, or C-contiguous stacks of them (batch x M x K and batch x K x N: a batched GEMM, C batch x M x
    N; the threads split the batch, or each product where the products are few and large); float16 is
    accumulated in float32 and rounded once at the end, and so is bfloat16 (its products, exact in float32,
    by AVX512-BF16's dot products where the CPU has them, or on the fp32 register tile, widened as it is
    packed, where the core's FMAs outrun them: default_tiles()["bf16"] says which kernel runs).
    tiles, an opbench.Tiles (or a record's tile dict), says how it runs (None: every default): m / n / k,
    the cache-blocking sizes (None: derived from this CPU's caches); threads (None: the cores this process
    may use); isa, a kernel set ("avx512", "avx2", "ref"; None: the best this CPU runs, or $OPBENCH_ISA).
    opbench.tuned.tuned_tiles(m, n, k, dtype, threads) returns the Tiles `opbench tune` recorded for
    this problem on this machine (or for the nearest tuned shape) with a note saying which.
    accumulate="fp16" (float16 inputs only, opt-in) sums each tile_k block of products in fp16 with an
    fp16-accumulating kernel and the blocks in fp32: twice the FMA rate on AVX512-FP16, with an error that
    grows with tile_k (see ops.numerics.dot_bound). It needs AVX512-FP16; isa="ref" emulates it on any CPU
    (slowly), to study the error. default_tiles()["fp16_accumulate"] says whether it can run here.
    The driver's path thresholds (csrc/gemm/README.md, "Paths by shape"; None: the defaults that
    default_tiles() lists) are Tiles' too: small_m (>= 0), the most rows of A for which B is read in place
    instead of packed (0: never; by default fewer, default_tiles()["aliased_small_m"], where B's rows are
    a multiple of default_tiles()["aliased_row_bytes"] apart and share a few L1 sets), parallel_flops
    (>= 0), the FLOPs under which one thread runs the whole product, and stream_m (0 to
    default_tiles()["stream_m_max"]), the most rows of A for which B is streamed row by row (0 or 1: never
    for M >= 2; M = 1 always streams; the default, default_tiles()["stream_m"], streams only a B past half
    of L2).
    prepare_gemm(...).tiles()["path"] says which path runs.
    On isa "amx" (or its exact emulator "amx-emu"), bf16 runs AMX tiles, laid out by Tiles' amx_rows x
    amx_cols accumulator tiles of 16 x 16 fp32 (one to four) and amx_ksteps, the K steps of operand tiles
    loaded before their products (None: the default layout's, 2 x 2 and 1; the layouts are
    _core.amx_shapes, the tile space tuning/spaces/gemm_amx.toml); every layout gives the same bits. The
    bf16 conv2d and recurrent layers take the same fields for their products.
    Raises ValueError naming the problem for any invalid input.
    """
    plain = tiles is None and accumulate == "fp32" and type(a) is type(b) is np.ndarray
    if plain and (out is None or type(out) is np.ndarray):
        return _core.gemm_now(a, b, out)  # planned and called in one C++ call (the same checks)
    return prepare_gemm(a, b, out=out, tiles=tiles, accumulate=accumulate).output()


def prepare_gemm(
    a: Array, b: Array, *, out: Array | None = None, tiles: TilesArg = None, accumulate: str = "fp32"
) -> Plan:
    """gemm(...) prepared once and called many times: `plan.run(loops)` times calls inside C++ (no Python
    between them), `plan.output()` returns C. The same arguments and errors as gemm; out (allocated when
    None) is where every call writes."""
    if not (out is None and type(a) is np.ndarray and type(b) is np.ndarray):  # (plain arrays: no check)
        _arrays(a=a, b=b, **({} if out is None else {"out": out}))
    if tiles is None:  # every default (a user's plain call): no tile or threshold to check
        return _core.prepare_gemm(a, b, out, _default_tiles(), accumulate, None, None, None)
    lookup = "tuned_tiles(m, n, k, dtype, threads)"
    given = _as_tiles(tiles, lookup)
    paths = given.thresholds()
    return _core.prepare_gemm(
        a,
        b,
        out,
        _tiles(given, lookup),
        accumulate,
        _optional_count(paths.get("small_m"), "small_m", MAX_TILE),
        _optional_count(paths.get("parallel_flops"), "parallel_flops"),
        _optional_count(paths.get("stream_m"), "stream_m", int(_core.stream_m_max)),
    )


def conv2d(
    x: Array,
    w: Array,
    *,
    stride: int | tuple[int, int] = 1,
    padding: Padding = 0,
    dilation: int | tuple[int, int] = 1,
    groups: int = 1,
    tiles: TilesArg = None,
    out: Array | None = None,
) -> Array:
    """Conv2d forward with opbench's kernels: x is N x C x H x W, w is K x C/groups x R x S (PyTorch's
    layouts), both C-contiguous float32 or float16; returns N x K x H_out x W_out. Computed as an implicit
    GEMM (Y = W * im2col(x) per image and group, the im2col matrix never written out): tiles.m is output
    channels and tiles.n output pixels per work unit, tiles.k the depth of a rank-k update (None: from the
    cache model; `prepare_conv2d(...).tiles()` reports what is used), with tiles.threads and tiles.isa as
    in gemm; fp16 accumulates in fp32. stride and dilation are an int or an (h, w) pair; padding too, or
    (top, bottom, left, right). opbench.tuned.tuned_conv2d_tiles(x, w, stride, padding, dilation,
    groups, threads) returns the Tiles `opbench tune conv` recorded (exact or nearest shape) with a note
    saying which. tiles.conv_path forces a way instead of the planner's model (None or "model"): one of
    _core.conv_path_names, "columns_in_place" (output pixels as columns, B's rows read in place from the
    padded input: stride 1 only), "columns_gathered" (B's micro-panels gathered), "rows_in_place" (output
    pixels as rows, A read in place), "rows_gathered", "pointwise_gemm" (a 1x1 at stride 1 without
    padding as a batched GEMM) or "im2col_gemm" (every image's im2col matrix written side by side, one
    GEMM); fp32 and fp16, where it can run the problem (else a ValueError saying
    why). `prepare_conv2d(...).tiles()["conv_path"]` names the way that runs. Raises ValueError on invalid
    input."""
    plan = prepare_conv2d(
        x, w, stride=stride, padding=padding, dilation=dilation, groups=groups, tiles=tiles, out=out
    )
    return plan.output()


def prepare_conv2d(
    x: Array,
    w: Array,
    *,
    stride: int | tuple[int, int] = 1,
    padding: Padding = 0,
    dilation: int | tuple[int, int] = 1,
    groups: int = 1,
    tiles: TilesArg = None,
    out: Array | None = None,
) -> Plan:
    """conv2d(...) prepared once (see prepare_gemm); `plan.tiles()` reports the tiles conv2d uses for this
    problem (given ones clamped and rounded to the register tile, the rest derived) and its register tile."""
    if not (out is None and type(x) is np.ndarray and type(w) is np.ndarray):  # (plain arrays: no check)
        _arrays(x=x, w=w, **({} if out is None else {"out": out}))
    if (
        tiles is None
        and type(stride) is int
        and type(padding) is int
        and type(dilation) is int
        and type(groups) is int
        and 1 <= stride <= MAX_CONV_PARAM
        and 0 <= padding <= MAX_CONV_PARAM
        and 1 <= dilation <= MAX_CONV_PARAM
        and 1 <= groups <= MAX_CONV_PARAM
    ):
        # plain integers in range and every default tile (a user's plain call): nothing else to convert
        sides = (padding, padding, padding, padding)
        return _core.prepare_conv2d(
            x, w, out, (stride, stride), sides, (dilation, dilation), groups, _default_tiles()
        )
    lookup = "tuned_conv2d_tiles(x, w, stride, padding, dilation, groups, threads)"
    given = _as_tiles(tiles, lookup)
    return _core.prepare_conv2d(
        x,
        w,
        out,
        _pair(stride, "stride", 1),
        _padding(padding),
        _pair(dilation, "dilation", 1),
        _positive_int(groups, "groups"),
        _tiles(given, lookup, "conv2d"),
        _conv_path(given.conv_path),
    )


def padding_sides(padding: Padding) -> tuple[int, int, int, int]:
    """The (top, bottom, left, right) that conv2d's `padding` argument names (ValueError if it names none)."""
    return _padding(padding)


def known_isas() -> tuple[str, ...]:
    """Every kernel set this build knows, best first (the C++ ISA table), whether or not this CPU runs it."""
    return tuple(_core.known_isas())


def available_isas() -> list[str]:
    """Kernel sets this CPU can run, best first."""
    return list(_core.cpu_info()["isas"])


def default_tiles(isa: str | None = None, n: int = 0) -> KernelInfo:
    """Micro-kernel shape (mr, nr) and the cache-model default tiles of a kernel set (for a GEMM with n
    columns where given: a narrow n may pick the kernel set's narrow tile)."""
    return _core.kernel_info(isa or "", n)


def register_tile(isa: str | None, dtype: str, n: int = 0) -> dict[str, int]:
    """The register tile (mr, nr) our GEMMs run for this dtype (bf16: the bf16 kernels', packed in k pairs;
    fp32 and fp16: the kernel set's, for n columns where given) and elem_bytes, the bytes of one element of
    its packed panels (2 for bf16 pairs; 4 otherwise, fp16, and bf16 on the fp32 units, being widened when
    packed): what the tuning spaces' cache rules size panels with."""
    info = default_tiles(isa, n)
    if dtype == "bf16":
        if info["bf16"]["fp32_units"]:  # (products of fewer rows than fp32_units_min_rows keep the pairs)
            return {"mr": int(info["mr"]), "nr": int(info["nr"]), "elem_bytes": 4}
        return {"mr": int(info["bf16"]["mr"]), "nr": int(info["bf16"]["nr"]), "elem_bytes": 2}
    return {"mr": int(info["mr"]), "nr": int(info["nr"]), "elem_bytes": 4}


def cpu_info() -> CpuInfo:
    """What the C++ runtime detected: vendor, brand, ISA flags, caches (sizes in bytes), kernel sets."""
    return _core.cpu_info()


def l3_bytes() -> int:
    return int(_core.cpu_info()["caches"]["l3"]["size_bytes"])


def native_fp16_fma() -> bool:
    return bool(_core.cpu_info()["native_fp16_fma"])


def compute_unit(dtype: str) -> str:
    """The execution unit whose peak bounds a dtype's GEMM on this CPU, as fma_peak names it: "fp16"
    (AVX512-FP16 FMAs) for fp16 and "bf16" (AVX512-BF16 dot products) for bf16 where the CPU (and build)
    has them and our kernels use them, else "fp32" (the 2-byte formats are then widened and multiplied on
    the fp32 FMA units: also bf16 where this core's FMAs outrun its dot products, default_tiles()["bf16"])."""
    info = _core.cpu_info()
    if dtype == "fp16" and info["native_fp16_fma"]:
        return "fp16"
    if dtype == "bf16" and info["bf16_dot"] and not _core.kernel_info("", 0)["bf16"]["fp32_units"]:
        return "bf16"
    return "fp32"


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


def cpu_features() -> CpuFeatures:
    """What run-time dispatch found: vendor, brand, ISA flags, caches, kernel sets and the one chosen."""
    return {**_core.cpu_info(), "selected_isa": _core.kernel_info("")["isa"], "kernel": default_tiles()}

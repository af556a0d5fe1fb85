"""The GEMM driver's paths by shape (csrc/gemm/README.md, "Paths by shape") against float64: up to 8 rows of
A (B streamed), few columns (A streamed), few rows (B read in place) and the blocked path, each forced
through its threshold (stream_m, small_m, parallel_flops) as well as chosen by default, on odd shapes
(M, N = 1, 2, 3, primes; K = 1, primes), every thread count 1-5, every ISA and both dtypes."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import kernel_set_isas, run_as_row

from opbench import kernels, microarch
from opbench.ops import gemm as gemm_op
from opbench.tiles import Tiles

ISAS = kernel_set_isas()
DTYPES = {"fp32": np.float32, "fp16": np.float16}

# M and N of 1, 2, 3 and primes beside K of 1 and primes: every register-tile edge, short K blocks, and the
# micro-panel of the unpacked path that would read past B's last column.
ODD = [
    (2, 3, 1),
    (3, 2, 7),
    (2, 37, 5),
    (3, 97, 131),
    (13, 33, 1),
    (17, 61, 257),
    (29, 127, 67),
    (43, 31, 521),
    (97, 101, 103),
]
# What each threshold setting makes of them: B streamed (stream_m 32, for M <= 32 and N > 32), the unpacked
# path (small_m above M), the blocked one (small_m 0), and the default.
SETTINGS = {
    "streamed": {"stream_m": 32},
    "unpacked": {"small_m": 10**6, "stream_m": 0},
    "blocked": {"small_m": 0, "stream_m": 0},
    "default": {},
}


def inputs_for(m: int, n: int, k: int, dtype: str, seed: int = 1) -> dict[str, np.ndarray]:
    return gemm_op.make_inputs(gemm_op.GemmShape(m, n, k), dtype, seed)


def assert_close(c: np.ndarray, inp: dict[str, np.ndarray], dtype: str) -> None:
    shape = gemm_op.GemmShape(inp["a"].shape[0], inp["b"].shape[1], inp["a"].shape[1])
    result = gemm_op.check(shape, c, inp, gemm_op.reference(shape, inp), dtype, accumulate="fp32")
    assert result["ok"], f"error {result['max_err_ratio']:.3g}x the bound"


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("threads", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("shape", ODD, ids=lambda s: "x".join(map(str, s)))
def test_every_path_matches_float64(isa: str, dtype: str, threads: int, setting: str, shape: tuple) -> None:
    inp = inputs_for(*shape, dtype, seed=threads)
    # parallel_flops 0: every thread takes part however small the product (the default would run these alone)
    c = kernels.gemm(
        inp["a"], inp["b"], tiles=Tiles(isa=isa, threads=threads, parallel_flops=0, **SETTINGS[setting])
    )
    assert_close(c, inp, dtype)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tiles", [(None, 7, 3), (None, 45, 17), (None, 10**9, 10**9), (5, 1, 1)])
def test_unpacked_path_with_any_tiles(isa: str, dtype: str, tiles: tuple) -> None:
    """tile_k blocks K and tile_n the columns of the unpacked path too (tile_m does not apply to it)."""
    inp = inputs_for(53, 71, 89, dtype)
    tm, tn, tk = tiles
    c = kernels.gemm(inp["a"], inp["b"], tiles=Tiles(m=tm, n=tn, k=tk, isa=isa, threads=2, small_m=64))
    assert_close(c, inp, dtype)


def at_float_offset(x: np.ndarray, offset: int) -> np.ndarray:
    """A copy of x whose data starts `offset` floats past a 64-byte boundary."""
    buf = np.empty(x.size + 32, x.dtype)
    start = (-buf.ctypes.data % 64) // x.itemsize + offset
    out = buf[start : start + x.size].reshape(x.shape)
    out[:] = x
    return out


# The unpacked path starts its micro-panels at B's first 64-byte boundary when every row is misaligned alike
# (N a multiple of 16 floats): a narrower first panel of 1-15 columns, then aligned ones. Every offset, a
# first panel wider than a thread's share or than a tile_n block, and column counts around the panels. On
# an Intel CPU, a thread with 4 or more tiles of rows packs each panel of a misaligned B instead (60 and
# 97 rows; 97 x 100: rows never aligned).
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("offset", range(16))
def test_unpacked_path_at_every_alignment_of_b(isa: str, offset: int) -> None:
    cases = (
        (3, 96, 5, 1, None),
        (17, 128, 67, 2, None),
        (29, 112, 131, 3, 32),
        (15, 80, 9, 5, None),
        (60, 96, 37, 1, None),
        (97, 100, 45, 2, 64),
    )
    for m, n, k, threads, tile_n in cases:
        inp = inputs_for(m, n, k, "fp32", seed=offset + n)
        b = at_float_offset(inp["b"], offset)
        assert b.ctypes.data % 64 == 4 * offset
        plan = kernels.prepare_gemm(
            inp["a"],
            b,
            tiles=Tiles(isa=isa, threads=threads, n=tile_n, parallel_flops=0, small_m=10**6, stream_m=0),
        )
        assert plan.tiles()["path"].startswith("unpacked"), (m, n, k)
        assert_close(plan.output(), inp, "fp32")


# N = 1 dots rows of A that all start equally far into a cache line (K a multiple of 16) from the line's
# end: every offset, K shorter than the offset's head, and rows in groups of 4 with a short last group.
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("offset", range(16))
def test_matrix_vector_product_at_every_alignment_of_a(isa: str, offset: int) -> None:
    for m, k, threads in ((5, 16, 1), (13, 48, 3), (2, 160, 1), (31, 1024, 2)):
        inp = inputs_for(m, 1, k, "fp32", seed=offset + k)
        a = at_float_offset(inp["a"], offset)
        plan = kernels.prepare_gemm(a, inp["b"], tiles=Tiles(isa=isa, threads=threads, parallel_flops=0))
        assert plan.tiles()["path"].startswith("thin"), (m, k)
        assert_close(plan.output(), inp, "fp32")


# One row of A streams B from B's first line boundary on: every offset, a first block wider than N, and the
# threads' column shares.
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("offset", range(16))
def test_one_row_at_every_alignment_of_b(isa: str, offset: int) -> None:
    for n, k, threads in ((48, 9, 1), (80, 67, 3), (2064, 17, 2), (16, 5, 1)):
        inp = inputs_for(1, n, k, "fp32", seed=offset + n)
        b = at_float_offset(inp["b"], offset)
        plan = kernels.prepare_gemm(inp["a"], b, tiles=Tiles(isa=isa, threads=threads, parallel_flops=0))
        assert plan.tiles()["path"].startswith("row"), (n, k)
        assert_close(plan.output(), inp, "fp32")


# The rows path at every M up to 8 (one instantiation each) and past it (passes of 8 rows, the last one
# short), N past the thin path's 32 with vector and column tails (33: two vectors and one column; 100: a
# 4-vector step, two vectors and four columns), K from one row to past several groups of 8 with a short last
# group.
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 21, 32])
def test_rows_path_at_every_m(isa: str, dtype: str, m: int) -> None:
    for n, k, threads in ((33, 1, 1), (100, 9, 3), (47, 8, 2), (161, 131, 5), (1000, 23, 2)):
        inp = inputs_for(m, n, k, dtype, seed=m + n)
        plan = kernels.prepare_gemm(
            inp["a"],
            inp["b"],
            tiles=Tiles(isa=isa, threads=threads, parallel_flops=0, stream_m=32),
        )
        assert plan.tiles()["path"].startswith("row"), (m, n, k)
        assert_close(plan.output(), inp, dtype)


def test_rows_path_with_b_past_half_of_l3() -> None:
    """1-8 rows against a B past half of L3 keep their accumulators in L2, in blocks of whole rows of C
    (stream_m 8 given: AVX2's default streams 5)."""
    n = 2100
    k = kernels.cpu_info()["caches"]["l3"]["size_bytes"] // (2 * 4 * n) + 3
    for m, threads in ((1, 1), (1, 2), (2, 1), (5, 3), (8, 2)):
        inp = inputs_for(m, n, k, "fp32", seed=m)
        plan = kernels.prepare_gemm(inp["a"], inp["b"], tiles=Tiles(threads=threads, stream_m=8))
        assert plan.tiles()["path"].startswith("rows" if m > 1 else "row (one row"), (m, n, k)
        assert_close(plan.output(), inp, "fp32")


def test_blocked_path_narrows_its_n_block_to_keep_c_in_l3() -> None:
    """Past L3, C's N block (M x tile_n) would come back from memory for every K block: the model's tile_n is
    narrowed to equal blocks that fit (here two ragged ones), a given tile_n is kept, and both are right.
    M grows with L3 (266,241 rows on a 260 MiB L3): tile_k is given small, so that two K blocks take K = 101
    instead of the model's tile_k + 37 (2085 with a 2 MiB L2: 143 s of this suite on such a Xeon). Rows are
    independent, so every column of a sample of rows (every 97th, and the last 50) is checked: the bound of
    all 266,241 took 16 s."""
    n, tile_k = 300, 64
    k = tile_k + 37
    m = kernels.cpu_info()["caches"]["l3"]["size_bytes"] // (4 * 256) + 1
    inp = inputs_for(m, n, k, "fp32", seed=5)
    rows = np.unique(np.r_[0:m:97, max(0, m - 50) : m])
    sample = {"a": inp["a"][rows], "b": inp["b"]}
    shape = gemm_op.GemmShape(len(rows), n, k)
    ref = gemm_op.reference(shape, sample)
    bounds = gemm_op.error_bounds(shape, sample, ref, "fp32", "fp32")
    for threads, tiles in ((1, {}), (2, {}), (2, {"tile_n": 1000})):
        given = Tiles.of({"tile_k": tile_k, **tiles}, threads=threads)
        plan = kernels.prepare_gemm(inp["a"], inp["b"], tiles=given)
        t = plan.tiles()
        assert t["path"].startswith("blocked") and t["tile_k"] == tile_k, t
        assert t["tile_n"] == (n if tiles else -(-(n // 2) // t["nr"]) * t["nr"]), t
        out = plan.output()[rows]
        result = gemm_op.check(shape, out, sample, ref, "fp32", accumulate="fp32", bounds=bounds)
        assert result["ok"], (threads, tiles, result["max_err_ratio"])


def test_blocked_path_keeps_its_b_block_to_a_quarter_of_l3() -> None:
    """With one K block (C is written once) the model's tile_n is still narrowed, so that B's packed block
    (tile_k x tile_n) takes at most a quarter of L3: equal blocks, and the product is right."""
    square = np.zeros((64, 64), np.float32)
    t0 = kernels.prepare_gemm(square, square).tiles()
    nr, k = t0["nr"], t0["tile_k"]
    l3 = kernels.default_tiles()["l3_counted_bytes"]  # CPUID's, or less (microarch.cpp)
    assert 0 < l3 <= kernels.cpu_info()["caches"]["l3"]["size_bytes"]
    fit = max(8 * nr, l3 // 4 // (4 * k) // nr * nr)
    m, n = t0["small_m"] + 3, fit + 300
    inp = inputs_for(m, n, k, "fp32", seed=6)
    shape = gemm_op.GemmShape(m, n, k)
    ref = gemm_op.reference(shape, inp)
    plan = kernels.prepare_gemm(inp["a"], inp["b"], tiles=Tiles(threads=2))
    t = plan.tiles()
    assert t["path"].startswith("blocked"), t
    half = (n + 1) // 2
    assert t["tile_n"] == (half + nr - 1) // nr * nr, t
    result = gemm_op.check(shape, plan.output(), inp, ref, "fp32", accumulate="fp32")
    assert result["ok"], result["max_err_ratio"]


def test_rows_path_reads_a_transposed() -> None:
    """dB = A^T dC with few columns of A (K <= 8 here) and a dC past half of L2 streams dC's rows by default,
    reading A^T through its transpose."""
    n = 70
    m = kernels.cpu_info()["caches"]["l2"]["size_bytes"] // (2 * 4 * n) + 3
    for k in (3, 8):
        shape = gemm_op.GemmShape(m, n, k)
        inp = gemm_op.make_inputs(shape, "fp32", 9)
        dc = np.random.default_rng(10).uniform(-1, 1, (m, n)).astype(np.float32)
        _, db = kernels.gemm_backward(inp["a"], inp["b"], dc, tiles=Tiles(threads=2))
        a64, dc64 = inp["a"].astype(np.float64), dc.astype(np.float64)
        scale = np.abs(a64.T) @ np.abs(dc64) + 1e-30
        assert (np.abs(db - a64.T @ dc64) <= 8 * m * 6e-8 * scale + 1e-6).all()


# Every padded width of the thin path (1: dot products over 4 rows of A at a time; 2, 4, 8, 16, 32: one to
# sixteen rows of B per vector, or two vectors per row) exact and padded, N = 16 (read in place on AVX-512),
# and K below, at and past whole groups.
THIN_N = [1, 2, 3, 4, 5, 8, 9, 12, 16, 17, 24, 31, 32]
THIN_K = [1, 3, 7, 17, 523]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", THIN_N)
@pytest.mark.parametrize("threads", [1, 3])
def test_few_columns_take_the_thin_path_at_every_width(isa: str, dtype: str, n: int, threads: int) -> None:
    for m, k in ((2, 1), (37, 3), (9, 7), (21, 17), (37, 523)):
        inp = inputs_for(m, n, k, dtype, seed=n + k)
        plan = kernels.prepare_gemm(
            inp["a"], inp["b"], tiles=Tiles(isa=isa, threads=threads, parallel_flops=0)
        )
        assert plan.tiles()["path"].startswith("thin"), (m, n, k)
        assert_close(plan.output(), inp, dtype)


# Past 32 columns the thin path takes an fp32 B that is its own layout (48 or 64 columns, read in place) and
# small (a quarter of L2), with vectors of 16 lanes; the blocked or unpacked path takes every other width.
WIDE_N = [33, 47, 48, 49, 63, 64, 65]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", WIDE_N)
@pytest.mark.parametrize("threads", [1, 3])
def test_up_to_64_columns_of_a_small_b_take_the_thin_path(isa: str, dtype: str, n: int, threads: int) -> None:
    wide = kernels.default_tiles(isa)["thin_max_n"] == 64
    quarter_l2 = kernels.cpu_info()["caches"]["l2"]["size_bytes"] // 4
    big_k = quarter_l2 // (4 * n) + 1
    for m, k in ((2, 1), (37, 3), (9, 7), (21, 17), (37, 523), (13, big_k)):
        inp = inputs_for(m, n, k, dtype, seed=n + k)
        plan = kernels.prepare_gemm(
            inp["a"], inp["b"], tiles=Tiles(isa=isa, threads=threads, parallel_flops=0)
        )
        thin = wide and n in (48, 64) and dtype == "fp32" and k < big_k
        assert plan.tiles()["path"].startswith("thin") == thin, (m, n, k, plan.tiles()["path"])
        assert_close(plan.output(), inp, dtype)
    # B read in place through its leading dimension: 64 columns of a wider array
    inp = inputs_for(29, 80, 41, dtype, seed=5)
    inp["b"] = inp["b"][:, 3 : 3 + n]
    plan = kernels.prepare_gemm(inp["a"], inp["b"], tiles=Tiles(isa=isa, threads=threads))
    assert_close(plan.output(), inp, dtype)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n", [3, 8, 16, 32])
def test_thin_path_reads_b_transposed(isa: str, n: int) -> None:
    """dA = dC B^T takes the thin path with B^T read through its transpose when B has few rows (K here)."""
    m, k = 29, n
    shape = gemm_op.GemmShape(m, 53, k)
    inp = gemm_op.make_inputs(shape, "fp32", 7)
    dc = np.random.default_rng(8).uniform(-1, 1, (m, 53)).astype(np.float32)
    da, _ = kernels.gemm_backward(inp["a"], inp["b"], dc, tiles=Tiles(threads=2, isa=isa))
    want = dc.astype(np.float64) @ inp["b"].astype(np.float64).T
    scale = np.abs(dc.astype(np.float64)) @ np.abs(inp["b"].astype(np.float64).T) + 1e-30
    assert (np.abs(da - want) <= 8 * 53 * 6e-8 * scale + 1e-6).all()


def test_each_shape_takes_the_path_its_thresholds_say() -> None:
    def path(m: int, n: int, k: int, **thresholds: int) -> str:
        inp = inputs_for(m, n, k, "fp32")
        return str(
            kernels.prepare_gemm(inp["a"], inp["b"], tiles=Tiles(threads=2, **thresholds)).tiles()["path"]
        )

    small_m = kernels.default_tiles()["small_m"]
    assert path(1, 300, 40).startswith("row")
    assert path(300, 3, 40).startswith("thin")
    assert path(300, 8, 600).startswith("thin")
    assert path(300, 32, 4).startswith("thin")
    assert path(3, 16, 4).startswith("thin")  # few columns before few rows
    assert not path(300, 33, 40).startswith("thin")
    assert path(small_m, 67, 64).startswith("unpacked")
    assert path(small_m + 1, 67, 64).startswith("blocked")
    assert path(20, 67, 64, small_m=19).startswith("blocked")
    assert path(20, 67, 64, small_m=20).startswith("unpacked")
    assert path(20, 67, 64, small_m=0).startswith("blocked")
    # B streamed for 2 to the default stream_m rows (the micro-architecture table's) once B
    # outgrows half of L2 (below that it is read faster in place), for any B when stream_m is given, and
    # never at stream_m 0 or 1
    caches = kernels.cpu_info()["caches"]
    half_l2 = caches["l2"]["size_bytes"] // 2
    big_k = half_l2 // (4 * 64) + 1
    stream_m = kernels.default_tiles()["stream_m"]
    assert path(stream_m, 64, big_k).startswith("rows")
    assert path(stream_m + 1, 64, big_k).startswith("unpacked")
    past_l3 = caches["l3"]["size_bytes"] // (4 * 64) + 1
    assert path(stream_m + 1, 64, past_l3).startswith("unpacked")
    assert path(16, 64, past_l3, stream_m=16).startswith("rows")
    assert path(17, 64, 5, stream_m=17).startswith("rows")
    assert path(8, 64, max(1, half_l2 // (4 * 64) - 1)).startswith("unpacked")
    assert path(2, 40, 3, stream_m=2).startswith("rows")
    assert path(3, 40, 3, stream_m=2).startswith("unpacked")
    assert path(2, 64, big_k, stream_m=1).startswith("unpacked")
    assert path(2, 64, big_k, stream_m=0).startswith("unpacked")
    assert path(2, 16, big_k).startswith("thin")  # few columns before few rows


def test_the_kernels_micro_architecture_row_is_the_one_the_peaks_name() -> None:
    # csrc/runtime/microarch.cpp mirrors opbench/microarch.py's CPUID ranges: both name this CPU alike, or
    # the kernels' table has no row of its own for it and says whose choices it takes.
    info, cpu = kernels.default_tiles(), kernels.cpu_info()
    arch = microarch.lookup(cpu["vendor"], cpu["family"], cpu["model"])
    row, measured = info["microarch"], info["microarch_measured"]
    assert (arch is not None and row == arch.name) or row.endswith("(no row)") or row == "unknown"
    assert measured in ("Zen 3", "Zen 4", "Zen 5", "Emerald Rapids")
    assert (measured == "Emerald Rapids") == (cpu["vendor"] == "GenuineIntel")
    assert measured == row or row not in ("Zen 3", "Zen 4", "Zen 5", "Emerald Rapids")


@pytest.mark.parametrize("isa", ISAS)
def test_b_rows_that_alias_in_l1_are_read_in_place_only_for_fewer_rows(isa: str) -> None:
    # B's rows a multiple of aliased_row_bytes apart share L1 sets: the default reads such a B in place up to
    # aliased_small_m rows instead of small_m; a given small_m holds for every B (blocking.cpp). On Intel's
    # AVX-512 set that is 4 KiB strides up to 32 rows; an L1-fed register tile (AVX2's, the portable one),
    # whose B micro-panel must stay in L1, takes B in place for at most 128 rows, 32 at strides its L1 model
    # finds aliased (256 B on a 32 KiB 8-way L1); AMD's AVX-512 set keeps one limit.
    info = kernels.default_tiles(isa)
    small_m, aliased, stride = info["small_m"], info["aliased_small_m"], info["aliased_row_bytes"]
    l1_fed = info["mr"] * info["nr"] <= 6 * 16  # AVX2's 6x16 and the portable 4x8
    intel = kernels.cpu_info()["vendor"] == "GenuineIntel"
    assert stride >= 64 and stride & (stride - 1) == 0
    assert stride <= 4096 if l1_fed else stride == 4096
    groups = info["b_group_rows"]  # the unpacked path packs B in groups from these rows (small.cpp)
    assert groups in (0, 4 * info["mr"]) and (groups == 0 or info["nr"] == 16), info
    assert small_m <= (168 if groups else 128) if l1_fed else small_m > 128
    assert aliased == (min(32, small_m) if intel or l1_fed else small_m)

    def path(m: int, n: int, dtype: str = "fp32", **thresholds: int) -> str:
        inp = inputs_for(m, n, 40, dtype)
        tiles = Tiles(threads=2, isa=isa, **thresholds)
        return str(kernels.prepare_gemm(inp["a"], inp["b"], tiles=tiles).tiles()["path"])

    alias_n = max(1024, stride // 4)  # a multiple of the stride in floats
    assert path(aliased, alias_n).startswith("unpacked")
    # One row more is blocked: past the aliased limit, or past small_m where that is the limit (AMD's
    # AVX-512 set) ... unless the unpacked path packs B in groups of micro-panels from b_group_rows rows
    # (Zen 4's and Intel's rows on the AVX2 tile: small.cpp), which no stride aliases
    grouped = 0 < groups <= aliased + 1
    assert path(aliased + 1, alias_n).startswith("unpacked" if grouped and aliased < small_m else "blocked")
    if grouped:
        assert "packed 4 micro-panels at a time" in path(aliased + 1, alias_n)
        assert "packed 4 micro-panels at a time" in path(small_m, alias_n)
    assert path(aliased + 1, 2 * alias_n, "fp16").startswith("blocked")  # fp16 B is never packed in groups
    assert path(small_m, 1000).startswith("unpacked")  # 4000-byte rows
    assert path(small_m + 1, 1000).startswith("blocked")
    assert path(small_m, alias_n, small_m=small_m).startswith("unpacked")
    inp = inputs_for(64, 1024, 40, "fp32")
    plan = kernels.prepare_gemm(inp["a"], inp["b"], tiles=Tiles(threads=2, isa=isa))
    assert_close(plan.output(), inp, "fp32")


def test_thresholds_are_reported_and_checked() -> None:
    info = kernels.default_tiles()
    assert info["small_m"] >= 1 and info["parallel_flops"] >= 1
    inp = inputs_for(9, 10, 11, "fp32")
    plan = kernels.prepare_gemm(inp["a"], inp["b"], tiles=Tiles(small_m=3, parallel_flops=5))
    assert plan.tiles()["small_m"] == 3 and plan.tiles()["parallel_flops"] == 5
    # a tuned record's tiles carry them like the tiles
    c = kernels.gemm(inp["a"], inp["b"], tiles={"tile_k": 4, "small_m": 0, "parallel_flops": 0})
    assert_close(c, inp, "fp32")
    # every row of microarch.cpp's table; 8-lane kernel sets (AVX2's, blocked.cpp) stream fewer rows
    assert info["stream_m"] == (8 if info["nr"] >= 32 else 5) and kernels.STREAM_M_MAX == 32
    assert all(kernels.default_tiles(isa)["stream_m"] == 5 for isa in ("avx2", "ref") if isa in ISAS)
    # measured on Emerald Rapids only ([E5], [E6]): every other row keeps CPUID's L3 and no prefetch
    emerald = info["microarch_measured"] == "Emerald Rapids"
    assert info["packed_ahead_steps"] == (16 if emerald else 0)
    assert info["f32_a_in_place_max_k"] == (1024 if emerald and info["isa"] == "avx512" else 0)
    assert (info["l3_counted_bytes"] < kernels.cpu_info()["caches"]["l3"]["size_bytes"]) == (
        emerald and kernels.cpu_info()["caches"]["l3"]["size_bytes"] > 64 << 20
    )
    assert kernels.prepare_gemm(inp["a"], inp["b"], tiles=Tiles(stream_m=2)).tiles()["stream_m"] == 2
    bad_values = (
        {"small_m": -1},
        {"parallel_flops": -2},
        {"small_m": 1.5},
        {"small_m": "8"},
        {"stream_m": 33},
    )
    for bad in bad_values:
        with pytest.raises(ValueError, match=next(iter(bad))):
            kernels.gemm(inp["a"], inp["b"], tiles=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=next(iter(bad))):
            kernels.gemm(inp["a"], inp["b"], tiles=Tiles.of(bad))
    with pytest.raises(ValueError, match="conv2d takes no small_m"):  # GEMM's thresholds are GEMM's
        kernels.conv2d(
            np.ones((1, 1, 3, 3), np.float32), np.ones((1, 1, 1, 1), np.float32), tiles={"small_m": 2}
        )


@pytest.mark.parametrize("dtype", DTYPES)
def test_accumulating_and_transposed_operands_on_the_unpacked_path(dtype: str) -> None:
    """The backward pass multiplies by A^T (trans_a) on whatever path its shape takes: dB = A^T dC with few
    columns of A^T, and dA = dC B^T."""
    for m, n, k in ((7, 29, 41), (2, 3, 5), (45, 17, 3)):
        shape = gemm_op.GemmShape(m, n, k)
        inp = gemm_op.make_inputs(shape, dtype, 5)
        dc = np.random.default_rng(6).uniform(-1, 1, (m, n)).astype(DTYPES[dtype])
        da, db = kernels.gemm_backward(inp["a"], inp["b"], dc, tiles=Tiles(threads=3))
        a64, b64, dc64 = (x.astype(np.float64) for x in (inp["a"], inp["b"], dc))
        tol = 8 * max(m, n, k) * (6e-8 if dtype == "fp32" else 1e-3)
        scale_a = np.abs(dc64) @ np.abs(b64.T) + 1e-30
        scale_b = np.abs(a64.T) @ np.abs(dc64) + 1e-30
        assert (np.abs(da.astype(np.float64) - dc64 @ b64.T) <= tol * scale_a + 1e-6).all()
        assert (np.abs(db.astype(np.float64) - a64.T @ dc64) <= tol * scale_b + 1e-6).all()


@pytest.mark.parametrize("isa", ISAS)
def test_opbench_isa_forces_every_path(isa: str) -> None:
    script = """
import numpy as np
from opbench import kernels
from opbench.ops import gemm
assert kernels.cpu_features()["selected_isa"] == ISA
# The unpacked path's row limit is this CPU's cache model's (small_m: 182 on a Zen 4 with AVX-512, 1170 with
# AVX2, 448 on a Zen 5): the blocked case is just past it, the unpacked one within it (forced where the
# model's limit is below 31).
small_m = kernels.default_tiles(ISA)["small_m"]
for dtype in ("fp32", "fp16"):
    big = max(small_m + 1, 64)
    for (m, n, k), prefix in (((1, 67, 71), "row"), ((67, 1, 71), "thin"), ((53, 7, 601), "thin"),
                              ((5, 67, 71), "rows"), ((31, 67, 71), "unpacked"), ((big, 67, 71), "blocked")):
        s = gemm.GemmShape(m, n, k)
        i = gemm.make_inputs(s, dtype, 3)
        stream_m = 8 if m == 5 else None
        rows = max(small_m, 31) if prefix == "unpacked" else None
        tiles = kernels.Tiles(threads=3, parallel_flops=0, stream_m=stream_m, small_m=rows)
        plan = kernels.prepare_gemm(i["a"], i["b"], tiles=tiles)
        assert plan.tiles()["path"].startswith(prefix), (m, n, k, plan.tiles()["path"])
        assert plan.tiles()["isa"] == ISA
        assert gemm.check(s, plan.output(), i, gemm.reference(s, i), dtype, "fp32")["ok"], (m, n, k, dtype)
print("ok")
""".replace("ISA", repr(isa))
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env={**os.environ, "OPBENCH_ISA": isa}
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("row", ["Emerald Rapids", "Zen 5"])
def test_fp32_a_read_in_place_against_float64(isa: str, row: str) -> None:
    """fp32 A read in place by the AVX-512 kernel (GemmKernels::ukernel_a), on the rows of the
    micro-architecture table that take it and that do not, forced with OPBENCH_MICROARCH on any CPU: the
    unpacked-B path with B misaligned and on a line (row tiles alike in size, 2 rows apart, an odd one last),
    the blocked
    loops (several K blocks, N blocks cut to half of L2), the limits (N past 2048, K blocks past 1024) and 1-3
    threads, on odd shapes and round ones, against float64."""
    script = """
import numpy as np
from opbench import kernels
from opbench.ops import gemm
info = kernels.default_tiles(ISA)
assert info["microarch"] == ROW, info["microarch"]
in_place = info["f32_a_in_place_max_k"] > 0
assert in_place == (ROW == "Emerald Rapids" and ISA == "avx512"), info["f32_a_in_place_max_k"]

def misaligned(x, skew):
    # a copy of x whose data starts `skew` bytes past a 64-byte line (numpy's own are 16 bytes past, or 0)
    buf = np.empty(x.size + 32, np.float32)
    off = (skew - buf.ctypes.data % 64) % 64 // 4
    y = buf[off:off + x.size].reshape(x.shape)
    y[...] = x
    assert y.ctypes.data % 64 == skew
    return y

cases = [  # (m, n, k), tiles, whether A is read in place where the row takes it (the blocked path, past
    # small_m: not on the 14x16 narrow tile, which N = 33-48 takes, nor past the row's K or N limits)
    ((57, 67, 71), {}, True), ((71, 101, 103), {}, True), ((97, 33, 1021), {}, False),
    ((113, 257, 511), {}, True), ((128, 128, 128), {}, True), ((59, 2049, 3), {}, False),
    ((449, 67, 131), {}, True), ((463, 37, 600), {"k": 128}, False), ((463, 49, 600), {"k": 128}, True),
    ((449, 61, 1025), {}, False), ((500, 2000, 300), {}, True), ((31, 67, 71), {}, False),
]
for (m, n, k), given, expect in cases:
    s = gemm.GemmShape(m, n, k)
    i = gemm.make_inputs(s, "fp32", 5)
    for skew, threads in ((16, 1), (16, 2), (16, 3), (0, 1), (0, 2)):
        i["b"] = misaligned(i["b"], skew)
        plan = kernels.prepare_gemm(i["a"], i["b"], tiles=kernels.Tiles(threads=threads, isa=ISA, **given))
        path = plan.tiles()["path"]
        if m > plan.tiles()["small_m"]:
            assert ("A read in place" in path) == (in_place and expect), (m, n, k, path)
        r = gemm.check(s, plan.output(), i, gemm.reference(s, i), "fp32", "fp32")
        assert r["ok"], (m, n, k, threads, r["max_err_ratio"])
print("ok")
""".replace("ISA", repr(isa)).replace("ROW", repr(row))
    proc = run_as_row(script, row, isa=isa)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr

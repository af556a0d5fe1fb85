"""bf16 (issue 20): our GEMM, conv2d and recurrent layers against float64 on odd and round shapes, on every
ISA (each also forced by OPBENCH_ISA), the AVX512-BF16 kernel where the CPU has it, its peak loop, and bf16
through a sweep."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from conftest import run_as_row

from opbench import _core, kernels
from opbench.dtypes import parse_dtypes
from opbench.ops import conv, gemm, gru, lstm, rnn
from opbench.ops.numerics import compare
from opbench.tiles import Tiles

BF16 = ml_dtypes.bfloat16
# The AMX emulator (amx-emu) runs the AMX kernels' blocking, packing and edges on any machine.
ISAS = [*kernels.available_isas(), "amx-emu"]
HAS_BF16_DOT = bool(_core.cpu_info()["bf16_dot"])
# 1, primes, and non-multiples of every register tile (14x32, 4x16) and of a pair; odd K ends on half a pair.
SHAPES = [
    (1, 1, 1),
    (1, 1, 2),
    (2, 3, 5),
    (13, 31, 7),
    (15, 33, 17),
    (29, 67, 131),
    (97, 61, 1),
    (64, 64, 64),
]


def _ternary(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    return rng.integers(-1, 2, size=shape).astype(BF16)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("mnk", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_bf16_gemm_is_within_the_float64_bound(isa: str, mnk: tuple[int, int, int]) -> None:
    shape = gemm.GemmShape(*mnk)
    inputs = gemm.make_inputs(shape, "bf16", 11)
    plan = kernels.prepare_gemm(inputs["a"], inputs["b"], tiles=Tiles(isa=isa, threads=2))
    out = plan.output()
    assert out.dtype == np.dtype(BF16) and out.shape == (shape.m, shape.n)
    # the bf16 kernels' pairs, or the fp32 tile with bf16 widened (default_tiles()["bf16"]["fp32_units"])
    assert plan.tiles()["path"].startswith(("blocked, bf16 pairs", "blocked, bf16 widened onto the fp32"))
    result = gemm.check(shape, out, inputs, gemm.reference(shape, inputs), "bf16", "fp32")
    assert result["ok"], (isa, mnk, result)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("k", [1025, 2049, 4608])
def test_bf16_k_past_1024_runs_in_equal_blocks_with_a_in_place(isa: str, k: int) -> None:
    """The model's bf16 K block (4096) is cut into blocks of at most 1024 alike in size where the kernel reads
    A in place for them (blocked.cpp, bf16_k_blocks): the plan reports that block and the path; a tile_k
    given is kept. Exact on ternary entries: a block dropped, doubled or cut at the wrong pair changes C.
    (13 rows: fewer than any CPU widens onto the fp32 tile, so the pairs run everywhere.)"""
    rng = np.random.default_rng(k)
    a, b = _ternary(rng, (13, k)), _ternary(rng, (k, 45))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    unit = kernels.default_tiles(isa)["bf16"]["isa"]
    for given in ({}, {"tile_k": 4096}):
        plan = kernels.prepare_gemm(a, b, tiles=Tiles.of(given, isa=isa, threads=2))
        np.testing.assert_array_equal(plan.output().astype(np.float64), exact)
        tiles = plan.tiles()
        bf16 = kernels.default_tiles(isa)["bf16"]
        widened = bf16["fp32_units"] and bf16["fp32_units_min_rows"] <= 13  # no bf16 unit: always widened
        assert ("widened onto the fp32 tile" if widened else "bf16 pairs") in tiles["path"], tiles["path"]
        if unit != "avx512bf16":
            continue  # (the AMX kernels choose their own K block; the portable pairs kernel packs A)
        blocks = -(-k // 1024)
        want = 4096 if given else -(-k // blocks) + (-(-k // blocks)) % 2
        assert tiles["tile_k"] == want, tiles
        assert ("A read in place" in tiles["path"]) == (not given or k <= 1024), tiles["path"]


def _rows_alias_in_l1(row_bytes: int, rows: int) -> bool:
    """Whether `rows` rows `row_bytes` apart, one line of each, need more ways of one L1 set than it has less
    one (blocked.cpp's a_rows_alias_in_l1), from the caches the kernels found."""
    l1 = kernels.cpu_info()["caches"]["l1d"]
    span = l1["sets"] * l1["line_bytes"]
    sets_reached = span // max(math.gcd(row_bytes, span), l1["line_bytes"])
    return -(-rows // sets_reached) > l1["ways"] - 1


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("k", [1024, 2048, 4096])
def test_bf16_a_whose_rows_alias_in_l1_is_packed(isa: str, k: int) -> None:
    """A read in place is a register tile's rows at once. Where A's rows are a multiple of an L1 way (4 KiB on
    64 sets of 64-byte lines) apart, those rows all fall in one set, more than it has ways, and every step
    missed L1 (2048^3 at 0.46 of A packed on a Zen 4 guest): such an A is packed, in the model's one K block,
    not cut for the in-place kernel (blocked.cpp, a_rows_alias_in_l1). The same A as a view of rows 64 bytes
    further apart is read in place in K blocks of at most 1024. Exact on ternary entries, 1-3 threads."""
    info = kernels.default_tiles(isa)["bf16"]
    if info["isa"] != "avx512bf16":
        pytest.skip(f"{isa}: its bf16 kernel does not read A in place by K blocks ({info['isa']})")
    rng = np.random.default_rng(k)
    a, b = _ternary(rng, (29, k)), _ternary(rng, (k, 67))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    wider = np.zeros((29, k + 32), BF16)
    wider[:, :k] = a
    for view, lda in ((a, k), (wider[:, :k], k + 32)):
        aliased = _rows_alias_in_l1(lda * 2, info["mr"])
        for threads in (1, 3):
            plan = kernels.prepare_gemm(view, b, tiles=Tiles(isa=isa, threads=threads))
            np.testing.assert_array_equal(plan.output().astype(np.float64), exact)
            tiles = plan.tiles()
            assert ("A read in place" in tiles["path"]) == (not aliased), (lda, tiles["path"])
            cut = not aliased and k > 1024  # (the model's block, 4096, otherwise)
            assert tiles["tile_k"] == (-(-k // -(-k // 1024)) if cut else 4096), (lda, tiles)
    assert not _rows_alias_in_l1((k + 32) * 2, info["mr"])  # the view is always read in place
    if kernels.cpu_info()["caches"]["l1d"]["ways"] <= info["mr"]:  # 8-16 ways: 14 rows 4 KiB apart alias
        assert _rows_alias_in_l1(k * 2, info["mr"]) == (k >= 2048)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("row", ["Emerald Rapids", "Zen 5"])
def test_bf16_widened_onto_the_fp32_tile_is_exact(isa: str, row: str) -> None:
    """bf16 widened as it is packed and run on the fp32 register tile (gemm.hpp, bf16_on_fp32), on the
    micro-architecture rows that take it and that do not, forced with OPBENCH_MICROARCH on any CPU: around
    the rows threshold, narrow N, several K blocks, B as is and transposed (the conv's W^T), B packed once
    (an LSTM's W_hh, at batches on both sides of the threshold) and a conv, 1-3 threads. Ternary entries
    make every sum exact, so a value widened wrong (a shift off by one, a half lost) changes C."""
    script = """
import numpy as np, ml_dtypes
from opbench import kernels
from opbench.ops import conv, lstm
BF16 = ml_dtypes.bfloat16
info = kernels.default_tiles(ISA)
assert info["microarch"] == ROW, info["microarch"]
b16 = info["bf16"]
portable = not b16["dot_product_unit"] and ISA in ("avx512", "avx2")  # no bf16 unit: widened at any size
widens = portable or (ROW == "Emerald Rapids" and ISA == "avx512" and b16["isa"] == "avx512bf16")
assert b16["fp32_units"] == widens, b16
assert b16["fp32_units_min_rows"] == (16 if b16["dot_product_unit"] else 1), b16
rng = np.random.default_rng(3)
tern = lambda *s: rng.integers(-1, 2, size=s).astype(BF16)
for m, n, k, given in ((15, 33, 70, {}), (16, 33, 70, {}), (17, 7, 301, {}), (61, 97, 1029, {}),
                       (29, 257, 50, {"k": 24}), (200, 13, 131, {})):
    a, b = tern(m, k), tern(k, n)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    for threads in (1, 2, 3):
        plan = kernels.prepare_gemm(a, b, tiles=kernels.Tiles(threads=threads, isa=ISA, **given))
        path = plan.tiles()["path"]
        assert ("widened onto the fp32 tile" in path) == (widens and m >= b16["fp32_units_min_rows"]), path
        np.testing.assert_array_equal(plan.output().astype(np.float64), exact)
c = conv.shape_from_case(dict(n=2, c=7, h=9, w=11, k=19, r=3, s=3, pad_h=1, pad_w=1))
x, w = tern(2, 7, 9, 11), tern(19, 7, 3, 3)
plan = kernels.prepare_conv2d(x, w, padding=1, tiles=kernels.Tiles(threads=2, isa=ISA))
assert ("bf16 widened" in plan.tiles()["kernel"]) == widens, plan.tiles()
i = {"x": x, "w": w}
r = conv.check(c, plan.output(), i, conv.reference(c, i), "bf16", "fp32")
assert r["ok"], r
for batch in (5, 16, 21):
    s = lstm.shape_from_case(dict(seq_len=3, batch=batch, input_size=7, hidden=13))
    i = lstm.OP.make_inputs(s, "bf16", 3)
    plan = lstm.plan(s, i, kernels.Tiles(threads=2, isa=ISA))
    r = lstm.OP.check(s, plan.output(), i, lstm.reference(s, i), "bf16", "fp32")
    assert r["ok"], (batch, r)
print("ok")
""".replace("ISA", repr(isa)).replace("ROW", repr(row))
    proc = run_as_row(script, row, isa=isa)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize(
    "mnk_tiles",
    [
        ((13, 31, 7), {}),
        ((53, 70, 301), {"tile_m": 28, "tile_n": 64, "tile_k": 33}),
        ((200, 97, 1025), {}),
        ((131, 64, 1023), {}),
        ((29, 257, 50), {}),
    ],
    ids=["small", "odd-tile_k", "several-k-blocks", "odd-k-in-place", "wide"],
)
def test_bf16_gemm_is_exact_on_small_integers(isa: str, mnk_tiles: tuple[tuple[int, int, int], dict]) -> None:
    """Entries in {-1, 0, 1}: every sum is an integer below 2^24 (exact in fp32) and, at these K, below 256
    in magnitude almost surely, so exact in bf16 too. A dropped or doubled product, or half a pair lost at
    an odd K or an odd K block, changes an output by at least 1, which the float64 bound would hide at
    large K."""
    (m, n, k), tiles = mnk_tiles
    rng = np.random.default_rng(7)
    a, b = _ternary(rng, (m, k)), _ternary(rng, (k, n))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(exact).max() <= 256
    for threads in (1, 3):
        out = kernels.gemm(a, b, tiles=Tiles.of(tiles, isa=isa, threads=threads))
        np.testing.assert_array_equal(out.astype(np.float64), exact)
    # The AVX512-BF16 kernel reads A in place (its own rows are the pairs layout) for K blocks of up to 1024,
    # and with K in one block rounds bf16 C itself; A's rows then start anywhere: here an odd column of a
    # wider array, whose other columns are NaN, so that a kernel reading the pair past an odd K's last element
    # (times B's zero pad) writes NaN.
    plan = kernels.prepare_gemm(a, b, tiles=Tiles.of(tiles, isa=isa))
    kc = plan.tiles()["tile_k"]
    info = kernels.default_tiles(isa)["bf16"]
    unit = info["isa"]
    # (the AMX kernels read A in place at any K block up to N = 64, pack it into their tile layout past that,
    # and round bf16 C either way; on the fp32 tile, bf16 A is widened as it is packed)
    widened = info["fp32_units"] and m >= info["fp32_units_min_rows"]
    assert ("bf16 widened onto the fp32 tile" in plan.tiles()["path"]) == widened, plan.tiles()["path"]
    tiles_unit = unit in ("amx", "amx-emu")
    in_place = not widened and ((tiles_unit and n <= 64) or (unit == "avx512bf16" and min(kc, k) <= 1024))
    assert ("A read in place" in plan.tiles()["path"]) == in_place, plan.tiles()["path"]
    rounds = (in_place or tiles_unit) and kc >= k
    assert ("C rounded in the kernel" in plan.tiles()["path"]) == rounds, plan.tiles()["path"]
    wider = np.full((m, k + 4), np.nan, BF16)
    wider[:, 3 : 3 + k] = a
    out = kernels.gemm(wider[:, 3 : 3 + k], b, tiles=Tiles.of(tiles, isa=isa, threads=2))
    np.testing.assert_array_equal(out.astype(np.float64), exact)


# n, c, h, w, k, r, s and geometry: 1x1 (x read as the GEMM's B on a plane of 2048 pixels or more, else
# as patch rows), padding, strides, dilation, groups (depthwise too), patches in W's order (no more pixels
# than filters), odd patch widths (rows padded to a pair), primes and non-multiples of the tiles in every GEMM
# dimension.
CONV_SHAPES = [
    dict(n=1, c=1, h=1, w=1, k=1, r=1, s=1),
    dict(n=2, c=7, h=5, w=9, k=13, r=1, s=1),
    dict(n=1, c=5, h=47, w=45, k=19, r=1, s=1),
    dict(n=1, c=5, h=3, w=4, k=40, r=3, s=3, pad_h=1, pad_w=1),
    dict(n=2, c=6, h=5, w=5, k=48, r=3, s=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1, groups=2),
    dict(n=2, c=29, h=9, w=11, k=20, r=3, s=3, pad_h=1, pad_w=1),
    dict(n=1, c=60, h=5, w=5, k=70, r=3, s=3, pad_h=1, pad_w=1, groups=2),
    dict(n=2, c=5, h=11, w=13, k=17, r=3, s=3, pad_h=1, pad_w=1),
    dict(n=1, c=6, h=17, w=15, k=31, r=3, s=5, stride_h=2, stride_w=3, pad_h=2, pad_w=1),
    dict(n=1, c=4, h=19, w=19, k=33, r=3, s=3, dil_h=2, dil_w=3, pad_h=3, pad_w=2),
    dict(n=2, c=8, h=9, w=10, k=12, r=3, s=3, pad_h=1, pad_w=1, groups=4),
    dict(n=1, c=6, h=8, w=8, k=6, r=3, s=3, pad_h=1, pad_w=1, groups=6),
    # depthwise (a direct fp32 loop for bf16 too): a multiplier of 2 at stride 2, a dilated 5x3, a 1-row plane
    dict(n=2, c=5, h=11, w=13, k=10, r=3, s=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1, groups=5),
    dict(n=1, c=7, h=9, w=7, k=7, r=5, s=3, dil_h=2, pad_h=2, pad_w=1, groups=7),
    dict(n=3, c=3, h=1, w=17, k=3, r=1, s=3, pad_w=1, groups=3),
    dict(n=1, c=64, h=14, w=14, k=64, r=3, s=3, pad_h=1, pad_w=1),
    dict(n=1, c=3, h=5, w=6, k=2, r=5, s=5),
    dict(n=2, c=6, h=9, w=8, k=4, r=3, s=3, pad_h=2, pad_h_end=0, pad_w=0, pad_w_end=1),  # per side
    dict(n=1, c=8, h=9, w=9, k=8, r=3, s=3, stride_h=2, stride_w=2, pad_h=0, pad_h_end=1, pad_w=1, groups=8),
]


def _conv_args(shape: conv.ConvShape) -> dict[str, Any]:
    return dict(
        stride=(shape.stride_h, shape.stride_w),
        padding=shape.padding,
        dilation=(shape.dil_h, shape.dil_w),
        groups=shape.groups,
    )


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("fields", CONV_SHAPES, ids=lambda f: "-".join(f"{k}{v}" for k, v in f.items()))
def test_bf16_conv2d_is_within_the_float64_bound(isa: str, fields: dict[str, int]) -> None:
    shape = conv.shape_from_case(fields)
    inputs = conv.make_inputs(shape, "bf16", 9)
    ref = conv.reference(shape, inputs)
    for tiles in ({}, {"tile_m": 5, "tile_n": 40, "tile_k": 7}):
        for threads in (1, 2):
            plan = kernels.prepare_conv2d(
                inputs["x"], inputs["w"], tiles=Tiles.of(tiles, threads=threads, isa=isa), **_conv_args(shape)
            )
            out = plan.output()
            assert out.dtype == np.dtype(BF16)
            result = conv.check(shape, out, inputs, ref, "bf16", "fp32")
            assert result["ok"], (isa, fields, tiles, threads, result)
            assert "bf16" in plan.tiles()["path"]


@pytest.mark.parametrize("k", [65, 8])
def test_bf16_conv2d_writes_patches_in_chunks_across_images(k: int) -> None:
    """7500 patch rows of 576 halves: two chunks (8 MiB each), the first ending inside the third image, so
    Y^T's rows are transposed into y across image boundaries."""
    shape = conv.shape_from_case(dict(n=3, c=64, h=50, w=50, k=k, r=3, s=3, pad_h=1, pad_w=1))
    inputs = conv.make_inputs(shape, "bf16", 2)
    out = kernels.conv2d(inputs["x"], inputs["w"], padding=1, tiles=Tiles(threads=2))
    result = conv.check(shape, out, inputs, conv.reference(shape, inputs), "bf16", "fp32")
    assert result["ok"], result


@pytest.mark.parametrize("isa", ISAS)
def test_bf16_conv2d_is_exact_on_small_integers(isa: str) -> None:
    """{-1, 0, 1} inputs (sums below 256, exact in bf16): a tap read from the wrong place, padding that is not
    zero or a product dropped by an odd K block shows as an error of at least 1."""
    rng = np.random.default_rng(4)
    for fields in CONV_SHAPES:
        shape = conv.shape_from_case(fields)
        x = _ternary(rng, (shape.n * shape.c, shape.h * shape.w)).reshape(shape.n, shape.c, shape.h, shape.w)
        w = _ternary(rng, (shape.k, shape.c // shape.groups * shape.r * shape.s)).reshape(
            shape.k, shape.c // shape.groups, shape.r, shape.s
        )
        exact = conv.conv64(shape, x.astype(np.float64), w.astype(np.float64))
        assert np.abs(exact).max() <= 256
        out = kernels.conv2d(x, w, tiles=Tiles(threads=2, isa=isa, k=7), **_conv_args(shape))
        np.testing.assert_array_equal(out.astype(np.float64), exact)


# (seq_len, batch, input_size, hidden): 1, primes, non-multiples of 14, 32, 4, 16 and 2; more than one K
# block and N block of the recurrent product with the odd tiles below.
RECURRENT_SHAPES = [
    (1, 1, 1, 1),
    (3, 2, 5, 7),
    (5, 3, 17, 23),
    (4, 13, 33, 31),
    (2, 64, 64, 64),
    (3, 20, 100, 129),
]
RECURRENT_TILES = [{}, {"tile_m": 5, "tile_n": 40, "tile_k": 7}]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("op", [lstm.OP, gru.OP, rnn.OP], ids=lambda m: m.name)
def test_bf16_recurrent_layers_are_within_the_float64_bound(isa: str, op: Any) -> None:
    """h and c come back in bf16; the gates and the state stay fp32 in our kernels ("fp32" cells), W_hh is
    packed once in pairs for all steps (an odd tile_k pads every K block to a pair)."""
    for t, b, i, h in RECURRENT_SHAPES:
        shape = op.shape_from_case({"seq_len": t, "batch": b, "input_size": i, "hidden": h})
        inputs = op.make_inputs(shape, "bf16", 5)
        ref = op.reference(shape, inputs)
        for tiles in RECURRENT_TILES:
            for threads in (1, 2):
                out = op.plan(shape, inputs, Tiles.of(tiles, threads, isa)).output()
                result = op.check(shape, out, inputs, ref, "bf16", "fp32")
                assert result["ok"], (isa, shape, tiles, threads, result)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("tiles", RECURRENT_TILES, ids=["model", "odd-tiles"])
def test_the_bf16_recurrent_product_is_exact_on_small_integers(isa: str, tiles: dict) -> None:
    """A ReLU RNN on sparse {-1, 0, 1} inputs and weights: every pre-activation and h is an integer of
    magnitude at most 256, exact in fp32 and in bf16, so a product dropped or doubled by the W_hh packed
    once (odd K blocks, several N blocks) changes an output by at least 1."""
    rng = np.random.default_rng(3)
    t, b, i, h = 3, 5, 9, 70

    def sparse(*size: int) -> np.ndarray:
        return (rng.integers(-1, 2, size=size) * (rng.random(size) < 0.3)).astype(np.float64)

    x, w_ih, w_hh, h0 = sparse(t, b, i), sparse(h, i), sparse(h, h), sparse(b, h)
    zeros = np.zeros(h)
    states, hs = [], h0
    for step in range(t):
        hs = np.maximum(x[step] @ w_ih.T + hs @ w_hh.T, 0.0)
        states.append(hs)
    exact = np.stack(states)
    assert np.abs(exact).max() <= 256
    args = [a.astype(BF16) for a in (x, w_ih, w_hh, zeros, zeros, h0)]
    for threads in (1, 2):
        plan = kernels.prepare_rnn(
            *args, nonlinearity="relu", tiles=Tiles.of(tiles, threads=threads, isa=isa)
        )
        y, h_n = plan.output()
        np.testing.assert_array_equal(y.astype(np.float64), exact)
        np.testing.assert_array_equal(h_n.astype(np.float64), exact[-1])


def test_an_output_in_another_format_than_the_case_dtype_is_a_wrong_answer() -> None:
    """A layer that quietly computes a bf16 case in fp32 returns float32: no bf16 bound may pass it."""
    ref = np.ones((2, 2))
    result = compare({"y": ref.astype(np.float32)}, {"y": ref}, {"y": np.ones((2, 2))}, "bf16")
    assert not result["ok"] and "float32, not bfloat16" in result["reason"]
    assert compare({"y": ref.astype(BF16)}, {"y": ref}, {"y": np.ones((2, 2))}, "bf16")["ok"]


@pytest.mark.parametrize("isa", ISAS)
def test_bf16_output_rounds_to_nearest_even_and_keeps_nans_and_infinities(isa: str) -> None:
    """C = A B with K = 2 whose exact fp32 sums fall on ties, just off them, past the largest finite bf16 and
    on infinities and NaNs, 40 columns wide (16-lane conversion and the scalar tail): every output is the
    fp32 sum rounded to nearest even (ml_dtypes' float32 -> bfloat16), NaN where the sum is NaN."""
    rng = np.random.default_rng(1)
    base = rng.choice([1.0, -1.0, 2.0**-100, 3.0e38, 1.5], size=40)  # products stay normal (see below)
    a = np.array([[1.0, 2.0**-8], [1.0, 3 * 2.0**-8], [1.0, 1.0]])
    b = np.stack([base, base])
    b[1, 5], b[1, 23], b[0, 31], b[0, 39] = np.inf, -np.inf, np.nan, 3.3e38
    a16, b16 = a.astype(BF16), b.astype(BF16)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, and sums past fp32's range
        exact = (a16.astype(np.float64) @ b16.astype(np.float64)).astype(np.float32)
        want = exact.astype(BF16)
    out = kernels.gemm(a16, b16, tiles=Tiles(isa=isa, threads=1))
    nan = np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(out.astype(np.float32)), nan)
    np.testing.assert_array_equal(out.view(np.uint16)[~nan], want.view(np.uint16)[~nan])
    assert np.all(out.view(np.uint16)[nan] & 0x40)  # quiet


@pytest.mark.parametrize("isa", ISAS)
def test_subnormal_bf16_products_flush_to_zero_only_on_the_dot_product_unit(isa: str) -> None:
    """vdpbf16ps treats subnormal inputs and results as zero whatever MXCSR says (Intel's SDM), so the
    AVX512-BF16 kernel does; the portable pairs kernel keeps them. 2^-130 is subnormal in bf16 as in fp32."""
    a = np.full((1, 2), 2.0**-130).astype(BF16)
    b = np.ones((2, 1)).astype(BF16)
    out = float(kernels.gemm(a, b, tiles=Tiles(isa=isa, threads=1))[0, 0])
    dot_unit = kernels.default_tiles(isa)["bf16"]["dot_product_unit"]
    assert out == (0.0 if dot_unit else 2.0**-129)


@pytest.mark.parametrize("isa", ISAS)
def test_opbench_isa_forces_the_bf16_kernels(isa: str) -> None:
    script = """
import numpy as np
from opbench import kernels
from opbench.ops import conv, gemm, lstm
assert kernels.cpu_features()["selected_isa"] == ISA
s = gemm.GemmShape(37, 75, 99)
i = gemm.make_inputs(s, "bf16", 3)
plan = kernels.prepare_gemm(i["a"], i["b"], tiles=kernels.Tiles(threads=2))
assert plan.tiles()["isa"] == ISA
print(plan.tiles()["kernel"])
assert gemm.check(s, plan.output(), i, gemm.reference(s, i), "bf16", "fp32")["ok"]
c = conv.shape_from_case(dict(n=1, c=5, h=9, w=11, k=19, r=3, s=3, pad_h=1, pad_w=1))
i = conv.make_inputs(c, "bf16", 3)
plan = kernels.prepare_conv2d(i["x"], i["w"], padding=1, tiles=kernels.Tiles(threads=2))
assert plan.tiles()["isa"] == ISA and plan.tiles()["kernel"] in KERNELS
assert conv.check(c, plan.output(), i, conv.reference(c, i), "bf16", "fp32")["ok"]
# (the tiles name the kernel of x's projection, 18 rows)
r = lstm.shape_from_case(dict(seq_len=3, batch=6, input_size=7, hidden=13))
i = lstm.OP.make_inputs(r, "bf16", 3)
plan = lstm.plan(r, i, kernels.Tiles(threads=2))
assert plan.tiles()["isa"] == ISA and plan.tiles()["kernel"] in KERNELS
assert lstm.OP.check(r, plan.output(), i, lstm.reference(r, i), "bf16", "fp32")["ok"]
""".replace("ISA", repr(isa))
    script = "KERNELS = set()\n" + script.replace(
        'print(plan.tiles()["kernel"])',
        'print(plan.tiles()["kernel"]); KERNELS.add(plan.tiles()["kernel"])',
        1,
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env={**os.environ, "OPBENCH_ISA": isa}
    )
    assert proc.returncode == 0, proc.stderr
    # (these products have 37-99 rows: where the row widens bf16 onto the fp32 tile, they run that)
    widened = kernels.default_tiles(isa)["bf16"]["fp32_units"]
    expect_dot = isa == "avx512" and HAS_BF16_DOT and not widened
    assert ("vdpbf16ps" in proc.stdout) == expect_dot, proc.stdout
    assert ("bf16 widened to fp32 in packing" in proc.stdout) == widened, proc.stdout


def test_the_kernel_info_says_which_bf16_kernel_runs_and_why() -> None:
    for isa in ISAS:
        info = kernels.default_tiles(isa)["bf16"]
        # the AVX512-BF16 dot products, or the AMX tiles (emulated on amx-emu)
        assert info["dot_product_unit"] == ((isa == "avx512" and HAS_BF16_DOT) or isa in ("amx", "amx-emu"))
        assert info["dot_product_unit"] or info["reason"]
        if not info["dot_product_unit"]:
            assert "portable" in info["description"]


@pytest.mark.skipif(not HAS_BF16_DOT, reason="this CPU (or build) has no AVX512-BF16 dot product")
def test_the_bf16_dot_product_peak_is_measured_on_its_own_unit() -> None:
    gflops, kernel = kernels.fma_peak("bf16", 1, 0.02, 2)
    fp32, _ = kernels.fma_peak("fp32", 1, 0.02, 2)
    # the best bf16 unit: AMX's tiles where the CPU has them, else AVX512-BF16's dot products
    unit = "tdpbf16ps" if "amx" in kernels.available_isas() else "vdpbf16ps"
    assert unit in kernel and gflops > 0 and fp32 > 0
    # how much faster it is (about 2x the fp32 FMA loop on Zen 4 and 5) is measured by benchmarks/bf16.py;
    # where it is slower than the fp32 FMAs (the micro-architecture row's bf16_on_fp32_units) our bf16 runs
    # on those, and their peak is bf16's
    widened = kernels.default_tiles()["bf16"]["fp32_units"]
    assert kernels.compute_unit("bf16") == ("fp32" if widened else "bf16")


def test_bf16_inputs_are_refused_where_our_kernels_have_none() -> None:
    x = np.ones((1, 2, 5, 5), dtype=BF16)
    with pytest.raises(ValueError, match="unsupported dtype bfloat16"):
        kernels.conv2d_backward(x, np.ones((3, 2, 3, 3), dtype=BF16), np.ones((1, 3, 3, 3), dtype=BF16))
    with pytest.raises(ValueError, match="w must have the dtype of x"):
        kernels.conv2d(x, np.ones((3, 2, 3, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="same dtype"):
        kernels.gemm(np.ones((2, 2), dtype=BF16), np.ones((2, 2), dtype=np.float32))
    with pytest.raises(ValueError, match="accumulate='fp16' needs float16 inputs, got bfloat16"):
        kernels.gemm(np.ones((2, 2), dtype=BF16), np.ones((2, 2), dtype=BF16), accumulate="fp16")


def test_the_tuner_names_the_bf16_register_tile_and_its_element_size() -> None:
    from opbench.tune.config import TuneConfig, _names

    for isa in ISAS:
        names = _names(TuneConfig(gemm.GemmShape(64, 96, 128), "bf16", 1, "s", "sqlite://", isa=isa))
        tiles = kernels.default_tiles(isa)
        info = tiles["bf16"]
        # (bf16 widened onto the fp32 tile packs fp32 panels)
        want = (tiles["mr"], tiles["nr"], 4) if info["fp32_units"] else (info["mr"], info["nr"], 2)
        assert (names["mr"], names["nr"], names["elem_bytes"]) == want
        fp32 = _names(TuneConfig(gemm.GemmShape(64, 96, 128), "fp32", 1, "s", "sqlite://", isa=isa))
        assert fp32["elem_bytes"] == 4
    # bf16 conv: the GEMM its way runs (here pixels of both images as rows, the filters as columns; on a
    # kernel set without a bf16 unit the fp32 columns way: the filters as rows, a padded row's 16 pixels
    # times 14 rows as columns)
    shape = conv.shape_from_case(dict(n=2, c=64, h=14, w=14, k=128, r=3, s=3, pad_h=1, pad_w=1))
    names = _names(TuneConfig(shape, "bf16", 1, "s", "sqlite://", op=conv.OP))
    inputs = conv.make_inputs(shape, "bf16", 1)
    path = kernels.prepare_conv2d(inputs["x"], inputs["w"], padding=1).tiles()["path"]
    want = (128, 14 * 16, 64 * 9) if "bf16 widened into" in path else (2 * 14 * 14, 128, 64 * 9)
    assert (names["m"], names["n"], names["k"]) == want, path


def test_dtype_names() -> None:
    assert parse_dtypes("bf16,bfloat16,fp32") == ["bf16", "fp32"]


def test_a_bf16_sweep_verifies_and_names_the_unit_it_divides_by(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "opbench",
            "sweep",
            "gemm",
            "--dtype",
            "bf16",
            "--m",
            "33",
            "--n",
            "47",
            "--k",
            "65",
            "--backend",
            "cpp,numpy,mindspore",
            "--threads",
            "1",
            "--quiet",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(next(tmp_path.glob("*.json")).read_text())
    by = {r["backend"]: r for r in doc["records"]}
    assert by["cpp"]["status"] == "ok" and by["cpp"]["verify"]["ok"] and by["cpp"]["dtype"] == "bf16"
    assert by["numpy"]["status"] == "ok" and by["numpy"]["verify"]["ok"]
    assert by["mindspore"]["status"] == "skipped" and "bfloat16" in by["mindspore"]["reason"]
    unit = (
        "bf16 tile dot-product peak (AMX-BF16)"
        if "amx" in kernels.available_isas()
        else "no AVX512-BF16 on this CPU"
        if not HAS_BF16_DOT
        else "fp32 FMAs outrun its AVX512-BF16 dot products"
        if kernels.default_tiles()["bf16"]["fp32_units"]
        else "bf16 dot-product peak"
    )
    assert unit in json.dumps(by["cpp"]["peak"])

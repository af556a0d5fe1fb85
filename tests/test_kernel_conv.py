"""opbench.kernels.conv2d against the float64 reference (itself checked against torch in float64): odd
shapes, stride, padding, dilation, groups, both dtypes, every kernel set, several tilings and threads."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import import_or_skip, kernel_set_isas

from opbench import kernels, layout
from opbench.ops import conv
from opbench.tiles import Tiles

ISAS = kernel_set_isas()

# (n, c, h, w, k, r, s, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups)
CASES = [
    (1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1),
    (2, 3, 7, 9, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1),
    (1, 4, 10, 11, 6, 3, 2, 2, 3, 1, 0, 2, 1, 2),
    (3, 8, 5, 5, 8, 1, 1, 1, 1, 0, 0, 1, 1, 1),  # 1x1: the image is the GEMM operand
    (2, 6, 13, 17, 7, 1, 1, 2, 2, 0, 0, 1, 1, 1),  # 1x1 strided: im2col
    (1, 16, 14, 14, 32, 5, 5, 1, 1, 2, 2, 1, 1, 4),
    (2, 5, 31, 29, 3, 7, 7, 2, 2, 3, 3, 1, 1, 1),
    (1, 3, 6, 6, 4, 3, 3, 1, 1, 4, 4, 3, 3, 1),  # padding wider than the image
    (1, 12, 9, 9, 12, 3, 3, 1, 1, 1, 1, 1, 1, 12),  # depthwise
    (1, 4, 9, 40, 6, 3, 3, 1, 2, 1, 1, 1, 1, 1),  # stride_w 2, 20 output columns: vector gather
    (1, 3, 11, 50, 5, 2, 3, 2, 3, 1, 2, 1, 1, 1),  # stride_w 3: the generic strided gather
    (2, 4, 12, 37, 10, 3, 3, 1, 1, 2, 2, 2, 2, 1),  # stride 1 with dilation, odd width: rows read in place
    (1, 8, 4, 4, 70, 3, 3, 1, 1, 1, 1, 1, 1, 1),  # 1 small image, 70 channels: rows split
    # padding per side (top, left here; bottom, right last): benchdnn's implied padding
    (2, 3, 7, 9, 5, 3, 3, 1, 1, 2, 0, 1, 1, 1, 0, 2),
    (1, 4, 10, 11, 6, 3, 2, 2, 3, 0, 1, 2, 1, 2, 3, 0),
    (1, 12, 9, 9, 12, 3, 3, 1, 1, 0, 1, 1, 1, 12, 1, 0),  # depthwise, the plane kernel's masks
    (2, 12, 17, 16, 12, 3, 3, 2, 2, 1, 0, 1, 1, 12, 0, 1),  # depthwise strided
    (1, 16, 1, 48, 24, 1, 3, 1, 4, 0, 2, 1, 1, 1, 0, 0),  # 1-D (height 1), padded on the left only
    (2, 64, 7, 7, 96, 3, 3, 1, 1, 0, 2, 1, 1, 1, 1, 0),  # a small plane: output pixels as rows
    # 1x1 on planes of >= 256 pixels: the batched GEMM, x read in place (odd widths, groups, one image)
    (3, 8, 16, 17, 11, 1, 1, 1, 1, 0, 0, 1, 1, 1),
    (2, 12, 19, 23, 9, 1, 1, 1, 1, 0, 0, 1, 1, 3),
    (1, 5, 16, 16, 70, 1, 1, 1, 1, 0, 0, 1, 1, 1),
]


def shape_of(t: tuple[int, ...]) -> conv.ConvShape:
    return conv.shape_from_case(dict(zip(conv.SHAPE_FIELDS[: len(t)], t, strict=True)))


def run(shape: conv.ConvShape, inp: dict[str, np.ndarray], **kw: object) -> np.ndarray:
    return kernels.conv2d(
        inp["x"],
        inp["w"],
        stride=(shape.stride_h, shape.stride_w),
        padding=shape.padding,
        dilation=(shape.dil_h, shape.dil_w),
        groups=shape.groups,
        **kw,
    )  # type: ignore[arg-type]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("case", CASES, ids=lambda t: shape_of(t).label().replace(" ", "_"))
def test_matches_float64_reference(isa: str, dtype: str, case: tuple[int, ...]) -> None:
    shape = shape_of(case)
    inp = conv.make_inputs(shape, dtype, seed=3)
    y = run(shape, inp, tiles=Tiles(isa=isa, threads=2))
    assert y.shape == (shape.n, shape.k, shape.out_h, shape.out_w) and y.dtype == inp["x"].dtype
    result = conv.check(shape, y, inp, conv.reference(shape, inp), dtype, "fp32")
    assert result["ok"], result


# Small planes with many channels, where conv2d takes output pixels as the GEMM's rows (all images at once):
# runs of pixels across output rows and images, a partial last register tile of pixels and of channels,
# groups, strides, dilation, asymmetric padding and 1x1. Which of them take that path depends on the kernel
# set's register tile; every kernel set takes it for some.
PIXEL_CASES = [
    (2, 64, 7, 7, 96, 3, 3, 1, 1, 1, 1, 1, 1, 1),
    (2, 64, 5, 5, 128, 3, 3, 1, 1, 1, 1, 1, 1, 2),
    (3, 40, 9, 11, 70, 3, 3, 2, 2, 1, 1, 2, 2, 1),
    (1, 33, 3, 4, 47, 3, 3, 1, 1, 1, 1, 1, 1, 1),
    (2, 48, 6, 5, 64, 2, 3, 1, 2, 0, 1, 1, 1, 1),
    (5, 24, 4, 4, 200, 1, 1, 1, 1, 0, 0, 1, 1, 1),
    (2, 96, 7, 9, 160, 3, 3, 2, 1, 1, 2, 1, 2, 1),
    # Rows in groups of images (2 at 7x7 for MR 14, 4 for MR 4) with a short last group, and filter rows
    # skipped where a micro-panel's taps read only padding; the last two have outputs that read nothing else.
    (3, 64, 7, 7, 96, 3, 3, 1, 1, 1, 1, 1, 1, 1),
    (5, 64, 7, 7, 96, 3, 3, 1, 1, 1, 1, 1, 1, 1),
    (2, 64, 2, 3, 96, 3, 3, 1, 1, 3, 2, 1, 1, 1),
    (3, 48, 3, 3, 64, 3, 3, 1, 1, 2, 2, 2, 1, 1),
    # Output rows of whole micro-panels at stride 1 (14 and 28 for MR 14; 12 and 24 for MR 6 and 4): A read
    # in the padded input by the micro-kernel, not gathered.
    (2, 16, 14, 14, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1),
    (2, 24, 12, 12, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1),
    (3, 32, 4, 28, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1),
    (2, 8, 6, 12, 70, 3, 3, 1, 1, 1, 1, 1, 1, 1),
    (1, 40, 5, 24, 33, 3, 3, 1, 1, 1, 1, 1, 1, 1),
    # Strided, A read in the input's stride phases: the 7x7 stem's geometry, 3x3 and 1x1 at stride 2, and
    # strides 2 x 3 with a dilated filter row and groups.
    (2, 3, 20, 56, 16, 7, 7, 2, 2, 3, 3, 1, 1, 1),
    (1, 8, 9, 24, 20, 3, 3, 2, 2, 1, 1, 1, 1, 1),
    (2, 6, 11, 48, 24, 1, 1, 2, 2, 0, 0, 1, 1, 1),
    (1, 4, 13, 72, 12, 3, 3, 2, 3, 1, 1, 2, 1, 2),
    # Output rows that are not whole micro-panels (113 and 101 pixels, primes), A still read in place: the
    # micro-panels that straddle two output rows (or images) are multiplied a call per row. The stem's
    # geometry in the stride phases on every tile; at stride 1 with a filter row dilated 16 (the columns
    # would multiply 32 padding columns per row) in the padded input, on the 4- and 6-row tiles.
    (1, 3, 9, 226, 32, 7, 7, 2, 2, 3, 3, 1, 1, 1),
    (2, 3, 7, 225, 40, 7, 7, 2, 2, 3, 3, 1, 1, 1),
    (1, 4, 5, 101, 16, 1, 3, 1, 1, 0, 16, 1, 16, 1),
]
PIXELS_PATH = "implicit GEMM, output pixels as rows"


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_pixels_as_rows_matches_float64_reference(isa: str, dtype: str) -> None:
    taken = in_place = straddled = 0
    for case in PIXEL_CASES:
        shape = shape_of(case)
        inp = conv.make_inputs(shape, dtype, seed=11)
        for threads, tiles in ((1, {}), (3, {}), (2, {"tile_m": 1, "tile_n": 1, "tile_k": 5})):
            plan = conv.plan(shape, inp, Tiles.of(tiles, threads, isa))
            t = plan.tiles()
            if t["path"].startswith(PIXELS_PATH):
                taken += threads == 1
                in_place += "A read in place" in t["path"]
                straddled += "A read in place" in t["path"] and shape.out_w % t["mr"] != 0
                pixels = shape.n * shape.out_h * shape.out_w
                assert (t["gemm_m"], t["gemm_n"]) == (pixels, shape.k // shape.groups)
                if tiles:  # one register tile of pixels by one of channels per unit, K blocks of 5
                    assert (t["tile_m"], t["tile_n"], t["tile_k"]) == (t["mr"], t["nr"], 5)
            result = conv.check(shape, plan.output(), inp, conv.reference(shape, inp), dtype, "fp32")
            assert result["ok"], (case, threads, tiles, t["path"], result)
    assert taken >= 3 and in_place >= 3 and straddled >= 1


@pytest.mark.parametrize("isa", ISAS)
def test_an_output_past_half_the_last_level_cache_matches_float64_reference(isa: str) -> None:
    # conv2d_pixels.cpp's stream_output: a Y of more than half the last-level cache is written with
    # non-temporal stores where the kernel set has them (AVX2), 16 pixels of a channel (a cache line) at a
    # time. Y starts one float into a line, so each output row's first 15 pixels are stored through the cache
    # and the rest streamed; 21 channels (a block of 16, then 5 stored through the cache) and a 3x3 stride-2
    # filter on one input channel, pixels as rows.
    k, out_hw = 21, 112
    n = kernels.l3_bytes() // 2 // (k * out_hw * out_hw * 4) + 1
    shape = shape_of((n, 1, 2 * out_hw, 2 * out_hw, k, 3, 3, 2, 2, 1, 1, 1, 1, 1))
    inp = conv.make_inputs(shape, "fp32", seed=5)
    shifted = layout.place(np.zeros((n, k, out_hw, out_hw), np.float32), 4)
    tiles = Tiles(threads=2, isa=isa, conv_path="rows_in_place")  # the model's way depends on the core
    plan = kernels.prepare_conv2d(inp["x"], inp["w"], stride=(2, 2), padding=(1, 1), out=shifted, tiles=tiles)
    assert plan.tiles()["path"].startswith(PIXELS_PATH), plan.tiles()["path"]
    plan.run(1)
    result = conv.check(shape, shifted, inp, conv.reference(shape, inp), "fp32", "fp32")
    assert result["ok"], result


def path_of_3x3(n: int, c: int, hw: int, k: int, isa: str) -> str:
    """The path a 3x3 padding-1 conv of n images, c -> k channels, hw x hw, takes on kernel set `isa`."""
    x, w = np.zeros((n, c, hw, hw), np.float32), np.zeros((k, c, 3, 3), np.float32)
    return str(kernels.prepare_conv2d(x, w, padding=(1, 1), tiles=Tiles(threads=2, isa=isa)).tiles()["path"])


@pytest.mark.skipif("avx512" not in ISAS, reason="the choice is measured for the AVX-512 14x32 tile")
def test_pixels_as_rows_is_taken_where_it_wastes_fewer_fmas() -> None:
    # 7x7 at 512 channels: 49 pixels fill 49 of 64 columns per image, 4 images 196 rows = 14 tiles exactly.
    # 56x56 at 64 channels: the columns path wastes 9% (64 channels in 70 rows) and pixels read A in place.
    def path(n: int, c: int, hw: int, k: int) -> str:
        return path_of_3x3(n, c, hw, k, "avx512")

    assert path(4, 512, 7, 512).startswith(PIXELS_PATH)
    assert path(4, 256, 14, 256).startswith(PIXELS_PATH)
    assert path(4, 64, 56, 64) == PIXELS_PATH + " (A read in place, W^T packed, padding taps skipped)"
    assert "A gathered" in path(4, 512, 7, 512)  # two images' rows per micro-panel


@pytest.mark.skipif("avx2" not in ISAS, reason="the choice is measured for the AVX2 6x16 tile")
def test_the_avx2_tile_takes_pixels_as_rows_only_where_it_was_faster() -> None:
    # conv2d_pixels.cpp's gather cost for 8-lane tiles: on one Zen 4 core the columns ran 7x7 at 512 channels
    # in 0.69-0.90 of the rows' time at batch 1-4 and 14x14 at 256 channels in 0.80-0.92; batch 8 at 7x7
    # (micro-panels of 6 pixels in one output row of 6 images) was faster as rows, and as fast again as one
    # GEMM on the explicit im2col matrix (conv2d_im2col.cpp: 69.9 against 69.3 GFLOPS on one core, 137
    # against 132 on two), which takes 7x7 at batch 4 and 8.
    for n, c, hw, k in ((1, 512, 7, 512), (4, 512, 7, 512), (4, 256, 14, 256), (4, 192, 14, 384)):
        assert not path_of_3x3(n, c, hw, k, "avx2").startswith(PIXELS_PATH), (n, c, hw, k)
    assert path_of_3x3(8, 512, 7, 512, "avx2").startswith("im2col of all images")


@pytest.mark.skipif("avx2" not in ISAS, reason="the choices are measured for the AVX2 6x16 tile")
def test_the_avx2_tile_reads_the_stems_pixels_in_place_and_strided_3x3s_as_columns() -> None:
    # Measured on 2 Zen 4 cores (conv2d_pixels.cpp): the 7x7 stride-2 stem as rows with A read in place
    # (112 pixels a row, 2 of 56 micro-panels straddling) against the gathered rows and the columns 117 / 82
    # / 108 GFLOPS; 3x3 stride 2 as columns against the rows 106 / 76. The Zen 3 row's cheaper gather
    # (microarch.cpp [Z4]) takes the stem as columns there: tuning/choices/conv_paths.json holds both rows
    # to their measurements on any AVX2 CPU (test_conv_paths.py).
    def plan(n: int, c: int, hw: int, k: int, f: int, threads: int) -> dict[str, Any]:
        x, w = np.zeros((n, c, hw, hw), np.float32), np.zeros((k, c, f, f), np.float32)
        tiles = Tiles(threads=threads, isa="avx2")
        pad = (f // 2, f // 2)
        return dict(kernels.prepare_conv2d(x, w, stride=(2, 2), padding=pad, tiles=tiles).tiles())

    zen3 = kernels.default_tiles()["microarch"] == "Zen 3"
    for n, threads in ((1, 1), (8, 2)):
        stem = plan(n, 3, 224, 64, 7, threads)
        if zen3:
            assert stem["conv_path"] == "columns_gathered", stem
            continue
        assert stem["path"] == PIXELS_PATH + " (A read in place, W^T packed, padding taps skipped)", stem
        # blocks of many micro-panels: units of one (balancing the threads to a unit) ran 0.81x as fast
        assert stem["tile_m"] >= 16 * stem["mr"], stem
    for c, hw in ((128, 56), (256, 28)):
        assert not plan(8, c, hw, c, 3, 2)["path"].startswith(PIXELS_PATH), (c, hw)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("hw", [(1, 1), (3, 2), (9, 15), (17, 16), (12, 33), (20, 47), (5, 65)], ids=str)
def test_depthwise_3x3_matches_float64_reference(isa: str, stride: int, hw: tuple[int, int]) -> None:
    # The 3x3 depthwise conv that AVX-512 computes from the planes in place (masked loads make the padding,
    # 8/4/2/1-row blocks, 16-column vectors): widths around the vector, heights short of and past a block,
    # padding from none to past the filter, a channel multiplier, 1 and 3 threads, and an input that starts
    # one float past where numpy put it. fp16 planes are widened whole for the same kernel there; the other
    # kernel sets copy the planes padded.
    h, w = hw
    for pad_h, pad_w in [(0, 0), (1, 1), (2, 1), (0, 3)]:
        if h + 2 * pad_h < 3 or w + 2 * pad_w < 3:
            continue
        for mult, threads, dtype in [(1, 1, "fp32"), (2, 3, "fp32"), (1, 3, "fp16")]:
            shape = shape_of((2, 3, h, w, 3 * mult, 3, 3, stride, stride, pad_h, pad_w, 1, 1, 3))
            inp = conv.make_inputs(shape, dtype, seed=7)
            shifted = np.empty(inp["x"].size + 1, inp["x"].dtype)[1:].reshape(inp["x"].shape)
            shifted[...] = inp["x"]
            inp["x"] = shifted
            plan = conv.plan(shape, inp, Tiles(threads=threads, isa=isa))
            plane_kernel = isa.startswith("avx512")
            assert plan.tiles()["path"].startswith(
                "direct depthwise, padded plane copies"
                if not plane_kernel
                else "direct depthwise, planes read in place"
                if dtype == "fp32"
                else "direct depthwise, fp16 planes widened whole"
            )
            result = conv.check(shape, plan.output(), inp, conv.reference(shape, inp), dtype, "fp32")
            assert result["ok"], (pad_h, pad_w, mult, threads, dtype, result)


@pytest.mark.parametrize("tiles", [(1, 1, 1), (5, 7, 3), (29, 45, 17)])
@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize(
    "case",
    [
        (2, 6, 11, 13, 9, 3, 3, 1, 2, 1, 1, 1, 1, 1),
        (2, 6, 11, 13, 31, 3, 3, 1, 1, 1, 1, 1, 1, 1),
        (3, 6, 16, 17, 31, 1, 1, 1, 1, 0, 0, 1, 1, 1),
    ],
    ids=["gathered", "in-place", "pointwise"],
)
def test_tiles_apply_to_conv_without_changing_the_answer(
    tiles: tuple[int, int, int], threads: int, dtype: str, case: tuple[int, ...]
) -> None:
    # Several row blocks, column blocks and K blocks (C accumulated across them) on both B paths.
    shape = shape_of(case)
    inp = conv.make_inputs(shape, dtype, seed=4)
    y = run(shape, inp, tiles=Tiles(*tiles, threads=threads))
    assert conv.check(shape, y, inp, conv.reference(shape, inp), dtype, "fp32")["ok"]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_pointwise_convs_on_large_planes_run_on_the_batched_gemm(dtype: type) -> None:
    w = np.zeros((24, 8, 1, 1), dtype)
    for hw, padding, stride, gemm in [
        ((16, 16), 0, 1, True),
        ((15, 17), 0, 1, False),
        ((16, 16), 1, 1, False),
        ((32, 32), 0, 2, False),
    ]:
        x = np.zeros((2, 8, *hw), dtype)
        t = kernels.prepare_conv2d(x, w, padding=padding, stride=stride, tiles=Tiles(threads=2)).tiles()
        assert t["path"].startswith("1x1: W * x on the batched GEMM") == gemm, (
            hw,
            padding,
            stride,
            t["path"],
        )
        if gemm:
            assert (t["gemm_m"], t["gemm_n"], t["gemm_k"]) == (24, 256, 8)


def test_conv_tiles_reports_what_conv2d_uses() -> None:
    # 55x55 (not whole micro-panels of output pixels, so output channels are the rows)
    x, w = np.zeros((8, 64, 55, 55), np.float32), np.zeros((64, 64, 3, 3), np.float32)
    info = kernels.default_tiles()
    t = kernels.prepare_conv2d(x, w, padding=(1, 1), tiles=Tiles(threads=2)).tiles()
    assert t["path"] == "implicit GEMM, B rows read in place"
    # kc and mc from this CPU's cache model for implicit GEMMs (clamped to C*R*S and to the 64 output
    # channels, mc rounded up to MR), nc a multiple of NR
    assert t["tile_k"] == min(info["implicit_tile_k"], 64 * 9)
    assert t["tile_m"] == -(-min(info["implicit_tile_m"], 64) // t["mr"]) * t["mr"]
    assert t["tile_n"] % t["nr"] == 0 and t["tile_n"] <= 55 * 57 + t["nr"]
    given = kernels.prepare_conv2d(x, w, padding=(1, 1), tiles=Tiles(m=20, n=100, k=50, threads=2)).tiles()
    assert (given["tile_m"], given["tile_k"]) == (-(-20 // t["mr"]) * t["mr"], 50)
    assert given["tile_n"] == -(-100 // t["nr"]) * t["nr"]


@pytest.mark.parametrize("isa", kernel_set_isas())
def test_conv_tiles_report_the_register_tile_that_runs(isa: str) -> None:
    # 5x5 with padding 1: 35 GEMM columns over the padded width, few enough for the narrow tile on AVX-512
    # (it was reported from the 25 output pixels, naming the wide tile while the narrow one ran).
    x, w = np.zeros((1, 2, 5, 5), np.float32), np.zeros((3, 2, 3, 3), np.float32)
    t = kernels.prepare_conv2d(x, w, padding=(1, 1), tiles=Tiles(threads=1, isa=isa)).tiles()
    assert t["tile_n"] % t["nr"] == 0 and t["tile_m"] % t["mr"] == 0, t
    assert t["kernel"] == kernels.default_tiles(isa, 35)["description"]


SIDES = [c for c in CASES if len(c) > 14]  # padded differently on each side


@pytest.mark.parametrize("case", CASES[:7] + SIDES, ids=lambda t: shape_of(t).label().replace(" ", "_"))
def test_reference_agrees_with_torch_in_float64(case: tuple[int, ...]) -> None:
    torch = import_or_skip("torch")
    shape = shape_of(case)
    inp = conv.make_inputs(shape, "fp32", seed=5)
    top, bottom, left, right = shape.padding
    want = torch.nn.functional.conv2d(
        torch.nn.functional.pad(torch.from_numpy(inp["x"].astype(np.float64)), (left, right, top, bottom)),
        torch.from_numpy(inp["w"].astype(np.float64)),
        None,
        (shape.stride_h, shape.stride_w),
        0,
        (shape.dil_h, shape.dil_w),
        shape.groups,
    ).numpy()
    np.testing.assert_allclose(conv.reference(shape, inp), want, rtol=1e-12, atol=1e-12)


def test_the_tolerance_can_fail() -> None:
    shape = shape_of((2, 8, 9, 9, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1))
    inp = conv.make_inputs(shape, "fp32", seed=6)
    y = run(shape, inp)
    ref = conv.reference(shape, inp)
    assert conv.check(shape, y, inp, ref, "fp32", "fp32")["ok"]
    wrong = y.copy()
    wrong[1, 2, 4, 4] += 1e-3 * np.abs(ref).max()  # one output off by a thousandth
    assert not conv.check(shape, wrong, inp, ref, "fp32", "fp32")["ok"]


def test_the_check_tells_the_padding_sides_apart() -> None:
    # the same output size padded top-heavy or bottom-heavy: each answer fails the other's check
    top = shape_of((2, 4, 9, 9, 5, 3, 3, 1, 1, 2, 1, 1, 1, 1, 0, 1))
    bottom = shape_of((2, 4, 9, 9, 5, 3, 3, 1, 1, 0, 1, 1, 1, 1, 2, 1))
    assert (top.out_h, top.out_w) == (bottom.out_h, bottom.out_w)
    for dtype in ("fp32", "fp16"):
        inp = conv.make_inputs(top, dtype, seed=6)
        y_top, y_bottom = run(top, inp), run(bottom, inp)
        assert conv.check(top, y_top, inp, conv.reference(top, inp), dtype, "fp32")["ok"]
        assert not conv.check(top, y_bottom, inp, conv.reference(top, inp), dtype, "fp32")["ok"]
        assert not conv.check(bottom, y_top, inp, conv.reference(bottom, inp), dtype, "fp32")["ok"]


X = np.ones((1, 4, 6, 6), np.float32)
W = np.ones((2, 4, 3, 3), np.float32)


@pytest.mark.parametrize(
    ("x", "w", "kwargs", "match"),
    [
        (np.ones((4, 6, 6), np.float32), W, {}, "x must be a 4-D array, got 3-D"),
        (X, np.ones((2, 3, 3, 3), np.float32), {}, "dimension 1 must be input channels / groups = 4"),
        (X, W.astype(np.float16), {}, "w must have the dtype of x"),
        (X.astype(np.float64), W.astype(np.float64), {}, "x has unsupported dtype float64"),
        (X, W, {"stride": 0}, "stride must be >= 1"),
        (X, W, {"padding": -1}, "padding must be >= 0"),
        (X, W, {"dilation": (1, 0)}, "dilation must be >= 1"),
        (X, W, {"stride": (1, 2, 3)}, r"stride must be an integer or a pair \(h, w\)"),
        (
            X,
            np.ones((3, 2, 3, 3), np.float32),
            {"groups": 2},
            r"groups=2 must divide .* output channels \(3\)",
        ),
        (X, np.ones((2, 4, 7, 7), np.float32), {}, "output would be empty: input 6x6 with filter 7x7"),
        (
            np.ones((1, 4, 6, 6), np.float32)[:, :, :, ::2],
            np.ones((2, 4, 3, 3), np.float32),
            {},
            "x must be C-contiguous",
        ),
        (X, W, {"tiles": Tiles(k=0)}, "tile_k must be >= 1"),
    ],
)
def test_invalid_input_raises_value_error(x: np.ndarray, w: np.ndarray, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        kernels.conv2d(x, w, **kwargs)


def test_a_plain_call_runs_the_plan_a_spelled_out_one_does() -> None:
    """conv2d and gemm with plain integers and no tiles skip the facade's conversions (issue 41): the same
    plan and answer as every argument spelled out, and a value out of range still takes the checks."""
    rng = np.random.default_rng(5)
    x, w = rng.random((2, 6, 9, 11), np.float32), rng.random((4, 3, 3, 3), np.float32)
    plain = kernels.prepare_conv2d(x, w, stride=2, padding=1, dilation=1, groups=2)
    spelled = kernels.prepare_conv2d(
        x, w, stride=(2, 2), padding=(1, 1, 1, 1), dilation=(1, 1), groups=2, tiles=Tiles()
    )
    assert plain.tiles() == spelled.tiles()
    np.testing.assert_array_equal(plain.output(), spelled.output())
    for bad in ({"stride": 0}, {"padding": -1}, {"dilation": True}, {"groups": 2**40}):
        with pytest.raises(ValueError):
            kernels.conv2d(x, w, **{"groups": 2, **bad})  # type: ignore[arg-type]
    a, b = rng.random((7, 5), np.float32), rng.random((5, 3), np.float32)
    assert kernels.prepare_gemm(a, b).tiles() == kernels.prepare_gemm(a, b, tiles=Tiles()).tiles()
    with pytest.raises(ValueError, match="a must be a numpy.ndarray"):
        kernels.gemm([[1.0]], b)  # type: ignore[arg-type]

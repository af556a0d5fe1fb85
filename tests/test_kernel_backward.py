"""Backward passes of our kernels against float64 gradients (torch's autograd in float64 checks the
references): odd shapes, both dtypes, every kernel set, threads and ragged tiles."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import import_or_skip, kernel_set_isas

from opbench import kernels
from opbench.ops import conv, conv_bwd, gemm, gemm_bwd
from opbench.tiles import Tiles

ISAS = kernel_set_isas()
GEMM_SHAPES = [(1, 1, 1), (17, 31, 13), (64, 3, 5), (3, 2, 200), (130, 257, 67), (5, 1, 3), (256, 128, 64)]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("dims", GEMM_SHAPES, ids=lambda d: "x".join(map(str, d)))
def test_gemm_backward_matches_float64(isa: str, dtype: str, dims: tuple[int, int, int]) -> None:
    shape = gemm.GemmShape(*dims)
    inp = gemm_bwd.make_inputs(shape, dtype, seed=3)
    da, db = kernels.gemm_backward(inp["a"], inp["b"], inp["dc"], tiles=Tiles(isa=isa, threads=2))
    assert da.shape == (shape.m, shape.k) and db.shape == (shape.k, shape.n)
    assert da.dtype == db.dtype == inp["a"].dtype
    result = gemm_bwd.check(shape, (da, db), inp, gemm_bwd.reference(shape, inp), dtype, "fp32")
    assert result["ok"], result


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_gemm_backward_threads_and_ragged_tiles(isa: str, threads: int) -> None:
    shape = gemm.GemmShape(45, 38, 29)
    inp = gemm_bwd.make_inputs(shape, "fp32", seed=4)
    out = gemm_bwd.plan(shape, inp, Tiles(m=7, n=9, k=5, threads=threads, isa=isa)).output()
    assert gemm_bwd.check(shape, out, inp, gemm_bwd.reference(shape, inp), "fp32", "fp32")["ok"]


def test_gemm_backward_reference_is_torch_autograd_in_float64() -> None:
    torch = import_or_skip("torch")
    shape = gemm.GemmShape(13, 7, 11)
    inp = gemm_bwd.make_inputs(shape, "fp32", seed=5)
    a = torch.from_numpy(inp["a"].astype(np.float64)).requires_grad_(True)
    b = torch.from_numpy(inp["b"].astype(np.float64)).requires_grad_(True)
    da, db = torch.autograd.grad(a @ b, (a, b), torch.from_numpy(inp["dc"].astype(np.float64)))
    ref = gemm_bwd.reference(shape, inp)
    np.testing.assert_allclose(ref["da"], da.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ref["db"], db.numpy(), rtol=1e-12, atol=1e-12)
    # The forward's inputs are the same values for the same seed: fwd and bwd cases share a and b.
    fwd = gemm.make_inputs(shape, "fp32", seed=5)
    assert np.array_equal(fwd["a"], inp["a"]) and np.array_equal(fwd["b"], inp["b"])


def test_the_bound_catches_swapped_gradients_and_a_missing_transpose() -> None:
    shape = gemm.GemmShape(12, 12, 12)
    inp = gemm_bwd.make_inputs(shape, "fp32", seed=6)
    ref = gemm_bwd.reference(shape, inp)
    da, db = kernels.gemm_backward(inp["a"], inp["b"], inp["dc"])
    assert gemm_bwd.check(shape, (da, db), inp, ref, "fp32", "fp32")["ok"]
    assert not gemm_bwd.check(shape, (db, da), inp, ref, "fp32", "fp32")["ok"]
    wrong_da = (inp["dc"].astype(np.float64) @ inp["b"].astype(np.float64)).astype(np.float32)  # no B^T
    assert not gemm_bwd.check(shape, (wrong_da, db), inp, ref, "fp32", "fp32")["ok"]


def test_gemm_backward_invalid_input_raises_value_error() -> None:
    a, b, dc = np.ones((4, 3), np.float32), np.ones((3, 5), np.float32), np.ones((4, 5), np.float32)
    cases = [
        ((a, b, np.ones((5, 4), np.float32)), r"dc has shape \(5, 4\), expected \(4, 5\)"),
        ((a, np.ones((2, 5), np.float32), dc), "inner dimensions differ"),
        ((a, b, dc.astype(np.float16)), "one dtype"),
        ((a[:, :2], np.ones((2, 5), np.float32), dc), "C-contiguous"),
        ((a, b, [[1.0] * 5] * 4), "dc must be a numpy.ndarray"),
    ]
    for args, match in cases:
        with pytest.raises(ValueError, match=match):
            kernels.gemm_backward(*args)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="da must not overlap an input"):
        kernels.prepare_gemm_backward(a, b, dc, outs=(a, np.empty((3, 5), np.float32)))


# Every geometry: 1x1, odd sizes and channel counts, stride 2 (and mixed strides), dilation 2, groups
# (depthwise too), padding past the dilated filter (the col2im path at stride 1), a single pixel.
CONV_SHAPES = [
    conv.ConvShape(2, 3, 11, 7, 5, 3, 3, pad_h=1, pad_w=1),
    conv.ConvShape(1, 5, 7, 7, 3, 1, 1),
    conv.ConvShape(1, 4, 9, 9, 6, 3, 3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
    conv.ConvShape(2, 4, 10, 10, 4, 3, 3, dil_h=2, dil_w=2, pad_h=2, pad_w=2),
    conv.ConvShape(2, 6, 8, 8, 4, 3, 3, pad_h=1, pad_w=1, groups=2),
    conv.ConvShape(1, 6, 9, 9, 6, 3, 3, pad_h=1, pad_w=1, groups=6),
    conv.ConvShape(2, 8, 13, 13, 6, 5, 3, stride_h=3, stride_w=2, pad_h=2, dil_w=2, groups=2),
    conv.ConvShape(1, 3, 6, 6, 2, 3, 3, pad_h=3, pad_w=1),
    conv.ConvShape(1, 1, 1, 1, 1, 1, 1),
    conv.ConvShape(3, 17, 13, 11, 19, 3, 3, pad_h=1, pad_w=1),
    # padding per side: stride 1 (dX as a forward conv, its padding per side swapped) and strided (col2im)
    conv.ConvShape(2, 5, 9, 8, 7, 3, 3, pad_h=2, pad_w=0, pad_h_end=0, pad_w_end=2),
    conv.ConvShape(1, 6, 11, 10, 4, 3, 5, 1, 1, 0, 4, 1, 1, 2, pad_h_end=2, pad_w_end=1),
    conv.ConvShape(2, 4, 13, 9, 6, 3, 3, 2, 2, 1, 0, 2, 1, 1, pad_h_end=3, pad_w_end=2),
]
# Depthwise (one input channel per group: csrc/conv/depthwise_backward.cpp): the flipped 3x3 kernel at
# stride 1 on rows wider than a vector; two and four output channels per channel (one channel, groups 1);
# strides 2 and 3 with padding per side; dilation; a 5x5 filter (taps in two passes of the row kernel); 1x1
# at stride 2 (phases no tap lands in); a single pixel.
DEPTHWISE = [
    conv.ConvShape(3, 4, 9, 21, 4, 3, 3, pad_h=1, pad_w=1, groups=4),
    conv.ConvShape(2, 5, 37, 19, 10, 3, 3, stride_h=2, stride_w=2, pad_h=1, pad_w=1, groups=5),
    conv.ConvShape(2, 1, 8, 8, 4, 3, 3, pad_h=1, pad_w=1),
    conv.ConvShape(2, 6, 12, 11, 6, 3, 3, 3, 2, 2, 0, 1, 1, 6, pad_h_end=1, pad_w_end=2),
    conv.ConvShape(1, 3, 17, 23, 3, 3, 3, 1, 1, 2, 2, 2, 2, 3),
    conv.ConvShape(2, 2, 11, 13, 2, 5, 5, pad_h=2, pad_w=2, groups=2),
    conv.ConvShape(2, 4, 7, 7, 4, 1, 1, stride_h=2, stride_w=2, groups=4),
    conv.ConvShape(1, 3, 1, 1, 6, 1, 1, groups=3),
]
CONV_SHAPES += DEPTHWISE
# Strided (dX by col2im): 1x1 at stride 2 and 3x3 at stride 4 (input positions no tap reaches), 5x3 at
# strides 3 x 2 with groups and padding per side, the 7x7 stem's geometry, no padding on odd sizes, and
# padding past the filter.
STRIDED = [
    conv.ConvShape(2, 6, 9, 8, 5, 1, 1, stride_h=2, stride_w=2),
    conv.ConvShape(1, 3, 13, 13, 4, 3, 3, 4, 4, 1, 1),
    conv.ConvShape(2, 4, 14, 11, 6, 5, 3, 3, 2, 2, 1, 1, 1, 2, pad_h_end=1, pad_w_end=0),
    conv.ConvShape(1, 3, 17, 15, 4, 7, 7, 2, 2, 3, 3),
    conv.ConvShape(2, 5, 10, 11, 7, 3, 3, 2, 2, 0, 0),
    conv.ConvShape(1, 3, 9, 9, 4, 3, 3, 2, 2, 4, 4),
]
CONV_SHAPES += STRIDED
# dW from the image in place (csrc/conv/conv2d_weights.cpp): planes of several blocks of dY's panel (24 x 23:
# 600 pixel rows with the gap column), 1x1 with more output than input channels (dY's rows read in place
# against x's panels), output channels past one panel and its register rows, small planes summed a few images
# per call with a remainder (seven 7x7 images), and a 1x1 at stride 2 on the stride phases.
IN_PLACE = [
    conv.ConvShape(2, 3, 24, 23, 5, 3, 3, pad_h=1, pad_w=1),
    conv.ConvShape(2, 3, 9, 10, 37, 1, 1),
    conv.ConvShape(1, 11, 12, 9, 70, 3, 3, pad_h=1, pad_w=1),
    conv.ConvShape(7, 4, 7, 7, 5, 3, 3, pad_h=1, pad_w=1),
    conv.ConvShape(2, 5, 23, 21, 33, 1, 1, stride_h=2, stride_w=2),
]
CONV_SHAPES += IN_PLACE
ASYMMETRIC = [s for s in CONV_SHAPES if not s.symmetric]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("shape", CONV_SHAPES, ids=lambda s: s.label().replace(" ", "_"))
def test_conv2d_backward_matches_float64(isa: str, dtype: str, shape: conv.ConvShape) -> None:
    inp = conv_bwd.make_inputs(shape, dtype, seed=7)
    dx, dw = conv_bwd.plan(shape, inp, Tiles(threads=2, isa=isa)).output()
    assert dx.shape == inp["x"].shape and dw.shape == inp["w"].shape and dx.dtype == inp["x"].dtype
    result = conv_bwd.check(shape, (dx, dw), inp, conv_bwd.reference(shape, inp), dtype, "fp32")
    assert result["ok"], result


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("tiles", [{}, {"tile_m": 14, "tile_n": 5, "tile_k": 8}, {"tile_n": 1000}])
def test_conv2d_backward_threads_and_pixel_blocks(threads: int, tiles: dict[str, int]) -> None:
    for shape in (*CONV_SHAPES[:3], CONV_SHAPES[9], DEPTHWISE[1], *IN_PLACE[:4]):
        inp = conv_bwd.make_inputs(shape, "fp32", seed=8)
        plan = conv_bwd.plan(shape, inp, Tiles.of(tiles, threads))
        if "tile_n" in tiles and shape.groups == 1:
            assert plan.tiles()["tile_n"] == min(tiles["tile_n"], shape.out_h * shape.out_w)
        ref = conv_bwd.reference(shape, inp)
        assert conv_bwd.check(shape, plan.output(), inp, ref, "fp32", "fp32")["ok"]


@pytest.mark.parametrize("shape", CONV_SHAPES[:8] + ASYMMETRIC, ids=lambda s: s.label().replace(" ", "_"))
def test_conv2d_backward_reference_is_torch_autograd_in_float64(shape: conv.ConvShape) -> None:
    torch = import_or_skip("torch")
    inp = conv_bwd.make_inputs(shape, "fp32", seed=9)
    x = torch.from_numpy(inp["x"].astype(np.float64)).requires_grad_(True)
    w = torch.from_numpy(inp["w"].astype(np.float64)).requires_grad_(True)
    top, bottom, left, right = shape.padding
    y = torch.nn.functional.conv2d(
        torch.nn.functional.pad(x, (left, right, top, bottom)), w, None, (shape.stride_h, shape.stride_w),
        0, (shape.dil_h, shape.dil_w), shape.groups,
    )  # fmt: skip
    dx, dw = torch.autograd.grad(y, (x, w), torch.from_numpy(inp["dy"].astype(np.float64)))
    ref = conv_bwd.reference(shape, inp)
    np.testing.assert_allclose(ref["dx"], dx.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ref["dw"], dw.numpy(), rtol=1e-12, atol=1e-12)


def test_the_conv_bound_catches_a_flipped_filter_and_swapped_gradients() -> None:
    shape = CONV_SHAPES[0]
    inp = conv_bwd.make_inputs(shape, "fp32", seed=10)
    ref = conv_bwd.reference(shape, inp)
    dx, dw = kernels.conv2d_backward(inp["x"], inp["w"], inp["dy"], padding=1)
    assert conv_bwd.check(shape, (dx, dw), inp, ref, "fp32", "fp32")["ok"]
    assert not conv_bwd.check(shape, (dx, dw[:, :, ::-1, ::-1].copy()), inp, ref, "fp32", "fp32")["ok"]
    wrong = dict(inp, w=np.ascontiguousarray(inp["w"][:, :, ::-1, ::-1]))
    dx_wrong, _ = kernels.conv2d_backward(wrong["x"], wrong["w"], wrong["dy"], padding=1)
    assert not conv_bwd.check(shape, (dx_wrong, dw), inp, ref, "fp32", "fp32")["ok"]


def test_each_backward_way_is_taken_where_it_applies() -> None:
    def path(shape: conv.ConvShape) -> str:
        inp = conv_bwd.make_inputs(shape, "fp32", seed=1)
        return str(conv_bwd.plan(shape, inp, Tiles(threads=1)).tiles()["path"])

    assert "flipped-filter" in path(CONV_SHAPES[0]) and "direct depthwise" in path(DEPTHWISE[1])
    assert path(CONV_SHAPES[1]).startswith("1x1: dW from x's rows in place")
    assert all("col2im" in path(shape) for shape in STRIDED + [CONV_SHAPES[2], CONV_SHAPES[12]])
    in_place = STRIDED + IN_PLACE + CONV_SHAPES[:5]
    assert all("in place against dY's panels" in path(shape) for shape in in_place)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("shape", [CONV_SHAPES[0], CONV_SHAPES[2], IN_PLACE[2], IN_PLACE[3]], ids=str)
def test_a_nan_or_inf_in_x_reaches_only_the_taps_that_meet_it(isa: str, shape: conv.ConvShape) -> None:
    # The padded image's gap columns meet zeros of dY that no tap does: an Inf there must not become NaN in
    # dW, so such an x takes the im2col path (the float64 reference's NaN and Inf, nothing more).
    inp = conv_bwd.make_inputs(shape, "fp32", seed=12)
    x = inp["x"].copy()
    x[0, 0, 0, -1] = np.inf
    x[-1, -1, -1, 0] = np.nan
    inp = dict(inp, x=x)
    _, dw = conv_bwd.plan(shape, inp, Tiles(threads=2, isa=isa)).output()
    with np.errstate(invalid="ignore"):
        ref = conv_bwd.reference(shape, inp)["dw"]
    assert np.array_equal(np.isnan(dw), np.isnan(ref)) and np.array_equal(np.isinf(dw), np.isinf(ref))
    finite = np.isfinite(ref)
    scale = float(np.abs(ref[finite]).max())
    assert finite.any() and np.allclose(dw[finite], ref[finite], rtol=1e-4, atol=1e-4 * scale)


@pytest.mark.parametrize("isa", ISAS)
def test_the_depthwise_bound_catches_a_flipped_filter_and_one_element_off(isa: str) -> None:
    for shape in (DEPTHWISE[0], DEPTHWISE[1]):
        inp = conv_bwd.make_inputs(shape, "fp32", seed=11)
        ref = conv_bwd.reference(shape, inp)
        dx, dw = conv_bwd.plan(shape, inp, Tiles(threads=2, isa=isa)).output()
        assert conv_bwd.check(shape, (dx, dw), inp, ref, "fp32", "fp32")["ok"]
        assert not conv_bwd.check(shape, (dx, dw[:, :, ::-1, ::-1].copy()), inp, ref, "fp32", "fp32")["ok"]
        for grad in (dx, dw):
            off = grad.copy()
            off.flat[off.size // 2] += 0.01 * float(np.abs(grad).max())
            outs = (off, dw) if grad is dx else (dx, off)
            assert not conv_bwd.check(shape, outs, inp, ref, "fp32", "fp32")["ok"]


def test_conv2d_backward_invalid_input_raises_value_error() -> None:
    shape = CONV_SHAPES[0]
    inp = conv_bwd.make_inputs(shape, "fp32", seed=0)
    x, w, dy = inp["x"], inp["w"], inp["dy"]
    cases = [
        (
            (x, w, np.ascontiguousarray(dy[:, :, :-1])),
            {"padding": 1},
            r"dy has shape .*expected \(2, 5, 11, 7\)",
        ),
        ((x, w, dy[:, :, :-1]), {"padding": 1}, "dy must be C-contiguous"),
        ((x, w, dy), {"padding": 0}, "dy has shape"),
        ((x, w, dy.astype(np.float16)), {"padding": 1}, "dy must have the dtype of x"),
        ((x, w, dy), {"padding": 1, "groups": 2}, "groups=2 must divide"),
        (
            (x, np.ascontiguousarray(w[:, :2]), dy),
            {"padding": 1},
            "dimension 1 must be input channels / groups",
        ),
        ((x, w, dy), {"padding": 1, "stride": 0}, "stride must be >= 1"),
    ]
    for args, kw, match in cases:
        with pytest.raises(ValueError, match=match):
            kernels.conv2d_backward(*args, **kw)  # type: ignore[arg-type]


# The recurrent layers' BPTT: T=1, B=1, primes, H not a multiple of any register tile, several steps.
RNN_DIMS = [(1, 1, 1, 1), (5, 3, 7, 9), (4, 2, 16, 33), (7, 1, 13, 17), (3, 5, 8, 20)]
RNN_CELLS = ("rnn_tanh", "rnn_relu", "gru", "lstm")


def _recurrent(cell: str, dims: tuple[int, int, int, int]) -> tuple[Any, Any]:
    from opbench.ops import get_op

    op = get_op(f"{cell.partition('_')[0]}:bwd")
    fields = dict(zip(("seq_len", "batch", "input_size", "hidden"), dims, strict=True))
    if cell.startswith("rnn"):
        fields["relu"] = int(cell == "rnn_relu")
    return op, op.shape_from_case(fields)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("cell", RNN_CELLS)
@pytest.mark.parametrize("dims", RNN_DIMS, ids=lambda d: "T{}B{}I{}H{}".format(*d))
def test_recurrent_backward_matches_float64(isa: str, dtype: str, cell: str, dims: tuple[int, ...]) -> None:
    op, shape = _recurrent(cell, dims)
    inp = op.make_inputs(shape, dtype, seed=11)
    out = op.plan(shape, inp, Tiles(threads=2, isa=isa)).output()
    want = [inp["x"].shape, inp["w_ih"].shape, inp["w_hh"].shape, inp["b_ih"].shape, inp["b_hh"].shape]
    want += [inp["h0"].shape] + ([inp["c0"].shape] if cell == "lstm" else [])
    assert [g.shape for g in out] == want and all(g.dtype == inp["x"].dtype for g in out)
    result = op.check(shape, out, inp, op.reference(shape, inp), dtype, "fp32")
    assert result["ok"], result


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("cell", RNN_CELLS)
def test_recurrent_backward_threads_and_tiles(threads: int, cell: str) -> None:
    op, shape = _recurrent(cell, (6, 7, 24, 40))
    inp = op.make_inputs(shape, "fp32", seed=12)
    out = op.plan(shape, inp, Tiles(m=3, n=17, k=5, threads=threads)).output()
    assert op.check(shape, out, inp, op.reference(shape, inp), "fp32", "fp32")["ok"]


@pytest.mark.parametrize("cell", RNN_CELLS)
def test_recurrent_backward_reference_is_torch_autograd_in_float64(cell: str) -> None:
    torch = import_or_skip("torch")
    op, shape = _recurrent(cell, (5, 3, 7, 9))
    inp = op.make_inputs(shape, "fp32", seed=13)
    t = {k: torch.from_numpy(v.astype(np.float64)) for k, v in inp.items()}
    cls = {"gru": "GRU", "lstm": "LSTM"}.get(cell, "RNN")
    extra = {"nonlinearity": cell[4:]} if cell.startswith("rnn") else {}
    m = getattr(torch.nn, cls)(shape.input_size, shape.hidden, **extra).double()
    params = [m.weight_ih_l0, m.weight_hh_l0, m.bias_ih_l0, m.bias_hh_l0]
    with torch.no_grad():
        for p, n in zip(params, ("w_ih", "w_hh", "b_ih", "b_hh"), strict=True):
            p.copy_(t[n])
    x = t["x"].requires_grad_(True)
    states = [t["h0"][None].requires_grad_(True)] + (
        [t["c0"][None].requires_grad_(True)] if cell == "lstm" else []
    )
    y, final = m(x, tuple(states) if cell == "lstm" else states[0])
    outs = [y, *(final if cell == "lstm" else (final,))]
    ups = [t["dy"], t["dh_n"][None]] + ([t["dc_n"][None]] if cell == "lstm" else [])
    grads = torch.autograd.grad(outs, [x, *params, *states], ups)
    ref = op.reference(shape, inp)["grads"]
    names = ("dx", "dw_ih", "dw_hh", "db_ih", "db_hh", "dh0", "dc0")
    for name, g in zip(names, grads, strict=False):
        np.testing.assert_allclose(
            ref[name], g.detach().numpy().reshape(ref[name].shape), rtol=1e-10, atol=1e-12
        )


def test_the_training_forward_is_the_forward_and_keeps_its_activations() -> None:
    op, shape = _recurrent("lstm", (4, 3, 6, 5))
    inp = op.make_inputs(shape, "fp32", seed=15)
    saved = op.plan(shape, inp, Tiles(threads=2)).saved()
    y, (h_n, c_n) = kernels.lstm(*(inp[k] for k in ("x", "w_ih", "w_hh", "b_ih", "b_hh", "h0", "c0")))
    assert np.array_equal(saved["y"], y) and np.array_equal(saved["h_n"], h_n)
    assert np.array_equal(saved["c_n"], c_n) and np.array_equal(saved["state"][-1], c_n)
    assert saved["gates"].shape == (4, 3, 20) and saved["tanh_c"].shape == (4, 3, 5)
    np.testing.assert_allclose(saved["tanh_c"], np.tanh(saved["state"]), rtol=1e-5, atol=1e-6)
    i, o = saved["gates"][..., :5], saved["gates"][..., 15:]  # activated gates, in (0, 1)
    assert ((i > 0) & (i < 1) & (o > 0) & (o < 1)).all()
    np.testing.assert_allclose(saved["y"], o * saved["tanh_c"], rtol=1e-5, atol=1e-6)
    gop, gshape = _recurrent("gru", (4, 3, 6, 5))
    g = gop.make_inputs(gshape, "fp32", seed=15)
    gs = gop.plan(gshape, g, Tiles(threads=2)).saved()
    assert set(gs) == {"y", "h_n", "gates", "state"} and gs["state"].shape == (4, 3, 5)
    assert kernels.prepare_gemm(g["w_ih"].T.copy(), g["w_hh"]).saved() == {}


def test_the_recurrent_bound_catches_a_wrong_gate_order() -> None:
    op, shape = _recurrent("lstm", (4, 3, 6, 5))
    inp = op.make_inputs(shape, "fp32", seed=14)
    ref = op.reference(shape, inp)
    assert op.check(shape, op.plan(shape, inp, Tiles(threads=1)).output(), inp, ref, "fp32", "fp32")["ok"]
    h = shape.hidden
    swapped = dict(inp)
    for name in ("w_ih", "w_hh", "b_ih", "b_hh"):  # exchange the i and f gate blocks
        v = inp[name].copy()
        v[:h], v[h : 2 * h] = inp[name][h : 2 * h], inp[name][:h]
        swapped[name] = v
    assert not op.check(shape, op.plan(shape, swapped, Tiles(threads=1)).output(), inp, ref, "fp32", "fp32")[
        "ok"
    ]


def test_recurrent_backward_invalid_input_raises_value_error() -> None:
    op, shape = _recurrent("lstm", (3, 2, 5, 4))
    inp = op.make_inputs(shape, "fp32", seed=0)
    args = {k: inp[k] for k in ("x", "w_ih", "w_hh", "b_ih", "b_hh", "h0", "c0", "dy", "dh_n", "dc_n")}
    cases = [
        ({"dy": inp["dy"][:2].copy()}, r"dy has shape \(2, 2, 4\), expected \(3, 2, 4\)"),
        ({"dh_n": inp["dh_n"].astype(np.float16)}, "dh_n must have the dtype of x"),
        ({"dc_n": None}, "the LSTM needs dc_n"),
    ]
    for change, match in cases:
        a = {**args, **change}
        with pytest.raises(ValueError, match=match):
            kernels.prepare_rnn_backward("lstm", *a.values())  # type: ignore[arg-type]
    gop, gshape = _recurrent("gru", (3, 2, 5, 4))
    g = gop.make_inputs(gshape, "fp32", seed=0)
    names = ("x", "w_ih", "w_hh", "b_ih", "b_hh", "h0")
    with pytest.raises(ValueError, match="dc_n is the LSTM's"):
        kernels.prepare_rnn_backward("gru", *(g[k] for k in names), None, g["dy"], g["dh_n"], g["dh_n"])
    da = kernels.gru_backward(*(g[k] for k in (*names, "dy", "dh_n")))
    assert gop.check(gshape, da, g, gop.reference(gshape, g), "fp32", "fp32")["ok"]

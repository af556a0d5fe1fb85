"""opbench.kernels.rnn (tanh and ReLU), gru and lstm against the float64 references and their first-order
running error bounds (the references themselves checked against torch.nn.RNN/GRU/LSTM in float64), both
dtypes, every kernel set."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import import_or_skip, kernel_set_isas

from opbench import kernels
from opbench.ops import gru, lstm, rnn
from opbench.ops.recurrent import input_names
from opbench.tiles import Tiles

ISAS = kernel_set_isas()
SHAPES = [(1, 1, 1, 1), (5, 3, 7, 9), (4, 2, 16, 33), (3, 5, 8, 20), (25, 4, 61, 67), (2, 17, 130, 257)]
CELLS = ("rnn_tanh", "rnn_relu", "gru", "lstm")
TORCH_CLASS = {"rnn_tanh": "RNN", "rnn_relu": "RNN", "gru": "GRU", "lstm": "LSTM"}


def op_and_shape(cell: str, dims: tuple[int, ...]) -> tuple[Any, Any]:
    if cell == "lstm":
        return lstm.OP, lstm.LstmShape(*dims)
    if cell == "gru":
        return gru.OP, gru.GruShape(*dims)
    return rnn.OP, rnn.RnnShape(*dims, relu=int(cell == "rnn_relu"))


def run(inp: dict[str, np.ndarray], **kw: Any) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    return kernels.lstm(
        inp["x"], inp["w_ih"], inp["w_hh"], inp["b_ih"], inp["b_hh"], inp["h0"], inp["c0"], **kw
    )


def run_cell(op: Any, shape: Any, inp: dict[str, np.ndarray], **kw: Any) -> Any:
    """The cell's kernel through its op's plan (the path the cpp backend and the tuner take)."""
    tiles = {k: kw.pop(k) for k in ("tile_m", "tile_n", "tile_k") if k in kw}
    return op.plan(shape, inp, Tiles.of(tiles, kw.pop("threads", 2), kw.pop("isa", None))).output()


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("dims", SHAPES, ids=lambda d: "T{}B{}I{}H{}".format(*d))
def test_matches_float64_reference(isa: str, dtype: str, cell: str, dims: tuple[int, int, int, int]) -> None:
    op, shape = op_and_shape(cell, dims)
    inp = op.make_inputs(shape, dtype, seed=7)
    out = run_cell(op, shape, inp, isa=isa, threads=2)
    y, state = out
    h_n = state[0] if cell == "lstm" else state
    assert y.shape == (shape.seq_len, shape.batch, shape.hidden) and h_n.shape == (shape.batch, shape.hidden)
    assert y.dtype == inp["x"].dtype and np.array_equal(h_n, y[-1])
    result = op.check(shape, out, inp, op.reference(shape, inp), dtype, "fp32")
    assert result["ok"], result


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("threads", [1, 2, 5])
@pytest.mark.parametrize("cell", CELLS)
def test_threads_and_tiles_do_not_change_the_answer(isa: str, dtype: str, threads: int, cell: str) -> None:
    # Ragged blocks in both directions of the recurrent weights packed once per call (gates * H = 40 to 160
    # columns in blocks of 17, H = 40 rows in blocks of 5).
    op, shape = op_and_shape(cell, (6, 7, 24, 40))
    inp = op.make_inputs(shape, dtype, seed=8)
    out = run_cell(op, shape, inp, threads=threads, tile_m=3, tile_n=17, tile_k=5, isa=isa)
    assert op.check(shape, out, inp, op.reference(shape, inp), dtype, "fp32")["ok"]


# How the recurrence splits over threads: by batch rows, by 64-unit column blocks when rows run short (one
# batch row), a ragged last block (H=70), one unit, and a single step (W_hh not packed ahead).
GRID_SHAPES = [(4, 2, 9, 70), (3, 7, 5, 8), (3, 1, 4, 20), (2, 3, 3, 1), (1, 6, 11, 45)]


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("threads", [1, 2, 3, 5])
@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("dims", GRID_SHAPES, ids=lambda d: "T{}B{}I{}H{}".format(*d))
def test_recurrence_thread_splits(
    dtype: str, threads: int, cell: str, dims: tuple[int, int, int, int]
) -> None:
    op, shape = op_and_shape(cell, dims)
    inp = op.make_inputs(shape, dtype, seed=11)
    out = run_cell(op, shape, inp, threads=threads)
    assert op.check(shape, out, inp, op.reference(shape, inp), dtype, "fp32")["ok"]


# Each step runs on as many threads as it has half-MFLOPs of product (rnn_step_threads), so the shapes above
# take one thread a step. These are the smallest of each cell whose steps take 5 threads, split by batch rows
# (B = 7), and at least 3, split by 64-unit column blocks with a ragged last one (B = 2): step FLOPs
# 2 B gates H^2.
STEP_SPLITS = {
    "lstm": [(3, 7, 5, 230), (2, 2, 3, 330)],
    "gru": [(3, 7, 5, 260), (2, 2, 3, 370)],
    "rnn_tanh": [(3, 7, 5, 450), (2, 2, 3, 650)],
}


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("threads", [2, 3, 5])
@pytest.mark.parametrize("split", ["rows", "columns"])
@pytest.mark.parametrize("cell", sorted(STEP_SPLITS))
def test_threaded_steps_split_rows_and_columns(dtype: str, threads: int, split: str, cell: str) -> None:
    dims = STEP_SPLITS[cell][split == "columns"]
    op, shape = op_and_shape(cell, dims)
    inp = op.make_inputs(shape, dtype, seed=12)
    plan = op.plan(shape, inp, Tiles.of({}, threads))
    # (more where W_hh would not fit in a quarter of each thread's L2: the cache bound)
    assert min(threads, 5 if split == "rows" else 3) <= plan.tiles()["step_threads"] <= threads
    assert op.check(shape, plan.output(), inp, op.reference(shape, inp), dtype, "fp32")["ok"]


@pytest.mark.parametrize("cell", ["lstm", "rnn_tanh"])
def test_a_small_step_runs_on_one_thread(cell: str) -> None:
    # 2 x 1 x 4 x 64 x 64 = 32 KFLOP a step (the LSTM): 4 more threads woken twice a step cost more than that.
    op, shape = op_and_shape(cell, (4, 1, 8, 64))
    plan = op.plan(shape, op.make_inputs(shape, "fp32", seed=0), Tiles.of({}, 5))
    assert plan.tiles()["step_threads"] == 1


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("dims", SHAPES[:5], ids=lambda d: "T{}B{}I{}H{}".format(*d))
def test_reference_agrees_with_torch_in_float64(cell: str, dims: tuple[int, int, int, int]) -> None:
    torch = import_or_skip("torch")
    op, shape = op_and_shape(cell, dims)
    inp = op.make_inputs(shape, "fp32", seed=9)
    t = {k: torch.from_numpy(v.astype(np.float64)) for k, v in inp.items()}
    extra = {"nonlinearity": cell[4:]} if cell.startswith("rnn") else {}
    m = getattr(torch.nn, TORCH_CLASS[cell])(shape.input_size, shape.hidden, **extra).double()
    with torch.no_grad():
        for name, param in (
            ("w_ih", "weight_ih_l0"),
            ("w_hh", "weight_hh_l0"),
            ("b_ih", "bias_ih_l0"),
            ("b_hh", "bias_hh_l0"),
        ):
            getattr(m, param).copy_(t[name])
        state = (t["h0"][None], t["c0"][None]) if cell == "lstm" else t["h0"][None]
        y, final = m(t["x"], state)
    ref = op.reference(shape, inp)
    np.testing.assert_allclose(ref.y, y.numpy(), rtol=1e-12, atol=1e-12)
    if cell == "lstm":
        np.testing.assert_allclose(ref.c_n, final[1][0].numpy(), rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_allclose(ref.h_n, final[0].numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cell", CELLS)
def test_the_bound_grows_with_k_and_depends_on_the_unit(cell: str) -> None:
    scale = {}
    for name, dims in (("small", (4, 2, 16, 16)), ("big_k", (4, 2, 512, 16))):
        op, shape = op_and_shape(cell, dims)
        ref = op.reference(shape, op.make_inputs(shape, "fp32", seed=1))
        scale[name] = {unit: float(ref.scales(unit)["y"][0].max()) for unit in ("fp32", "fp16-cells", "fp16")}
    assert scale["big_k"]["fp32"] > scale["small"]["fp32"]  # the first step: its sums' length alone
    assert scale["small"]["fp16-cells"] > 100 * scale["small"]["fp32"]  # cells in fp16 allow far more error
    assert scale["big_k"]["fp16"] > scale["big_k"]["fp16-cells"]  # and sums in fp16 more still
    with pytest.raises(ValueError, match="unknown recurrent unit"):
        ref.scales("fp8")


def test_the_tolerance_catches_a_wrong_gate_order() -> None:
    shape = lstm.LstmShape(5, 3, 12, 10)
    inp = lstm.OP.make_inputs(shape, "fp32", seed=10)
    ref = lstm.reference(shape, inp)
    h = shape.hidden
    swapped = dict(inp)
    for name in ("w_ih", "w_hh", "b_ih", "b_hh"):  # exchange the i and f gate blocks
        v = inp[name].copy()
        v[:h], v[h : 2 * h] = inp[name][h : 2 * h], inp[name][:h]
        swapped[name] = v
    assert lstm.OP.check(shape, run(inp), inp, ref, "fp32", "fp32")["ok"]
    assert not lstm.OP.check(shape, run(swapped), inp, ref, "fp32", "fp32")["ok"]


def test_invalid_input_raises_value_error() -> None:
    inp = lstm.OP.make_inputs(lstm.LstmShape(3, 2, 5, 4), "fp32", seed=0)
    cases = [
        ({"x": inp["x"][0]}, "x must be a 3-D array, got 2-D"),
        ({"w_hh": np.ones((15, 4), np.float32)}, "dimension 0 must be 4 \\* hidden"),
        ({"w_ih": np.ones((16, 6), np.float32)}, r"w_ih has shape \(16, 6\), expected \(16, 5\)"),
        ({"b_ih": np.ones(15, np.float32)}, r"b_ih has shape \(15,\), expected \(16,\)"),
        ({"h0": np.ones((3, 4), np.float32)}, r"h0 has shape \(3, 4\), expected \(2, 4\)"),
        ({"c0": inp["c0"].astype(np.float16)}, "c0 must have the dtype of x"),
    ]
    for change, match in cases:
        args = {**inp, **change}
        with pytest.raises(ValueError, match=match):
            run(args)


def _swap_blocks(inp: dict[str, np.ndarray], h: int, a: int, b: int) -> dict[str, np.ndarray]:
    swapped = dict(inp)
    for name in ("w_ih", "w_hh", "b_ih", "b_hh"):
        v = inp[name].copy()
        v[a * h : (a + 1) * h], v[b * h : (b + 1) * h] = (
            inp[name][b * h : (b + 1) * h],
            inp[name][a * h : (a + 1) * h],
        )
        swapped[name] = v
    return swapped


def test_the_tolerance_catches_a_wrong_gru_gate_order_and_a_wrong_activation() -> None:
    shape = gru.GruShape(5, 3, 12, 10)
    inp = gru.OP.make_inputs(shape, "fp32", seed=10)
    ref = gru.reference(shape, inp)
    assert gru.OP.check(shape, run_cell(gru, shape, inp), inp, ref, "fp32", "fp32")["ok"]
    swapped = _swap_blocks(inp, shape.hidden, 0, 1)  # r and z exchanged
    assert not gru.OP.check(shape, run_cell(gru, shape, swapped), inp, ref, "fp32", "fp32")["ok"]

    tanh_shape = rnn.RnnShape(5, 3, 12, 10)
    relu_shape = rnn.RnnShape(5, 3, 12, 10, relu=1)
    inp = rnn.OP.make_inputs(tanh_shape, "fp32", seed=10)
    relu_out = run_cell(rnn, relu_shape, inp)
    assert rnn.OP.check(relu_shape, relu_out, inp, rnn.reference(relu_shape, inp), "fp32", "fp32")["ok"]
    assert not rnn.OP.check(tanh_shape, relu_out, inp, rnn.reference(tanh_shape, inp), "fp32", "fp32")["ok"]


@pytest.mark.parametrize("cell", ["rnn_tanh", "gru"])
def test_invalid_input_to_the_rnn_and_gru_raises_value_error(cell: str) -> None:
    op, shape = op_and_shape(cell, (3, 2, 5, 4))
    inp = op.make_inputs(shape, "fp32", seed=0)
    fn = kernels.gru if cell == "gru" else kernels.rnn
    g = shape.GATES * 4
    cases = [
        ({"x": inp["x"][0]}, "x must be a 3-D array, got 2-D"),
        ({"w_hh": np.ones((g + 1, 4), np.float32)}, "w_hh has shape"),
        ({"w_ih": np.ones((g, 6), np.float32)}, rf"w_ih has shape \({g}, 6\), expected \({g}, 5\)"),
        ({"b_hh": np.ones(g + 1, np.float32)}, rf"b_hh has shape \({g + 1},\), expected \({g},\)"),
        ({"h0": inp["h0"].astype(np.float16)}, "h0 must have the dtype of x"),
        ({"h0": [[0.0] * 4] * 2}, "h0 must be a numpy.ndarray"),
    ]
    for change, match in cases:
        args = {**inp, **change}
        with pytest.raises(ValueError, match=match):
            fn(*(args[n] for n in input_names(shape)))  # type: ignore[operator]
    if cell != "gru":
        with pytest.raises(ValueError, match="nonlinearity must be 'tanh' or 'relu', got 'sigmoid'"):
            kernels.rnn(*(inp[n] for n in input_names(shape)), nonlinearity="sigmoid")

"""opbench.kernels.lstm against the float64 reference and its first-order running error bound (the
reference itself checked against torch.nn.LSTM in float64), both dtypes, every kernel set."""

from __future__ import annotations

import numpy as np
import pytest

from opbench import kernels
from opbench.ops import lstm

ISAS = kernels.available_isas()
SHAPES = [(1, 1, 1, 1), (5, 3, 7, 9), (4, 2, 16, 33), (3, 5, 8, 20), (25, 4, 61, 67), (2, 17, 130, 257)]


def run(inp: dict[str, np.ndarray], **kw: object) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    return kernels.lstm(
        inp["x"], inp["w_ih"], inp["w_hh"], inp["b_ih"], inp["b_hh"], inp["h0"], inp["c0"], **kw
    )  # type: ignore[arg-type]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("dims", SHAPES, ids=lambda d: "T{}B{}I{}H{}".format(*d))
def test_matches_float64_reference(isa: str, dtype: str, dims: tuple[int, int, int, int]) -> None:
    shape = lstm.LstmShape(*dims)
    inp = lstm.make_inputs(shape, dtype, seed=7)
    out = run(inp, isa=isa, threads=2)
    y, (h_n, c_n) = out
    assert y.shape == (shape.seq_len, shape.batch, shape.hidden) and h_n.shape == c_n.shape == (
        shape.batch,
        shape.hidden,
    )
    assert y.dtype == inp["x"].dtype and np.array_equal(h_n, y[-1])
    result = lstm.check(shape, out, inp, lstm.reference(shape, inp), dtype, "fp32")
    assert result["ok"], result


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("threads", [1, 2, 5])
def test_threads_and_tiles_do_not_change_the_answer(isa: str, dtype: str, threads: int) -> None:
    # Ragged blocks in both directions of the recurrent weights packed once per call (4H = 160 columns in
    # blocks of 17, H = 40 rows in blocks of 5).
    shape = lstm.LstmShape(6, 7, 24, 40)
    inp = lstm.make_inputs(shape, dtype, seed=8)
    out = run(inp, threads=threads, tile_m=3, tile_n=17, tile_k=5, isa=isa)
    assert lstm.check(shape, out, inp, lstm.reference(shape, inp), dtype, "fp32")["ok"]


# How the recurrence splits over threads: by batch rows, by 64-unit column blocks when rows run short (one
# batch row), a ragged last block (H=70), one unit, and a single step (W_hh not packed ahead).
GRID_SHAPES = [(4, 2, 9, 70), (3, 7, 5, 8), (3, 1, 4, 20), (2, 3, 3, 1), (1, 6, 11, 45)]


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("threads", [1, 2, 3, 5])
@pytest.mark.parametrize("dims", GRID_SHAPES, ids=lambda d: "T{}B{}I{}H{}".format(*d))
def test_recurrence_thread_splits(dtype: str, threads: int, dims: tuple[int, int, int, int]) -> None:
    shape = lstm.LstmShape(*dims)
    inp = lstm.make_inputs(shape, dtype, seed=11)
    out = run(inp, threads=threads)
    assert lstm.check(shape, out, inp, lstm.reference(shape, inp), dtype, "fp32")["ok"]


@pytest.mark.parametrize("dims", SHAPES[:5], ids=lambda d: "T{}B{}I{}H{}".format(*d))
def test_reference_agrees_with_torch_in_float64(dims: tuple[int, int, int, int]) -> None:
    torch = pytest.importorskip("torch")
    shape = lstm.LstmShape(*dims)
    inp = lstm.make_inputs(shape, "fp32", seed=9)
    t = {k: torch.from_numpy(v.astype(np.float64)) for k, v in inp.items()}
    m = torch.nn.LSTM(shape.input_size, shape.hidden).double()
    with torch.no_grad():
        for name, param in (
            ("w_ih", "weight_ih_l0"),
            ("w_hh", "weight_hh_l0"),
            ("b_ih", "bias_ih_l0"),
            ("b_hh", "bias_hh_l0"),
        ):
            getattr(m, param).copy_(t[name])
        y, (h, c) = m(t["x"], (t["h0"][None], t["c0"][None]))
    ref = lstm.reference(shape, inp)
    np.testing.assert_allclose(ref.y, y.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ref.c_n, c[0].numpy(), rtol=1e-12, atol=1e-12)


def test_the_bound_grows_with_k_and_time_and_depends_on_dtype() -> None:
    small = lstm.LstmShape(4, 2, 16, 16)
    big_k = lstm.LstmShape(4, 2, 512, 16)
    long = lstm.LstmShape(40, 2, 16, 16)
    bound = {}
    for name, shape in (("small", small), ("big_k", big_k), ("long", long)):
        ref = lstm.reference(shape, lstm.make_inputs(shape, "fp32", seed=1))
        bound[name] = (ref.bounds["fp32"]["h_n"].max(), ref.bounds["fp16"]["h_n"].max())
    assert bound["big_k"][0] > bound["small"][0] and bound["long"][0] > bound["small"][0]
    assert bound["small"][1] > 100 * bound["small"][0]  # fp16 accumulation allows far more error


def test_the_tolerance_catches_a_wrong_gate_order() -> None:
    shape = lstm.LstmShape(5, 3, 12, 10)
    inp = lstm.make_inputs(shape, "fp32", seed=10)
    ref = lstm.reference(shape, inp)
    h = shape.hidden
    swapped = dict(inp)
    for name in ("w_ih", "w_hh", "b_ih", "b_hh"):  # exchange the i and f gate blocks
        v = inp[name].copy()
        v[:h], v[h : 2 * h] = inp[name][h : 2 * h], inp[name][:h]
        swapped[name] = v
    assert lstm.check(shape, run(inp), inp, ref, "fp32", "fp32")["ok"]
    assert not lstm.check(shape, run(swapped), inp, ref, "fp32", "fp32")["ok"]


def test_invalid_input_raises_value_error() -> None:
    inp = lstm.make_inputs(lstm.LstmShape(3, 2, 5, 4), "fp32", seed=0)
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

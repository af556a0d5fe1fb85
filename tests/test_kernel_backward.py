"""Backward passes of our kernels against float64 gradients (torch's autograd in float64 checks the
references): odd shapes, both dtypes, every kernel set, threads and ragged tiles."""

from __future__ import annotations

import numpy as np
import pytest

from opbench import kernels
from opbench.ops import gemm, gemm_bwd

ISAS = kernels.available_isas()
GEMM_SHAPES = [(1, 1, 1), (17, 31, 13), (64, 3, 5), (3, 2, 200), (130, 257, 67), (5, 1, 3), (256, 128, 64)]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("dims", GEMM_SHAPES, ids=lambda d: "x".join(map(str, d)))
def test_gemm_backward_matches_float64(isa: str, dtype: str, dims: tuple[int, int, int]) -> None:
    shape = gemm.GemmShape(*dims)
    inp = gemm_bwd.make_inputs(shape, dtype, seed=3)
    da, db = kernels.gemm_backward(inp["a"], inp["b"], inp["dc"], isa=isa, threads=2)
    assert da.shape == (shape.m, shape.k) and db.shape == (shape.k, shape.n)
    assert da.dtype == db.dtype == inp["a"].dtype
    result = gemm_bwd.check(shape, (da, db), inp, gemm_bwd.reference(shape, inp), dtype, "fp32")
    assert result["ok"], result


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_gemm_backward_threads_and_ragged_tiles(isa: str, threads: int) -> None:
    shape = gemm.GemmShape(45, 38, 29)
    inp = gemm_bwd.make_inputs(shape, "fp32", seed=4)
    out = gemm_bwd.plan(shape, inp, {"tile_m": 7, "tile_n": 9, "tile_k": 5}, threads, isa).output()
    assert gemm_bwd.check(shape, out, inp, gemm_bwd.reference(shape, inp), "fp32", "fp32")["ok"]


def test_gemm_backward_reference_is_torch_autograd_in_float64() -> None:
    torch = pytest.importorskip("torch")
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

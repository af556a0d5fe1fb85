"""Invalid input to opbench.kernels.gemm raises ValueError with a message naming the problem."""

from __future__ import annotations

import numpy as np
import pytest

from opbench import kernels

A = np.ones((4, 5), np.float32)
B = np.ones((5, 6), np.float32)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((np.ones(5, np.float32), B), {}, "a must be a 2-D array or a 3-D stack of them, got 1-D"),
        (
            (A, np.ones((2, 5, 6), np.float32)),
            {},
            r"a is \(4, 5\) and b is \(2, 5, 6\): both 2-D, or both 3-D",
        ),
        ((A, np.ones((1, 2, 5, 6), np.float32)), {}, "b must be a 2-D array or a 3-D stack of them, got 4-D"),
        ((A, np.ones((4, 6), np.float32)), {}, r"inner dimensions differ: a is \(4, 5\) and b is \(4, 6\)"),
        ((A, B.astype(np.float16)), {}, "a and b must have the same dtype, got float32 and float16"),
        ((A.astype(np.float64), B.astype(np.float64)), {}, "a has unsupported dtype float64"),
        ((A.astype(np.int32), B.astype(np.int32)), {}, "a has unsupported dtype int32"),
        ((np.ones((0, 5), np.float32), B), {}, "a must have at least one row and one column"),
        ((np.asfortranarray(np.ones((4, 5), np.float32)), B), {}, "a must be row-major with contiguous rows"),
        ((A, B[:, ::2]), {}, "b must be row-major with contiguous rows"),
        ((A, B), {"tiles": kernels.Tiles(m=0)}, "tile_m must be >= 1, got 0"),
        ((A, B), {"tiles": kernels.Tiles(n=-3)}, "tile_n must be >= 1, got -3"),
        ((A, B), {"tiles": kernels.Tiles(k=2.5)}, "tile_k must be an integer >= 1, got 2.5"),  # type: ignore[arg-type]
        ((A, B), {"tiles": kernels.Tiles(k=True)}, "tile_k must be an integer >= 1, got True"),
        ((A, B), {"tiles": {"tile_k": 0}}, "tile_k must be >= 1, got 0"),
        ((A, B), {"tiles": {"tile_z": 8}}, "tiles has unknown key"),
        ((A, B), {"tiles": (8, 8, 8)}, "tiles must be an opbench.Tiles"),
        ((A, B), {"tiles": kernels.Tiles(threads=0)}, "threads must be >= 1, got 0"),
        ((A, B), {"tiles": kernels.Tiles(threads=100_000)}, "threads must be <= 1024, got 100000"),
        ((A, B), {"tiles": kernels.Tiles(isa="sse9")}, "unknown isa 'sse9'"),
        ((A, B), {"tiles": kernels.Tiles(isa=3)}, "isa must be a kernel set's name"),  # type: ignore[arg-type]
        ((A.tolist(), B), {}, "a must be a numpy.ndarray, got list"),
        ((A, B), {"out": np.ones((4, 7), np.float32)}, r"out has shape \(4, 7\), expected \(4, 6\)"),
        ((A, B), {"out": np.ones((4, 6), np.float16)}, "out must have the dtype of a and b"),
        ((A, B.astype(">f4")), {}, "b is big-endian"),
    ],
)
def test_invalid_input_raises_value_error(args: tuple, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        kernels.gemm(*args, **kwargs)
    # A plain call of two arrays takes the one-call path (_core.gemm_now); a prepared plan, the same checks.
    with pytest.raises(ValueError, match=match):
        kernels.prepare_gemm(*args, **kwargs).output()


def test_the_plain_call_computes_what_the_plan_does() -> None:
    import ml_dtypes

    rng = np.random.default_rng(3)
    for shape_a, shape_b, dtype in [
        ((1, 1), (1, 1), np.float32),
        ((7, 5), (5, 3), np.float32),
        ((33, 70), (70, 129), np.float16),
        ((3, 9, 4), (3, 4, 11), np.float32),
        ((17, 19), (19, 23), ml_dtypes.bfloat16),
    ]:
        a, b = rng.standard_normal(shape_a).astype(dtype), rng.standard_normal(shape_b).astype(dtype)
        c = kernels.gemm(a, b)
        assert c.dtype == dtype and c.shape == (*shape_a[:-1], shape_b[-1])
        np.testing.assert_array_equal(c, kernels.prepare_gemm(a, b, tiles=kernels.Tiles()).output())
        # with out (the one-call path too): written there and returned
        out = np.full(c.shape, np.nan, dtype)
        c_out = kernels.gemm(a, b, out=out)
        assert np.shares_memory(c_out, out)
        np.testing.assert_array_equal(out, c)


def test_read_only_and_aliased_out_are_rejected() -> None:
    out = np.empty((4, 6), np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out is read-only"):
        kernels.gemm(A, B, out=out)
    sq = np.ones((5, 5), np.float32)
    with pytest.raises(ValueError, match="out must not overlap a or b"):
        kernels.gemm(sq, sq.copy(), out=sq)

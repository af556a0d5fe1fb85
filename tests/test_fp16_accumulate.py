"""GEMM with fp16 accumulation (accumulate="fp16"): each tile_k block of products summed in fp16, every FMA
rounded once to fp16, the blocks in fp32. The portable emulation (isa="ref") runs on any CPU and is checked
rounding by rounding against numpy; the AVX512-FP16 kernel, where the CPU has it, must match the emulation bit
for bit (same order of roundings) and the float64 reference within the blocked bound."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli

from opbench import kernels
from opbench.ops import gemm as gemm_op
from opbench.ops.numerics import dot_bound
from opbench.tiles import Tiles

FAST = kernels.default_tiles()["fp16_accumulate"]
SHAPES = [(1, 1, 1), (2, 3, 5), (13, 17, 19), (37, 70, 257), (61, 129, 300)]


def inputs(m: int, n: int, k: int, seed: int = 7) -> dict[str, np.ndarray]:
    return gemm_op.make_inputs(gemm_op.GemmShape(m, n, k), "fp16", seed)


def test_the_emulation_rounds_each_fma_once_to_fp16() -> None:
    # K = 2: c = fp16(a1*b1 + fp16(a0*b0)), computed by numpy in float64 (exact here) and rounded to fp16
    # directly from float64 (numpy's double -> half conversion rounds to nearest even).
    rng = np.random.default_rng(3)
    a = rng.uniform(-4, 4, (23, 2)).astype(np.float16)
    b = rng.uniform(-4, 4, (2, 29)).astype(np.float16)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    first = (a64[:, :1] * b64[:1, :]).astype(np.float16).astype(np.float64)
    want = (a64[:, 1:] * b64[1:, :] + first).astype(np.float16)
    got = kernels.gemm(
        a,
        b,
        tiles=Tiles(isa="ref", threads=2),
        accumulate="fp16",
    )
    np.testing.assert_array_equal(got, want)
    # ... which differs from fp32 accumulation somewhere, or this test would not tell them apart.
    assert np.any(kernels.gemm(a, b, tiles=Tiles(isa="ref")) != want)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("tile_k", [1, 16, 100, 1000])
def test_emulation_within_the_blocked_bound(shape: tuple[int, int, int], tile_k: int) -> None:
    inp = inputs(*shape)
    c = kernels.gemm(
        inp["a"],
        inp["b"],
        tiles=Tiles(isa="ref", k=tile_k, threads=2),
        accumulate="fp16",
    )
    ref = gemm_op.reference(gemm_op.GemmShape(*shape), inp)
    kc = min(tile_k, shape[2])
    result = gemm_op.check(gemm_op.GemmShape(*shape), c, inp, ref, "fp16", f"fp16:{kc}")
    assert result["ok"], result


def test_blocking_bounds_the_error_where_plain_fp16_stagnates() -> None:
    # Summing 4096 ones in fp16 stops at 2048 (2048 + 1 rounds back to 2048); blocks of 256 sum exactly.
    a, b = np.ones((3, 4096), np.float16), np.ones((4096, 5), np.float16)
    assert np.all(
        kernels.gemm(
            a,
            b,
            tiles=Tiles(isa="ref", k=4096),
            accumulate="fp16",
        )
        == 2048
    )
    assert np.all(
        kernels.gemm(
            a,
            b,
            tiles=Tiles(isa="ref", k=256),
            accumulate="fp16",
        )
        == 4096
    )
    # The blocked bound rejects the stagnated answer and admits the blocked one.
    shape, inp = gemm_op.GemmShape(3, 5, 4096), {"a": a, "b": b}
    ref = gemm_op.reference(shape, inp)
    stagnated = np.full((3, 5), 2048, np.float16)
    assert not gemm_op.check(shape, stagnated, inp, ref, "fp16", "fp16:256")["ok"]
    assert gemm_op.check(shape, np.full((3, 5), 4096, np.float16), inp, ref, "fp16", "fp16:256")["ok"]


def test_the_blocked_bound_grows_with_the_block() -> None:
    # sums of 4096 products of uniform [-1, 1) inputs: |C| ~ 21, sum |p| ~ 1024, sum p^2 ~ 455
    value, magnitude, squares = np.full((1, 1), 21.0), np.full((1, 1), 1024.0), np.full((1, 1), 455.0)

    def bound(acc: str) -> float:
        return float(dot_bound(value, magnitude, squares, 4096, acc, "fp32")[0, 0])

    assert bound("fp32") < bound("fp16:64") < bound("fp16:1024") < bound("fp16")
    with pytest.raises(ValueError, match="unknown accumulation"):
        dot_bound(value, magnitude, squares, 10, "fp16:0", "fp32")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"accumulate": "bf16", "tiles": Tiles(isa="ref")}, "accumulate must be 'fp32' or 'fp16'"),
        ({"accumulate": "fp16", "tiles": Tiles(isa="ref"), "dtype": np.float32}, "needs float16 inputs"),
    ],
)
def test_invalid_accumulate_raises(kwargs: dict, match: str) -> None:
    dtype = kwargs.pop("dtype", np.float16)
    with pytest.raises(ValueError, match=match):
        kernels.gemm(np.ones((2, 3), dtype), np.ones((3, 4), dtype), **kwargs)


@pytest.mark.skipif(FAST["available"], reason="this CPU has AVX512-FP16")
def test_without_avx512fp16_the_fast_path_says_why() -> None:
    with pytest.raises(ValueError, match=r"needs AVX512-FP16.*Tiles\(isa='ref'\) \(--isa ref\) emulates"):
        kernels.gemm(np.ones((2, 3), np.float16), np.ones((3, 4), np.float16), accumulate="fp16")
    if "avx2" in kernels.available_isas():
        with pytest.raises(ValueError, match="kernel set 'avx2' has none"):
            kernels.gemm(
                np.ones((2, 3), np.float16),
                np.ones((3, 4), np.float16),
                accumulate="fp16",
                tiles=Tiles(isa="avx2"),
            )


@pytest.mark.skipif(not FAST["available"], reason=f"no fast fp16 accumulation here: {FAST.get('reason')}")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("tile_k", [7, 216])
@pytest.mark.parametrize("threads", [1, 2])
def test_avx512fp16_matches_the_emulation_bit_for_bit(
    shape: tuple[int, int, int], tile_k: int, threads: int
) -> None:
    inp = inputs(*shape)
    fast = kernels.gemm(inp["a"], inp["b"], accumulate="fp16", tiles=Tiles(k=tile_k, threads=threads))
    emulated = kernels.gemm(
        inp["a"],
        inp["b"],
        tiles=Tiles(isa="ref", k=tile_k, threads=threads),
        accumulate="fp16",
    )
    np.testing.assert_array_equal(fast, emulated)
    ref = gemm_op.reference(gemm_op.GemmShape(*shape), inp)
    kc = min(tile_k, shape[2])
    assert gemm_op.check(gemm_op.GemmShape(*shape), fast, inp, ref, "fp16", f"fp16:{kc}")["ok"]


@pytest.mark.slow
def test_sweep_accumulate_fp16_records_the_blocked_bound(tmp_path: Path) -> None:
    args = "sweep gemm --m 33 --n 40 --k 300 --dtype fp16,fp32 --backend cpp --isa ref --accumulate fp16"
    proc = run_cli(
        [*args.split(), "--tile-k", "128", "--out", str(tmp_path), "--quiet", "--max-time-s", ".2"]
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(next(tmp_path.glob("gemm-*.json")).read_text())
    by_dtype = {r["dtype"]: r for r in doc["records"]}
    fp16 = by_dtype["fp16"]
    assert fp16["status"] == "ok" and fp16["verify"]["accumulate_assumed"] == "fp16:128"
    assert "fp16 accumulation" in by_dtype["fp16"]["details"]["algorithm"]
    assert by_dtype["fp16"]["verify"]["max_rel_err"] > 0  # the error is reported
    # fp32 inputs accumulate in fp32 whatever --accumulate says.
    assert by_dtype["fp32"]["verify"]["accumulate_assumed"] == "fp32"


@pytest.mark.skipif(FAST["available"], reason="this CPU has AVX512-FP16")
def test_sweep_accumulate_fp16_without_avx512fp16_is_a_usage_error(tmp_path: Path) -> None:
    proc = run_cli(["sweep", "gemm", "--dtype", "fp16", "--accumulate", "fp16", "--out", str(tmp_path)])
    assert proc.returncode == 2
    assert "--accumulate fp16: accumulate='fp16' needs AVX512-FP16" in proc.stderr
    assert "Traceback" not in proc.stderr and not list(tmp_path.iterdir())

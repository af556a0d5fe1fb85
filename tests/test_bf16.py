"""bf16 GEMM (issue 20): our kernels against float64 on odd and round shapes, on every ISA (each also forced
by OPBENCH_ISA), the AVX512-BF16 kernel where the CPU has it, its peak loop, and bf16 through a sweep."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from opbench import _core, kernels
from opbench.dtypes import parse_dtypes
from opbench.ops import gemm

BF16 = ml_dtypes.bfloat16
ISAS = kernels.available_isas()
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
    plan = kernels.prepare_gemm(inputs["a"], inputs["b"], isa=isa, threads=2)
    out = plan.output()
    assert out.dtype == np.dtype(BF16) and out.shape == (shape.m, shape.n)
    assert plan.tiles()["path"] == "blocked, bf16 pairs"
    result = gemm.check(shape, out, inputs, gemm.reference(shape, inputs), "bf16", "fp32")
    assert result["ok"], (isa, mnk, result)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize(
    "mnk_tiles",
    [((13, 31, 7), {}), ((53, 70, 301), {"tile_m": 28, "tile_n": 64, "tile_k": 33}), ((200, 97, 1025), {})],
    ids=["small", "odd-tile_k", "several-k-blocks"],
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
        out = kernels.gemm(a, b, isa=isa, threads=threads, **tiles)
        np.testing.assert_array_equal(out.astype(np.float64), exact)


@pytest.mark.parametrize("isa", ISAS)
def test_opbench_isa_forces_the_bf16_kernels(isa: str) -> None:
    script = """
import numpy as np
from opbench import kernels
from opbench.ops import gemm
assert kernels.cpu_features()["selected_isa"] == ISA
s = gemm.GemmShape(37, 45, 99)
i = gemm.make_inputs(s, "bf16", 3)
plan = kernels.prepare_gemm(i["a"], i["b"], threads=2)
assert plan.tiles()["isa"] == ISA
print(plan.tiles()["kernel"])
assert gemm.check(s, plan.output(), i, gemm.reference(s, i), "bf16", "fp32")["ok"]
""".replace("ISA", repr(isa))
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env={**os.environ, "OPBENCH_ISA": isa}
    )
    assert proc.returncode == 0, proc.stderr
    expect_dot = isa == "avx512" and HAS_BF16_DOT
    assert ("vdpbf16ps" in proc.stdout) == expect_dot, proc.stdout


def test_the_kernel_info_says_which_bf16_kernel_runs_and_why() -> None:
    for isa in ISAS:
        info = kernels.default_tiles(isa)["bf16"]
        assert info["dot_product_unit"] == (isa == "avx512" and HAS_BF16_DOT)
        assert info["dot_product_unit"] or info["reason"]
        if not info["dot_product_unit"]:
            assert "portable" in info["description"]


@pytest.mark.skipif(not HAS_BF16_DOT, reason="this CPU (or build) has no AVX512-BF16 dot product")
def test_the_bf16_dot_product_peak_is_measured_on_its_own_unit() -> None:
    gflops, kernel = kernels.fma_peak("bf16", 1, 0.02, 2)
    fp32, _ = kernels.fma_peak("fp32", 1, 0.02, 2)
    assert "vdpbf16ps" in kernel
    assert gflops > 1.2 * fp32  # two products per lane: ~2x the fp32 FMA loop on Zen 4/5
    assert kernels.compute_unit("bf16") == "bf16"


def test_bf16_inputs_are_refused_where_our_kernels_have_none() -> None:
    x = np.ones((1, 2, 5, 5), dtype=BF16)
    with pytest.raises(ValueError, match="unsupported dtype bfloat16"):
        kernels.conv2d(x, np.ones((3, 2, 3, 3), dtype=BF16))
    with pytest.raises(ValueError, match="same dtype"):
        kernels.gemm(np.ones((2, 2), dtype=BF16), np.ones((2, 2), dtype=np.float32))
    with pytest.raises(ValueError, match="accumulate='fp16' needs float16 inputs, got bfloat16"):
        kernels.gemm(np.ones((2, 2), dtype=BF16), np.ones((2, 2), dtype=BF16), accumulate="fp16")


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
    unit = "bf16 dot-product peak" if HAS_BF16_DOT else "no AVX512-BF16 on this CPU"
    assert unit in json.dumps(by["cpp"]["peak"])

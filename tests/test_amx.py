"""AMX-BF16 (issue 43): the exact tile emulator against the instruction's documented semantics on any machine,
and the CPU's tiles against the emulator, bit for bit, where it has AMX (skipped elsewhere with the reason;
failing instead under OPBENCH_REQUIRE_AMX=1, set on a machine that has AMX). The AMX kernels' GEMM, conv and
recurrent paths run on both in tests/test_bf16.py (ISAs "amx-emu" and, where present, "amx")."""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

from opbench import _core, kernels
from opbench.ops import gemm as gemm_op
from opbench.tiles import Tiles

BF16 = ml_dtypes.bfloat16
WHY_NOT = _core.cpu_info()["amx_unavailable"]
if WHY_NOT and os.environ.get("OPBENCH_REQUIRE_AMX"):
    raise RuntimeError(f"OPBENCH_REQUIRE_AMX is set but AMX cannot run: {WHY_NOT}")
needs_amx = pytest.mark.skipif(bool(WHY_NOT), reason=f"AMX-BF16 cannot run here: {WHY_NOT}")


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.astype(BF16)).view(np.uint16)


def _ftz(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float32)
    return np.where(np.abs(x) < np.finfo(np.float32).tiny, np.float32(0.0) * np.sign(x), x).astype(np.float32)


def _sdm(c: np.ndarray, a: np.ndarray, b: np.ndarray, *, pairs_apart: bool = True) -> np.ndarray:
    """TDPBF16PS as the Intel SDM describes it, in numpy float32 (independent of the C++ emulator): inputs
    with denormals read as zero; per row, an fp32 sum of the pairs' even products and one of the odd products,
    each step rounded to nearest even (the products are exact in fp32 at the exponents the tests use) and
    flushed to zero when denormal; then the two added and the total added to C, flushed likewise.
    pairs_apart=False is the older manual's reading (each product added to C in turn): a wrong model the
    tests show these inputs tell apart."""
    af = a.view(BF16).astype(np.float32)
    bf = b.view(BF16).astype(np.float32)
    af = np.where(np.abs(af) < np.finfo(np.float32).tiny, 0, af).astype(np.float32)
    bf = np.where(np.abs(bf) < np.finfo(np.float32).tiny, 0, bf).astype(np.float32)
    out = c.astype(np.float32).copy()
    for m in range(16):
        if not pairs_apart:
            acc = out[m].copy()
            for k in range(16):
                acc = _ftz(acc + af[m, 2 * k] * bf[k, 0::2])
                acc = _ftz(acc + af[m, 2 * k + 1] * bf[k, 1::2])
            out[m] = acc
            continue
        even = np.zeros(16, np.float32)
        odd = np.zeros(16, np.float32)
        for k in range(16):
            even = _ftz(even + af[m, 2 * k] * bf[k, 0::2])
            odd = _ftz(odd + af[m, 2 * k + 1] * bf[k, 1::2])
        out[m] = _ftz(out[m] + _ftz(even + odd))
    return out


def _random_tiles(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """C, A and B with signs and exponents spread over 2^-20..2^20: every product exact in fp32, and sums
    whose order shows in their rounding."""
    rng = np.random.default_rng(seed)

    def spread(shape: tuple[int, int]) -> np.ndarray:
        return rng.standard_normal(shape) * np.exp2(rng.integers(-20, 21, size=shape))

    c = spread((16, 16)).astype(np.float32)
    return c, _bits(spread((16, 32))), _bits(spread((16, 32)))


def _cancelling_tiles() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every output: even products 2^24 then -2^24, odd products 1 then 0. Added in turn to C they give 0 (the
    1 is lost against 2^24); as two partial sums they give 1."""
    a = np.zeros((16, 32), np.float32)
    b = np.zeros((16, 32), np.float32)
    a[:, 0], a[:, 1], a[:, 2] = 2.0**12, 1.0, -(2.0**12)
    b[0, 0::2], b[0, 1::2], b[1, 0::2] = 2.0**12, 1.0, 2.0**12
    return np.zeros((16, 16), np.float32), _bits(a), _bits(b)


def _same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    return bool(np.array_equal(x.view(np.uint32), y.view(np.uint32)))


@pytest.mark.parametrize("seed", range(6))
def test_the_emulator_is_the_documented_instruction_bit_for_bit(seed: int) -> None:
    c, a, b = _random_tiles(seed)
    assert _same_bits(_core.amx_tile_dot(c, a, b, True), _sdm(c, a, b))


def test_the_emulator_adds_a_pairs_even_and_odd_products_apart() -> None:
    c, a, b = _cancelling_tiles()
    out = _core.amx_tile_dot(c, a, b, True)
    assert _same_bits(out, _sdm(c, a, b)) and np.all(out == 1.0)
    # the check can fail: the older manual's order gives 0 on these inputs, and so would an emulator using it
    assert np.all(_sdm(c, a, b, pairs_apart=False) == 0.0)


def test_the_emulator_reads_denormal_inputs_as_zero_and_flushes_denormal_results() -> None:
    tiny = np.finfo(np.float32).tiny  # 2^-126
    a = np.zeros((16, 32), np.float32)
    b = np.zeros((16, 32), np.float32)
    a[0, 0], b[0, 0] = tiny / 4, 1.0  # a denormal bf16 input: its product counts as zero
    a[1, 0], b[0, 2] = 2.0**-70, 2.0**-70  # a product below 2^-126: flushed
    a[2, 0], b[0, 4] = 1.0, 1.0
    c = np.zeros((16, 16), np.float32)
    c[2, 2] = -1.0 + 2.0**-23  # 1 + C leaves 2^-23: normal, kept
    c[3, 3] = tiny / 2  # a denormal C: C + 0 is denormal, flushed
    out = _core.amx_tile_dot(c, _bits(a), _bits(b), True)
    assert out[0, 0] == 0 and out[1, 1] == 0 and out[2, 2] == np.float32(2.0**-23) and out[3, 3] == 0
    assert _same_bits(out, _sdm(c, _bits(a), _bits(b)))


def test_tile_shapes_are_checked() -> None:
    c, a, b = _random_tiles(0)
    with pytest.raises(ValueError, match="a must be 16 x 32"):
        _core.amx_tile_dot(c, a[:8], b, True)


@needs_amx
@pytest.mark.parametrize("seed", range(20))
def test_the_cpus_tiles_match_the_emulator_bit_for_bit(seed: int) -> None:
    c, a, b = _random_tiles(seed)
    assert _same_bits(_core.amx_tile_dot(c, a, b, False), _core.amx_tile_dot(c, a, b, True))


@needs_amx
def test_the_cpus_tiles_order_cancellations_and_denormals_as_the_emulator() -> None:
    for c, a, b in (_cancelling_tiles(), _random_tiles(99)):
        assert _same_bits(_core.amx_tile_dot(c, a, b, False), _core.amx_tile_dot(c, a, b, True))
    a = np.zeros((16, 32), np.float32)
    a[0, 0], a[1, 0] = np.finfo(np.float32).tiny / 4, 2.0**-70
    b = np.full((16, 32), 2.0**-70, np.float32)
    c = np.full((16, 16), np.finfo(np.float32).tiny / 2, np.float32)
    a16, b16 = _bits(a), _bits(b)
    assert _same_bits(_core.amx_tile_dot(c, a16, b16, False), _core.amx_tile_dot(c, a16, b16, True))


@needs_amx
@pytest.mark.parametrize(
    "mnk", [(1, 1, 1), (13, 31, 7), (33, 65, 131), (64, 64, 64), (97, 45, 1031), (300, 200, 700)]
)
def test_the_amx_gemm_is_the_emulated_gemm_bit_for_bit(mnk: tuple[int, int, int]) -> None:
    m, n, k = mnk
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((m, k)).astype(BF16)
    b = rng.standard_normal((k, n)).astype(BF16)
    for threads in (1, 3):
        real = kernels.gemm(a, b, tiles=Tiles(isa="amx", threads=threads))
        emulated = kernels.gemm(a, b, tiles=Tiles(isa="amx-emu", threads=threads))
        assert np.array_equal(real.view(np.uint16), emulated.view(np.uint16)), (mnk, threads)


# (batch, m, n, k): products dealt out whole and in blocks of rows (101 rows on 2 threads), odd edges
BATCHED = [(3, 129, 16, 70), (5, 17, 31, 13), (1, 101, 33, 47), (13, 64, 64, 32)]


@pytest.mark.parametrize("dims", BATCHED, ids=lambda d: "x".join(map(str, d)))
def test_batched_bf16_on_the_amx_kernels(dims: tuple[int, int, int, int]) -> None:
    """A stack of products on the emulated tiles within the float64 bound, and on the CPU's tiles bit for bit
    the same, on 1-3 threads."""
    b, m, n, k = dims
    shape = gemm_op.GemmShape(m, n, k, b)
    inp = gemm_op.make_inputs(shape, "bf16", 4)
    if b == 1:
        inp = {name: x[None] for name, x in inp.items()}
    for threads in (1, 2, 3):
        emulated = kernels.gemm(inp["a"], inp["b"], tiles=Tiles(isa="amx-emu", threads=threads))
        assert gemm_op.check(shape, emulated, inp, gemm_op.reference(shape, inp), "bf16", "fp32")["ok"]
        if not WHY_NOT:
            real = kernels.gemm(inp["a"], inp["b"], tiles=Tiles(isa="amx", threads=threads))
            assert np.array_equal(real.view(np.uint16), emulated.view(np.uint16)), (dims, threads)


def test_amx_says_why_it_cannot_run() -> None:
    if WHY_NOT:
        refused = "isa 'amx' is not supported by this CPU: " + WHY_NOT.split(" (")[0]
        with pytest.raises(ValueError, match=refused):
            kernels.gemm(np.ones((2, 2), BF16), np.ones((2, 2), BF16), tiles=Tiles(isa="amx"))
        assert "amx" not in kernels.available_isas()
    else:
        assert kernels.available_isas()[0] == "amx"
    assert "amx-emu" not in kernels.available_isas() and "amx-emu" in kernels.known_isas()

"""The portable fp16 <-> fp32 conversions (used by the reference kernel on CPUs without F16C) are exact
and round to nearest even, bit for bit as numpy does."""

from __future__ import annotations

import numpy as np

from opbench import _core


def test_every_half_widens_exactly() -> None:
    bits = np.arange(65536, dtype=np.uint16)
    got = _core.f16_bits_to_f32(bits)
    want = bits.view(np.float16).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


def test_narrowing_rounds_like_numpy() -> None:
    rng = np.random.default_rng(0)
    halves = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    finite = halves[np.isfinite(halves)]
    # Every half, the midpoints between neighbours (ties), values just either side of them, overflow and
    # underflow regions, subnormals and random floats over the whole exponent range.
    mids = ((finite[:-1].astype(np.float64) + finite[1:]) / 2).astype(np.float32)
    near = np.concatenate([np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf))])
    special = np.array(
        [
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            65504,
            65519.99,
            65520,
            65536,
            1e9,
            2**-24,
            2**-25,
            2**-25 * 1.0000001,
            2**-26,
            3 * 2**-26,
            1e-30,
        ],
        np.float32,
    )
    rand = (rng.standard_normal(200_000) * np.exp2(rng.uniform(-30, 20, 200_000))).astype(np.float32)
    x = np.concatenate([finite, mids, near, special, -special, rand])
    got = _core.f32_to_f16_bits(x)
    with np.errstate(over="ignore"):  # values past 65520 overflow to inf on purpose
        want = x.astype(np.float16).view(np.uint16)
    assert np.array_equal(got, want)
    nan = _core.f32_to_f16_bits(np.array([np.nan], np.float32))
    assert np.isnan(nan.view(np.float16)).all()

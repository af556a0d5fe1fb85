"""Error bounds shared by the operators' verification: the dot-product bound (worst case and statistical),
and the comparison of an output with its float64 reference.

Why two bounds. The classic worst case, gamma_K(u) * sum|products|, is tight for short sums in fp32 but has
the wrong scale elsewhere: sum|products| is about sqrt(K) times |C| for inputs of random sign, and gamma_K
reaches 1 once K*u nears 1/2 (fp16 from K ~ 1000, bf16 from K ~ 128), so it accepted any answer of the right
magnitude: a negated one included. A sum rounded at each step in unit roundoff u makes the error
    e = sum_t delta_t s_t,   |delta_t| <= u,   s_t the partial sums,
and with the rounding errors delta_t independent and of mean zero (round to nearest), Hoeffding's
inequality gives |e| <= lambda u sqrt(sum_t s_t^2) with probability at least 1 - 2 exp(-lambda^2 / 2)
(Higham and Mary, SIAM J. Sci. Comput. 2019, take the same route). The partial sums depend on the order a
kernel sums in, which we do not know; for opbench's inputs (independent, uniformly drawn, so the products of
one output are exchangeable) every order that does not look at the values has the same expectation, which
the sequential chain (the largest partial sums of any summation tree) bounds:
    E sum_{t<=L} s_t^2 = m^2 L(L+1)(2L+1)/6 + v [K L(L+1)/2 - L(L+1)(2L+1)/6] / (K-1)
for a chain of L of the K products (mean m = C/K, variance v = sum p^2/K - m^2), per chain, plus sum p^2 for
products rounded before they are added. The bound is then
    min(worst case, LAMBDA u sqrt(V)),
and a correct answer fails it only if its rounding errors line up against the odds. LAMBDA = 10: the
Hoeffding tail is 2e-22 per element; the largest error seen on 1,000+ emulated outputs of each kind
(sequential, pairwise and blocked sums in fp16, bf16 and fp32, K = 16 to 16,384;
benchmarks/verification_power.py) is 0.23 of the bound. The rounding of the sum to the output format adds
2 u_out |C| (OUTPUT_ROUNDINGS; not u_out sum|products|: the old bound's second loss of scale, which let bf16
outputs pass 10% errors).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import numpy as np

from opbench.dtypes import NUMPY_DTYPES, UNIT_ROUNDOFF, Array, Inputs, Output, finfo
from opbench.record_blocks import VerifyBlock

# Standard deviations (in Hoeffding's scale u * sqrt(V)) a correct sum's error may reach.
LAMBDA = 10.0
# Roundings of the sum to the output format allowed: one to nearest is at most u_out |C|; two leave room for a
# library that truncates (bf16 as the top half of an fp32) or rounds twice (through fp32 into 16 bits).
OUTPUT_ROUNDINGS = 2.0


def gamma(k: int, unit: float) -> float:
    """gamma_k = k*u / (1 - k*u), the classic bound on k accumulated roundings (capped at 1)."""
    ku = k * unit
    return ku / (1.0 - ku) if ku < 0.5 else 1.0


def tiny(output_dtype: str) -> float:
    """Half the output format's smallest subnormal: below the normal range, rounding error is absolute."""
    return float(finfo(output_dtype).smallest_subnormal) / 2


def accumulation(accumulate: str) -> tuple[str, int | None]:
    """'fp32', 'fp16' or 'bf16' (one precision for the whole sum), or 'fp16:B' / 'bf16:B' (blocks of B
    products summed in that precision, the block sums in fp32: opbench's fp16-accumulating kernel with
    tile_k = B) -> (precision, B or None)."""
    precision, _, block = accumulate.partition(":")
    if precision not in UNIT_ROUNDOFF or (block and (not block.isdigit() or int(block) < 1)):
        raise ValueError(f"unknown accumulation {accumulate!r} (expected fp32, fp16, bf16 or fp16:BLOCK)")
    return precision, int(block) if block else None


def chain_squares(value: Array, squares: Array, k: int, chain: int) -> Array:
    """Expected sum of squared partial sums of ceil(k/chain) sequential chains of `chain` products each,
    drawn from the k products of an output (their sum `value`, their sum of squares at most `squares`),
    plus `squares` for the products' own rounding (the model in the module docstring)."""
    length = min(chain, k)
    mean = value / k
    var = np.maximum(squares / k - mean * mean, 0.0)
    l1, l2, l3 = length, length * (length + 1) / 2, length * (length + 1) * (2 * length + 1) / 6
    spread = var * (k * l2 - l3) / (k - 1) if k > 1 else 0.0
    return -(-k // l1) * (mean * mean * l3 + spread) + squares


def squares_bound(row_max: Array | float, col_max: Array | float, magnitude: Array) -> Array:
    """An upper bound on sum(products^2) of each output from the largest |operand| on each side:
    sum p^2 <= max|p| * sum|p| <= max|a| max|b| * magnitude (a float64 product fewer than the exact sum;
    about 2.3x it for uniform inputs, 1.5x in the bound)."""
    return row_max * col_max * magnitude


def accumulation_error(value: Array, magnitude: Array, squares: Array, k: int, accumulate: str) -> Array:
    """Bound on |sum computed with `accumulate` - exact sum| of k products per output: the smaller of the
    worst case and the statistical bound (module docstring), plus the absolute error of products that
    underflow a 16-bit accumulator."""
    precision, block = accumulation(accumulate)
    u = UNIT_ROUNDOFF[precision]
    chain = k if block is None else min(block, k)
    stat = LAMBDA * u * np.sqrt(chain_squares(value, squares, k, chain))
    if block is None:
        worst = gamma(k, u) * magnitude
    else:
        blocks = -(-k // chain)
        worst = ((1.0 + gamma(chain, u)) * (1.0 + gamma(blocks, UNIT_ROUNDOFF["fp32"])) - 1.0) * magnitude
        # The block sums meet in fp32: at most gamma_blocks(fp32) of the magnitude on top.
        stat = stat + gamma(blocks, UNIT_ROUNDOFF["fp32"]) * magnitude
    underflow = k * tiny(precision) if precision != "fp32" else 0.0
    return np.minimum(worst, stat) + underflow


def dot_bound(
    value: Array,
    magnitude: Array,
    squares: Array,
    k: int,
    accumulate: str,
    output_dtype: str,
) -> Array:
    """Bound on |output - exact| for sums of k products accumulated as `accumulate` and rounded to the output
    format: with A the accumulation error (accumulation_error) and r = OUTPUT_ROUNDINGS u_out,
        A (1 + r) + r |C| + tiny_out.
    `value` is the exact sum C (the float64 reference), `magnitude` sum|products|, `squares` sum products^2
    or an upper bound (squares_bound)."""
    acc = accumulation_error(value, magnitude, squares, k, accumulate)
    r = OUTPUT_ROUNDINGS * UNIT_ROUNDOFF[output_dtype]
    return acc * (1.0 + r) + r * np.abs(value) + tiny(output_dtype)


def compare(
    outputs: dict[str, Array], refs: dict[str, Array], bounds: dict[str, Array], dtype: str
) -> VerifyBlock:
    """Check each named output against its reference and bound. Returns {'ok', 'max_err_ratio' (largest
    |err| / bound; <= 1 passes), 'max_rel_err' (largest |err| / max |ref|), 'worst' (which output)}.
    Every output must be in the case's dtype: one in another format was computed in another precision (a
    layer that quietly ran in fp32 for a bf16 case), which the bound for this dtype would pass."""
    worst_ratio, worst_rel, worst = 0.0, 0.0, ""
    expected = np.dtype(NUMPY_DTYPES[dtype])
    for name, ref in refs.items():
        out = outputs[name]
        problem = None
        if out.shape != ref.shape:
            problem = f"{name} has shape {out.shape}, expected {ref.shape}"
        elif out.dtype != expected:
            problem = (
                f"{name} came back as {out.dtype}, not {expected} ({dtype}): computed in another precision"
            )
        if problem is not None:
            return {"ok": False, "reason": problem, "max_err_ratio": None, "max_rel_err": None}
        out64 = out.astype(np.float64)
        if not np.all(np.isfinite(out64)):
            return {
                "ok": False,
                "reason": f"{name} contains inf or NaN",
                "max_err_ratio": None,
                "max_rel_err": None,
            }
        err = np.abs(out64 - ref)
        ratio = float(np.max(err / bounds[name])) if err.size else 0.0
        if ratio >= worst_ratio:
            worst_ratio, worst = ratio, name
        if err.size:
            worst_rel = max(worst_rel, float(np.max(err)) / (float(np.max(np.abs(ref))) or 1.0))
    return {"ok": worst_ratio <= 1.0, "max_err_ratio": worst_ratio, "max_rel_err": worst_rel, "worst": worst}


S = TypeVar("S")
S_contra = TypeVar("S_contra", contravariant=True)
R = TypeVar("R")


class Check(Protocol[S_contra]):
    def __call__(
        self,
        shape: S_contra,
        output: Output,
        inputs: Inputs,
        ref: Any,
        dtype: str,
        accumulate: str,
        bounds: dict[str, Array] | None = None,
    ) -> VerifyBlock: ...


def checker(
    error_bounds: Callable[[S, Inputs, R, str, str], dict[str, Array]],
    named_outputs: Callable[[S, Output], dict[str, Output]],
    answers: Callable[[R], dict[str, Array]],
) -> Check[S]:
    """An op's check(shape, output, inputs, ref, dtype, accumulate, bounds=None): the output's named arrays
    (named_outputs) compared with the float64 reference's (`answers`) within error_bounds for the precision
    the sums are assumed in (`bounds`: error_bounds, if already computed)."""

    def check(
        shape: S,
        output: Output,
        inputs: Inputs,
        ref: R,
        dtype: str,
        accumulate: str,
        bounds: dict[str, Array] | None = None,
    ) -> VerifyBlock:
        outs = {name: np.asarray(value) for name, value in named_outputs(shape, output).items()}
        return compare(
            outs, answers(ref), bounds or error_bounds(shape, inputs, ref, dtype, accumulate), dtype
        )

    return check

"""What the recurrent ops' backward passes (`rnn:bwd`, `gru:bwd`, `lstm:bwd`) share: backpropagation
through time for upstream gradients dy (T x B x H), dh_n and (LSTM) dc_n, giving (dx, dw_ih, dw_hh, db_ih,
db_hh, dh0[, dc0]) in PyTorch's layouts. This module binds them onto each forward's Op
(RNN, GRU, LSTM: ops/base.py backward_of).

FLOPs = 2x the forward's (BPTT: the recurrent gradient dZ W_hh per step, and dW_hh, dW_ih and dx over all
steps, four GEMMs of the forward's two sizes).

The check's bound: the float64 BPTT run again on absolute values (every product of magnitudes, every
difference a sum of magnitudes) gives each gradient's sum of |terms| M, and on squares its sum of terms^2 S;
an implementation that accumulates in unit roundoff u, stores y in store_dtype and keeps its activations in
fp32 stays within
    SAFETY * min((e_n(u) + e_n(u_fp32) + e_8T(u_store)) * M,
                 LAMBDA (sqrt(n) (u + u_fp32) + sqrt(8 T) u_store) sqrt(S)) + u_out |gradient| + tiny,
    n = T (G + I + H) + T B + 8 T,
a first-order count of every rounding on the longest chain (the steps' recurrent products, the sums over
all steps, and the forward's own errors in the saved activations), where e_n(u) is the relative error of a
term through n roundings: min(gamma_n(u), LAMBDA sqrt(n) u) (term_error). The final rounding to the output
format is relative to the gradient itself, not to M (which is about sqrt(terms) times larger).

A ReLU RNN's derivative factors are 0 or 1, exact unless a unit switches: a unit whose pre-activation lies
within LAMBDA times the error scale of the implementation's own forward (Switching, for the unit its sums
imply: forward_unit) may come out on either side, and the terms through it count whole, at most their sum
of |terms| and within LAMBDA times the root of their sum of squares. dW_hh also carries the forward's errors
in the saved h. (Until 2026-11-27 a ReLU RNN was bounded by the worst case alone, which grows as M: about
sqrt(H)^T times the gradient, so that at T = 16 even fp32 let negated gradients pass.)

"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypedDict, cast

import numpy as np

from opbench import kernels
from opbench.dtypes import ITEMSIZE, NUMPY_DTYPES, UNIT_ROUNDOFF, Array, Inputs, Output
from opbench.ops import gru, lstm, rnn, spot
from opbench.ops import recurrent as fwd
from opbench.ops.base import Op, backward_of
from opbench.ops.numerics import LAMBDA, checker, gamma, tiny
from opbench.tiles import Tiles

SAFETY = 2.0
GRAD_NAMES = ("dx", "dw_ih", "dw_hh", "db_ih", "db_hh", "dh0", "dc0")


def flops(shape: fwd.RecurrentShape) -> int:
    return 2 * fwd.flops(shape)


def _grad_elems(shape: fwd.RecurrentShape) -> int:
    t, b, i, h, g = shape.seq_len, shape.batch, shape.input_size, shape.hidden, shape.GATES * shape.hidden
    return t * b * i + g * (i + h) + 2 * g + shape.STATES * b * h


def min_bytes(shape: fwd.RecurrentShape, dtype: str) -> int:
    """Compulsory traffic: the forward's inputs and y, the upstream gradients read once; the gradients
    written once (the saved activations, fp32, read once)."""
    t, b, h, g = shape.seq_len, shape.batch, shape.hidden, shape.GATES * shape.hidden
    upstream = t * b * h + shape.STATES * b * h
    saved = 4 * t * b * (g + 2 * h) if shape.STATES == 2 else 4 * t * b * (g + h) if shape.GATES == 3 else 0
    return ITEMSIZE[dtype] * (fwd._io_elems(shape) + upstream + _grad_elems(shape)) + saved


def memory_bytes(shape: fwd.RecurrentShape, dtype: str, reference: bool = True) -> int:
    """The forward's and our saved activations, upstream and gradient arrays (x3 copies), and, when
    verifying, the float64 forward, its saved activations and two BPTT runs."""
    t, b, h, g = shape.seq_len, shape.batch, shape.hidden, shape.GATES * shape.hidden
    arrays = fwd._io_elems(shape) + t * b * h + 2 * _grad_elems(shape)
    saved = t * b * (g + 2 * h)
    relu = 2 * _grad_elems(shape) + t * b * h if fwd.cell_of(shape) == "rnn_relu" else 0
    ref = 8 * (6 * arrays + 4 * saved + relu) if reference else 0
    return 3 * ITEMSIZE[dtype] * arrays + 4 * (saved + 2 * t * b * g) + ref


def verify_cost_flops(shape: fwd.RecurrentShape) -> int:
    """The float64 forward and the BPTT runs: values, magnitudes and squares; a ReLU's forward error
    scales and the magnitudes and squares of the units that may switch besides."""
    return (7 if fwd.cell_of(shape) == "rnn_relu" else 3) * flops(shape)


def make_inputs(shape: fwd.RecurrentShape, dtype: str, seed: int) -> dict[str, Array]:
    """The forward's inputs (the same values for the same seed) and the upstream gradients dy, dh_n and
    (LSTM) dc_n, uniform in [-1, 1)."""
    inputs = fwd.make_inputs(shape, dtype, seed)
    rng = np.random.default_rng([seed, 1])
    t, b, h = shape.seq_len, shape.batch, shape.hidden
    np_dtype = NUMPY_DTYPES[dtype]
    inputs["dy"] = rng.uniform(-1.0, 1.0, size=(t, b, h)).astype(np_dtype)
    inputs["dh_n"] = rng.uniform(-1.0, 1.0, size=(b, h)).astype(np_dtype)
    if shape.STATES == 2:
        inputs["dc_n"] = rng.uniform(-1.0, 1.0, size=(b, h)).astype(np_dtype)
    return inputs


class BpttReference(TypedDict, total=False):
    """The float64 gradients by name and, beside each, its sums of |terms| and of terms^2 (the bound); the
    precision the inputs were stored in; for ReLU what the units that may switch add (Switching)."""

    grads: dict[str, Array]
    magnitude: dict[str, Array]
    squares: dict[str, Array]
    store: str
    switching: Switching


def _sigmoid(z: Array) -> Array:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def _forward64(shape: fwd.RecurrentShape, f64: dict[str, Array]) -> dict[str, Array]:
    """The float64 forward keeping what BPTT needs: y, h_prev per step, and the cell's activations (those
    its cell has)."""
    cell = fwd.cell_of(shape)
    t_len, h = shape.seq_len, shape.hidden
    w_hh = f64["w_hh"]
    gx = (f64["x"] @ f64["w_ih"].T) + f64["b_ih"]  # T x B x G
    hs = f64["h0"]
    cs = f64.get("c0", np.zeros_like(hs))
    saved: dict[str, list[Array]] = {k: [] for k in ("h_prev", "y", "gates", "c_prev", "c", "q", "z")}
    for t in range(t_len):
        saved["h_prev"].append(hs)
        gh = hs @ w_hh.T + f64["b_hh"]
        if cell == "lstm":
            z = gx[t] + gh
            i, f, g = _sigmoid(z[:, :h]), _sigmoid(z[:, h : 2 * h]), np.tanh(z[:, 2 * h : 3 * h])
            o = _sigmoid(z[:, 3 * h :])
            saved["c_prev"].append(cs)
            cs = f * cs + i * g
            saved["c"].append(cs)
            saved["gates"].append(np.concatenate([i, f, g, o], axis=1))
            hs = o * np.tanh(cs)
        elif cell == "gru":
            r = _sigmoid(gx[t][:, :h] + gh[:, :h])
            zg = _sigmoid(gx[t][:, h : 2 * h] + gh[:, h : 2 * h])
            q = gh[:, 2 * h :]
            n = np.tanh(gx[t][:, 2 * h :] + r * q)
            saved["gates"].append(np.concatenate([r, zg, n], axis=1))
            saved["q"].append(q)
            hs = n + zg * (hs - n)
        else:
            z = gx[t] + gh
            hs = np.maximum(z, 0.0) if cell == "rnn_relu" else np.tanh(z)
            if cell == "rnn_relu":  # the pre-activations: which units may switch
                saved["z"].append(z)
        saved["y"].append(hs)
    return {k: np.stack(v) for k, v in saved.items() if v}


def _bptt(
    shape: fwd.RecurrentShape,
    f64: dict[str, Array],
    fw: dict[str, Array],
    mode: str = "value",
    margin: Array | float = 0.0,
    keep: dict[str, Array] | None = None,
) -> dict[str, Array]:
    """BPTT in float64 over the expansion of each gradient into terms (products of factors along a path):
    "value" the gradients; "abs" every product of magnitudes, every difference a sum of them (each
    gradient's sum of |terms| M); "square" every factor squared, every difference split in two terms (each
    gradient's sum of terms^2 S), for the bound. `margin` (ReLU, T x B x H): a unit counts as active where
    its pre-activation z > -margin (a superset of the active units for margin > 0, a subset for margin < 0:
    the units a correct implementation's own errors may switch). `keep` receives the gate gradients dgx
    ((T B) x G)."""
    ways: dict[str, Callable[[Array], Array]] = {"value": lambda v: v, "abs": np.abs, "square": np.square}
    a = ways[mode]

    def diff(p: Array, q: Array) -> Array:
        return p - q if mode == "value" else a(p) + a(q)

    def one_minus(v: Array) -> Array:  # a derivative factor: a difference too (cancellation)
        return diff(np.ones_like(v), v)

    cell = fwd.cell_of(shape)
    t_len, b, h = shape.seq_len, shape.batch, shape.hidden
    w_hh, w_ih = a(f64["w_hh"]), a(f64["w_ih"])
    dh = a(f64["dh_n"]).copy()
    dc = a(f64["dc_n"]).copy() if cell == "lstm" else np.zeros(0)  # the cell state's (an LSTM's alone)
    g = shape.GATES * h
    dgx = np.zeros((t_len, b, g))
    dgh = np.zeros((t_len, b, g)) if cell == "gru" else dgx
    for t in range(t_len - 1, -1, -1):
        d = dh + a(f64["dy"][t])
        if cell == "lstm":
            i, f, gg, o = (fw["gates"][t][:, k * h : (k + 1) * h] for k in range(4))
            tc = np.tanh(fw["c"][t])
            dcell = dc + d * a(o) * one_minus(tc * tc)
            dgx[t] = np.concatenate(
                [dcell * a(gg) * a(i) * one_minus(i), dcell * a(fw["c_prev"][t]) * a(f) * one_minus(f),
                 dcell * a(i) * one_minus(gg * gg), d * a(tc) * a(o) * one_minus(o)],
                axis=1,
            )  # fmt: skip
            dc = dcell * a(f)
            dh = dgx[t] @ w_hh
        elif cell == "gru":
            r, z, n = (fw["gates"][t][:, k * h : (k + 1) * h] for k in range(3))
            q = fw["q"][t]
            dn_pre = d * one_minus(z) * one_minus(n * n)
            dz_pre = d * diff(fw["h_prev"][t], n) * a(z) * one_minus(z)
            dr_pre = dn_pre * a(q) * a(r) * one_minus(r)
            dgx[t] = np.concatenate([dr_pre, dz_pre, dn_pre], axis=1)
            dgh[t] = np.concatenate([dr_pre, dz_pre, dn_pre * a(r)], axis=1)
            dh = d * a(z) + dgh[t] @ w_hh
        else:
            y = fw["y"][t]
            if cell == "rnn_relu":
                dgx[t] = d * (
                    (y > 0)
                    if mode == "value"
                    else (fw["z"][t] > -(margin[t] if isinstance(margin, np.ndarray) else margin))
                )
            else:
                dgx[t] = d * one_minus(y * y)
            dh = dgx[t] @ w_hh
    x = a(f64["x"]).reshape(t_len * b, -1)
    h_prev = a(fw["h_prev"]).reshape(t_len * b, h)
    gx2, gh2 = dgx.reshape(t_len * b, g), dgh.reshape(t_len * b, g)
    if keep is not None:
        keep["dgx"] = gx2
    out = {
        "dx": (gx2 @ w_ih).reshape(t_len, b, -1),
        "dw_ih": gx2.T @ x,
        "dw_hh": gh2.T @ h_prev,
        "db_ih": gx2.sum(axis=0),
        "db_hh": gh2.sum(axis=0),
        "dh0": dh,
    }
    if cell == "lstm":
        out["dc0"] = dc
    return out


class Switching:
    """ReLU: what the units a correct forward may switch add to the bound, for the forward of a given unit
    (ops/recurrent.py: UNITS), computed when a bound first asks for that unit. A unit whose pre-activation z
    lies within LAMBDA times that forward's error scale of 0 (ops/rnn.py's scales) may come out on either
    side: the terms through it are an error of a whole term, not a rounding of one. Per gradient: their sum
    of |terms| ("switching") and of terms^2 ("switching_squares"), and dW_hh's share of the forward's errors
    in the saved h ("forward_error")."""

    def __init__(self, shape: fwd.RecurrentShape, inputs: dict[str, Array], f64: dict[str, Array],
                 fw: dict[str, Array], dgx: Array) -> None:  # fmt: skip
        self._shape, self._inputs, self._f64, self._fw, self._dgx = shape, inputs, f64, fw, dgx
        self._forward: fwd.RecurrentReference | None = None  # ops/rnn.py's reference: its scales by unit
        self._cache: dict[str, dict[str, dict[str, Array]]] = {}

    def of(self, unit: str) -> dict[str, dict[str, Array]]:
        if unit not in self._cache:
            shape, f64, fw = self._shape, self._f64, self._fw
            if self._forward is None:
                self._forward = rnn.reference(cast(rnn.RnnShape, shape), self._inputs)
            scales = self._forward.scales(unit)
            margin = LAMBDA * scales["z"]
            outer, inner = _bptt(shape, f64, fw, "abs", margin), _bptt(shape, f64, fw, "abs", -margin)
            outer_sq, inner_sq = (
                _bptt(shape, f64, fw, "square", margin),
                _bptt(shape, f64, fw, "square", -margin),
            )
            # dW_hh sums dgx^T h_prev over steps and rows, and each saved h_prev is a correct forward's,
            # off by up to LAMBDA times its error scale (h0 is exact)
            h_err = np.concatenate([np.zeros((1, *scales["y"].shape[1:])), LAMBDA * scales["y"][:-1]])
            self._cache[unit] = {
                "switching": {n: outer[n] - inner[n] for n in outer},
                "switching_squares": {n: np.maximum(outer_sq[n] - inner_sq[n], 0.0) for n in outer},
                "forward_error": {"dw_hh": np.abs(self._dgx).T @ h_err.reshape(-1, shape.hidden)},
            }
        return self._cache[unit]


def reference(shape: fwd.RecurrentShape, inputs: dict[str, Array]) -> BpttReference:
    """The float64 gradients and, beside them, the sums of |terms| and of terms^2 behind each (the bound);
    for ReLU what units that may switch add (Switching)."""
    f64 = {k: v.astype(np.float64) for k, v in inputs.items()}
    fw = _forward64(shape, f64)
    kept: dict[str, Array] = {}
    out: BpttReference = {
        "grads": _bptt(shape, f64, fw, "value", keep=kept),
        "magnitude": _bptt(shape, f64, fw, "abs"),
        "squares": _bptt(shape, f64, fw, "square"),
        "store": fwd.store_of(inputs),
    }
    if fwd.cell_of(shape) == "rnn_relu":
        out["switching"] = Switching(shape, inputs, f64, fw, kept["dgx"])
    return out


def forward_unit(accumulate: str, store: str) -> str:
    """The forward unit (ops/recurrent.py: UNITS) of an implementation whose backward sums in `accumulate`:
    one that sums in the stored precision computes its cells in it too; one that sums in fp32 is taken to
    compute its cells in fp32 (a cell in the stored precision rounds z, which cannot change its sign)."""
    sums, _, act = accumulate.partition("+act=")
    base = sums.partition(":")[0]
    unit = base if base == store and base in ("fp16", "bf16") else "fp32"
    return f"{unit}+act={act}" if act else unit


def grad_bounds(
    shape: fwd.RecurrentShape, ref: BpttReference, dtype: str, accumulate: str, names: tuple[str, ...]
) -> dict[str, Array]:
    """The bound of each gradient in `names` (module docstring): the relative error of any term of its sum
    of |terms| M, through at most n = T (G + I + H) + T B + 8 T roundings, plus its rounding to the output
    format."""
    t_len, g = shape.seq_len, shape.GATES * shape.hidden
    n_eff = t_len * (g + shape.input_size + shape.hidden) + t_len * shape.batch + 8 * t_len
    sums, _, act = accumulate.partition("+act=")
    u, u32, u_store = (
        UNIT_ROUNDOFF[sums.partition(":")[0]],
        UNIT_ROUNDOFF["fp32"],
        UNIT_ROUNDOFF[ref["store"]],
    )
    # activations off by an absolute e (Backend.activation_error): each saved activation and each
    # derivative factor built from them (1 - y^2 counted as 1 + y^2) off by at most 2e relative
    acts = 2 * t_len * float(act) if act else 0.0
    u_out, floor = UNIT_ROUNDOFF[dtype], tiny(dtype)
    worst = term_error(n_eff, u) + term_error(n_eff, u32) + term_error(8 * t_len, u_store) + acts
    stat = LAMBDA * (math.sqrt(n_eff) * (u + u32) + math.sqrt(8 * t_len) * u_store) + acts
    bounds = {n: np.minimum(worst * ref["magnitude"][n], stat * np.sqrt(ref["squares"][n])) for n in names}
    if "switching" in ref:
        # ReLU: the terms through units that may switch count whole, at most their sum of |terms| and, like
        # any sum of many terms of random sign, within LAMBDA times the root of their sum of squares
        extra = ref["switching"].of(forward_unit(accumulate, ref["store"]))
        for n in names:
            bounds[n] = bounds[n] + np.minimum(
                extra["switching"][n], LAMBDA * np.sqrt(extra["switching_squares"][n])
            )
            if n in extra["forward_error"]:
                bounds[n] = bounds[n] + extra["forward_error"][n]
    return {n: SAFETY * bounds[n] + u_out * np.abs(ref["grads"][n]) + floor for n in names}


def term_error(n: int, u: float) -> float:
    """Relative error of one term that passes through n roundings of unit u: the worst case gamma_n, or with
    independent roundings of mean zero lambda sqrt(n) u (Higham and Mary 2019, Theorem 2.8: probability at
    least 1 - 2n exp(-lambda^2 (1-u)^2 / 2) for every term at once), whichever is smaller."""
    return min(gamma(n, u), LAMBDA * math.sqrt(n) * u * (1.0 + u))


def error_bounds(
    shape: fwd.RecurrentShape, inputs: dict[str, Array], ref: BpttReference, dtype: str, accumulate: str
) -> dict[str, Array]:
    """What check() compares with: every gradient's bound."""
    return grad_bounds(shape, ref, dtype, accumulate, GRAD_NAMES[: len(ref["grads"])])


# The gradients of each batch row alone (the weights' gradients sum over the rows).
PER_ROW = {"dx": 1, "dh0": 0, "dc0": 0}


def spot_cost_flops(shape: fwd.RecurrentShape) -> int:
    """float64 work of a spot check: the BPTT of SPOT_ROWS batch rows."""
    return verify_cost_flops(replace(shape, batch=min(shape.batch, spot.SPOT_ROWS)))


def spot_part(
    shape: fwd.RecurrentShape, inputs: dict[str, Array], dtype: str, accumulate: str, seed: int
) -> spot.Part:
    """Seeded batch rows of dx, dh0 (and dc0), their BPTT computed alone (ops/spot.py); the weights'
    gradients sum over every row and are checked in full on the first call only."""
    rows = spot.pick(shape.batch, seed)
    ref = reference(replace(shape, batch=len(rows)), fwd.batch_rows(inputs, rows))
    names = tuple(n for n in GRAD_NAMES[: len(ref["grads"])] if n in PER_ROW)
    t, b, i, h = shape.seq_len, shape.batch, shape.input_size, shape.hidden
    shapes = {"dx": (t, b, i), "dh0": (b, h), "dc0": (b, h)}
    return spot.Part(
        {n: shapes[n] for n in names},
        {n: (slice(None), rows) if PER_ROW[n] else rows for n in names},
        {n: ref["grads"][n] for n in names},
        grad_bounds(shape, ref, dtype, accumulate, names),
        f"{spot.rows_text('batch rows', rows, b)} of {', '.join(names)}",
    )


def named_outputs(shape: fwd.RecurrentShape, output: Output) -> dict[str, Output]:
    """(dx, dw_ih, dw_hh, db_ih, db_hh, dh0[, dc0]) by name, in that order (dc0: the LSTM's)."""
    return dict(zip(GRAD_NAMES[: 6 + (shape.STATES == 2)], output, strict=True))


check = checker(error_bounds, named_outputs, lambda ref: ref["grads"])


spot_check = spot.checker(spot_part, named_outputs)


def plan(shape: fwd.RecurrentShape, inputs: Inputs, tiles: Tiles, accumulate: str = "fp32") -> kernels.Plan:
    """Our BPTT prepared for this case (kernels.Plan): the training forward runs once when it is prepared,
    every call is the backward."""
    return kernels.prepare_rnn_backward(
        fwd.cell_of(shape),
        inputs["x"],
        inputs["w_ih"],
        inputs["w_hh"],
        inputs["b_ih"],
        inputs["b_hh"],
        inputs["h0"],
        inputs.get("c0"),
        inputs["dy"],
        inputs["dh_n"],
        inputs.get("dc_n"),
        tiles=tiles,
    )


def flop_note(forward: Op[Any]) -> str:
    return (
        f"{forward.name.upper()} backward FLOPs = 2x the forward's (BPTT: the recurrent gradient per step "
        "and the weight and input gradients over all steps; the forward is not included)"
    )


import opbench.ops.recurrent_bwd as this  # noqa: E402  (the module binds itself: mypy checks it as a PassModule)

# The passes `rnn:bwd`, `gru:bwd` and `lstm:bwd`: the forward's shape interface, these callables. A ReLU
# layer's zeros are the forward's, not its gradients'.
RNN, GRU, LSTM = (
    backward_of(f, this, flop_note=flop_note(f), expected_zero_fraction=None)
    for f in (rnn.OP, gru.OP, lstm.OP)
)

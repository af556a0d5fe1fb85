"""LSTM forward, one layer, one direction, sequence-first (x is T x B x I), PyTorch gate order (i, f, g, o):
its shape class and float64 reference with the propagated scale of a correct answer's error; the rest is
shared with the other recurrent ops (ops/recurrent.py)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from opbench import kernels
from opbench.documents import Fields, Scalar
from opbench.dtypes import UNIT_ROUNDOFF, Array, Inputs
from opbench.ops.recurrent import (
    RecurrentReference,
    Unit,
    activation_error,
    dot_scale,
    input_projection,
    recurrent_op,
    shared_magnitudes,
    store_of,
    store_roundoff,
)
from opbench.ops.recurrent_shape import RecurrentShape, sizes_from_case
from opbench.tiles import Tiles

NAME = "lstm"
FLOP_NOTE = (
    "LSTM FLOPs = 2*4H*(I+H) per time step per batch row (DeepBench's convention: the input and recurrent "
    "GEMMs; the gate activations and cell update are excluded)"
)
PARAMS: dict[str, Scalar] = {}


@dataclass(frozen=True, order=True)
class LstmShape(RecurrentShape):
    GATES: ClassVar[int] = 4
    STATES: ClassVar[int] = 2


SHAPE_FIELDS = LstmShape.fields()
INPUT_NAMES = ("x", "w_ih", "w_hh", "b_ih", "b_hh", "h0", "c0")


def shape_from_case(fields: Fields) -> LstmShape:
    return LstmShape(**sizes_from_case(LstmShape, fields, NAME))


def make_shape(point: Fields) -> LstmShape:
    return shape_from_case({f: point[f] for f in SHAPE_FIELDS})


def _sigmoid(z: Array) -> Array:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def reference(shape: LstmShape, inputs: dict[str, Array]) -> RecurrentReference:
    """float64 forward pass, keeping what the error propagation needs (the states each step read, its
    pre-activations and its recurrent parts). The scale of a correct implementation's error in a unit
    (ops/recurrent.py: UNITS), first order, derivatives at the float64 values, independent roundings in
    quadrature (rss), e_act = activation_error:
        s_z = rss(dot scale of the I+H+2 products and biases, propagated(s_h, W_hh))
        s_i,f,o = rss(s'(z) s_z, e_act(i, f, o)),  s_g = rss((1 - g^2) s_z, e_act(g))
        s_c' = rss(f s_c, c s_f, i s_g, g s_i, u_cells (f c, i g, c'), u_store c')
        s_h' = rss(o (1 - tanh^2 c') s_c', o e_act(tanh c'), tanh(c') s_o, u_cells h', u_store h')"""
    f64 = {k: v.astype(np.float64) for k, v in inputs.items()}
    t_len, b, h = shape.seq_len, shape.batch, shape.hidden
    w_hh = f64["w_hh"]
    xw = input_projection(shape, f64)
    hs, cs = f64["h0"], f64["c0"]
    h_prev, c_prev = np.empty((t_len, b, h)), np.empty((t_len, b, h))
    hw, z = np.empty((t_len, b, 4 * h)), np.empty((t_len, b, 4 * h))
    y, c_all = np.empty((t_len, b, h)), np.empty((t_len, b, h))
    for t in range(t_len):
        h_prev[t], c_prev[t] = hs, cs
        hw[t] = hs @ w_hh.T + f64["b_hh"]
        z[t] = xw[t] + hw[t]
        ig, fg, og = (_sigmoid(z[t][:, k * h : (k + 1) * h]) for k in (0, 1, 3))
        cs = fg * cs + ig * np.tanh(z[t][:, 2 * h : 3 * h])
        hs = og * np.tanh(cs)
        y[t], c_all[t] = hs, cs
    store = store_of(inputs)

    magnitudes = functools.cache(functools.partial(shared_magnitudes, shape, f64, h_prev, w_hh))

    def scales(unit: Unit) -> dict[str, Array]:
        # In variances (squared scales), every term that does not depend on the previous step's errors
        # computed for all steps at once; the loop carries the recurrence alone.
        u_cell, u_store = UNIT_ROUNDOFF[unit.cells], store_roundoff(unit, store)
        magnitude, maxima = magnitudes()
        v_dot = np.square(dot_scale(z, magnitude, maxima, shape.input_size + h + 2,
                                    unit, (z - hw, hw)))  # fmt: skip
        gates = np.concatenate(
            [_sigmoid(z[..., : 2 * h]), np.tanh(z[..., 2 * h : 3 * h]), _sigmoid(z[..., 3 * h :])], -1
        )
        ig, fg, gg, og = (gates[..., k * h : (k + 1) * h] for k in range(4))
        slope = np.concatenate([ig * (1 - ig), fg * (1 - fg), 1 - gg * gg, og * (1 - og)], -1)
        slope2, act2 = np.square(slope), np.square(activation_error(gates, unit))
        tc = np.tanh(c_all)
        r_c = (
            np.square(u_cell * fg * c_prev)
            + np.square(u_cell * ig * gg)
            + (u_cell**2 + u_store**2) * c_all**2
        )
        r_h = np.square(og * activation_error(tc, unit)) + (u_cell**2 + u_store**2) * np.square(y)
        k_c, k_o = np.square(og * (1 - tc * tc)), np.square(tc)
        f2, cp2, i2, g2 = np.square(fg), np.square(c_prev), np.square(ig), np.square(gg)
        w2 = np.square(w_hh)
        v_h, v_c = np.zeros((b, h)), np.zeros((b, h))
        v_y = np.empty((t_len, b, h))
        for t in range(t_len):
            v_g = slope2[t] * (v_dot[t] + v_h @ w2.T) + act2[t]
            v_i, v_f, v_gg, v_o = (v_g[:, k * h : (k + 1) * h] for k in range(4))
            v_c = f2[t] * v_c + cp2[t] * v_f + i2[t] * v_gg + g2[t] * v_i + r_c[t]
            v_h = k_c[t] * v_c + k_o[t] * v_o + r_h[t]
            v_y[t] = v_h
        s_y = np.sqrt(v_y)
        return {"y": s_y, "h_n": s_y[-1], "c_n": np.sqrt(v_c)}

    return RecurrentReference({"y": y, "h_n": y[-1], "c_n": cs}, scales)


def plan(shape: LstmShape, inputs: Inputs, tiles: Tiles, accumulate: str = "fp32") -> kernels.Plan:
    """Our LSTM prepared for this case (kernels.Plan): both of its GEMMs use the tiles (None: cache model)."""
    return kernels.prepare_lstm(*(inputs[n] for n in INPUT_NAMES), tiles=tiles)


import opbench.ops.lstm as this  # noqa: E402  (the module binds itself: mypy checks it as a Cell)

OP = recurrent_op(this)

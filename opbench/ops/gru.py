"""GRU forward, one layer, one direction, sequence-first (x is T x B x I), PyTorch's gate order (r, z, n)
with b_hn inside the reset product, as torch.nn.GRU: its shape class and float64 reference with the
propagated scale of a correct answer's error; the rest is shared with the other recurrent ops
(ops/recurrent.py)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from opbench import kernels
from opbench.documents import Fields, Scalar
from opbench.dtypes import UNIT_ROUNDOFF, Array, Inputs
from opbench.ops.recurrent import (
    RecurrentReference,
    Unit,
    absolute_projection,
    activation_error,
    dot_scale,
    input_projection,
    operand_maxima,
    recurrent_magnitude,
    recurrent_op,
    store_of,
    store_roundoff,
)
from opbench.ops.recurrent_shape import RecurrentShape, sizes_from_case
from opbench.tiles import Tiles

NAME = "gru"
FLOP_NOTE = (
    "GRU FLOPs = 2*3H*(I+H) per time step per batch row (DeepBench's convention: the input and recurrent "
    "GEMMs; the gate activations and state update are excluded)"
)
PARAMS: dict[str, Scalar] = {}


@dataclass(frozen=True, order=True)
class GruShape(RecurrentShape):
    GATES: ClassVar[int] = 3
    STATES: ClassVar[int] = 1


SHAPE_FIELDS = GruShape.fields()
INPUT_NAMES = ("x", "w_ih", "w_hh", "b_ih", "b_hh", "h0")


def shape_from_case(fields: Fields) -> GruShape:
    return GruShape(**sizes_from_case(GruShape, fields, NAME))


def make_shape(point: Fields) -> GruShape:
    return shape_from_case({f: point[f] for f in SHAPE_FIELDS})


def _sigmoid(z: Array) -> Array:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def reference(shape: GruShape, inputs: dict[str, Array]) -> RecurrentReference:
    """float64 forward pass, keeping what the error propagation needs. The scale of a correct
    implementation's error in a unit (ops/recurrent.py: UNITS), first order, derivatives at the float64
    values, independent roundings in quadrature (rss), gx = x W_ih^T + b_ih, gh = h W_hh^T + b_hh,
    e_act = activation_error:
        s_r, s_z = rss(s'(.) rss(dot scale of the I+H+2 products and biases, propagated(s_h, W_h.)), e_act)
        s_gx_n = dot scale of I+1 terms,  s_gh_n = rss(dot scale of H+1 terms, propagated(s_h, W_hn))
        s_n = rss((1 - n^2) rss(s_gx_n, r s_gh_n, gh_n s_r, u_cells (r gh_n, gx_n + r gh_n)), e_act)
        s_h' = rss((1 - z) s_n, z s_h, (h - n) s_z, u_cells (h - n, z (h - n), h'), u_store h')"""
    f64 = {k: v.astype(np.float64) for k, v in inputs.items()}
    t_len, b, h = shape.seq_len, shape.batch, shape.hidden
    w_hh = f64["w_hh"]
    gx = input_projection(shape, f64)
    hs = f64["h0"]
    h_prev, y = np.empty((t_len, b, h)), np.empty((t_len, b, h))
    gh = np.empty((t_len, b, 3 * h))
    rz, n_all = np.empty((t_len, b, 2 * h)), np.empty((t_len, b, h))
    for t in range(t_len):
        h_prev[t] = hs
        gh[t] = hs @ w_hh.T + f64["b_hh"]
        rz[t] = _sigmoid(gx[t][:, : 2 * h] + gh[t][:, : 2 * h])
        n_all[t] = np.tanh(gx[t][:, 2 * h :] + rz[t][:, :h] * gh[t][:, 2 * h :])
        hs = n_all[t] + rz[t][:, h:] * (hs - n_all[t])
        y[t] = hs
    store = store_of(inputs)

    @functools.cache
    def magnitudes() -> tuple[Array, Array, Any]:  # the same for every unit: computed once
        ax = absolute_projection(shape, f64, both=False)
        ah = recurrent_magnitude(h_prev, w_hh) + np.abs(f64["b_hh"])
        return ax, ah, operand_maxima(f64, h_prev)

    def scales(unit: Unit) -> dict[str, Array]:
        u_cell, u_store = UNIT_ROUNDOFF[unit.cells], store_roundoff(unit, store)
        ax, ah, maxima = magnitudes()
        i_size = shape.input_size
        # r and z: one sum of I + H + 2 terms each; n: x W_in^T + b_in and h W_hn^T + b_hn apart.
        s_rz = dot_scale(gx[..., : 2 * h] + gh[..., : 2 * h], ax[..., : 2 * h] + ah[..., : 2 * h],
                         (maxima[0], maxima[1][: 2 * h]), i_size + h + 2, unit,
                         (gx[..., : 2 * h], gh[..., : 2 * h]))  # fmt: skip
        tail = (maxima[0], maxima[1][2 * h :])
        v_gx_n = np.square(dot_scale(gx[..., 2 * h :], ax[..., 2 * h :], tail, i_size + 1, unit))
        v_gh_n = np.square(dot_scale(gh[..., 2 * h :], ah[..., 2 * h :], tail, h + 1, unit))
        # In variances, every term that does not depend on the previous step's errors for all steps at once.
        v_rz, slope2_rz, act2_rz = (
            np.square(s_rz),
            np.square(rz * (1 - rz)),
            np.square(activation_error(rz, unit)),
        )
        r, z, gh_n = rz[..., :h], rz[..., h:], gh[..., 2 * h :]
        r2, gh_n2 = np.square(r), np.square(gh_n)
        r_pre = np.square(u_cell * r * gh_n) + np.square(u_cell * (gx[..., 2 * h :] + r * gh_n))
        slope2_n, act2_n = np.square(1 - n_all * n_all), np.square(activation_error(n_all, unit))
        d = h_prev - n_all
        keep2, z2, d2 = np.square(1 - z), np.square(z), np.square(d)
        r_h = u_cell**2 * (d2 + z2 * d2) + (u_cell**2 + u_store**2) * np.square(y)
        w2 = np.square(w_hh)
        v_h = np.zeros((b, h))
        v_y = np.empty((t_len, b, h))
        for t in range(t_len):
            prop = v_h @ w2.T
            v_gate = slope2_rz[t] * (v_rz[t] + prop[:, : 2 * h]) + act2_rz[t]
            v_r, v_z = v_gate[:, :h], v_gate[:, h:]
            v_pre = v_gx_n[t] + r2[t] * (v_gh_n[t] + prop[:, 2 * h :]) + gh_n2[t] * v_r + r_pre[t]
            v_n = slope2_n[t] * v_pre + act2_n[t]
            v_h = keep2[t] * v_n + z2[t] * v_h + d2[t] * v_z + r_h[t]
            v_y[t] = v_h
        s_y = np.sqrt(v_y)
        return {"y": s_y, "h_n": s_y[-1]}

    return RecurrentReference({"y": y, "h_n": y[-1]}, scales)


def plan(shape: GruShape, inputs: Inputs, tiles: Tiles, accumulate: str = "fp32") -> kernels.Plan:
    """Our GRU prepared for this case (kernels.Plan): both of its GEMMs use the tiles (None: cache model)."""
    return kernels.prepare_gru(*(inputs[n] for n in INPUT_NAMES), tiles=tiles)


import opbench.ops.gru as this  # noqa: E402  (the module binds itself: mypy checks it as a Cell)

OP = recurrent_op(this)

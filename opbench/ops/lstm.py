"""LSTM forward, one layer, one direction, sequence-first (x is T x B x I), PyTorch gate order (i, f, g, o):
its shape class and float64 reference with a first-order running error bound; the rest is shared with the
other recurrent ops (ops/recurrent.py)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from opbench.dtypes import UNIT_ROUNDOFF
from opbench.ops.recurrent import (  # noqa: F401  (the op interface, shared)
    AXES,
    BASE,
    BATCH_FIELDS,
    DEFAULT_AXES,
    DEFAULT_BACKENDS,
    DEFAULT_MODE,
    SPACE,
    SPATIAL_FIELDS,
    UNITS,
    RecurrentReference,
    RecurrentShape,
    check,
    factors,
    finish,
    flops,
    input_projection,
    make_inputs,
    memory_bytes,
    min_bytes,
    pre_activation_gammas,
    scale,
    sizes_from_case,
    stacked_roundoffs,
    store_of,
    tile_args,
    tile_names,
    verify_cost_flops,
)

NAME = "lstm"
FLOP_NOTE = (
    "LSTM FLOPs = 2*4H*(I+H) per time step per batch row (DeepBench's convention: the input and recurrent "
    "GEMMs; the gate activations and cell update are excluded)"
)
PARAMS: dict[str, Any] = {}


@dataclass(frozen=True, order=True)
class LstmShape(RecurrentShape):
    GATES: ClassVar[int] = 4
    STATES: ClassVar[int] = 2


SHAPE_FIELDS = LstmShape.fields()
INPUT_NAMES = ("x", "w_ih", "w_hh", "b_ih", "b_hh", "h0", "c0")


def shape_from_case(fields: dict[str, Any]) -> LstmShape:
    return LstmShape(**sizes_from_case(LstmShape, fields, NAME))


def make_shape(point: dict[str, Any]) -> LstmShape:
    return shape_from_case({f: point[f] for f in SHAPE_FIELDS})


def default_cases() -> list[LstmShape]:
    from opbench.space import expand

    return expand(sys.modules[__name__], DEFAULT_AXES, dict(BASE), dict(PARAMS), DEFAULT_MODE)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def reference(
    shape: LstmShape, inputs: dict[str, np.ndarray], store_dtype: str | None = None
) -> RecurrentReference:
    """float64 forward pass, and beside it the propagation of a first-order bound on the error of an
    implementation that accumulates each gate's dot products (length I+H, plus two biases) with unit
    roundoff u, evaluates activations within ACTIVATION_ULPS*u, and stores h and c in store_dtype:
        e_z = gamma_{I+H+2}(u) * (|x||W_ih|^T + |h||W_hh|^T + |b|) + |W_hh| e_h       (pre-activations)
        e_i,f,o = e_z/4 + e_act,  e_g = e_z + e_act                        (sigmoid' <= 1/4, tanh' <= 1)
        e_c' = |f| e_c + |c| e_f + |i| e_g + |g| e_i + 3u(|f c| + |i g|) + u_store |c'|
        e_h' = |o| (e_c' + e_act) + |tanh c'| e_o + 2u |h'| + u_store |h'|
    Bounds are computed for u = fp32 and u = fp16 at once."""
    store = store_dtype or store_of(inputs)
    u_store = UNIT_ROUNDOFF[store]
    f64 = {k: v.astype(np.float64) for k, v in inputs.items()}
    t_len, b, i_size, h = shape.seq_len, shape.batch, shape.input_size, shape.hidden
    u, e_act = stacked_roundoffs()
    gam = pre_activation_gammas(i_size + h + 2)

    w_hh, abs_w_hh = f64["w_hh"], np.abs(f64["w_hh"])
    bias = f64["b_ih"] + f64["b_hh"]
    xw, ax = input_projection(shape, f64, bias, np.abs(f64["b_ih"]) + np.abs(f64["b_hh"]))

    hs, cs = f64["h0"], f64["c0"]
    e_h = np.zeros((len(UNITS), b, h))
    e_c = np.zeros((len(UNITS), b, h))
    y = np.empty((t_len, b, h))
    bound_y = np.empty((len(UNITS), t_len, b, h))
    for t in range(t_len):
        z = xw[t] + hs @ w_hh.T
        mz = ax[t] + np.abs(hs) @ abs_w_hh.T
        e_z = gam * mz + (e_h.reshape(-1, h) @ abs_w_hh.T).reshape(len(UNITS), b, 4 * h)
        gi, gf, gg, go = (z[:, k * h : (k + 1) * h] for k in range(4))
        ez_i, ez_f, ez_g, ez_o = (e_z[:, :, k * h : (k + 1) * h] for k in range(4))
        ig, fg, gt, og = _sigmoid(gi), _sigmoid(gf), np.tanh(gg), _sigmoid(go)
        ei, ef, eo, eg = ez_i / 4 + e_act, ez_f / 4 + e_act, ez_o / 4 + e_act, ez_g + e_act
        c_new = fg * cs + ig * gt
        e_c = (
            np.abs(fg) * e_c
            + np.abs(cs) * ef
            + np.abs(ig) * eg
            + np.abs(gt) * ei
            + 3 * u * (np.abs(fg * cs) + np.abs(ig * gt))
            + u_store * np.abs(c_new)
        )
        tc = np.tanh(c_new)
        h_new = og * tc
        e_h = np.abs(og) * (e_c + e_act) + np.abs(tc) * eo + (2 * u + u_store) * np.abs(h_new)
        y[t] = h_new
        bound_y[:, t] = e_h
        hs, cs = h_new, c_new
    return finish(y, bound_y, {"c_n": (cs, e_c)})


def plan(
    shape: LstmShape,
    inputs: dict[str, np.ndarray],
    tiles: dict[str, int | None],
    threads: int,
    isa: str | None = None,
    accumulate: str = "fp32",
) -> Any:
    """Our LSTM prepared for this case (kernels.Plan): both of its GEMMs use the tiles (None: cache model)."""
    from opbench import kernels

    return kernels.prepare_lstm(*(inputs[n] for n in INPUT_NAMES), **tile_args(tiles, threads, isa))

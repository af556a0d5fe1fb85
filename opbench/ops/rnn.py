"""Elman RNN forward (tanh or ReLU), one layer, one direction, sequence-first (x is T x B x I), as
torch.nn.RNN: its shape class (the nonlinearity is a shape field, relu = 0 or 1, so records stay integer)
and float64 reference with the propagated scale of a correct answer's error; the rest is shared with the
other recurrent ops (ops/recurrent.py)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from opbench import kernels
from opbench.documents import Fields, Scalar
from opbench.dtypes import Array, Inputs
from opbench.ops.fields import int_field
from opbench.ops.numerics import LAMBDA
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

NAME = "rnn"
FLOP_NOTE = (
    "RNN FLOPs = 2*H*(I+H) per time step per batch row (DeepBench's convention: the input and recurrent "
    "GEMMs; the activation is excluded)"
)
NONLINEARITIES = ("tanh", "relu")
# Fixed parameters of a sweep: the activation (--nonlinearity; records keep it as the shape field relu).
PARAMS: dict[str, Scalar] = {"nonlinearity": "tanh"}
PARAM_CHOICES: dict[str, tuple[str, ...]] = {"nonlinearity": NONLINEARITIES}


@dataclass(frozen=True, order=True)
class RnnShape(RecurrentShape):
    relu: int = 0  # 0: h = tanh(z), 1: h = max(z, 0)

    GATES: ClassVar[int] = 1
    STATES: ClassVar[int] = 1

    @property
    def nonlinearity(self) -> str:
        return NONLINEARITIES[self.relu]

    def label(self) -> str:
        return super().label() + (" relu" if self.relu else "")

    @classmethod
    def fields(cls) -> tuple[str, ...]:
        return (*super().fields(), "relu")


SHAPE_FIELDS = RnnShape.fields()
INPUT_NAMES = ("x", "w_ih", "w_hh", "b_ih", "b_hh", "h0")


def shape_from_case(fields: Fields) -> RnnShape:
    """From explicit shape fields; relu is optional (0: tanh, the default; 1: ReLU)."""
    sizes = sizes_from_case(RnnShape, fields, NAME)
    relu = int_field(fields, "relu", 0) if "relu" in fields else 0
    if relu > 1:
        raise ValueError(f"'relu' must be 0 (tanh) or 1 (ReLU), got {relu}")
    return RnnShape(**sizes, relu=relu)


def expected_zero_fraction(shape: RnnShape) -> float:
    """The share of exact zeros an output may hold with opbench's random inputs: about half of a ReLU
    layer's states are 0 (the mistrusted-output guard allows for them); a tanh layer has none."""
    return 0.5 if shape.relu else 0.0


def make_shape(point: Fields) -> RnnShape:
    nonlinearity = point.get("nonlinearity", "tanh")
    if nonlinearity not in NONLINEARITIES:
        raise ValueError(f"nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
    fields = {f: point[f] for f in SHAPE_FIELDS if f != "relu"}
    return shape_from_case({**fields, "relu": NONLINEARITIES.index(nonlinearity)})


def reference(shape: RnnShape, inputs: dict[str, Array]) -> RecurrentReference:
    """float64 forward pass, keeping what the error propagation needs. The scale of a correct
    implementation's error in a unit (ops/recurrent.py: UNITS), first order, independent roundings in
    quadrature (rss), e_act = activation_error:
        s_z = rss(dot scale of the I+H+2 products and biases, propagated(s_h, W_hh))
        tanh: s_h' = rss((1 - h'^2) s_z, e_act(h'), u_store h')
        relu: s_h' = rss(s_z where z > -LAMBDA s_z (ReLU is 1-Lipschitz; exactly 0 below), u_store h')"""
    f64 = {k: v.astype(np.float64) for k, v in inputs.items()}
    t_len, b, h = shape.seq_len, shape.batch, shape.hidden
    w_hh = f64["w_hh"]
    xw = input_projection(shape, f64)
    hs = f64["h0"]
    h_prev, hw, z, y = (np.empty((t_len, b, h)) for _ in range(4))
    for t in range(t_len):
        h_prev[t] = hs
        hw[t] = hs @ w_hh.T + f64["b_hh"]
        z[t] = xw[t] + hw[t]
        hs = np.maximum(z[t], 0.0) if shape.relu else np.tanh(z[t])
        y[t] = hs
    store = store_of(inputs)

    magnitudes = functools.cache(functools.partial(shared_magnitudes, shape, f64, h_prev, w_hh))

    def scales(unit: Unit) -> dict[str, Array]:
        u_store = store_roundoff(unit, store)
        magnitude, maxima = magnitudes()
        n = shape.input_size + h + 2
        v_dot = np.square(dot_scale(z, magnitude, maxima, n, unit, (z - hw, hw)))
        # In variances, the terms that do not depend on the previous step's errors for all steps at once.
        stored = np.square(u_store * y)
        if not shape.relu:
            slope2 = np.square(1 - y * y)
            fixed = np.square(activation_error(y, unit)) + stored
        w2 = np.square(w_hh)
        v_h = np.zeros((b, h))
        v_y, v_zs = np.empty((t_len, b, h)), np.empty((t_len, b, h))
        for t in range(t_len):
            v_z = v_zs[t] = v_dot[t] + v_h @ w2.T
            if shape.relu:
                v_h = np.where(z[t] > -LAMBDA * np.sqrt(v_z), v_z, 0.0) + stored[t]
            else:
                v_h = slope2[t] * v_z + fixed[t]
            v_y[t] = v_h
        s_y = np.sqrt(v_y)
        # (and the pre-activations' own scale: the backward's ReLU units that may switch)
        return {"y": s_y, "h_n": s_y[-1], "z": np.sqrt(v_zs)}

    return RecurrentReference({"y": y, "h_n": y[-1]}, scales)


def plan(shape: RnnShape, inputs: Inputs, tiles: Tiles, accumulate: str = "fp32") -> kernels.Plan:
    """Our RNN prepared for this case (kernels.Plan): both of its GEMMs use the tiles (None: cache model)."""
    return kernels.prepare_rnn(
        *(inputs[n] for n in INPUT_NAMES), nonlinearity=shape.nonlinearity, tiles=tiles
    )


import opbench.ops.rnn as this  # noqa: E402  (the module binds itself: mypy checks it as a Cell)

OP = recurrent_op(this)

"""Elman RNN forward (tanh or ReLU), one layer, one direction, sequence-first (x is T x B x I), as
torch.nn.RNN: its shape class (the nonlinearity is a shape field, relu = 0 or 1, so records stay integer)
and float64 reference with a first-order running error bound; the rest is shared with the other recurrent
ops (ops/recurrent.py)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from opbench.dtypes import UNIT_ROUNDOFF
from opbench.ops.fields import int_field
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

NAME = "rnn"
FLOP_NOTE = (
    "RNN FLOPs = 2*H*(I+H) per time step per batch row (DeepBench's convention: the input and recurrent "
    "GEMMs; the activation is excluded)"
)
NONLINEARITIES = ("tanh", "relu")
# Fixed parameters of a sweep: the activation (--nonlinearity; records keep it as the shape field relu).
PARAMS: dict[str, Any] = {"nonlinearity": "tanh"}
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


def shape_from_case(fields: dict[str, Any]) -> RnnShape:
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


def make_shape(point: dict[str, Any]) -> RnnShape:
    nonlinearity = point.get("nonlinearity", "tanh")
    if nonlinearity not in NONLINEARITIES:
        raise ValueError(f"nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
    fields = {f: point[f] for f in SHAPE_FIELDS if f != "relu"}
    return shape_from_case({**fields, "relu": NONLINEARITIES.index(nonlinearity)})


def default_cases() -> list[RnnShape]:
    from opbench.space import expand

    return expand(sys.modules[__name__], DEFAULT_AXES, dict(BASE), dict(PARAMS), DEFAULT_MODE)


def reference(
    shape: RnnShape, inputs: dict[str, np.ndarray], store_dtype: str | None = None
) -> RecurrentReference:
    """float64 forward pass, and beside it the propagation of a first-order bound on the error of an
    implementation that accumulates z's dot products (length I+H, plus two biases) with unit roundoff u,
    evaluates tanh within ACTIVATION_ULPS*u and stores h in store_dtype:
        e_z = gamma_{I+H+2}(u) (|x||W_ih|^T + |h||W_hh|^T + |b|) + |W_hh| e_h
        tanh: e_h' = (1 - h'^2) e_z + e_act + u_store |h'|
        relu: e_h' = e_z where z > -e_z (ReLU is 1-Lipschitz; exactly 0 below) + u_store |h'|
    Bounds are computed for u = fp32 and u = fp16 at once."""
    store = store_dtype or store_of(inputs)
    u_store = UNIT_ROUNDOFF[store]
    f64 = {k: v.astype(np.float64) for k, v in inputs.items()}
    t_len, b, h = shape.seq_len, shape.batch, shape.hidden
    _, e_act = stacked_roundoffs()
    gam = pre_activation_gammas(shape.input_size + h + 2)
    w_hh, abs_w_hh = f64["w_hh"], np.abs(f64["w_hh"])
    bias = f64["b_ih"] + f64["b_hh"]
    xw, ax = input_projection(shape, f64, bias, np.abs(f64["b_ih"]) + np.abs(f64["b_hh"]))

    hs = f64["h0"]
    e_h = np.zeros((len(UNITS), b, h))
    y = np.empty((t_len, b, h))
    bound_y = np.empty((len(UNITS), t_len, b, h))
    for t in range(t_len):
        z = xw[t] + hs @ w_hh.T
        e_z = gam * (ax[t] + np.abs(hs) @ abs_w_hh.T) + (e_h.reshape(-1, h) @ abs_w_hh.T).reshape(e_h.shape)
        if shape.relu:
            h_new = np.maximum(z, 0.0)
            e_h = np.where(z > -e_z, e_z, 0.0) + u_store * h_new
        else:
            h_new = np.tanh(z)
            e_h = (1 - h_new * h_new) * e_z + e_act + u_store * np.abs(h_new)
        y[t] = h_new
        bound_y[:, t] = e_h
        hs = h_new
    return finish(y, bound_y, {})


def plan(
    shape: RnnShape,
    inputs: dict[str, np.ndarray],
    tiles: dict[str, int | None],
    threads: int,
    isa: str | None = None,
    accumulate: str = "fp32",
) -> Any:
    """Our RNN prepared for this case (kernels.Plan): both of its GEMMs use the tiles (None: cache model)."""
    from opbench import kernels

    args = tile_args(tiles, threads, isa)
    return kernels.prepare_rnn(*(inputs[n] for n in INPUT_NAMES), nonlinearity=shape.nonlinearity, **args)

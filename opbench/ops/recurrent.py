"""What the recurrent ops (rnn, gru, lstm) share: one layer, one direction, sequence-first (x is T x B x I),
PyTorch's layouts. The shape classes differ by their gate count and state count (class constants), so the
functions here serve all three; each op module adds its name, shape class and float64 reference.

FLOPs follow DeepBench: 2 * gates * H * (I + H) per step per batch row (the input and recurrent GEMMs;
gates 1, 3 and 4 for the Elman RNN, GRU and LSTM), activations and elementwise updates excluded."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Protocol, TypeVar, cast

import numpy as np

from opbench import kernels
from opbench.documents import Fields
from opbench.dtypes import ITEMSIZE, NUMPY_DTYPES, UNIT_ROUNDOFF, Array, Inputs, Output, dtype_name
from opbench.ops import recurrent_shape, spot
from opbench.ops.base import Op, OpModule, Plan, bind
from opbench.ops.numerics import LAMBDA, accumulation_error, checker, squares_bound, tiny
from opbench.ops.recurrent_shape import (
    BASE,
    DEFAULT_AXES,
    DEFAULT_MODE,
    RecurrentShape,
)
from opbench.ops.space import expand

# Absolute error allowed for one activation (sigmoid, tanh) computed in fp32, in fp32 ulps (vectorised
# exp-based implementations are within a few), before its rounding to the cells' precision
# (activation_error).
ACTIVATION_ULPS = 8


@dataclass(frozen=True)
class Unit:
    """How an implementation computes a step: the precision it sums the gates' dot products in, and the
    precision of its cells (each pre-activation rounded to it, the activations and the state update
    computed in it). h and c are stored in the case's dtype either way."""

    sums: str
    cells: str
    # absolute error of an activation computed in fp32 (before its rounding to the cells' precision)
    act: float = 0.0


# The units a bound can assume (a backend's accumulation(), Backend.half_cells; a user's
# --kernel-accumulate):
# - "fp32": fp32 sums and cells (opbench's kernels in every dtype, every framework in fp32);
# - "fp16-cells", "bf16-cells": fp32 sums (every fp16 and bf16 GEMM on a CPU: oneDNN's, Eigen's, ours,
#   measured in benchmarks/verification_power.py), each part of a pre-activation rounded to the dtype and
#   the cell's arithmetic in it: the frameworks' half-precision layers, which chain tensor ops;
# - "fp16", "bf16": the sums in that precision as well (declared by --kernel-accumulate, or an accelerator).
UNITS: dict[str, Unit] = {
    "fp32": Unit("fp32", "fp32"),
    "fp16-cells": Unit("fp32", "fp16"),
    "bf16-cells": Unit("fp32", "bf16"),
    "fp16": Unit("fp16", "fp16"),
    "bf16": Unit("bf16", "bf16"),
}


def flops(shape: RecurrentShape) -> int:
    h = shape.hidden
    return 2 * shape.GATES * h * (shape.input_size + h) * shape.seq_len * shape.batch


def _io_elems(shape: RecurrentShape) -> int:
    t, b, i, h, g = shape.seq_len, shape.batch, shape.input_size, shape.hidden, shape.GATES
    return t * b * i + g * h * (i + h) + 2 * g * h + 2 * shape.STATES * b * h + t * b * h


def min_bytes(shape: RecurrentShape, dtype: str) -> int:
    """Compulsory traffic: x, weights, biases, initial states read once; y and final states written once."""
    return ITEMSIZE[dtype] * _io_elems(shape)


def memory_bytes(shape: RecurrentShape, dtype: str, reference: bool = True) -> int:
    """Inputs and outputs (x3 copies) and our fp32 gate buffer; when verifying, the float64 reference with
    its projections and bounds."""
    t, b, h, g = shape.seq_len, shape.batch, shape.hidden, shape.GATES
    io = _io_elems(shape)
    ref = 8 * (3 * io + 3 * t * b * g * h + 3 * t * b * h) if reference else 0
    return 3 * ITEMSIZE[dtype] * io + 4 * t * b * g * h + ref


def verify_cost_flops(shape: RecurrentShape) -> int:
    """The reference, its magnitudes and the error propagation: about four times the op."""
    return 4 * flops(shape)


def cell_of(shape: RecurrentShape) -> str:
    """The kernels' cell name (kernels.prepare_rnn_backward): rnn_tanh, rnn_relu, gru or lstm."""
    if shape.STATES == 2:
        return "lstm"
    if shape.GATES == 3:
        return "gru"
    return "rnn_relu" if getattr(shape, "relu", 0) else "rnn_tanh"


def input_names(shape: RecurrentShape) -> tuple[str, ...]:
    """The kernel's positional inputs, in PyTorch's order (c0 for the LSTM only)."""
    return ("x", "w_ih", "w_hh", "b_ih", "b_hh", "h0", "c0")[: 6 + shape.STATES - 1]


def make_inputs(shape: RecurrentShape, dtype: str, seed: int) -> dict[str, Array]:
    """x and the initial states uniform in [-1, 1); weights and biases uniform in +-1/sqrt(H) (PyTorch's
    initialisation)."""
    rng = np.random.default_rng(seed)
    t, b, i, h, g = shape.seq_len, shape.batch, shape.input_size, shape.hidden, shape.GATES
    bound = 1.0 / np.sqrt(h)
    np_dtype = NUMPY_DTYPES[dtype]

    def u(size: tuple[int, ...], lim: float) -> Array:
        return rng.uniform(-lim, lim, size=size).astype(np_dtype)

    inputs = {
        "x": u((t, b, i), 1.0),
        "w_ih": u((g * h, i), bound),
        "w_hh": u((g * h, h), bound),
        "b_ih": u((g * h,), bound),
        "b_hh": u((g * h,), bound),
        "h0": u((b, h), 1.0),
    }
    if shape.STATES == 2:
        inputs["c0"] = u((b, h), 1.0)
    return inputs


class RecurrentReference:
    """The float64 outputs (y: T x B x H, h_n, and c_n for the LSTM) and, computed when a unit is first
    asked for, the scale of a correct implementation's error in each (`scales(unit)`, arrays like the
    outputs). The bound is LAMBDA times that scale (module check())."""

    def __init__(self, outputs: dict[str, Array], scales: Callable[[Unit], dict[str, Array]]) -> None:
        self.outputs = outputs
        self._scales = scales
        self._cache: dict[str, dict[str, Array]] = {}

    def scales(self, unit: str) -> dict[str, Array]:
        if unit not in self._cache:
            self._cache[unit] = self._scales(unit_of(unit))
        return self._cache[unit]

    @property
    def y(self) -> Array:
        return self.outputs["y"]

    @property
    def h_n(self) -> Array:
        return self.outputs["h_n"]

    @property
    def c_n(self) -> Array:
        return self.outputs["c_n"]


# The ops' scales (lstm.py, gru.py, rnn.py) are propagated in variances, their docstrings written with
# rss(a, b, ...) = sqrt(a^2 + b^2 + ...) (independent roundings add in quadrature) and
# propagated(s_h, W) = sqrt(s_h^2 (W^2)^T), the scale of W e_h for independent errors e_h of random sign (a
# worst-case |W| e_h grows by about sqrt(H)/2 per step for random weights and made the bound of a long
# sequence larger than its values).


def unit_of(name: str) -> Unit:
    """A unit by name (UNITS), optionally with "+act=E": activations within E absolute (a backend whose fp32
    tanh is an approximation: Backend.activation_error), instead of ACTIVATION_ULPS fp32 ulps."""
    base, _, act = name.partition("+act=")
    if base not in UNITS:
        raise ValueError(f"unknown recurrent unit {name!r} (expected one of {', '.join(UNITS)}[+act=E])")
    try:
        allowed = float(act) if act else ACTIVATION_ULPS * UNIT_ROUNDOFF["fp32"]
    except ValueError:
        raise ValueError(f"unknown recurrent unit {name!r}: +act= takes a number") from None
    return replace(UNITS[base], act=allowed)


def activation_error(value: Array, unit: Unit) -> Array:
    """Bound on the error of an activation's value (sigmoid or tanh, |value| <= 1): computed in fp32 within
    unit.act (ACTIVATION_ULPS fp32 ulps, or what the backend declares), then rounded to the cells'
    precision. Every framework's half-precision activation on a CPU computes in fp32 (torch, TensorFlow and
    MindSpore upcast; ours is fp32 throughout)."""
    return unit.act + UNIT_ROUNDOFF[unit.cells] * np.abs(value)


def store_roundoff(unit: Unit, store: str) -> float:
    """The rounding of h and c to the format they are stored in (the dtype): none where the cells compute in
    it already (their own last rounding is that one), u_store where they compute in fp32 (ours)."""
    return 0.0 if unit.cells == store else UNIT_ROUNDOFF[store]


def store_of(inputs: dict[str, Array]) -> str:
    """The format h and c are stored in: the inputs' dtype (fp32, fp16 or bf16)."""
    return dtype_name(inputs["x"].dtype)


def input_projection(shape: RecurrentShape, f64: dict[str, Array]) -> Array:
    """x W_ih^T + b_ih for every step (T x B x G)."""
    t, b, i = shape.seq_len, shape.batch, shape.input_size
    return (f64["x"].reshape(t * b, i) @ f64["w_ih"].T + f64["b_ih"]).reshape(t, b, -1)


def absolute_projection(shape: RecurrentShape, f64: dict[str, Array], both: bool = True) -> Array:
    """|x| |W_ih|^T + |b_ih| (and + |b_hh| with `both`: the ops that add both biases to one sum) for every
    step (T x B x G)."""
    bias = np.abs(f64["b_ih"]) + (np.abs(f64["b_hh"]) if both else 0.0)
    t, b, i = shape.seq_len, shape.batch, shape.input_size
    return (np.abs(f64["x"]).reshape(t * b, i) @ np.abs(f64["w_ih"]).T + bias).reshape(t, b, -1)


def recurrent_magnitude(h_prev: Array, w_hh: Array) -> Array:
    """|h| |W_hh|^T for every step at once (h_prev: T x B x H, the state each step read)."""
    t, b, h = h_prev.shape
    return (np.abs(h_prev).reshape(t * b, h) @ np.abs(w_hh).T).reshape(t, b, -1)


def shared_magnitudes(
    shape: RecurrentShape, f64: dict[str, Array], h_prev: Array, w_hh: Array
) -> tuple[Array, tuple[Array, Array]]:
    """What the scales of every unit share, for an op that adds both biases to one sum (rnn, lstm): the
    pre-activations' magnitudes and operand maxima (computed once per reference)."""
    magnitude = absolute_projection(shape, f64) + recurrent_magnitude(h_prev, w_hh)
    return magnitude, operand_maxima(f64, h_prev)


def operand_maxima(f64: dict[str, Array], h_prev: Array) -> tuple[Array, Array]:
    """The largest |operand| on each side of every pre-activation's products, biases included (times 1):
    per step and batch row (x, h), per gate row (W_ih, W_hh, b_ih, b_hh), for numerics.squares_bound."""
    rows = np.maximum(np.abs(f64["x"]).max(axis=2), np.abs(h_prev).max(axis=2))
    cols = np.maximum(np.abs(f64["w_ih"]).max(axis=1, initial=0.0), np.abs(f64["w_hh"]).max(axis=1))
    cols = np.maximum(cols, np.maximum(np.abs(f64["b_ih"]), np.abs(f64["b_hh"])))
    return np.maximum(rows, 1.0)[:, :, None], cols


def dot_scale(
    value: Array,
    magnitude: Array,
    maxima: tuple[Array, Array],
    n: int,
    unit: Unit,
    parts: tuple[Array, ...] = (),
) -> Array:
    """Scale of the error of pre-activations, each a sum of n products and biases in unit.sums (the dot
    bound of ops/numerics.py over LAMBDA); where the cells are narrower than the sums, each of `parts`
    and the sum are rounded to the cells' precision as well (the frameworks add x W_ih^T + b_ih and
    h W_hh^T + b_hh as tensors)."""
    squares = squares_bound(maxima[0], maxima[1], magnitude)
    scale = accumulation_error(value, magnitude, squares, n, unit.sums) / LAMBDA
    if unit.cells != unit.sums:
        u = UNIT_ROUNDOFF[unit.cells]
        # each part rounded twice (its product, then with its bias added), their sum once
        scale = np.sqrt(np.square(scale) + sum(2 * np.square(u * p) for p in parts) + np.square(u * value))
    return scale


def error_bounds(
    shape: RecurrentShape, inputs: dict[str, Array], ref: RecurrentReference, dtype: str, accumulate: str
) -> dict[str, Array]:
    """LAMBDA times the propagated scale of the unit `accumulate` names, plus the dtype's least rounding."""
    floor = tiny(dtype)
    return {k: LAMBDA * v + floor for k, v in ref.scales(accumulate).items()}


# Inputs with a batch axis: second for the sequences (T x B x .), first for the states.
_BATCH_AXIS = {"x": 1, "dy": 1, "h0": 0, "c0": 0, "dh_n": 0, "dc_n": 0}


def batch_rows(inputs: dict[str, Array], rows: Array) -> dict[str, Array]:
    """The inputs of batch rows `rows` alone (weights and biases whole): rows of a recurrent layer are
    independent, forward and backward."""
    return {k: np.take(v, rows, axis=_BATCH_AXIS[k]) if k in _BATCH_AXIS else v for k, v in inputs.items()}


def spot_cost_flops(shape: RecurrentShape) -> int:
    """float64 work of a spot check: the reference of SPOT_ROWS batch rows."""
    return verify_cost_flops(replace(shape, batch=min(shape.batch, spot.SPOT_ROWS)))


def spot_of(
    reference: Callable[[Shape, Inputs], RecurrentReference],
) -> tuple[spot.PartOf[Shape], spot.SpotCheck[Shape]]:
    """An op's spot_part and spot_check (ops/spot.py): seeded batch rows, their reference computed alone."""

    def spot_part(shape: Shape, inputs: Inputs, dtype: str, accumulate: str, seed: int) -> spot.Part:
        rows = spot.pick(shape.batch, seed)
        sub = replace(shape, batch=len(rows))
        sub_inputs = batch_rows(inputs, rows)
        ref = reference(sub, sub_inputs)
        t, b, h = shape.seq_len, shape.batch, shape.hidden
        names = ("y", "h_n", "c_n")[: 1 + shape.STATES]
        shapes = {n: (t, b, h) if n == "y" else (b, h) for n in names}
        index: dict[str, spot.Index] = {n: (slice(None), rows) if n == "y" else rows for n in names}
        bounds = error_bounds(sub, sub_inputs, ref, dtype, accumulate)
        checked = spot.rows_text("batch rows", rows, b)
        return spot.Part(shapes, index, {n: ref.outputs[n] for n in names}, bounds, checked)

    return spot_part, spot.checker(spot_part, named_outputs)


def named_outputs(shape: RecurrentShape, output: Output) -> dict[str, Output]:
    """PyTorch's return structure, (y, h_n) or (y, (h_n, c_n)), by name."""
    y, state = output
    return {"y": y, **({"h_n": state[0], "c_n": state[1]} if shape.STATES == 2 else {"h_n": state})}


check = checker(error_bounds, named_outputs, lambda ref: ref.outputs)


# --- opbench's own kernel for these ops (the cpp backend and the tuner) -------------------------------------


def tile_names(shape: RecurrentShape, isa: str | None, dtype: str = "fp32") -> dict[str, int]:
    """What the tuning space's rules may name: the register tile (and elem_bytes, as gemm.tile_names) and the
    dimensions the tiles block in the two GEMMs, the input projection (T*B x G x I) and each step's
    recurrent product (B x G x H), G = gates * H: m = T*B rows at most, n = G columns, k = max(I, H)."""
    return {
        **kernels.register_tile(isa, dtype),
        "m": shape.seq_len * shape.batch,
        "n": shape.GATES * shape.hidden,
        "k": max(shape.input_size, shape.hidden),
        "batch": shape.batch,
    }


Shape = TypeVar("Shape", bound=RecurrentShape)


class Cell(Protocol[Shape]):
    """What a recurrent op's module (ops/rnn.py) defines: its NAME, FLOP_NOTE, SHAPE_FIELDS and PARAMS, these
    functions, and PARAM_CHOICES and expected_zero_fraction where it has them."""

    def shape_from_case(self, fields: Fields) -> Shape: ...
    def make_shape(self, point: Fields) -> Shape: ...
    def reference(self, shape: Shape, inputs: Inputs) -> RecurrentReference: ...

    @property
    def plan(self) -> Plan[Shape]: ...


def recurrent_op(cell: Cell[Shape]) -> Op[Shape]:
    """A recurrent op's Op: what its module defines, the shared pass from this module and the shared shape
    interface from ops/recurrent_shape.py (the first of the three that defines a name gives it)."""
    spot_part, spot_check = spot_of(cell.reference)
    layers = (vars(recurrent_shape), vars(sys.modules[__name__]), vars(cell))
    both = cast(OpModule[Shape], SimpleNamespace(**{k: v for layer in layers for k, v in layer.items()}))
    op: Op[Shape] = bind(
        both,
        default_cases=lambda: expand(op, DEFAULT_AXES, dict(BASE), dict(op.params), DEFAULT_MODE),
        spot_part=spot_part,
        spot_check=spot_check,
    )
    return op

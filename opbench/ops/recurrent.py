"""What the recurrent ops (rnn, gru, lstm) share: one layer, one direction, sequence-first (x is T x B x I),
PyTorch's layouts. The shape classes differ by their gate count and state count (class constants), so the
functions here serve all three; each op module adds its name, shape class and float64 reference.

FLOPs follow DeepBench: 2 * gates * H * (I + H) per step per batch row (the input and recurrent GEMMs;
gates 1, 3 and 4 for the Elman RNN, GRU and LSTM), activations and elementwise updates excluded."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from opbench.dtypes import ITEMSIZE, NUMPY_DTYPES
from opbench.ops.fields import int_field, reject_unknown
from opbench.ops.numerics import compare, gamma, tiny


@dataclass(frozen=True, order=True)
class RecurrentShape:
    seq_len: int
    batch: int
    input_size: int
    hidden: int

    GATES: ClassVar[int] = 4  # rows of W_ih and W_hh per hidden unit
    STATES: ClassVar[int] = 2  # h (and c for the LSTM)

    def label(self) -> str:
        return f"T{self.seq_len} B{self.batch} I{self.input_size} H{self.hidden}"

    def to_dict(self) -> dict[str, int]:
        return {f: int(getattr(self, f)) for f in self.fields()}

    @classmethod
    def fields(cls) -> tuple[str, ...]:
        return ("seq_len", "batch", "input_size", "hidden")


SIZE_FIELDS = ("seq_len", "batch", "input_size", "hidden")
AXES: dict[str, tuple[str, ...]] = {f: (f,) for f in ("batch", "seq_len", "input_size", "hidden")}
BASE = {"batch": 16, "seq_len": 25, "input_size": 256, "hidden": 256}
DEFAULT_AXES = {
    "batch": [4, 16, 64],
    "seq_len": [10, 25, 50],
    "input_size": [128, 256, 512],
    "hidden": [128, 256, 512],
}
DEFAULT_MODE = "one-factor"
SPACE = "recurrent"  # the tuning space all three share (tuning/spaces/recurrent.toml)
DEFAULT_BACKENDS = ("cpp", "torch", "mindspore", "tensorflow")
BATCH_FIELDS = ("batch",)
SPATIAL_FIELDS = ("input_size",)

# Absolute error allowed for one activation (sigmoid, tanh) in units of the compute precision's unit
# roundoff: vectorised exp-based implementations are within a few ulp.
ACTIVATION_ULPS = 8
# The bounds are first order (products of errors dropped); this factor covers the second-order terms.
SAFETY = 2.0
# The compute precisions every reference bounds at once (rows of one stacked product per step):
# - "fp32", "fp16": the gates' dot products summed, and the cell's arithmetic done, in that precision;
# - "bf16": the dot products summed in fp32 (every bf16 GEMM on a CPU: oneDNN's, ours) and each gate
#   pre-activation rounded to bf16, the cell's arithmetic in bf16: the frameworks' bf16 layers, which
#   chain bf16 tensor ops.
UNITS = ("fp32", "fp16", "bf16")
# Where each unit sums its dot products (bf16: in fp32, then rounds the sum to bf16).
_SUMS = {"fp32": "fp32", "fp16": "fp16", "bf16": "fp32"}


def sizes_from_case(cls: type[RecurrentShape], fields: dict[str, Any], name: str) -> dict[str, int]:
    reject_unknown(fields, cls.fields(), name)
    return {f: int_field(fields, f) for f in SIZE_FIELDS}


def factors(shape: RecurrentShape) -> dict[str, int]:
    """The sweep axes' values for this shape."""
    return {a: getattr(shape, a) for a in AXES}


def scale(shape: RecurrentShape, factor: float) -> Any:
    """Shrink batch and input size by factor (at least 1)."""
    return replace(
        shape, batch=max(1, round(shape.batch * factor)), input_size=max(1, round(shape.input_size * factor))
    )


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


def make_inputs(shape: RecurrentShape, dtype: str, seed: int) -> dict[str, np.ndarray]:
    """x and the initial states uniform in [-1, 1); weights and biases uniform in +-1/sqrt(H) (PyTorch's
    initialisation)."""
    rng = np.random.default_rng(seed)
    t, b, i, h, g = shape.seq_len, shape.batch, shape.input_size, shape.hidden, shape.GATES
    bound = 1.0 / np.sqrt(h)
    np_dtype = NUMPY_DTYPES[dtype]

    def u(size: tuple[int, ...], lim: float) -> np.ndarray:
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


@dataclass(frozen=True)
class RecurrentReference:
    outputs: dict[str, np.ndarray]  # y (T x B x H), h_n, and c_n for the LSTM: float64
    # First-order error bounds per compute precision ("fp32", "fp16"): arrays like the outputs.
    bounds: dict[str, dict[str, np.ndarray]]

    @property
    def y(self) -> np.ndarray:
        return self.outputs["y"]

    @property
    def h_n(self) -> np.ndarray:
        return self.outputs["h_n"]

    @property
    def c_n(self) -> np.ndarray:
        return self.outputs["c_n"]


def stacked_roundoffs() -> tuple[np.ndarray, np.ndarray]:
    """(u, e_act) per compute precision in UNITS, shaped to broadcast over (units, batch, columns)."""
    from opbench.dtypes import UNIT_ROUNDOFF

    u = np.array([UNIT_ROUNDOFF[name] for name in UNITS])[:, None, None]
    return u, ACTIVATION_ULPS * u


def pre_activation_gammas(n: int) -> np.ndarray:
    """Per unit in UNITS, the relative error of a gate pre-activation of n products and biases: gamma_n of
    the precision it is summed in, plus one rounding to bf16 for the bf16 unit (shaped like
    stacked_roundoffs)."""
    from opbench.dtypes import UNIT_ROUNDOFF

    rounded = {"bf16": UNIT_ROUNDOFF["bf16"]}
    return np.array([gamma(n, UNIT_ROUNDOFF[_SUMS[k]]) + rounded.get(k, 0.0) for k in UNITS])[:, None, None]


def store_of(inputs: dict[str, np.ndarray]) -> str:
    """The format h and c are stored in: the inputs' dtype (fp32, fp16 or bf16)."""
    from opbench.dtypes import dtype_name

    return dtype_name(inputs["x"].dtype)


def input_projection(
    shape: RecurrentShape, f64: dict[str, np.ndarray], bias: np.ndarray, abs_bias: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """x W_ih^T + bias for every step (T x B x G) and beside it |x| |W_ih|^T + abs_bias."""
    t, b, i, g = shape.seq_len, shape.batch, shape.input_size, shape.GATES * shape.hidden
    x = f64["x"].reshape(t * b, i)
    xw = (x @ f64["w_ih"].T + bias).reshape(t, b, g)
    ax = (np.abs(x) @ np.abs(f64["w_ih"]).T + abs_bias).reshape(t, b, g)
    return xw, ax


def finish(y: np.ndarray, bound_y: np.ndarray, states: dict[str, tuple[np.ndarray, np.ndarray]]) -> Any:
    """The reference from the float64 outputs and bounds: y with its per-step bounds (units, T, B, H), and
    the final states (name -> (value, bound per unit))."""
    outputs = {"y": y, "h_n": y[-1], **{k: v for k, (v, _) in states.items()}}
    bounds = {
        name: {"y": bound_y[k], "h_n": bound_y[k, -1], **{s: e[k] for s, (_, e) in states.items()}}
        for k, name in enumerate(UNITS)
    }
    return RecurrentReference(outputs=outputs, bounds=bounds)


def check(
    shape: RecurrentShape,
    output: Any,
    inputs: dict[str, np.ndarray],
    ref: RecurrentReference,
    dtype: str,
    accumulate: str,
) -> dict[str, Any]:
    """output as numpy arrays in PyTorch's return structure: (y, h_n), or (y, (h_n, c_n)) for the LSTM."""
    y, state = output
    if shape.STATES == 2:
        h_n, c_n = state
        outs = {"y": np.asarray(y), "h_n": np.asarray(h_n), "c_n": np.asarray(c_n)}
    else:
        outs = {"y": np.asarray(y), "h_n": np.asarray(state)}
    floor = tiny(dtype)
    bounds = {k: SAFETY * v + floor for k, v in ref.bounds[accumulate].items()}
    return compare(outs, ref.outputs, bounds, dtype)


# --- opbench's own kernel for these ops (the cpp backend and the tuner) -------------------------------------


def tile_names(shape: RecurrentShape, isa: str | None, dtype: str = "fp32") -> dict[str, int]:
    """What the tuning space's rules may name: the register tile (and elem_bytes, as gemm.tile_names) and the
    dimensions the tiles block in the two GEMMs, the input projection (T*B x G x I) and each step's
    recurrent product (B x G x H), G = gates * H: m = T*B rows at most, n = G columns, k = max(I, H)."""
    from opbench import kernels

    return {
        **kernels.register_tile(isa, dtype),
        "m": shape.seq_len * shape.batch,
        "n": shape.GATES * shape.hidden,
        "k": max(shape.input_size, shape.hidden),
        "batch": shape.batch,
    }


def tile_args(tiles: dict[str, int | None], threads: int, isa: str | None) -> dict[str, Any]:
    """The keyword arguments every kernels.prepare_<cell> takes from a plan's tiles."""
    return {
        "tile_m": tiles.get("tile_m"),
        "tile_n": tiles.get("tile_n"),
        "tile_k": tiles.get("tile_k"),
        "threads": threads,
        "isa": isa,
    }

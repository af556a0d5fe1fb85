"""LSTM forward, one layer, one direction, sequence-first (x is T x B x I), PyTorch gate order (i, f, g, o):
shapes, FLOPs, inputs, float64 reference and a first-order running error bound."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from opbench.dtypes import ITEMSIZE, NUMPY_DTYPES, UNIT_ROUNDOFF
from opbench.ops.fields import int_field, reject_unknown
from opbench.ops.numerics import compare, gamma, tiny

NAME = "lstm"
FLOP_NOTE = (
    "LSTM FLOPs = 2*4H*(I+H) per time step per batch row (the input and recurrent GEMMs; the gate "
    "activations and cell update are excluded)"
)


@dataclass(frozen=True, order=True)
class LstmShape:
    seq_len: int
    batch: int
    input_size: int
    hidden: int

    def label(self) -> str:
        return f"T{self.seq_len} B{self.batch} I{self.input_size} H{self.hidden}"

    def to_dict(self) -> dict[str, int]:
        return {f: getattr(self, f) for f in SHAPE_FIELDS}


SHAPE_FIELDS = ("seq_len", "batch", "input_size", "hidden")
AXES: dict[str, tuple[str, ...]] = {f: (f,) for f in ("batch", "seq_len", "input_size", "hidden")}
PARAMS: dict[str, Any] = {}
BASE = {"batch": 16, "seq_len": 25, "input_size": 256, "hidden": 256}
DEFAULT_AXES = {
    "batch": [4, 16, 64],
    "seq_len": [10, 25, 50],
    "input_size": [128, 256, 512],
    "hidden": [128, 256, 512],
}
DEFAULT_MODE = "one-factor"
DEFAULT_BACKENDS = ("cpp", "torch", "mindspore", "tensorflow")
BATCH_FIELDS = ("batch",)
SPATIAL_FIELDS = ("input_size",)

# Absolute error allowed for one activation (sigmoid, tanh) in units of the compute precision's unit
# roundoff: vectorised exp-based implementations are within a few ulp.
ACTIVATION_ULPS = 8
# The bound is first order (products of errors dropped); this factor covers the second-order terms.
SAFETY = 2.0


def shape_from_case(fields: dict[str, Any]) -> LstmShape:
    reject_unknown(fields, SHAPE_FIELDS, NAME)
    return LstmShape(**{f: int_field(fields, f) for f in SHAPE_FIELDS})


def make_shape(point: dict[str, Any]) -> LstmShape:
    return shape_from_case({f: point[f] for f in SHAPE_FIELDS})


def factors(shape: LstmShape) -> dict[str, int]:
    """The sweep axes' values for this shape."""
    return {
        "batch": shape.batch,
        "seq_len": shape.seq_len,
        "input_size": shape.input_size,
        "hidden": shape.hidden,
    }


def scale(shape: LstmShape, factor: float) -> LstmShape:
    """Shrink batch and input size by factor (at least 1)."""
    return replace(
        shape, batch=max(1, round(shape.batch * factor)), input_size=max(1, round(shape.input_size * factor))
    )


def default_cases() -> list[LstmShape]:
    from opbench.space import expand

    return expand(sys.modules[__name__], DEFAULT_AXES, dict(BASE), dict(PARAMS), DEFAULT_MODE)


def flops(shape: LstmShape) -> int:
    h = shape.hidden
    return 2 * 4 * h * (shape.input_size + h) * shape.seq_len * shape.batch


def _io_elems(shape: LstmShape) -> int:
    t, b, i, h = shape.seq_len, shape.batch, shape.input_size, shape.hidden
    return t * b * i + 4 * h * (i + h) + 8 * h + 4 * b * h + t * b * h


def min_bytes(shape: LstmShape, dtype: str) -> int:
    """Compulsory traffic: x, weights, biases and initial state read once; y and final state written once."""
    return ITEMSIZE[dtype] * _io_elems(shape)


def memory_bytes(shape: LstmShape, dtype: str, reference: bool = True) -> int:
    """Inputs and outputs (x3 copies) and our fp32 gate buffer; when verifying, the float64 reference with
    its projections and bounds."""
    t, b, h = shape.seq_len, shape.batch, shape.hidden
    io = _io_elems(shape)
    ref = 8 * (3 * io + 3 * t * b * 4 * h + 3 * t * b * h) if reference else 0
    return 3 * ITEMSIZE[dtype] * io + 4 * t * b * 4 * h + ref


def verify_cost_flops(shape: LstmShape) -> int:
    """The reference, its magnitudes and the error propagation: about four times the op."""
    return 4 * flops(shape)


def make_inputs(shape: LstmShape, dtype: str, seed: int) -> dict[str, np.ndarray]:
    """x, h0, c0 uniform in [-1, 1); weights and biases uniform in +-1/sqrt(H) (PyTorch's initialisation)."""
    rng = np.random.default_rng(seed)
    t, b, i, h = shape.seq_len, shape.batch, shape.input_size, shape.hidden
    bound = 1.0 / np.sqrt(h)
    np_dtype = NUMPY_DTYPES[dtype]

    def u(size: tuple[int, ...], lim: float) -> np.ndarray:
        return rng.uniform(-lim, lim, size=size).astype(np_dtype)

    return {
        "x": u((t, b, i), 1.0),
        "w_ih": u((4 * h, i), bound),
        "w_hh": u((4 * h, h), bound),
        "b_ih": u((4 * h,), bound),
        "b_hh": u((4 * h,), bound),
        "h0": u((b, h), 1.0),
        "c0": u((b, h), 1.0),
    }


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


@dataclass(frozen=True)
class LstmReference:
    y: np.ndarray  # T x B x H, float64
    h_n: np.ndarray
    c_n: np.ndarray
    # First-order error bounds per compute precision ("fp32", "fp16"): arrays like y, h_n, c_n.
    bounds: dict[str, dict[str, np.ndarray]]


def reference(
    shape: LstmShape, inputs: dict[str, np.ndarray], store_dtype: str | None = None
) -> LstmReference:
    """float64 forward pass, and beside it the propagation of a first-order bound on the error of an
    implementation that accumulates each gate's dot products (length I+H, plus two biases) with unit
    roundoff u, evaluates activations within ACTIVATION_ULPS*u, and stores h and c in store_dtype:
        e_z = gamma_{I+H+2}(u) * (|x||W_ih|^T + |h||W_hh|^T + |b|) + |W_hh| e_h       (pre-activations)
        e_i,f,o = e_z/4 + e_act,  e_g = e_z + e_act                        (sigmoid' <= 1/4, tanh' <= 1)
        e_c' = |f| e_c + |c| e_f + |i| e_g + |g| e_i + 3u(|f c| + |i g|) + u_store |c'|
        e_h' = |o| (e_c' + e_act) + |tanh c'| e_o + 2u |h'| + u_store |h'|
    Bounds are computed for u = fp32 and u = fp16 at once (rows of one stacked product per step)."""
    store = store_dtype or ("fp16" if inputs["x"].dtype == np.float16 else "fp32")
    u_store = UNIT_ROUNDOFF[store]
    f64 = {k: v.astype(np.float64) for k, v in inputs.items()}
    t_len, b, i_size, h = shape.seq_len, shape.batch, shape.input_size, shape.hidden
    units = ("fp32", "fp16")
    u = np.array([UNIT_ROUNDOFF[name] for name in units])[:, None, None]
    gam = np.array([gamma(i_size + h + 2, UNIT_ROUNDOFF[name]) for name in units])[:, None, None]
    e_act = ACTIVATION_ULPS * u

    w_hh, abs_w_hh = f64["w_hh"], np.abs(f64["w_hh"])
    bias = f64["b_ih"] + f64["b_hh"]
    xw = (f64["x"].reshape(t_len * b, i_size) @ f64["w_ih"].T + bias).reshape(t_len, b, 4 * h)
    ax = (
        np.abs(f64["x"]).reshape(t_len * b, i_size) @ np.abs(f64["w_ih"]).T
        + np.abs(f64["b_ih"])
        + np.abs(f64["b_hh"])
    ).reshape(t_len, b, 4 * h)

    hs, cs = f64["h0"], f64["c0"]
    e_h = np.zeros((len(units), b, h))
    e_c = np.zeros((len(units), b, h))
    y = np.empty((t_len, b, h))
    bound_y = np.empty((len(units), t_len, b, h))
    for t in range(t_len):
        z = xw[t] + hs @ w_hh.T
        mz = ax[t] + np.abs(hs) @ abs_w_hh.T
        e_z = gam * mz + (e_h.reshape(-1, h) @ abs_w_hh.T).reshape(len(units), b, 4 * h)
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
    bounds = {name: {"y": bound_y[k], "h_n": bound_y[k, -1], "c_n": e_c[k]} for k, name in enumerate(units)}
    return LstmReference(y=y, h_n=hs, c_n=cs, bounds=bounds)


def check(
    shape: LstmShape,
    output: Any,
    inputs: dict[str, np.ndarray],
    ref: LstmReference,
    dtype: str,
    accumulate: str,
) -> dict[str, Any]:
    """output is (y, (h_n, c_n)) as numpy arrays (PyTorch's return structure)."""
    y, (h_n, c_n) = output
    outs = {"y": np.asarray(y), "h_n": np.asarray(h_n), "c_n": np.asarray(c_n)}
    refs = {"y": ref.y, "h_n": ref.h_n, "c_n": ref.c_n}
    floor = tiny(dtype)
    bounds = {k: SAFETY * v + floor for k, v in ref.bounds[accumulate].items()}
    return compare(outs, refs, bounds)


# --- opbench's own kernel for this op (the cpp backend and the tuner) ---------------------------------------

INPUT_NAMES = ("x", "w_ih", "w_hh", "b_ih", "b_hh", "h0", "c0")


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

    return kernels.prepare_lstm(
        *(inputs[n] for n in INPUT_NAMES),
        tile_m=tiles.get("tile_m"),
        tile_n=tiles.get("tile_n"),
        tile_k=tiles.get("tile_k"),
        threads=threads,
        isa=isa,
    )


def tile_names(shape: LstmShape, isa: str | None) -> dict[str, int]:
    """What the tuning space's rules may name: the register tile (mr, nr) and the dimensions the tiles block
    in the LSTM's two GEMMs, the input projection (T*B x 4H x I) and each step's recurrent product
    (B x 4H x H): m = T*B rows at most, n = 4H columns, k = max(I, H)."""
    from opbench import kernels

    info = kernels.default_tiles(isa)
    return {
        "mr": info["mr"],
        "nr": info["nr"],
        "m": shape.seq_len * shape.batch,
        "n": 4 * shape.hidden,
        "k": max(shape.input_size, shape.hidden),
        "batch": shape.batch,
    }

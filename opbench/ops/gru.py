"""GRU forward, one layer, one direction, sequence-first (x is T x B x I), PyTorch's gate order (r, z, n)
with b_hn inside the reset product, as torch.nn.GRU: its shape class and float64 reference with a
first-order running error bound; the rest is shared with the other recurrent ops (ops/recurrent.py)."""

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

NAME = "gru"
FLOP_NOTE = (
    "GRU FLOPs = 2*3H*(I+H) per time step per batch row (DeepBench's convention: the input and recurrent "
    "GEMMs; the gate activations and state update are excluded)"
)
PARAMS: dict[str, Any] = {}


@dataclass(frozen=True, order=True)
class GruShape(RecurrentShape):
    GATES: ClassVar[int] = 3
    STATES: ClassVar[int] = 1


SHAPE_FIELDS = GruShape.fields()
INPUT_NAMES = ("x", "w_ih", "w_hh", "b_ih", "b_hh", "h0")


def shape_from_case(fields: dict[str, Any]) -> GruShape:
    return GruShape(**sizes_from_case(GruShape, fields, NAME))


def make_shape(point: dict[str, Any]) -> GruShape:
    return shape_from_case({f: point[f] for f in SHAPE_FIELDS})


def default_cases() -> list[GruShape]:
    from opbench.space import expand

    return expand(sys.modules[__name__], DEFAULT_AXES, dict(BASE), dict(PARAMS), DEFAULT_MODE)


def reference(
    shape: GruShape, inputs: dict[str, np.ndarray], store_dtype: str | None = None
) -> RecurrentReference:
    """float64 forward pass, and beside it the propagation of a first-order bound on the error of an
    implementation that accumulates each dot product (length I or H, plus a bias) with unit roundoff u,
    evaluates activations within ACTIVATION_ULPS*u and stores h in store_dtype (derivatives taken at the
    float64 values, gx = x W_ih^T + b_ih, gh = h W_hh^T + b_hh, gamma = gamma_{I+H+2}(u)):
        e_r, e_z = s'(.) (gamma (|x||W_i.|^T + |h||W_h.|^T + |b|) + |W_h.| e_h) + e_act       (s' = s (1 - s))
        e_gx_n = gamma (|x||W_in|^T + |b_in|),  e_gh_n = gamma (|h||W_hn|^T + |b_hn|) + |W_hn| e_h
        e_n = (1 - n^2) (e_gx_n + |r| e_gh_n + |gh_n| e_r + 2u (|gx_n| + |r gh_n|)) + e_act
        e_h' = |1 - z| e_n + |z| e_h + |h - n| e_z + 3u (|n| + |z (h - n)|) + u_store |h'|
    Bounds are computed for u = fp32 and u = fp16 at once."""
    store = store_dtype or store_of(inputs)
    u_store = UNIT_ROUNDOFF[store]
    f64 = {k: v.astype(np.float64) for k, v in inputs.items()}
    t_len, b, h = shape.seq_len, shape.batch, shape.hidden
    u, e_act = stacked_roundoffs()
    gam = pre_activation_gammas(shape.input_size + h + 2)
    w_hh, abs_w_hh = f64["w_hh"], np.abs(f64["w_hh"])
    gx_all, ax_all = input_projection(shape, f64, f64["b_ih"], np.abs(f64["b_ih"]))

    hs = f64["h0"]
    e_h = np.zeros((len(UNITS), b, h))
    y = np.empty((t_len, b, h))
    bound_y = np.empty((len(UNITS), t_len, b, h))
    for t in range(t_len):
        gh = hs @ w_hh.T + f64["b_hh"]
        ah = np.abs(hs) @ abs_w_hh.T + np.abs(f64["b_hh"])
        e_gh = gam * ah + (e_h.reshape(-1, h) @ abs_w_hh.T).reshape(len(UNITS), b, 3 * h)
        gx, ax = gx_all[t], ax_all[t]
        part = [slice(k * h, (k + 1) * h) for k in range(3)]
        r = 0.5 * (1.0 + np.tanh(0.5 * (gx[:, part[0]] + gh[:, part[0]])))
        z = 0.5 * (1.0 + np.tanh(0.5 * (gx[:, part[1]] + gh[:, part[1]])))
        e_r = r * (1 - r) * (gam * ax[:, part[0]] + e_gh[:, :, part[0]]) + e_act
        e_z = z * (1 - z) * (gam * ax[:, part[1]] + e_gh[:, :, part[1]]) + e_act
        gx_n, gh_n = gx[:, part[2]], gh[:, part[2]]
        n = np.tanh(gx_n + r * gh_n)
        e_pre = (
            gam * ax[:, part[2]]
            + np.abs(r) * e_gh[:, :, part[2]]
            + np.abs(gh_n) * e_r
            + 2 * u * (np.abs(gx_n) + np.abs(r * gh_n))
        )
        e_n = (1 - n * n) * e_pre + e_act
        h_new = n + z * (hs - n)
        e_h = (
            np.abs(1 - z) * e_n
            + np.abs(z) * e_h
            + np.abs(hs - n) * e_z
            + 3 * u * (np.abs(n) + np.abs(z * (hs - n)))
            + u_store * np.abs(h_new)
        )
        y[t] = h_new
        bound_y[:, t] = e_h
        hs = h_new
    return finish(y, bound_y, {})


def plan(
    shape: GruShape,
    inputs: dict[str, np.ndarray],
    tiles: dict[str, int | None],
    threads: int,
    isa: str | None = None,
    accumulate: str = "fp32",
) -> Any:
    """Our GRU prepared for this case (kernels.Plan): both of its GEMMs use the tiles (None: cache model)."""
    from opbench import kernels

    return kernels.prepare_gru(*(inputs[n] for n in INPUT_NAMES), **tile_args(tiles, threads, isa))

"""Backward passes (training) with opbench's kernels: the gradients of the inputs and the weights given an
upstream gradient, on the same kernel sets and tiles as the forward passes. tiles (an opbench.Tiles, a
record's tile dict, or None: the cache model, all this process's cores, the best kernel set) says how
they run. Invalid input raises ValueError naming the problem."""

from __future__ import annotations

from opbench.dtypes import Array
from opbench.kernels._args import (
    MAX_CONV_PARAM,
    Padding,
    Plan,
    TilesArg,
    _arrays,
    _padding,
    _pair,
    _positive_int,
    _tiles,
)
from opbench.kernels._native import core as _core


def _outs(outs: object, names: str) -> tuple[Array | None, Array | None]:
    """outs, a pair of arrays written by every call, or (None, None): allocated."""
    if outs is None:
        return None, None
    if not isinstance(outs, tuple) or len(outs) != 2:
        raise ValueError(f"outs must be a tuple ({names}), got {outs!r}")
    return outs[0], outs[1]


def prepare_gemm_backward(
    a: Array, b: Array, dc: Array, *, outs: tuple[Array, Array] | None = None, tiles: TilesArg = None
) -> Plan:
    """gemm_backward(...) prepared once (see kernels.prepare_gemm); outs = (da, db) are written by every
    call (allocated when None)."""
    _arrays(a=a, b=b, dc=dc)
    da, db = _outs(outs, "da, db")
    return _core.prepare_gemm_backward(a, b, dc, da, db, _tiles(tiles, "tuned(...)", "gemm_backward"))


def gemm_backward(a: Array, b: Array, dc: Array, *, tiles: TilesArg = None) -> tuple[Array, Array]:
    """For C = a @ b and the upstream gradient dc (M x N): (da, db) = (dc @ b.T, a.T @ dc), the two
    products of the blocked GEMM with B^T and A^T read in place (no transposed copies). a (M x K), b
    (K x N) and dc are C-contiguous float32 or float16 of one dtype; fp16 accumulates in fp32 and is
    rounded once. The tiles block both products."""
    da, db = prepare_gemm_backward(a, b, dc, tiles=tiles).output()
    return da, db


def prepare_conv2d_backward(
    x: Array,
    w: Array,
    dy: Array,
    *,
    stride: int | tuple[int, int] = 1,
    padding: Padding = 0,
    dilation: int | tuple[int, int] = 1,
    groups: int = 1,
    outs: tuple[Array, Array] | None = None,
    tiles: TilesArg = None,
) -> Plan:
    """conv2d_backward(...) prepared once (see kernels.prepare_gemm); outs = (dx, dw) are written by every
    call (allocated when None); `plan.tiles()` adds the pixel block of the im2col tile."""
    _arrays(x=x, w=w, dy=dy)
    dx, dw = _outs(outs, "dx, dw")
    return _core.prepare_conv2d_backward(
        x,
        w,
        dy,
        _pair(stride, "stride", 1),
        _padding(padding),
        _pair(dilation, "dilation", 1),
        _positive_int(groups, "groups", MAX_CONV_PARAM),
        dx,
        dw,
        _tiles(tiles, "tuned(...)", "conv2d_backward"),
    )


def conv2d_backward(
    x: Array,
    w: Array,
    dy: Array,
    *,
    stride: int | tuple[int, int] = 1,
    padding: Padding = 0,
    dilation: int | tuple[int, int] = 1,
    groups: int = 1,
    tiles: TilesArg = None,
) -> tuple[Array, Array]:
    """For y = conv2d(x, w, stride, padding, dilation, groups) (NCHW, KCRS, as kernels.conv2d) and the
    upstream gradient dy (the shape of y): (dx, dw). Per image, group and block of output pixels, the
    block's im2col rows are gathered into a bounded tile (never the whole im2col matrix) for dW += dY T^T,
    and dX's columns T = W^T dY are computed into it and scattered back; both products on the blocked GEMM
    (tiles.m and tiles.k block them, tiles.n is the pixel block). Any stride, padding, dilation and groups;
    fp16 is widened once, accumulated in fp32, rounded once."""
    plan = prepare_conv2d_backward(
        x, w, dy, stride=stride, padding=padding, dilation=dilation, groups=groups, tiles=tiles
    )
    dx, dw = plan.output()
    return dx, dw


def prepare_rnn_backward(
    cell: str,
    x: Array,
    w_ih: Array,
    w_hh: Array,
    b_ih: Array,
    b_hh: Array,
    h0: Array,
    c0: Array | None,
    dy: Array,
    dh_n: Array,
    dc_n: Array | None = None,
    *,
    tiles: TilesArg = None,
) -> Plan:
    """The recurrent layer `cell` ("rnn_tanh", "rnn_relu", "gru", "lstm"; torch layouts as kernels.rnn,
    gru and lstm) run forward once here with its activations saved, and its backpropagation through time
    prepared: every call computes, for the upstream gradients dy (T x B x H), dh_n and (LSTM) dc_n (B x H),
    `plan.output()` = (dx, dw_ih, dw_hh, db_ih, db_hh, dh0[, dc0]). Each step's recurrent gradient is one
    GEMM; the weight and input gradients are three GEMMs over all steps. fp16 accumulates in fp32.
    `plan.saved()` is the training forward's handle: y, h_n (c_n) and the fp32 activations BPTT reads."""
    arrays = {
        "x": x,
        "w_ih": w_ih,
        "w_hh": w_hh,
        "b_ih": b_ih,
        "b_hh": b_hh,
        "h0": h0,
        "dy": dy,
        "dh_n": dh_n,
    }
    _arrays(**arrays, **{k: v for k, v in (("c0", c0), ("dc_n", dc_n)) if v is not None})
    return _core.prepare_rnn_backward(
        cell,
        x,
        w_ih,
        w_hh,
        b_ih,
        b_hh,
        h0,
        c0,
        dy,
        dh_n,
        dc_n,
        _tiles(tiles, "tuned(...)", f"{cell} backward"),
    )


def rnn_backward(
    x: Array,
    w_ih: Array,
    w_hh: Array,
    b_ih: Array,
    b_hh: Array,
    h0: Array,
    dy: Array,
    dh_n: Array,
    *,
    nonlinearity: str = "tanh",
    tiles: TilesArg = None,
) -> tuple[Array, ...]:
    """The Elman RNN's gradients (dx, dw_ih, dw_hh, db_ih, db_hh, dh0) for the upstream gradients of
    kernels.rnn's (y, h_n); see prepare_rnn_backward."""
    if nonlinearity not in ("tanh", "relu"):
        raise ValueError(f"nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
    plan = prepare_rnn_backward(
        f"rnn_{nonlinearity}", x, w_ih, w_hh, b_ih, b_hh, h0, None, dy, dh_n, tiles=tiles
    )
    return tuple(plan.output())


def gru_backward(
    x: Array,
    w_ih: Array,
    w_hh: Array,
    b_ih: Array,
    b_hh: Array,
    h0: Array,
    dy: Array,
    dh_n: Array,
    *,
    tiles: TilesArg = None,
) -> tuple[Array, ...]:
    """The GRU's gradients (dx, dw_ih, dw_hh, db_ih, db_hh, dh0); see prepare_rnn_backward."""
    plan = prepare_rnn_backward("gru", x, w_ih, w_hh, b_ih, b_hh, h0, None, dy, dh_n, tiles=tiles)
    return tuple(plan.output())


def lstm_backward(
    x: Array,
    w_ih: Array,
    w_hh: Array,
    b_ih: Array,
    b_hh: Array,
    h0: Array,
    c0: Array,
    dy: Array,
    dh_n: Array,
    dc_n: Array,
    *,
    tiles: TilesArg = None,
) -> tuple[Array, ...]:
    """The LSTM's gradients (dx, dw_ih, dw_hh, db_ih, db_hh, dh0, dc0); see prepare_rnn_backward."""
    plan = prepare_rnn_backward("lstm", x, w_ih, w_hh, b_ih, b_hh, h0, c0, dy, dh_n, dc_n, tiles=tiles)
    return tuple(plan.output())

"""The recurrent layers with opbench's kernels: one layer, one direction, sequence-first (x is T x B x I),
PyTorch's layouts and gate orders, all arrays of one dtype (float32 or float16; fp16 accumulates in fp32
and the states are carried in fp32 between steps).

Each is built the same way: the input projection of all steps is one GEMM, each step's recurrent product
a second GEMM (W_hh packed once per call), and the gate activations are fused in a vectorised cell per
ISA. tiles (an opbench.Tiles, or a record `opbench tune` saved:
opbench.tuned.tuned_recurrent_tiles(op, x, w_hh, threads)[0]) block both GEMMs and say the threads
and kernel set. Invalid input raises ValueError naming the problem."""

from __future__ import annotations

from opbench.dtypes import Array
from opbench.kernels._args import Plan, TilesArg, _arrays, _tiles
from opbench.kernels._native import core as _core

NONLINEARITIES = ("tanh", "relu")
# Where each layer's tuned tiles are looked up (named when tiles="tuned" is given).
_LOOKUP = {
    "rnn": "tuned_recurrent_tiles('rnn', x, w_hh, threads, nonlinearity)",
    "gru": "tuned_recurrent_tiles('gru', x, w_hh, threads)",
    "lstm": "tuned_lstm_tiles(x, w_hh, threads)",
}


def _prepare(cell: str, arrays: dict[str, Array], outs: tuple[Array, ...] | None, tiles: TilesArg) -> Plan:
    _arrays(**arrays)
    lstm = "c0" in arrays
    want = 3 if lstm else 2
    if outs is not None and (not isinstance(outs, tuple) or len(outs) != want):
        raise ValueError(f"outs must be a tuple ({'y, h_n, c_n' if lstm else 'y, h_n'}), got {outs!r}")
    y, h_n, c_n = (*outs, None)[:3] if outs is not None else (None, None, None)
    a = arrays
    op = "lstm" if lstm else "gru" if cell == "gru" else "rnn"
    return _core.prepare_rnn(
        cell,
        a["x"],
        a["w_ih"],
        a["w_hh"],
        a["b_ih"],
        a["b_hh"],
        a["h0"],
        a.get("c0"),
        y,
        h_n,
        c_n,
        _tiles(tiles, _LOOKUP[op], op),
    )


def _rnn_cell(nonlinearity: object) -> str:
    if nonlinearity not in NONLINEARITIES:
        raise ValueError(f"nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
    return f"rnn_{nonlinearity}"


def prepare_rnn(
    x: Array,
    w_ih: Array,
    w_hh: Array,
    b_ih: Array,
    b_hh: Array,
    h0: Array,
    *,
    nonlinearity: str = "tanh",
    outs: tuple[Array, Array] | None = None,
    tiles: TilesArg = None,
) -> Plan:
    """rnn(...) prepared once (see kernels.prepare_gemm); outs = (y, h_n) are written by every call
    (allocated when None)."""
    arrays = {"x": x, "w_ih": w_ih, "w_hh": w_hh, "b_ih": b_ih, "b_hh": b_hh, "h0": h0}
    return _prepare(_rnn_cell(nonlinearity), arrays, outs, tiles)


def prepare_gru(
    x: Array,
    w_ih: Array,
    w_hh: Array,
    b_ih: Array,
    b_hh: Array,
    h0: Array,
    *,
    outs: tuple[Array, Array] | None = None,
    tiles: TilesArg = None,
) -> Plan:
    """gru(...) prepared once (see kernels.prepare_gemm); outs = (y, h_n)."""
    arrays = {"x": x, "w_ih": w_ih, "w_hh": w_hh, "b_ih": b_ih, "b_hh": b_hh, "h0": h0}
    return _prepare("gru", arrays, outs, tiles)


def prepare_lstm(
    x: Array,
    w_ih: Array,
    w_hh: Array,
    b_ih: Array,
    b_hh: Array,
    h0: Array,
    c0: Array,
    *,
    outs: tuple[Array, Array, Array] | None = None,
    tiles: TilesArg = None,
) -> Plan:
    """lstm(...) prepared once (see kernels.prepare_gemm); outs = (y, h_n, c_n)."""
    arrays = {"x": x, "w_ih": w_ih, "w_hh": w_hh, "b_ih": b_ih, "b_hh": b_hh, "h0": h0, "c0": c0}
    return _prepare("lstm", arrays, outs, tiles)


def rnn(
    x: Array,
    w_ih: Array,
    w_hh: Array,
    b_ih: Array,
    b_hh: Array,
    h0: Array,
    *,
    nonlinearity: str = "tanh",
    tiles: TilesArg = None,
) -> tuple[Array, Array]:
    """Elman RNN forward: h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh), act tanh or relu; w_ih is
    H x I, w_hh H x H, biases H, h0 B x H. Returns (y, h_n), y T x B x H, like torch.nn.RNN (without its
    leading num_layers dimension on h_n)."""
    y, h_n = prepare_rnn(x, w_ih, w_hh, b_ih, b_hh, h0, nonlinearity=nonlinearity, tiles=tiles).output()
    return y, h_n


def gru(
    x: Array, w_ih: Array, w_hh: Array, b_ih: Array, b_hh: Array, h0: Array, *, tiles: TilesArg = None
) -> tuple[Array, Array]:
    """GRU forward, gates r, z, n as torch.nn.GRU: r = sigmoid(W_ir x + b_ir + W_hr h + b_hr), z likewise,
    n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1 - z) * n + z * h; w_ih is 3H x I, w_hh 3H x H,
    biases 3H, h0 B x H. Returns (y, h_n)."""
    y, h_n = prepare_gru(x, w_ih, w_hh, b_ih, b_hh, h0, tiles=tiles).output()
    return y, h_n


def lstm(
    x: Array,
    w_ih: Array,
    w_hh: Array,
    b_ih: Array,
    b_hh: Array,
    h0: Array,
    c0: Array,
    *,
    tiles: TilesArg = None,
) -> tuple[Array, tuple[Array, Array]]:
    """LSTM forward, gates i, f, g, o as torch.nn.LSTM: w_ih is 4H x I, w_hh 4H x H, biases 4H, h0 and c0
    B x H. Returns (y, (h_n, c_n)). tiles: opbench.tuned.tuned_lstm_tiles(x, w_hh, threads)[0]."""
    y, (h_n, c_n) = prepare_lstm(x, w_ih, w_hh, b_ih, b_hh, h0, c0, tiles=tiles).output()
    return y, (h_n, c_n)

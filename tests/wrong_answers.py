"""User kernels (`--kernel tests/wrong_answers.py:FUNC --kernel-params kind=KIND`) that answer right or in
one chosen wrong way, for the tests that pin what verification catches (test_verification.py) and for
benchmarks/verification_power.py. Each computes the float64 reference and rounds it to the inputs' dtype
(the most accurate answer a kernel can give), then, by `kind`:

    right       the rounded reference
    neg         negated
    half        scaled by 0.5
    noise       random values of the answer's spread
    perm        rows (gemm), images and channels (conv), batch rows (recurrent) moved round by one
    trunc       the reduction cut to its first half (gemm: K, conv: each filter's taps, recurrent: x's
                features)
    one         one element off by 10% of max|answer| (the element of largest magnitude)
    one_any     one element off by 10% of max|answer| (the element a third of the way in)
    first_only  right on its first call, 25% too large on every later one
    memo        its first answer for a shape, returned for every later call of that shape
    forget_whh  (recurrent) W_hh taken as zero
    halved      (recurrent) h and c halved at every step

The module keeps state across calls (first_only, memo), as such kernels do.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_CALLS: dict[str, int] = {}
_MEMO: dict[tuple[Any, ...], Any] = {}


def _round(x: np.ndarray, like: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).astype(like.dtype)


def _perturb(value: np.ndarray, kind: str, key: tuple[Any, ...]) -> np.ndarray:
    """The float64 answer `value`, made wrong by `kind` (the stateful kinds keyed by `key`)."""
    if kind == "right":
        return value
    if kind == "neg":
        return -value
    if kind == "half":
        return 0.5 * value
    if kind == "noise":
        return np.random.default_rng(1).normal(0.0, float(value.std()) or 1.0, value.shape)
    if kind in ("one", "one_any"):
        out = value.copy()
        flat = out.reshape(-1)
        at = int(np.argmax(np.abs(flat))) if kind == "one" else flat.size // 3
        flat[at] += 0.1 * float(np.max(np.abs(flat)))
        return out
    if kind == "first_only":
        _CALLS[repr(key)] = _CALLS.get(repr(key), 0) + 1
        return value if _CALLS[repr(key)] == 1 else 1.25 * value
    raise ValueError(f"unknown kind {kind!r}")


def _answer(value: np.ndarray, like: np.ndarray, kind: str, key: tuple[Any, ...]) -> np.ndarray:
    if kind == "memo":
        if key not in _MEMO:
            _MEMO[key] = _round(value, like)
        return np.array(_MEMO[key], copy=True)
    return _round(_perturb(value, kind, key), like)


def gemm(a: np.ndarray, b: np.ndarray, kind: str = "right") -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if kind == "trunc":  # (a batched GEMM's a and b are stacks: each product cut alike)
        k = max(1, a.shape[-1] // 2)
        return _round(a64[..., :k] @ b64[..., :k, :], a)
    value = a64 @ b64
    if kind == "perm":
        value, kind = (np.roll(value, 1, axis=-2) if value.shape[-2] > 1 else -value), "right"
    return _answer(value, a, kind, ("gemm", a.shape, b.shape))


def conv(
    x: np.ndarray,
    w: np.ndarray,
    stride: tuple[int, int],
    padding: tuple[int, ...],
    dilation: tuple[int, int],
    groups: int,
    kind: str = "right",
) -> np.ndarray:
    from opbench.ops.conv import ConvShape, conv64

    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    top, bottom, left, right = (
        padding if len(padding) == 4 else (padding[0], padding[0], padding[1], padding[1])
    )
    shape = ConvShape(n, c, h, wd, k, r, s, *stride, top, left, *dilation, groups, bottom, right)
    if kind == "trunc":  # the first half of each filter's C/groups x R x S taps
        taps = w.reshape(k, -1).astype(np.float64)
        taps[:, max(1, taps.shape[1] // 2) :] = 0.0
        value = conv64(shape, x, taps.reshape(w.shape))
    else:
        value = conv64(shape, x, w)
    if kind == "perm":
        value = np.roll(value, 1, axis=(0, 1)) if value.shape[0] * value.shape[1] > 1 else -value
    kind = "right" if kind in ("trunc", "perm") else kind
    return _answer(value, x, kind, ("conv", x.shape, w.shape))


def _recurrent(op: str, inputs: dict[str, np.ndarray], extra: dict[str, Any], kind: str) -> Any:
    from opbench.ops import get_op

    module = get_op(op)
    t, b, i = inputs["x"].shape
    h = inputs["w_hh"].shape[1]
    shape = module.shape_from_case({"seq_len": t, "batch": b, "input_size": i, "hidden": h, **extra})
    given = dict(inputs)
    if kind == "forget_whh":
        given["w_hh"] = np.zeros_like(inputs["w_hh"])
    if kind == "trunc":
        cut = np.ones(i)
        cut[(i + 1) // 2 :] = 0.0
        given["x"] = (inputs["x"].astype(np.float64) * cut).astype(inputs["x"].dtype)
    ref = module.reference(shape, given)
    outs = dict(ref.outputs)
    like = inputs["x"]
    plain = kind in ("forget_whh", "trunc")
    if kind == "halved":
        outs = {k: 0.5 * v for k, v in outs.items()}
    elif kind == "perm":
        outs = {k: np.roll(v, 1, axis=-2) if b > 1 else -v for k, v in outs.items()}
    key = (op, inputs["x"].shape, inputs["w_hh"].shape)
    if kind == "memo":
        if key not in _MEMO:
            _MEMO[key] = {k: _round(v, like) for k, v in outs.items()}
        done = {k: np.array(v, copy=True) for k, v in _MEMO[key].items()}
    elif kind == "one" or kind == "one_any":
        y = _perturb(outs["y"], kind, key)
        done = {k: _round(v, like) for k, v in outs.items()}
        done["y"] = _round(y, like)
        done["h_n"] = done["y"][-1]
    else:
        factor = 1.0
        if kind == "first_only":
            _CALLS[repr(key)] = _CALLS.get(repr(key), 0) + 1
            factor = 1.0 if _CALLS[repr(key)] == 1 else 1.25
        elif kind not in ("right", "halved", "perm") and not plain:
            outs = {k: _perturb(v, kind, key) for k, v in outs.items()}
        done = {k: _round(factor * v, like) for k, v in outs.items()}
    if op == "lstm":
        return done["y"], (done["h_n"], done["c_n"])
    return done["y"], done["h_n"]


def lstm(x, w_ih, w_hh, b_ih, b_hh, h0, c0, kind: str = "right") -> Any:  # type: ignore[no-untyped-def]
    inputs = {"x": x, "w_ih": w_ih, "w_hh": w_hh, "b_ih": b_ih, "b_hh": b_hh, "h0": h0, "c0": c0}
    return _recurrent("lstm", inputs, {}, kind)


def gru(x, w_ih, w_hh, b_ih, b_hh, h0, kind: str = "right") -> Any:  # type: ignore[no-untyped-def]
    inputs = {"x": x, "w_ih": w_ih, "w_hh": w_hh, "b_ih": b_ih, "b_hh": b_hh, "h0": h0}
    return _recurrent("gru", inputs, {}, kind)


def rnn(x, w_ih, w_hh, b_ih, b_hh, h0, nonlinearity: str = "tanh", kind: str = "right") -> Any:  # type: ignore[no-untyped-def]
    inputs = {"x": x, "w_ih": w_ih, "w_hh": w_hh, "b_ih": b_ih, "b_hh": b_hh, "h0": h0}
    return _recurrent("rnn", inputs, {"relu": int(nonlinearity == "relu")}, kind)

"""numpy emulations of correct low-precision implementations, for the tests that pin verification's false
alarms (test_verification.py) and benchmarks/verification_power.py: sums of products rounded at every
addition in fp16, bf16 or fp32 (sequentially, pairwise or in blocks), and recurrent layers whose cells compute
in fp16 or bf16 as the frameworks' layers do."""

from __future__ import annotations

from typing import Any

import numpy as np

from opbench.dtypes import NUMPY_DTYPES


def emulated(a: np.ndarray, b: np.ndarray, kind: str, precision: str, block: int = 0) -> np.ndarray:
    """Batched GEMMs (S x M x K times S x K x N) summed in `precision`: 'seq' one product at a time, each
    sum rounded; 'pair' pairwise; 'block' sequential blocks of `block` products, the blocks added in fp32.
    Products are exact (an FMA), every addition rounds (numpy rounds float64 to the format directly)."""
    t = NUMPY_DTYPES[precision]
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    k = a.shape[2]
    if kind == "pair":
        terms = (a64[:, :, :, None] * b64[:, None, :, :]).astype(t)  # S, M, K, N
        while terms.shape[2] > 1:
            if terms.shape[2] % 2:
                terms = np.concatenate([terms, np.zeros_like(terms[:, :, :1])], axis=2)
            terms = (terms[:, :, ::2].astype(np.float64) + terms[:, :, 1::2]).astype(t)
        return terms[:, :, 0].astype(np.float64)
    step = block if kind == "block" else k
    total = np.zeros((a.shape[0], a.shape[1], b.shape[2]))
    for start in range(0, k, step):
        s = np.zeros_like(total).astype(t)
        for j in range(start, min(k, start + step)):
            s = (s.astype(np.float64) + a64[:, :, j, None] * b64[:, None, j, :]).astype(t)
        total = (total + s.astype(np.float64)).astype(np.float32).astype(np.float64)
    return total


def recurrent_emulated(module: Any, shape: Any, inputs: dict[str, np.ndarray], cells: str) -> Any:
    """A recurrent layer as the frameworks chain tensor ops in fp16 or bf16: fp32 GEMMs rounded to the cells'
    precision, the gates added, activated and combined in it, every result rounded (ops/recurrent.py's
    "-cells" units)."""
    t = NUMPY_DTYPES[cells]

    def r(x: np.ndarray) -> np.ndarray:
        return np.asarray(x, dtype=np.float64).astype(t).astype(np.float64)

    def sig(z: np.ndarray) -> np.ndarray:
        return r(0.5 * (1.0 + np.tanh(0.5 * z)))

    f = {k: v.astype(np.float64) for k, v in inputs.items()}
    h = f["h0"]
    c = f.get("c0")
    hid = shape.hidden
    ys = []
    for step in range(shape.seq_len):
        gx = r(r(f["x"][step].astype(np.float32) @ f["w_ih"].T.astype(np.float32)) + f["b_ih"])
        gh = r(r(h.astype(np.float32) @ f["w_hh"].T.astype(np.float32)) + f["b_hh"])
        if module.name == "lstm":
            z = r(gx + gh)
            i, fg, o = sig(z[:, :hid]), sig(z[:, hid : 2 * hid]), sig(z[:, 3 * hid :])
            g = r(np.tanh(z[:, 2 * hid : 3 * hid]))
            c = r(r(fg * c) + r(i * g))
            h = r(o * r(np.tanh(c)))
        elif module.name == "gru":
            rz = sig(r(gx[:, : 2 * hid] + gh[:, : 2 * hid]))
            n = r(np.tanh(r(gx[:, 2 * hid :] + r(rz[:, :hid] * gh[:, 2 * hid :]))))
            h = r(n + r(rz[:, hid:] * r(h - n)))
        else:
            h = r(np.tanh(r(gx + gh)))
        ys.append(h)
    y = np.stack(ys).astype(t)
    if module.name == "lstm":
        return y, (y[-1], np.asarray(c).astype(t))
    return y, y[-1]

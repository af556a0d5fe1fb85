"""An operator developer's own GEMM, tuned by opbench:

    opbench tune gemm --m 256 --n 256 --k 256 --kernel examples/blocked_gemm.py:blocked_gemm \
        --space examples/blocked_gemm.toml --trials 20

opbench imports this file in its isolated worker and calls `blocked_gemm(a, b, **params)` with the
problem's inputs (numpy arrays of the requested dtype) and one keyword per parameter of the space file;
it checks the answer against float64, times the calls, and keeps every measurement in a resumable study.
A crash, a hang or a wrong answer of one parameter choice is a failed trial, and the search goes on.

Here C = A @ B is computed one block of rows and one block of the inner dimension at a time, with
numpy's matmul on each block pair; the block sizes and the loop order are the search parameters.
"""

from __future__ import annotations

import numpy as np


def blocked_gemm(a: np.ndarray, b: np.ndarray, *, block_m: int, block_k: int, order: str) -> np.ndarray:
    m, k = a.shape
    n = b.shape[1]
    c = np.zeros((m, n), dtype=np.float32)  # fp16 inputs are summed in fp32, rounded once at the end
    rows = range(0, m, block_m)
    depth = range(0, k, block_k)
    pairs = (
        [(i, p) for i in rows for p in depth]
        if order == "rows-first"
        else [(i, p) for p in depth for i in rows]
    )
    for i, p in pairs:
        c[i : i + block_m] += a[i : i + block_m, p : p + block_k].astype(np.float32) @ b[
            p : p + block_k
        ].astype(np.float32)
    return c.astype(a.dtype)

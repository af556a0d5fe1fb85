"""Backend `numpy`: np.matmul into a preallocated output, BLAS threads fixed with threadpoolctl."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from opbench.backends.base import Backend, Prepared
from opbench.documents import Params
from opbench.dtypes import Array, Inputs
from opbench.errors import BackendUnavailable
from opbench.ops.base import Shape


class _NumpyGemm(Prepared):
    def __init__(self, a: Array, b: Array, details: dict[str, Any]) -> None:
        self._a, self._b = a.copy(), b.copy()  # its own, which refill() rewrites
        self._out = np.empty((*a.shape[:-1], b.shape[-1]), dtype=a.dtype)  # batched: a stack
        self._timed = False
        self.details = details

    def run(self, loops: int) -> float:
        a, b, out = self._a, self._b, self._out
        self._timed = True
        t0 = time.perf_counter()
        for _ in range(loops):
            np.matmul(a, b, out=out)
        return time.perf_counter() - t0

    def output(self) -> Array:
        # The timed call's own: into the output of the inputs' dtype (without out=, ml_dtypes' bfloat16
        # matmul returns float32, another result than the one timed).
        np.matmul(self._a, self._b, out=self._out)
        return self._out.copy()

    def timed_output(self) -> Array:
        return self._out.copy() if self._timed else self.output()  # what the last timed call wrote

    def refill(self, inputs: dict[str, Array]) -> bool:
        np.copyto(self._a, inputs["a"])
        np.copyto(self._b, inputs["b"])
        return True


class NumpyBackend(Backend):
    name = "numpy"
    ops = ("gemm",)  # for conv and the recurrent ops numpy is the float64 reference, not a contender

    def __init__(self) -> None:
        self._limiter: threadpool_limits | None = None
        self._blas: list[dict[str, Any]] = []

    def unavailable_reason(self) -> str | None:
        return None

    def version(self) -> str | None:
        return np.__version__

    def setup(self, threads: int, device: str) -> None:
        if device != "cpu":
            raise BackendUnavailable(f"numpy runs on the CPU only, not on {device}")

        # Kept for the whole process: the limit stays in force until the object is restored or dropped.
        self._limiter = threadpool_limits(limits=threads, user_api="blas")
        self._blas = [
            {k: lib.get(k) for k in ("internal_api", "version", "num_threads", "architecture")}
            for lib in threadpool_info()
            if lib.get("user_api") == "blas" and "numpy" in (lib.get("filepath") or "")
        ]

    def unsupported_reason(self, op: str, dtype: str) -> str | None:
        if op != "gemm":
            return f"numpy is the float64 reference for {op}, not a backend"
        return super().unsupported_reason(op, dtype)

    def prepare(self, op: str, shape: Shape, inputs: Inputs, params: Params) -> Prepared:
        return _NumpyGemm(inputs["a"], inputs["b"], {"blas": self._blas})

    def notes(self, op: str, dtype: str) -> list[str]:
        if dtype == "fp16":
            return ["numpy has no BLAS kernel for float16: this is its generic element loop"]
        if dtype == "bf16":
            return ["numpy has no BLAS kernel for bfloat16: ml_dtypes' dot loop, summed in fp32"]
        return []

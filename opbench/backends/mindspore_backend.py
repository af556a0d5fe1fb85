"""Backend `mindspore`: ops.matmul in PyNative mode on the CPU, each call run to completion.

MindSpore's PyNative CPU execution is asynchronous and `mindspore.runtime.synchronize()` does not
support the CPU, so the adapter calls `runtime.launch_blocking()`: every op returns only once it has
finished, and the clock can stop right after the loop.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from opbench.backends.base import Backend, Prepared
from opbench.errors import BackendUnavailable


class _MindSporeGemm(Prepared):
    def __init__(self, ms: Any, a: np.ndarray, b: np.ndarray, details: dict[str, Any]) -> None:
        self._matmul = ms.ops.matmul
        self._a = ms.Tensor(a)
        self._b = ms.Tensor(b)
        self.details = details

    def run(self, loops: int) -> float:
        matmul, a, b = self._matmul, self._a, self._b
        t0 = time.perf_counter()
        for _ in range(loops):
            matmul(a, b)
        return time.perf_counter() - t0

    def output(self) -> np.ndarray:
        return self._matmul(self._a, self._b).asnumpy()


class MindSporeBackend(Backend):
    name = "mindspore"

    def __init__(self) -> None:
        self._ms: Any = None
        self._details: dict[str, Any] = {}

    def unavailable_reason(self) -> str | None:
        os.environ.setdefault("GLOG_v", "3")  # MindSpore logs warnings on import unless told not to
        try:
            import mindspore  # noqa: F401
        except ImportError as e:
            return f"MindSpore is not installed ({e}); pip install 'opbench[mindspore]' (needs numpy<2)"
        except Exception as e:  # e.g. built against NumPy 1.x while NumPy 2 is installed
            return f"MindSpore fails to import: {type(e).__name__}: {e}"
        return None

    def version(self) -> str | None:
        import mindspore

        return str(mindspore.__version__)

    def setup(self, threads: int, device: str) -> None:
        if device != "cpu":
            raise BackendUnavailable(f"opbench's MindSpore adapter runs on the CPU only, not on {device}")
        import mindspore as ms

        ms.set_device("CPU")
        ms.set_context(mode=ms.PYNATIVE_MODE)
        note = None
        try:
            ms.device_context.cpu.op_tuning.threads_num(threads)
        except RuntimeError:  # can be set once per process
            note = "threads_num was already set in this process"
        try:
            ms.runtime.launch_blocking()
        except RuntimeError:
            pass  # already blocking
        self._ms = ms
        self._details = {
            "mode": "PyNative, launch_blocking",
            "threads_num": threads,
            "thread_note": note
            or "MindSpore 2.10's CPU matmul pool ignores threads_num; the process CPU affinity bounds it",
        }

    def prepare(self, op: str, inputs: dict[str, np.ndarray], params: dict[str, Any]) -> Prepared:
        return _MindSporeGemm(self._ms, inputs["a"], inputs["b"], dict(self._details))

    def notes(self, op: str, dtype: str) -> list[str]:
        return ["output allocated on every call (ops.matmul has no out= argument)"]

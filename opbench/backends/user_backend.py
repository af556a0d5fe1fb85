"""Backend `kernel:FUNC`: the operator developer's own kernel (`opbench sweep OP --kernel FILE.py:FUNC
[--kernel-params k=v,...]`), timed by the same harness as the built-in backends, side by side with them.

FUNC's calling convention is the tuner's (userkernel.py): the op's inputs as numpy arrays, plus the
fixed --kernel-params as keywords. Unlike `opbench tune --kernel`, a sweep runs every backend in its own
process: an exception is a failed case, but a kernel that crashes the process ends the sweep (the files
keep every case finished before it). Calls are timed on the host clock; the thread count is the kernel's
own business (what it was asked for is recorded, nothing is pinned for it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from opbench.backends.base import Backend, KeptOutput, Prepared, copied, host_timed
from opbench.documents import Params
from opbench.dtypes import Array, Inputs, Output
from opbench.errors import BackendUnavailable
from opbench.ops import assumed_accumulation
from opbench.ops.base import Shape
from opbench.userkernel import KernelRef, as_output, call, load_function


class UserCase(KeptOutput, Prepared):
    """One call of the user's kernel on a case's inputs (also the tuning worker's candidate)."""

    def __init__(
        self,
        fn: Callable[..., Any],
        op: str,
        shape: Shape,
        inputs: Inputs,
        params: Params,
        details: dict[str, Any] | None = None,
    ) -> None:

        # Its own copy of the inputs, which refill() rewrites in place (the sweep shares one set among the
        # backends of a case).
        own = {k: np.array(v, copy=True) for k, v in inputs.items()}
        self._inputs = own
        self._call: Callable[[], Any] = lambda: call(op, fn, shape, own, params)
        self._to_numpy = lambda result: copied(as_output(op, result))
        self.details = details or {}

    def run(self, loops: int) -> float:
        return host_timed(self._call, loops, keep=self.keep)

    def output(self) -> Output:
        return self._to_numpy(self._call())

    def refill(self, inputs: dict[str, Array]) -> bool:
        for name, values in inputs.items():
            np.copyto(self._inputs[name], values)
        return True


class UserKernelBackend(Backend):
    """One user kernel as a backend; its name is `kernel:FUNC`."""

    name = "kernel"

    def __init__(self, kernel: KernelRef, params: Params) -> None:
        self.kernel, self.params = kernel, dict(params)
        self.name = f"kernel:{kernel.func}"  # type: ignore[misc]
        self._fn: Callable[..., Any] | None = None
        self._threads = 1

    def accumulation(self, op: str, dtype: str, device: str = "cpu") -> str:
        """What the kernel declared it sums in (--kernel-accumulate, default fp32, as every real fp16 and bf16
        kernel on a CPU does); its half-precision recurrent cells are assumed to compute in the dtype."""
        return assumed_accumulation(op, dtype, self.kernel.accumulate, True)

    def unavailable_reason(self) -> str | None:
        try:
            self._fn = load_function(self.kernel.to_dict())
        except Exception as e:  # the user's module: any error while importing it
            return f"cannot import {self.kernel.spec}: {type(e).__name__}: {e}".splitlines()[0][:300]
        return None

    def version(self) -> str | None:
        return f"sha256:{self.kernel.sha256[:12]}" if self.kernel.sha256 else None

    def setup(self, threads: int, device: str) -> None:
        if device != "cpu":
            raise BackendUnavailable(f"{self.name} takes numpy arrays: it runs on the CPU, not on {device}")
        self._threads = threads

    def prepare(self, op: str, shape: Shape, inputs: Inputs, params: Params) -> Prepared:
        fn = self._fn
        assert fn is not None, "unavailable_reason() imports the kernel first"
        details = {
            "kernel": self.kernel.spec,
            "kernel_sha256": self.kernel.sha256,
            "params": self.params,
            "threads_requested": self._threads,
        }
        return UserCase(fn, op, shape, inputs, self.params, details)

    def repro_args(self, params: dict[str, Any], details: dict[str, Any]) -> tuple[list[str], list[str]]:
        args = ["--kernel", self.kernel.spec]
        if self.params:
            args += ["--kernel-params", ",".join(f"{k}={v}" for k, v in self.params.items())]
        if self.kernel.accumulate != "fp32":
            args += ["--kernel-accumulate", self.kernel.accumulate]
        return ["opbench"], [*args, "--backend", self.name]

    def notes(self, op: str, dtype: str) -> list[str]:
        return [
            f"{self.kernel.spec} with {self.params or 'no parameters'}: timed on the host clock; its threads "
            "are its own (opbench pins none for it)"
        ]

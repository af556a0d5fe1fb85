"""The backend interface: who calls what, and when.

The sweep calls, per process: `unavailable_reason()` (cheap; None means importable), then `setup(threads,
device)` once before the first case. Per case: `unsupported_reason(op, dtype)`, then `prepare(op, shape,
inputs, params)`, which converts inputs to the backend's own tensors and allocates outputs, all outside any
timed region. The returned Prepared is verified with `output()` and timed with `run(loops)` by the Timer.

Outputs come back as numpy arrays in the op's structure: gemm and conv one array, rnn and gru (y, h_n),
lstm (y, (h_n, c_n)).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np


def host_timed(call: Callable[[], Any], loops: int, finish: Callable[[], Any] | None = None) -> float:
    """Seconds of `loops` back-to-back calls on the host clock, `finish` (a device synchronisation)
    included before the clock stops."""
    t0 = time.perf_counter()
    for _ in range(loops):
        call()
    if finish is not None:
        finish()
    return time.perf_counter() - t0


def event_timed(event: Callable[..., Any], call: Callable[[], Any], loops: int) -> float:
    """Seconds of `loops` back-to-back calls between two device events (`event` is torch.cuda.Event or
    mindspore.runtime.Event: record, synchronize and elapsed_time in milliseconds)."""
    start, end = event(enable_timing=True), event(enable_timing=True)
    start.record()
    for _ in range(loops):
        call()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) / 1e3


class Prepared(ABC):
    """One case ready to run: inputs resident on the device, output buffer allocated."""

    #: facts about what ran (kernel, tiles, library config) that go into the result record
    details: dict[str, Any]
    #: how run() measures the elapsed time, recorded with every result
    clock: str = "host clock (time.perf_counter) around the calls"

    def cache_flush(self) -> tuple[Callable[[], None], str] | None:
        """For cold-cache timing on a device with its own caches: a function that evicts them and what it
        does. None: the host's caches are flushed (the CPU default)."""
        return None

    @abstractmethod
    def run(self, loops: int) -> float:
        """Perform `loops` calls back to back, synchronize, and return the elapsed seconds."""

    @abstractmethod
    def output(self) -> Any:
        """Perform one call and return its result as numpy arrays (for verification)."""


class Backend(ABC):
    name: ClassVar[str]
    #: precision each dtype is assumed to accumulate in, for the verification bound (bf16: every library's
    #: CPU kernels, oneDNN's and ours, sum bf16 products in fp32)
    accumulate: ClassVar[dict[str, str]] = {"fp32": "fp32", "fp16": "fp16", "bf16": "fp32"}

    @abstractmethod
    def unavailable_reason(self) -> str | None:
        """None when the backend can be used here, else why not (with an install hint)."""

    @abstractmethod
    def version(self) -> str | None:
        """The library version measured, for provenance."""

    @abstractmethod
    def setup(self, threads: int, device: str) -> None:
        """Fix the thread count and device for the rest of the process. Raises BackendUnavailable."""

    #: ops this backend has an adapter for
    ops: ClassVar[tuple[str, ...]] = ("gemm", "conv", "rnn", "gru", "lstm")
    #: the same with their backward passes ("gemm:bwd", ...), for a backend that runs both
    ops_with_backward: ClassVar[tuple[str, ...]] = (*ops, *(f"{op}:bwd" for op in ops))

    #: ops measured in bf16 (forward passes, docs/architecture.md: "bf16")
    bf16_ops: ClassVar[tuple[str, ...]] = ("gemm", "conv", "rnn", "gru", "lstm")
    #: the precision of a bf16 recurrent layer's gates and cell arithmetic, for its verification bound
    #: (ops/recurrent.py, UNITS): "bf16" for a framework layer built of bf16 tensor ops, "fp32" for a
    #: kernel that keeps the gates and state in fp32 and rounds only h and c to bf16
    bf16_cells: ClassVar[str] = "bf16"

    def accumulation(self, op: str, dtype: str) -> str:
        """The precision the verification bound assumes for `op` in `dtype` (a case may name its own in
        its details: opbench's fp16 accumulation names its block size)."""
        if dtype == "bf16" and op in ("rnn", "gru", "lstm"):
            return self.bf16_cells
        return self.accumulate.get(dtype, dtype)

    def unsupported_reason(self, op: str, dtype: str) -> str | None:
        """None when this backend runs `op` in `dtype`, else why not."""
        if op not in self.ops:
            return f"{self.name} has no {op} adapter"
        if dtype == "bf16" and op not in self.bf16_ops:
            ops = ", ".join(self.bf16_ops) or "no op"
            return f"opbench measures bf16 for {ops} on {self.name} so far, not {op}"
        return None

    @abstractmethod
    def prepare(self, op: str, shape: Any, inputs: dict[str, np.ndarray], params: dict[str, Any]) -> Prepared:
        """Build a Prepared for one case; raises on failure (the sweep records the reason)."""

    def notes(self, op: str, dtype: str) -> list[str]:
        """Known caveats worth printing beside this backend's numbers."""
        return []

    @property
    def pool(self) -> str:
        """The threads this backend runs on, by name: consecutive visits on one pool skip the wait for the
        previous pool to go quiet (measure.Bench's owner). Two sides of one backend share its pool."""
        return self.name

    def repro_args(self, params: dict[str, Any], details: dict[str, Any]) -> tuple[list[str], list[str]]:
        """How `opbench sweep` runs this backend again for one case: the command that starts opbench, and
        the options that name the backend and what it ran with (`params`: what it was asked for; `details`:
        what its Prepared reported, empty when the case never ran)."""
        return ["opbench"], ["--backend", self.name]

    def device_name(self, index: int) -> str | None:
        """The name this framework reports for GPU `index` (e.g. "NVIDIA H100 80GB HBM3"), or None where it
        cannot see one. Called before setup(); must not raise when the framework is missing."""
        return None

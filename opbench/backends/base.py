"""The backend interface: who calls what, and when.

The sweep calls, per process: `unavailable_reason()` (cheap; None means importable), then `setup(threads,
device)` once before the first case. Per case: `unsupported_reason(op, dtype)`, then `prepare(op, shape,
inputs, params)`, which converts inputs to the backend's own tensors and allocates outputs, all outside any
timed region. The returned Prepared is verified with `output()`; before each timed visit its inputs are
given new values with `refill(inputs)`, it is timed with `run(loops)` by the Timer, and the output of its
timed calls (`timed_output()`) is checked again (sweep/visits.py). Once per sweep, before its cases,
`call_overhead(op, params)` times one user's call of the op on a tiny case (overhead.py; `user_call` where
the case's timed call is not the one a user makes).

Outputs come back as numpy arrays in the op's structure: gemm and conv one array, rnn and gru (y, h_n),
lstm (y, (h_n, c_n)).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from opbench import overhead
from opbench.documents import Fields, Params, Scalar
from opbench.dtypes import Array, Inputs, Output
from opbench.ops import assumed_accumulation
from opbench.ops.base import Shape


def host_timed(
    call: Callable[[], Any],
    loops: int,
    finish: Callable[[], Any] | None = None,
    keep: Callable[[Any], None] | None = None,
) -> float:
    """Seconds of `loops` back-to-back calls on the host clock, `finish` (a device synchronisation)
    included before the clock stops; `keep` is given the last call's result after it stops (the others are
    dropped as they come, as before: only the last outlives its call)."""
    t0 = time.perf_counter()
    for _ in range(loops - 1):
        call()
    last = call() if loops > 0 else None
    if finish is not None:
        finish()
    elapsed = time.perf_counter() - t0
    if keep is not None and loops > 0:
        keep(last)
    return elapsed


def copied(result: Output | list[Output]) -> Output:
    """A result (an array, or tuples of arrays: the recurrent ops') copied out of buffers a later call
    overwrites."""
    if isinstance(result, tuple | list):
        return tuple(copied(r) for r in result)
    return np.array(result, copy=True)


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
    def output(self) -> Output:
        """Perform one call and return its result as numpy arrays (for verification)."""

    def timed_output(self) -> Output:
        """The result of the last call `run` timed, as numpy arrays the timing will not overwrite, where the
        backend keeps it; else one more call of the same prepared case (`output()`)."""
        return self.output()

    def refill(self, inputs: dict[str, Array]) -> bool:
        """Write `inputs` (the names, shapes and dtypes prepared) into this case's own input buffers in place,
        so that the next call computes on them with nothing reallocated (a kernel that remembers its first
        answer is then caught). False where the backend holds inputs it cannot rewrite: a framework's
        immutable tensors, a backward pass whose forward ran when prepared (nothing changes then)."""
        return False


class KeptOutput:
    """A Prepared whose timed loop hands its last result to `keep` (host_timed's keep): timed_output converts
    that result (`_to_numpy`) instead of making one more call."""

    _last: object = None  # the framework's result of the last timed call
    _to_numpy: Callable[[Any], Output]

    def keep(self, result: object) -> None:
        self._last = result

    def timed_output(self) -> Output:
        if self._last is None:
            return self.output()  # type: ignore[attr-defined]
        return self._to_numpy(self._last)


class Backend(ABC):
    name: ClassVar[str]
    #: the precision each dtype's products are assumed summed in on the CPU, for the verification bound:
    #: every library's CPU kernels (oneDNN's, Eigen's, MindSpore's, ours) sum fp16 and bf16 products in fp32
    #: (measured: their error is the output's rounding alone, benchmarks/verification_power.py)
    accumulate: ClassVar[dict[str, str]] = {"fp32": "fp32", "fp16": "fp32", "bf16": "fp32"}
    #: (op key, dtype) -> what the backend was measured to sum in where that is not `accumulate`'s (a
    #: framework's fp16 conv backward that adds partial results in fp16)
    accumulate_ops: ClassVar[dict[tuple[str, str], str]] = {}
    #: the same on an accelerator, where cuBLAS and cuDNN may reduce fp16 in fp16 (torch's
    #: allow_fp16_reduced_precision_reduction): nothing tighter is assumed there
    accumulate_accelerator: ClassVar[dict[str, str]] = {"fp32": "fp32", "fp16": "fp16", "bf16": "fp32"}
    #: whether this backend's half-precision recurrent layers compute their cells in the dtype (a framework's
    #: layer chains tensor ops: ops/recurrent.py, the "-cells" units) or in fp32 (a fused kernel: ours)
    half_cells: ClassVar[bool] = True
    #: the absolute error of its recurrent layers' fp32 activations where they are approximations (None:
    #: within a few ulps, ops/recurrent.py ACTIVATION_ULPS)
    activation_error: ClassVar[float | None] = None

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

    def accumulation(self, op: str, dtype: str, device: str = "cpu") -> str:
        """What the verification bound assumes for `op` in `dtype` on `device` (ops.assumed_accumulation: a
        precision for the sums, or a recurrent unit); a case may name its own in its details (opbench's
        fp16 accumulation names its block size)."""
        table = self.accumulate if device == "cpu" else self.accumulate_accelerator
        sums = self.accumulate_ops.get((op, dtype)) if device == "cpu" else None
        return assumed_accumulation(
            op, dtype, sums or table.get(dtype, dtype), self.half_cells, self.activation_error
        )

    def unsupported_reason(self, op: str, dtype: str) -> str | None:
        """None when this backend runs `op` in `dtype`, else why not."""
        if op not in self.ops:
            return f"{self.name} has no {op} adapter"
        if dtype == "bf16" and op not in self.bf16_ops:
            ops = ", ".join(self.bf16_ops) or "no op"
            return f"opbench measures bf16 for {ops} on {self.name} so far, not {op}"
        return None

    @abstractmethod
    def prepare(self, op: str, shape: Shape, inputs: Inputs, params: Params) -> Prepared:
        """Build a Prepared for one case; raises on failure (the sweep records the reason)."""

    def user_call(self, op: str, shape: Shape, inputs: Inputs) -> tuple[Callable[[], object], str] | None:
        """The call a user of this backend writes for `op` on these inputs, and its text, where the timed
        call of prepare()'s case is not that call (ours: the case runs a prepared plan, a user calls
        kernels.gemm); None: the case's timed call is the user's call (a framework's own op)."""
        return None

    def call_overhead(self, op: str, params: Params) -> overhead.CallOverhead:
        """What one user's call of `op` costs on its tiny case, timed in this process (overhead.measure)."""
        return overhead.measure(self, op, params)

    # The parameters a case of this backend may be given besides the case (the run's options for it, an A/B
    # side's NAME=VALUE): none unless a backend names them.
    param_names: ClassVar[tuple[str, ...]] = ()

    def parse_param(self, name: str, text: str) -> Scalar:
        """NAME=VALUE of an A/B side (`cpp:tile_m=56`): the value, checked and converted; ValueError naming
        what is wrong."""
        raise ValueError(f"{self.name} takes no parameters")

    def case_params(self, options: Fields, op: str, shape: Shape, dtype: str, threads: int) -> Params:
        """What one case is prepared with (`prepare`'s params), from the run's options for this backend
        (SweepConfig.backend_options; a lookup such as --tuned is the backend's own). None by default."""
        return {}

    def build(self) -> str | None:
        """What identifies this backend's compiled code beyond version() (history.py: a rebuilt kernel is a
        new case, not a change of the machine); None where the backend has none of its own."""
        return None

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

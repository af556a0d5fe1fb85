"""What one call costs a user: each backend's own call of the swept op on a tiny case, timed in the process
its cases run in, kept in the results header (backends.NAME.call_overhead_s, issue 41). The sweep times a
prepared call; a user's call of opbench.kernels, torch or numpy also checks its arguments, plans and
dispatches every time, which on a tiny case is nearly all of its time. For a framework the timed call of
its Prepared is that call already (torch.mm(a, b, out=c), a @ b); ours names its user-facing call
(Backend.user_call: kernels.gemm(a, b) rather than the prepared plan the sweep times)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Protocol, TypedDict

from opbench.documents import Fields, Params
from opbench.dtypes import Inputs
from opbench.ops import named
from opbench.ops.base import Shape


class CallOverhead(TypedDict):
    """One call of a backend's op on a tiny case, as its users make it (measure): seconds per call (None
    where it could not be timed), the case, and what was called (or why it was not timed)."""

    seconds: float | None
    case: str | None
    call: str


class Case(Protocol):
    """What measure() uses of a prepared case (backends.base.Prepared)."""

    @property
    def details(self) -> Mapping[str, object]: ...

    def run(self, loops: int) -> float: ...


class Timed(Protocol):
    """What measure() uses of a backend (backends.base.Backend has it all)."""

    def unsupported_reason(self, op: str, dtype: str) -> str | None: ...

    def user_call(self, op: str, shape: Shape, inputs: Inputs) -> tuple[Callable[[], object], str] | None: ...

    def prepare(self, op: str, shape: Shape, inputs: Inputs, params: Params) -> Case: ...


# Each forward op's tiny case: its time is the call's overhead (8x8x8 is 512 multiply-adds).
TINY: dict[str, Fields] = {
    "gemm": {"m": 8, "n": 8, "k": 8},
    "conv": {"n": 1, "c": 8, "h": 8, "w": 8, "k": 8, "r": 3, "s": 3, "pad_h": 1, "pad_w": 1},
    **{op: {"seq_len": 4, "batch": 2, "input_size": 8, "hidden": 8} for op in ("rnn", "gru", "lstm")},
}
DTYPE = "fp32"
SAMPLE_S = 2e-3  # each sample runs the call back to back for at least this long
SAMPLES = 7  # the best sample's time per call is the overhead (the least disturbed)


def per_call_s(run: Callable[[int], float]) -> float:
    """The best of SAMPLES samples of `run(loops)` (seconds for `loops` calls back to back) per call, with
    loops doubled until a sample takes SAMPLE_S."""
    loops = 1
    while run(loops) < SAMPLE_S and loops < 1 << 22:
        loops *= 2
    return min(run(loops) for _ in range(SAMPLES)) / loops


def python_loop(call: Callable[[], object]) -> Callable[[int], float]:
    """run(loops) for a call made from Python, as a user makes it."""

    def run(loops: int) -> float:
        start = time.perf_counter()
        for _ in range(loops):
            call()
        return time.perf_counter() - start

    return run


def tiny_shape(op: str) -> Shape | None:
    """op's tiny case (TINY) as its shape; None where it has none."""
    return named(op).shape_from_case(TINY[op]) if op in TINY else None


def measure(backend: Timed, op: str, params: Params) -> CallOverhead:
    """backend's call of `op` on its tiny case (TINY, fp32), in this process: seconds per call and what was
    called; `seconds` None with the reason where it cannot be timed (no tiny case, the backend refuses)."""
    shape = tiny_shape(op)
    if shape is None:
        return {"seconds": None, "case": None, "call": f"no tiny case for {op}"}
    spec = named(op)
    label = f"{op} {shape.label()} {DTYPE}"
    if (why := backend.unsupported_reason(op, DTYPE)) is not None:
        return {"seconds": None, "case": label, "call": why}
    inputs = spec.make_inputs(shape, DTYPE, 0)
    try:
        own = backend.user_call(op, shape, inputs)
        if own is not None:
            call, text = own
            return {"seconds": per_call_s(python_loop(call)), "case": label, "call": text}
        case = backend.prepare(op, shape, inputs, params)
        text = str(case.details.get("call") or "the timed call of its case")
        return {"seconds": per_call_s(case.run), "case": label, "call": text}
    except Exception as e:  # a backend that fails here still runs its cases; the header says why
        return {"seconds": None, "case": label, "call": f"{type(e).__name__}: {str(e).strip()[:200]}"}

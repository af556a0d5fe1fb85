"""One user's call of an op on a tiny case, per backend (overhead.py, the results header's
backends.NAME.call_overhead_s): real calls of our kernels and of the frameworks, timed in this process."""

from __future__ import annotations

import time

import pytest
from conftest import import_or_skip

from opbench import overhead
from opbench.backends import make_backend
from opbench.backends.base import Backend, Prepared
from opbench.backends.cpp_backend import CppBackend
from opbench.documents import Params
from opbench.dtypes import Inputs
from opbench.ops import named
from opbench.ops.base import Shape


def measured(backend: Backend, op: str) -> overhead.CallOverhead:
    """overhead.measure(backend, op), checked to be a time per call that the measurement's own duration
    bounds (SAMPLES samples of at least one call each): no bound on the machine's speed."""
    start = time.perf_counter()
    got = overhead.measure(backend, op, {})
    elapsed = time.perf_counter() - start
    assert got["seconds"] is not None and 0 < got["seconds"] <= elapsed / overhead.SAMPLES, (got, elapsed)
    return got


@pytest.mark.parametrize("op", ["gemm", "conv", "rnn", "gru", "lstm"])
def test_our_user_call_is_timed_and_computes_the_op(op: str) -> None:
    backend = CppBackend()
    backend.setup(1, "cpu")
    got = measured(backend, op)
    assert (
        got["call"].startswith("opbench.kernels.")
        and got["case"] == f"{op} {named(op).shape_from_case(overhead.TINY[op]).label()} fp32"
    )
    # the call timed is the user's plain call, and it computes what the prepared plan does
    spec = named(op)
    shape = spec.shape_from_case(overhead.TINY[op])
    inputs = spec.make_inputs(shape, "fp32", 0)
    own = backend.user_call(op, shape, inputs)
    assert own is not None
    case = backend.prepare(op, shape, inputs, {})
    assert spec.check(shape, own[0](), inputs, spec.reference(shape, inputs), "fp32", "fp32")["ok"]
    assert spec.check(shape, case.output(), inputs, spec.reference(shape, inputs), "fp32", "fp32")["ok"]


@pytest.mark.parametrize("name", ["numpy", "torch"])
def test_a_framework_call_is_its_timed_call(name: str) -> None:
    if name == "torch":
        import_or_skip("torch")
    backend = make_backend(name)
    backend.setup(1, "cpu")
    got = measured(backend, "gemm")
    assert got["case"] == "gemm 8x8x8 fp32" and got["call"]


def test_the_best_sample_per_call_is_what_is_kept() -> None:
    calls = []

    def run(loops: int) -> float:
        calls.append(loops)
        return loops * 1e-5 * (2.0 if len(calls) % 2 else 1.0)  # every other sample twice as slow

    assert overhead.per_call_s(run) == pytest.approx(1e-5)
    assert calls[0] == 1 and max(calls) * 1e-5 >= overhead.SAMPLE_S  # loops doubled to a 2 ms sample


class _Failing(CppBackend):
    """Our backend whose user call raises: the sweep still runs, the header says why."""

    def user_call(self, op: str, shape: Shape, inputs: Inputs):  # type: ignore[no-untyped-def]
        def boom() -> object:
            raise RuntimeError("the kernel refused")

        return boom, "boom()"


class _NoUserCall(CppBackend):
    """Our backend timed through its prepared case, as a framework is."""

    def user_call(self, op: str, shape: Shape, inputs: Inputs) -> None:
        return None

    def prepare(self, op: str, shape: Shape, inputs: Inputs, params: Params) -> Prepared:
        case = super().prepare(op, shape, inputs, params)
        case.details["call"] = "plan.run"
        return case


def test_a_call_that_fails_or_an_op_without_a_tiny_case_is_not_timed() -> None:
    got = overhead.measure(_Failing(), "gemm", {})
    assert got["seconds"] is None and got["call"] == "RuntimeError: the kernel refused"
    got = overhead.measure(CppBackend(), "gemm:bwd", {})
    assert got["seconds"] is None and "no tiny case" in got["call"]
    assert measured(_NoUserCall(), "gemm")["call"] == "plan.run"

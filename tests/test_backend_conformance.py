"""One conformance suite over every entry of BACKENDS and every installed plug-in (entry points of group
opbench.backends; tests/test_plugins.py runs it over a demo plug-in), after Optuna's shared sampler tests:
what the sweep relies on from any backend, checked the same way for each. A backend added to the registry
or installed as a plug-in is covered without editing this file.

- it says whether it can run here, and its version;
- setup on the CPU works, and a device it cannot use is BackendUnavailable (a skip, not a crash);
- for every op and dtype it either says why not (a non-empty reason, or for one shape an error the sweep
  reads as unsupported: "not supported", "no kernel") or prepares a case on odd shapes
  whose output passes the op's float64 check under the accumulation it declares, and whose run(loops)
  returns a positive time; refilled with new values (where it can rewrite its inputs), the output of its
  timed calls passes the spot check on those values and fails it on the old ones;
- notes() and device_name() answer without raising.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import missing

from opbench.backends import BACKENDS, Backend, make_backend, plugins
from opbench.errors import BackendUnavailable
from opbench.ops import conv, conv_bwd, gemm, gemm_bwd, gru, lstm, recurrent_bwd, rnn
from opbench.ops.spot import refreshed
from opbench.sweep.visits import UNSUPPORTED

NAMES = [*BACKENDS, *plugins()]
# Odd sizes: 1, primes, non-multiples of every tile. Each case: (its Op, shape).
CASES: dict[str, tuple[Any, Any]] = {
    "gemm": (gemm.OP, gemm.GemmShape(17, 31, 13)),
    "gemm-batched": (gemm.OP, gemm.GemmShape(17, 31, 13, batch=5)),
    "conv": (conv.OP, conv.ConvShape(2, 3, 11, 7, 5, 3, 3, pad_h=1, pad_w=1)),
    # padding per side (benchdnn's implied padding): top 2, bottom 1, left 0, right 2
    "conv-sides": (conv.OP, conv.ConvShape(2, 3, 11, 7, 5, 3, 3, pad_h=2, pad_w=0, pad_h_end=1, pad_w_end=2)),
    "conv-sides-s2": (
        conv.OP,
        conv.ConvShape(1, 4, 9, 13, 6, 3, 2, 2, 2, pad_h=0, pad_w=1, groups=2, pad_h_end=1, pad_w_end=0),
    ),
    "rnn": (rnn.OP, rnn.RnnShape(3, 2, 7, 5)),
    "rnn-relu": (rnn.OP, rnn.RnnShape(3, 2, 7, 5, relu=1)),
    # one hidden unit: weights of +-1, saturated tanh (MindSpore's approximate tanh, derivative cancellation)
    "rnn-h1": (rnn.OP, rnn.RnnShape(3, 5, 64, 1)),
    "gru": (gru.OP, gru.GruShape(3, 2, 7, 5)),
    "lstm": (lstm.OP, lstm.LstmShape(3, 2, 7, 5)),
    "gemm:bwd": (gemm_bwd.OP, gemm.GemmShape(17, 31, 13)),
    "conv:bwd": (conv_bwd.OP, conv.ConvShape(2, 3, 11, 7, 5, 3, 3, pad_h=1, pad_w=1)),
    "conv:bwd-sides": (
        conv_bwd.OP,
        conv.ConvShape(2, 3, 11, 7, 5, 3, 3, pad_h=2, pad_w=0, pad_h_end=1, pad_w_end=2),
    ),
    "conv:bwd-sides-s2": (
        conv_bwd.OP,
        conv.ConvShape(1, 4, 9, 13, 6, 3, 2, 2, 2, pad_h=0, pad_w=1, pad_h_end=1, pad_w_end=0),
    ),
    "rnn:bwd": (recurrent_bwd.RNN, rnn.RnnShape(3, 2, 7, 5)),
    "rnn:bwd-relu": (recurrent_bwd.RNN, rnn.RnnShape(3, 2, 7, 5, relu=1)),
    "rnn:bwd-h1": (recurrent_bwd.RNN, rnn.RnnShape(3, 5, 64, 1)),
    "gru:bwd": (recurrent_bwd.GRU, gru.GruShape(3, 2, 7, 5)),
    "lstm:bwd": (recurrent_bwd.LSTM, lstm.LstmShape(3, 2, 7, 5)),
    "conv:bwd-s2-g": (
        conv_bwd.OP,
        conv.ConvShape(2, 4, 9, 8, 6, 3, 3, stride_h=2, stride_w=2, pad_h=1, pad_w=1, groups=2),
    ),
}


@pytest.fixture(scope="module", params=NAMES)
def backend(request: pytest.FixtureRequest) -> Backend:
    be = make_backend(request.param)
    reason = be.unavailable_reason()
    if reason is not None:
        assert isinstance(reason, str) and reason, "an unavailable backend must say why"
        missing(f"{request.param}: {reason}")
    be.setup(2, "cpu")
    return be


def test_it_names_itself_and_its_version(backend: Backend) -> None:
    made_by = BACKENDS.get(backend.name) or plugins()[backend.name].load()
    assert type(backend) is made_by  # a plug-in is named as it was installed (make_backend)
    version = backend.version()
    assert version is None or (isinstance(version, str) and version)


def test_a_device_it_cannot_use_is_unavailable_not_a_crash(backend: Backend) -> None:
    fresh = make_backend(backend.name)
    with pytest.raises(BackendUnavailable):
        fresh.setup(2, "npu:97")


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("case_name", list(CASES))
def test_each_op_and_dtype_is_run_and_verified_or_refused_with_a_reason(
    backend: Backend, case_name: str, dtype: str
) -> None:
    op, shape = CASES[case_name]
    op_name = op.key
    reason = backend.unsupported_reason(op_name, dtype)
    if reason is not None:
        assert isinstance(reason, str) and reason
        return
    inputs = op.make_inputs(shape, dtype, 5)
    try:
        case = backend.prepare(op_name, shape, inputs, {})
    except Exception as e:  # a path the framework lacks for this shape must say so, as the sweep reads it
        assert UNSUPPORTED.search(str(e)), f"{backend.name} {case_name} {dtype}: {e}"
        return
    assert isinstance(case.details, dict)
    acc = case.details.get("accumulate") or backend.accumulation(op_name, dtype)
    result = op.check(shape, case.output(), inputs, op.reference(shape, inputs), dtype, acc)
    assert result["ok"], f"{backend.name} {op_name} {dtype}: {result}"
    # The timed kernel is the verified kernel: new values written in place (or a False that changes nothing),
    # then the output of the timed calls passes the spot check on the values they computed on.
    moved = refreshed(inputs, 11)
    used = moved if case.refill(moved) else inputs
    seconds = case.run(2)
    assert isinstance(seconds, float) and seconds > 0
    timed = op.spot_check(shape, case.timed_output(), used, dtype, acc, 3)
    assert timed["ok"], f"{backend.name} {op_name} {dtype}, timed output: {timed}"
    if used is moved:  # and the old values' answer is no longer what it computes
        stale = op.spot_check(shape, case.timed_output(), inputs, dtype, acc, 3)
        assert not stale["ok"], f"{backend.name} {op_name} {dtype}: refill changed nothing"
    notes = backend.notes(op_name, dtype)
    assert isinstance(notes, list) and all(isinstance(n, str) and n for n in notes)


def test_device_name_answers_without_raising(backend: Backend) -> None:
    name = backend.device_name(0)
    assert name is None or (isinstance(name, str) and name)

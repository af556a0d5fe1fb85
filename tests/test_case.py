"""The nouns (opbench/case.py): a Result becomes the versioned record in one place and reads back the same,
and every reason a sweep or the tuner writes reads back as the kind that wrote it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from opbench.blocks import Details, Guards, Peak, Reference, Sensitivity, Time, TimedCheck, Verify
from opbench.case import OK, RECORD_FIELDS, Case, Outcome, Reason, Result, Status
from opbench.ops import conv, gemm, get_op, lstm
from opbench.sweep.config import SweepConfig
from opbench.sweep.visits import _failure, memory_skip
from opbench.tune.isolation import describe_exit

TIME = Reason.TIME


def _case(shape: object = None, **kw: object) -> Case:
    shape = shape or gemm.GemmShape(3, 5, 7)
    fields = {"op": "gemm", "dtype": "fp32", "backend": "cpp", "threads": 2, "device": "cpu", **kw}
    fields["op"] = get_op(str(fields["op"]))
    return Case(shape=shape, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("op", "shape"),
    [
        ("gemm", gemm.GemmShape(3, 5, 7)),
        ("conv", conv.ConvShape(n=1, c=3, h=5, w=5, k=2, r=3, s=3)),
        ("lstm", lstm.LstmShape(seq_len=2, batch=3, input_size=4, hidden=5)),
    ],
)
def test_a_result_round_trips_through_its_record(op: str, shape: object) -> None:
    case = _case(shape, op=op, factors={"batch": 1}, params={"isa": "ref"})
    result = Result.of(
        case,
        OK,
        time=Time(median_s=1e-3, samples_s=(1e-3,)),
        gflops=1.5,
        peak=Peak(10.0, "in-run", "fma"),
        utilization=0.15,
        details=Details.of({"isa": "ref"}),
        notes=("a note",),
        flags=("drifting",),
    )
    rec = result.to_record()
    assert tuple(rec) == RECORD_FIELDS  # the schema's fields, in the order files have always had them
    assert rec["flops"] == case.flops and rec["arithmetic_intensity"] == case.flops / case.min_bytes()
    assert json.loads(json.dumps(rec)) == rec
    again = Result.from_record(json.loads(json.dumps(rec)))
    assert again.to_record() == rec
    assert again.status is Status.OK and again.reason is None and again.flags == ("drifting",)


# Every field of every block set (a sweep's full record), and the fields a block can lack left out.
FULL_BLOCKS = [
    Time(
        n_samples=3, loops=2, median_s=1e-3, iqr_s=1e-5, min_s=9e-4, mean_s=1e-3, std_s=1e-5, rel_iqr=0.01,
        stability="stable", single_sample=False, cold_cache=False, first_call=False,
        samples_s=(9e-4, 1e-3, 1.1e-3), rounds=2, rel_iqr_within=0.01, rel_spread_rounds=0.02,
        dropped_rounds=0, per_round=({"n_samples": 2, "kept": True},), settle_s=0.0,
        interval_s=(9e-4, 1.1e-3),
        interval_over="processes", processes=2, per_process=({"process": 0, "median_s": 1e-3},),
        between_processes=0.01, method="in-process",
    ),
    Time(median_s=2.0),
    Peak(10.0, "in-run", "fma"),
    Reference(basis="fma", fma_gflops=100.0, fma_speed=0.9, speed_index=0.95, fma_best_gflops=110.0,
              sensitivity=Sensitivity(value=0.8, estimate=0.7, se=0.1, weight=0.5, visits=9,
                                      probe_spread=0.02, prior=1.0, over="3 cases of cpp gemm", used=0.8),
              utilization_beside=0.5, utilization_best=0.45),
    Reference(basis="fma", fma_best_gflops=1.0,
              sensitivity=Sensitivity(visits=0, over="not yet estimated", used=1.0)),
    Verify(ok=True, max_err_ratio=0.1, max_rel_err=1e-6, worst="c", accumulate_assumed="fp32",
           timed=(TimedCheck(1, ok=True, max_err_ratio=0.2, inputs="new values", checked="rows 1, 5"),
                  TimedCheck(2, skipped="over the cap"))),
    Verify(ok=False, reason="c contains inf or NaN", accumulate_assumed="fp32"),
    Verify(skipped="over --verify-max-gflop"),
    Guards(zero_fraction=None, expected_zero_fraction=0.0, useful_flops=10, useful_gflops=1.0, reasons=(),
           peer="torch", peer_speedup=2.0),
    Guards(zero_fraction=1.0, expected_zero_fraction=0.0, reasons=("mistrusted: all zero",)),
]  # fmt: skip


@pytest.mark.parametrize("block", FULL_BLOCKS, ids=lambda b: type(b).__name__)
def test_every_block_reads_back_as_it_was_written(block: Any) -> None:
    written = json.loads(json.dumps(block.to_block()))
    assert type(block).from_block(written) == block
    # and a field of the wrong type reads as absent, never as a value of the wrong type
    for key, value in written.items():
        if value is not None and not isinstance(value, (list, dict)):
            bad = type(block).from_block({**written, key: [value]})
            assert bad is None or getattr(bad, key) is None, (key, bad)


def test_a_result_is_immutable() -> None:
    result = Result.of(_case())
    with pytest.raises(AttributeError):
        result.gflops = 2.0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("status", "text", "reason"),
    [
        ("ok", None, None),
        ("skipped", "memory: needs about 3.0 GiB, over the 1.0 GiB budget (--max-memory)", Reason.MEMORY),
        (
            "skipped",
            "predicted 40 s per call at the 1 GFLOPS numpy reached on x, over --max-call-s 5",
            Reason.TIME,
        ),
        ("skipped", "torch is not installed (pip install 'opbench[torch]')", Reason.UNSUPPORTED),
        ("skipped", "unsupported by torch: RuntimeError: not implemented for 'Half'", Reason.UNSUPPORTED),
        ("wrong_answer", "error above the bound", Reason.WRONG_ANSWER),
        ("wrong_answer", "wrong_answer", Reason.WRONG_ANSWER),
        ("failed", "crash: SIGSEGV", Reason.CRASH),
        ("failed", "worker exited with status 3", Reason.CRASH),
        ("failed", "timeout: no answer within 3 s", Reason.TIMEOUT),
        ("failed", "ValueError: tile_m must be >= 1", Reason.ERROR),
        ("failed", "out of memory", Reason.ERROR),
    ],
)
def test_reason_texts_read_back_as_their_kind(status: str, text: str | None, reason: Reason | None) -> None:
    outcome = Outcome.of(status, text)
    assert outcome.reason is reason
    assert outcome.status is (reason.status if reason else Status.OK)
    if reason is not None:
        assert reason.status.value == status and outcome.text == text


def test_an_outcome_refuses_a_text_that_reads_back_as_another_kind() -> None:
    with pytest.raises(ValueError, match="would read back as Reason.MEMORY"):
        Outcome(Reason.UNSUPPORTED, "memory: needs about 2 GiB")
    with pytest.raises(ValueError, match="needs a reason text"):
        Outcome(Reason.CRASH, "")
    with pytest.raises(ValueError, match="ok outcome has no reason"):
        Outcome(None, "why")


def test_the_producers_write_texts_of_their_own_kind() -> None:
    shapes = (gemm.GemmShape(8, 8, 8),)
    cfg = SweepConfig(gemm.OP, shapes, ("fp32",), ("cpp",), threads=1, max_memory_bytes=1 << 30)
    assert memory_skip(cfg, 3 << 30).reason is Reason.MEMORY
    assert (
        _failure("torch", RuntimeError("\"addmm\" not implemented for 'Half'")).reason is Reason.UNSUPPORTED
    )
    assert _failure("cpp", MemoryError()).reason is Reason.ERROR
    for code in (-11, -9, -6, 3):
        assert Outcome.of("failed", describe_exit(code)).reason is Reason.CRASH


@given(st.text(max_size=200))
def test_any_exception_message_is_an_error_or_unsupported_never_a_mismatch(message: str) -> None:
    outcome = _failure("torch", RuntimeError(message))  # an Outcome that did not read back would raise
    assert outcome.reason in (Reason.ERROR, Reason.UNSUPPORTED)


def test_a_record_of_an_op_this_version_does_not_run_keeps_its_name_and_refuses_to_measure() -> None:
    from opbench.errors import UsageError

    rec = Result.of(_case()).to_record()
    for op, pass_name in (("gemm2", "fwd"), ("gemm", "sideways")):
        back = Result.from_record({**rec, "op": op, "pass": pass_name})
        assert (back.case.op.name, back.case.pass_name) == (op, pass_name)
        assert back.to_record()["op"] == op and back.flops == rec["flops"]  # what the record said
        with pytest.raises(UsageError, match=f"op '{op}' .* is not one this version of opbench runs"):
            back.case.min_bytes()
    assert Result.from_record(rec).case.op is gemm.OP  # a known op is the registry's own


def test_the_op_module_protocols_name_every_field_bind_reads() -> None:
    """bind() and backward_of() read Op's fields under a module's names; the protocols mypy checks a module
    against must name the same ones, or a field would be read unchecked (or not at all)."""
    import dataclasses

    from opbench.ops import base

    functions = {name for name in base._REQUIRED if name not in base._CONSTANTS}
    assert {name for name in dir(base.OpModule) if not name.startswith("_")} == functions
    pass_members = {name for name in dir(base.PassModule) if not name.startswith("_")}
    assert set(base.PASS_FIELDS) == pass_members
    optional = {f.name for f in dataclasses.fields(base.Op) if f.name not in base._REQUIRED} - {"pass_name"}
    assert set(base.OPTIONAL_FIELDS) - {"flop_note", "tile_names"} == optional


def test_a_backward_pass_has_its_forwards_shape_interface_and_its_own_pass() -> None:
    """Every backward is its forward with its own PASS_FIELDS: the same shape interface objects, other
    FLOPs, inputs, reference, check and plan, and the key 'OP:bwd'."""
    import dataclasses

    from opbench.ops import BACKWARD, OPS
    from opbench.ops.base import OPTIONAL_FIELDS, PASS_FIELDS

    for name, backward in BACKWARD.items():
        forward = OPS[name]
        assert backward.key == f"{name}:bwd" and backward.pass_name == "bwd"
        for f in dataclasses.fields(forward):
            if f.name in PASS_FIELDS:
                assert getattr(backward, f.name) is not getattr(forward, f.name), (name, f.name)
            elif f.name not in (*OPTIONAL_FIELDS, "pass_name"):
                assert getattr(backward, f.name) is getattr(forward, f.name), (name, f.name)


def test_every_op_module_constant_has_its_fields_type() -> None:
    """bind() reads an op module's constants unchecked by mypy (OpModule names its functions only): each
    registered Op's are checked here, against what Op's fields mean."""
    from collections.abc import Mapping

    from opbench.ops import BACKWARD, OPS

    def strings(value: object) -> bool:
        return isinstance(value, tuple) and all(isinstance(v, str) for v in value)

    for op in (*OPS.values(), *BACKWARD.values()):
        assert isinstance(op.name, str) and isinstance(op.flop_note, str) and op.flop_note, op
        assert strings(op.shape_fields) and strings(op.default_backends), op
        assert set(op.batch_fields) | set(op.spatial_fields) <= set(op.shape_fields), op
        assert isinstance(op.axes, Mapping) and all(strings(v) for v in op.axes.values()), op
        assert all(set(v) <= set(op.shape_fields) for v in op.axes.values()), op
        assert isinstance(op.base, Mapping) and set(op.base) == set(op.axes), op
        assert isinstance(op.params, Mapping) and op.default_mode in ("one-factor", "product"), op
        assert op.space is None or isinstance(op.space, str), op

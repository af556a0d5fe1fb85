"""Registry of the operators opbench can sweep: one Op (ops/base.py) per pass of each op, keyed by the op
key ("gemm", "gemm:bwd"). Each op module owns its shapes, FLOPs, inputs, reference and check, and our
kernel's plan and tile names, and binds them into its `OP`; the fields are documented on Op.

`get_op` turns a name a person wrote (the command line, a spec) into an Op, and `named` one that a file or
another process wrote (a record, a worker's request); past that boundary code holds the Op itself (a
Case's `op`)."""

from __future__ import annotations

from typing import Any

from opbench.errors import UsageError
from opbench.ops import conv, conv_bwd, gemm, gemm_bwd, gru, lstm, recurrent_bwd, rnn
from opbench.ops.base import Op, foreign

OPS: dict[str, Op[Any]] = {op.name: op for op in (gemm.OP, conv.OP, rnn.OP, gru.OP, lstm.OP)}

# Training passes. A backward pass is an Op of its own (FLOPs, inputs with the upstream gradient, reference
# gradients, check, plan) with its forward's shape interface; it is reached by the op key "OP:bwd", which
# is also what backends are asked for (a backend lists the keys it runs in `ops`).
PASSES = ("fwd", "bwd")
BACKWARD: dict[str, Op[Any]] = {
    op.name: op for op in (gemm_bwd.OP, conv_bwd.OP, recurrent_bwd.RNN, recurrent_bwd.GRU, recurrent_bwd.LSTM)
}


def op_key(op: str, pass_name: str = "fwd") -> str:
    """The key of an op's pass: 'gemm' for the forward, 'gemm:bwd' for the backward."""
    return op if pass_name == "fwd" else f"{op}:{pass_name}"


def split_key(key: str) -> tuple[str, str]:
    """'gemm:bwd' -> ('gemm', 'bwd'); 'gemm' -> ('gemm', 'fwd')."""
    op, _, pass_name = key.partition(":")
    return op, pass_name or "fwd"


def get_op(name: str) -> Op[Any]:
    """The Op of an op key ('gemm', or one of its passes: 'gemm:bwd'); UsageError naming what exists."""
    op, pass_name = split_key(name)
    if op not in OPS:
        raise UsageError(f"unknown op '{op}' (available: {', '.join(OPS)})")
    return pass_of(OPS[op], pass_name)


def named(name: object, pass_name: str = "fwd") -> Op[Any]:
    """The Op a record or a worker's request names: the registry's, or, for one this version does not run
    (another version's, a poisoned file's), a foreign Op that carries the name for the tables and refuses
    to measure (a UsageError naming it)."""
    key = op_key(str(name), pass_name)  # (a worker's request names an op key: 'gemm:bwd')
    try:
        return get_op(key)
    except UsageError:
        return foreign(*split_key(key))


def pass_of(op: Op[Any], pass_name: str) -> Op[Any]:
    """`op`'s operator in a pass ("fwd": its forward, on which a backward's padded taps are counted);
    UsageError for a pass it lacks, naming the ops that have it."""
    name = op.name
    if pass_name == "fwd":
        return OPS[name]
    if pass_name not in PASSES:
        raise UsageError(f"unknown pass '{pass_name}' (expected {' or '.join(PASSES)})")
    if name not in BACKWARD:
        raise UsageError(
            f"no backward pass for {name} in this version (--pass bwd runs: {', '.join(BACKWARD)})"
        )
    return BACKWARD[name]


RECURRENT = ("rnn", "gru", "lstm")


def assumed_accumulation(
    key: str, dtype: str, sums: str, half_cells: bool, activation_error: float | None = None
) -> str:
    """What a verification bound assumes of a case: the precision its products are summed in (`sums`), or,
    for a recurrent forward pass in a 2-byte dtype, the unit (ops/recurrent.py: UNITS) of an
    implementation that sums in `sums` and computes its cells in the dtype (`half_cells`: a framework's
    layer) or in fp32 (a fused kernel); a recurrent backward pass whose layer chains half-precision tensor
    ops is taken to sum in the dtype. `activation_error`: a recurrent layer's fp32 activations are within
    that (absolute), not within a few ulps ("+act=E")."""
    op, _, pass_name = key.partition(":")
    act = f"+act={activation_error:g}" if activation_error and op in RECURRENT else ""
    if op in RECURRENT and dtype in ("fp16", "bf16") and sums == "fp32":
        if pass_name:
            return (dtype if half_cells else sums) + act
        return (f"{dtype}-cells" if half_cells else "fp32") + act
    return sums + act


def shape_label(op: str, fields: object) -> str:
    """The op's label for recorded shape fields (a study's fingerprint, a tuned record); the raw numbers
    joined by 'x' for an op or fields this version does not know."""
    try:
        return str(named(op).shape_from_case(dict(fields)).label())  # type: ignore[call-overload]
    except Exception:
        return "x".join(str(v) for v in (fields or {}).values()) if isinstance(fields, dict) else str(fields)

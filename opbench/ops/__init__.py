"""Registry of operators opbench can sweep; each module owns shapes, FLOPs, inputs and its reference.

An op module provides: NAME, FLOP_NOTE, SHAPE_FIELDS, AXES (sweep axis -> shape fields), PARAMS, BASE,
DEFAULT_MODE, DEFAULT_BACKENDS, default_cases(), make_shape(point), shape_from_case(fields), scale(shape, f),
flops, min_bytes, memory_bytes(shape, dtype, reference), verify_cost_flops, make_inputs, reference, check,
spot_check(shape, output, inputs, dtype, accumulate, seed) and spot_cost_flops (ops/spot.py: the check of a
timed call's output on a seeded part);
and for opbench's own kernel (the cpp backend and the tuner): plan(shape, inputs, tiles, threads, isa,
accumulate) -> kernels.Plan, and tile_names(shape, isa), what a tuning space's rules may name (mr, nr, and
the m, n, k that tile_m, tile_n and tile_k block).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from opbench.errors import UsageError
from opbench.ops import conv, conv_bwd, gemm, gemm_bwd, gru, gru_bwd, lstm, lstm_bwd, rnn, rnn_bwd

OPS: dict[str, ModuleType] = {"gemm": gemm, "conv": conv, "rnn": rnn, "gru": gru, "lstm": lstm}

# Training passes. A backward pass is a module with the op interface of its own (FLOPs, inputs with the
# upstream gradient, reference gradients, check, plan) that re-exports the forward's shape interface; it
# is reached by the op key "OP:bwd", which is also what backends are asked for (a backend lists the keys
# it runs in `ops`).
PASSES = ("fwd", "bwd")
BACKWARD: dict[str, ModuleType] = {
    "gemm": gemm_bwd,
    "conv": conv_bwd,
    "rnn": rnn_bwd,
    "gru": gru_bwd,
    "lstm": lstm_bwd,
}


def op_key(op: str, pass_name: str = "fwd") -> str:
    """The key of an op's pass: 'gemm' for the forward, 'gemm:bwd' for the backward."""
    return op if pass_name == "fwd" else f"{op}:{pass_name}"


def split_key(key: str) -> tuple[str, str]:
    """'gemm:bwd' -> ('gemm', 'bwd'); 'gemm' -> ('gemm', 'fwd')."""
    op, _, pass_name = key.partition(":")
    return op, pass_name or "fwd"


def get_op(name: str) -> ModuleType:
    """The module of an op (or of one of its passes: 'gemm:bwd'); UsageError naming what exists."""
    op, pass_name = split_key(name)
    if op not in OPS:
        raise UsageError(f"unknown op '{op}' (available: {', '.join(OPS)})")
    if pass_name == "fwd":
        return OPS[op]
    if pass_name not in PASSES:
        raise UsageError(f"unknown pass '{pass_name}' (expected {' or '.join(PASSES)})")
    if op not in BACKWARD:
        raise UsageError(
            f"no backward pass for {op} in this version (--pass bwd runs: {', '.join(BACKWARD)})"
        )
    return BACKWARD[op]


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


def shape_label(op: str, fields: Any) -> str:
    """The op's label for recorded shape fields (a study's fingerprint, a tuned record); the raw numbers
    joined by 'x' for an op or fields this version does not know."""
    try:
        return str(get_op(op).shape_from_case(dict(fields)).label())
    except Exception:
        return "x".join(str(v) for v in (fields or {}).values()) if isinstance(fields, dict) else str(fields)

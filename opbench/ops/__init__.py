"""Registry of operators opbench can sweep; each module owns shapes, FLOPs, inputs and its reference.

An op module provides: NAME, FLOP_NOTE, SHAPE_FIELDS, AXES (sweep axis -> shape fields), PARAMS, BASE,
DEFAULT_MODE, DEFAULT_BACKENDS, default_cases(), make_shape(point), shape_from_case(fields), scale(shape, f),
flops, min_bytes, memory_bytes(shape, dtype, reference), verify_cost_flops, make_inputs, reference, check;
and for opbench's own kernel (the cpp backend and the tuner): plan(shape, inputs, tiles, threads, isa,
accumulate) -> kernels.Plan, and tile_names(shape, isa), what a tuning space's rules may name (mr, nr, and
the m, n, k that tile_m, tile_n and tile_k block).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from opbench.errors import UsageError
from opbench.ops import conv, gemm, gru, lstm, rnn

OPS: dict[str, ModuleType] = {"gemm": gemm, "conv": conv, "rnn": rnn, "gru": gru, "lstm": lstm}


def get_op(name: str) -> ModuleType:
    try:
        return OPS[name]
    except KeyError:
        raise UsageError(f"unknown op '{name}' (available: {', '.join(OPS)})") from None


def shape_label(op: str, fields: Any) -> str:
    """The op's label for recorded shape fields (a study's fingerprint, a tuned record); the raw numbers
    joined by 'x' for an op or fields this version does not know."""
    try:
        return str(get_op(op).shape_from_case(dict(fields)).label())
    except Exception:
        return "x".join(str(v) for v in (fields or {}).values()) if isinstance(fields, dict) else str(fields)

"""Registry of operators opbench can sweep; each module owns shapes, FLOPs, inputs and its reference.

An op module provides: NAME, FLOP_NOTE, SHAPE_FIELDS, AXES (sweep axis -> shape fields), PARAMS, BASE,
DEFAULT_MODE, DEFAULT_BACKENDS, default_cases(), make_shape(point), shape_from_case(fields), scale(shape, f),
flops, min_bytes, memory_bytes(shape, dtype, reference), verify_cost_flops, make_inputs, reference, check.
"""

from __future__ import annotations

from types import ModuleType

from opbench.errors import UsageError
from opbench.ops import conv, gemm, lstm

OPS: dict[str, ModuleType] = {"gemm": gemm, "conv": conv, "lstm": lstm}


def get_op(name: str) -> ModuleType:
    try:
        return OPS[name]
    except KeyError:
        raise UsageError(f"unknown op '{name}' (available: {', '.join(OPS)})") from None

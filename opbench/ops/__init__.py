"""Registry of operators opbench can sweep; each module owns shapes, FLOPs, inputs and its reference."""

from __future__ import annotations

from types import ModuleType

from opbench.errors import UsageError
from opbench.ops import gemm

OPS: dict[str, ModuleType] = {"gemm": gemm}


def get_op(name: str) -> ModuleType:
    try:
        return OPS[name]
    except KeyError:
        raise UsageError(f"unknown op '{name}' (available: {', '.join(sorted(OPS))})") from None

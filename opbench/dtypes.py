"""The dtypes opbench measures: names on the command line and in results, numpy types, rounding units."""

from __future__ import annotations

import numpy as np

from opbench.errors import UsageError

NUMPY_DTYPES: dict[str, type[np.floating]] = {"fp32": np.float32, "fp16": np.float16}
# Unit roundoff u = 2^-p of each format (p = significand bits incl. the implicit one, minus one).
UNIT_ROUNDOFF: dict[str, float] = {"fp32": 2.0**-24, "fp16": 2.0**-11}
ITEMSIZE: dict[str, int] = {"fp32": 4, "fp16": 2}


def parse_dtypes(text: str) -> list[str]:
    """'fp32,fp16' -> ['fp32', 'fp16']; unknown names raise UsageError."""
    names = [t.strip().lower() for t in text.split(",") if t.strip()]
    aliases = {"float32": "fp32", "f32": "fp32", "float16": "fp16", "f16": "fp16", "half": "fp16"}
    out: list[str] = []
    for name in names:
        canon = aliases.get(name, name)
        if canon not in NUMPY_DTYPES:
            raise UsageError(f"unknown dtype '{name}' (expected fp32 or fp16)")
        if canon not in out:
            out.append(canon)
    if not out:
        raise UsageError("--dtype is empty (expected fp32, fp16 or both)")
    return out


def dtype_name(dtype: object) -> str:
    """'fp32' or 'fp16' for a numpy dtype; ValueError for any other."""
    for name, np_type in NUMPY_DTYPES.items():
        if np.dtype(dtype) == np.dtype(np_type):  # type: ignore[call-overload]
            return name
    raise ValueError(f"dtype {dtype} is not one opbench measures (float32 or float16)")

"""The dtypes opbench measures: names on the command line and in results, numpy types, rounding units.

numpy has no bfloat16: bf16 arrays are ml_dtypes.bfloat16 (the type TensorFlow and JAX use, which numpy sees
as a 2-byte dtype named 'bfloat16'), and its limits come from ml_dtypes.finfo."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
from numpy.typing import NDArray

from opbench.errors import UsageError

# An array of any dtype, in annotations (bf16 arrays are numpy arrays of ml_dtypes' type).
Array = NDArray[Any]
# A case's named input arrays (an op's make_inputs), as every backend is given them.
Inputs = dict[str, Array]
# What a backend's call returns, as numpy arrays in the op's structure: gemm and conv one array, rnn and gru
# (y, h_n), lstm (y, (h_n, c_n)); a backward pass its gradients in order.
Output = Array | tuple["Output", ...]

NUMPY_DTYPES: dict[str, type[np.generic]] = {
    "fp32": np.float32,
    "fp16": np.float16,
    "bf16": ml_dtypes.bfloat16,
}
# Unit roundoff u = 2^-p of each format (p = significand bits incl. the implicit one, minus one).
UNIT_ROUNDOFF: dict[str, float] = {"fp32": 2.0**-24, "fp16": 2.0**-11, "bf16": 2.0**-8}
ITEMSIZE: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2}


def finfo(dtype: str) -> Any:
    """The format's limits (eps, tiny, smallest_subnormal, max), for the standard types and bf16 alike."""
    return ml_dtypes.finfo(NUMPY_DTYPES[dtype])


def parse_dtypes(text: str) -> list[str]:
    """'fp32,fp16' -> ['fp32', 'fp16']; unknown names raise UsageError."""
    names = [t.strip().lower() for t in text.split(",") if t.strip()]
    aliases = {"float32": "fp32", "f32": "fp32", "float16": "fp16", "f16": "fp16", "half": "fp16"}
    aliases.update({"bfloat16": "bf16"})
    out: list[str] = []
    for name in names:
        canon = aliases.get(name, name)
        if canon not in NUMPY_DTYPES:
            raise UsageError(f"unknown dtype '{name}' (expected fp32, fp16 or bf16)")
        if canon not in out:
            out.append(canon)
    if not out:
        raise UsageError("--dtype is empty (expected one or more of fp32, fp16 and bf16)")
    return out


def dtype_name(dtype: object) -> str:
    """'fp32', 'fp16' or 'bf16' for a numpy dtype; ValueError for any other."""
    for name, np_type in NUMPY_DTYPES.items():
        if np.dtype(dtype) == np.dtype(np_type):  # type: ignore[call-overload]
            return name
    raise ValueError(f"dtype {dtype} is not one opbench measures (float32, float16 or bfloat16)")

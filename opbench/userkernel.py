"""The operator developer's own kernel: `--kernel FILE.py:FUNC` or `--kernel module:FUNC`, for `opbench tune`
(searched in the isolated worker) and `opbench sweep` (the backend `kernel:FUNC`, backends/user_backend.py).

FUNC is called with the op's inputs as numpy arrays of the requested dtype, in the op's documented order,
plus one keyword argument per search parameter, and returns the output:

    gemm   FUNC(a, b, **params)                                        -> C (M x N)
    conv   FUNC(x, w, stride=(sh, sw), padding=(ph, pw), dilation=(dh, dw), groups=g, **params)
                                                                       -> Y (N x K x H_out x W_out)
    rnn    FUNC(x, w_ih, w_hh, b_ih, b_hh, h0, nonlinearity="tanh"|"relu", **params) -> (y, h_n)
    gru    FUNC(x, w_ih, w_hh, b_ih, b_hh, h0, **params)               -> (y, h_n)
    lstm   FUNC(x, w_ih, w_hh, b_ih, b_hh, h0, c0, **params)           -> (y, (h_n, c_n))

In the tuner the module is imported inside the isolated worker only (tune/worker.py), so an import error,
an exception, an abort, a segfault or a hang costs one failed trial, never the study. What the parent knows
of the kernel (KernelRef) is its spec, the file it comes from and that file's SHA-256, which go into the
study's fingerprint: a study is not resumed on a changed kernel unless --force.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from opbench.documents import Params, Scalar, UserKernelDict
from opbench.dtypes import Inputs, Output
from opbench.errors import UsageError
from opbench.ops.base import Shape
from opbench.ops.conv_shape import ConvShape
from opbench.ops.recurrent import input_names
from opbench.ops.recurrent_shape import RecurrentShape
from opbench.ops.rnn import RnnShape

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


@dataclass(frozen=True)
class KernelRef:
    """A user kernel as the parent sees it: never imported there."""

    spec: str  # as given
    func: str
    path: str | None = None  # FILE.py, absolute
    module: str | None = None  # or an importable module
    sha256: str = ""  # of the file that defines it ("" when a module's source cannot be found)
    # What the verification bound assumes it sums in (--kernel-accumulate): fp32, as every real fp16 and bf16
    # kernel does on a CPU, unless the user declares fp16 or bf16.
    accumulate: str = "fp32"

    @property
    def name(self) -> str:
        return self.func

    def to_dict(self) -> UserKernelDict:
        return {"spec": self.spec, "func": self.func, "path": self.path, "module": self.module,
                "sha256": self.sha256, "accumulate": self.accumulate}  # fmt: skip


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


ACCUMULATIONS = ("fp32", "fp16", "bf16")  # what --kernel-accumulate may declare


def parse_kernel(spec: str, accumulate: str = "fp32", flag: str = "--kernel") -> KernelRef:
    """`FILE.py:FUNC` or `module:FUNC`, checked (the file exists, the names are identifiers) without importing
    anything; UsageError naming the problem (and `flag`) otherwise. `accumulate`: what the kernel declares it
    sums in."""
    if accumulate not in ACCUMULATIONS:
        raise UsageError(f"--kernel-accumulate must be one of {', '.join(ACCUMULATIONS)}, got '{accumulate}'")
    where, sep, func = spec.rpartition(":")
    if not sep or not where or not _IDENTIFIER.match(func):
        raise UsageError(f"{flag}: expected FILE.py:FUNC or module:FUNC, got '{spec}'")
    if where.endswith(".py") or "/" in where or "\\" in where:
        path = Path(where).expanduser().resolve()
        if not path.is_file():
            raise UsageError(f"{flag}: no such file '{where}'")
        try:
            digest = _sha256(path)
        except OSError as e:
            raise UsageError(f"{flag}: cannot read '{where}': {e.strerror or e}") from None
        return KernelRef(spec, func, path=str(path), sha256=digest, accumulate=accumulate)
    if not _MODULE.match(where):
        raise UsageError(f"{flag}: '{where}' is neither a .py file nor a module name")
    digest = ""
    try:
        found = importlib.util.find_spec(where.split(".")[0])  # the top package: nothing below is imported
    except (ImportError, ValueError):
        found = None
    if found is None:
        raise UsageError(f"{flag}: no module named '{where}' on this Python's path")
    origin = Path(found.origin) if found.origin and found.origin not in ("built-in", "frozen") else None
    if "." not in where and origin is not None and origin.is_file():
        digest = _sha256(origin)
    return KernelRef(spec, func, module=where, sha256=digest, accumulate=accumulate)


def load_function(kernel: UserKernelDict) -> Callable[..., Any]:
    """Import the kernel (in the worker) and return FUNC; any failure raises (the trial's reason)."""
    if where := kernel.get("path"):
        path = Path(where)
        name = f"opbench_user_kernel_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path} as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses and pickling look the module up by name
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(kernel["module"] or "")  # KernelRef names a path or a module
    fn = getattr(module, kernel["func"], None)
    if not callable(fn):
        raise AttributeError(f"{kernel['spec']}: the module has no function '{kernel['func']}'")
    return fn


def call(op: str, fn: Callable[..., Any], shape: Shape, inputs: Inputs, params: Params) -> object:
    """One call of the user's kernel on the op's inputs, in the op's documented order."""
    if op == "gemm":
        return fn(inputs["a"], inputs["b"], **params)
    if op == "conv":
        assert isinstance(shape, ConvShape)
        geometry = {
            "stride": (shape.stride_h, shape.stride_w),
            # (h, w), or (top, bottom, left, right) where the sides differ
            "padding": (shape.pad_h, shape.pad_w) if shape.symmetric else shape.padding,
            "dilation": (shape.dil_h, shape.dil_w),
            "groups": shape.groups,
        }
        return fn(inputs["x"], inputs["w"], **geometry, **params)
    if op in ("rnn", "gru", "lstm"):
        assert isinstance(shape, RecurrentShape)
        extra = {"nonlinearity": shape.nonlinearity} if isinstance(shape, RnnShape) else {}
        return fn(*(inputs[n] for n in input_names(shape)), **extra, **params)
    raise ValueError(f"no user-kernel calling convention for op '{op}'")


def as_output(op: str, result: Any) -> Output:
    """The kernel's result as numpy arrays in the op's structure (array-likes are converted)."""
    if op == "lstm":
        y, (h_n, c_n) = result
        return np.asarray(y), (np.asarray(h_n), np.asarray(c_n))
    if op in ("rnn", "gru"):
        y, h_n = result
        return np.asarray(y), np.asarray(h_n)
    return np.asarray(result)


def parse_params(text: str) -> Params:
    """`--baseline-params k=v,...`: integers, floats, true/false, else strings."""
    out: Params = {}
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not _IDENTIFIER.match(key):
            raise UsageError(f"--baseline-params: expected NAME=VALUE[,NAME=VALUE...], got '{item}'")
        out[key] = _value(raw.strip())
    return out


def _value(raw: str) -> Scalar:
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            continue
    return raw

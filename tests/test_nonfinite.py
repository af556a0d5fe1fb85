"""NaN and Inf propagate through every kernel on every ISA path, as they do through the float64 reference: a
NaN in an input is never turned into a finite number (the LSTM's fast exp used to clamp it away), and an
Inf gives Inf or NaN exactly where float64 does. Each ISA is forced with OPBENCH_ISA in its own process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import kernel_set_isas

ISAS = kernel_set_isas()

SCRIPT = r"""
import numpy as np
from opbench import kernels
from opbench.ops import conv, gemm, lstm

assert kernels.cpu_features()["selected_isa"] == ISA
f16acc = kernels.default_tiles()["fp16_accumulate"]["available"] or ISA == "ref"
problems = []


def same_pattern(name, out, ref):
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    same = [np.array_equal(f(out), f(ref)) for f in (np.isnan, np.isposinf, np.isneginf)]
    if not all(same):
        problems.append(f"{name}: NaN/Inf at {np.argwhere(~np.isfinite(out))[:4].tolist()}, "
                        f"float64 has them at {np.argwhere(~np.isfinite(ref))[:4].tolist()}")
    if not np.isfinite(ref).any() and np.isfinite(out).all():
        problems.append(f"{name}: every output finite")


for dtype in ("fp32", "fp16"):
    np_dtype = np.float32 if dtype == "fp32" else np.float16
    # gemm on the blocked, narrow and thin (N <= 4) paths
    for m, n, k in ((37, 67, 53), (29, 16, 41), (70, 3, 45)):
        s = gemm.GemmShape(m, n, k)
        for value, where in ((np.nan, "a"), (np.inf, "a"), (-np.inf, "b"), (np.nan, "b")):
            i = gemm.make_inputs(s, dtype, 1)
            target = i[where]
            target[min(5, target.shape[0] - 1), min(7, target.shape[1] - 1)] = value
            ref = i["a"].astype(np.float64) @ i["b"].astype(np.float64)
            same_pattern(f"gemm {s.label()} {dtype} {value} in {where}", kernels.gemm(i["a"], i["b"]), ref)
            if dtype == "fp16" and f16acc:
                out = kernels.gemm(i["a"], i["b"], accumulate="fp16")
                same_pattern(f"gemm {s.label()} fp16-accumulate {value} in {where}", out, ref)
    # conv: in place (stride 1) and gathered (stride 2), NaN/Inf in the input and in the filter. The second
    # case takes the output-pixels-as-rows path, which skips the filter taps that read padding unless W holds
    # a NaN or Inf: float64 multiplies the padding's zeros by it (NaN), so those outputs must be NaN too.
    cases = ({"n": 2, "c": 3, "h": 11, "w": 9, "k": 5},
             {"n": 4, "c": 64, "h": 7, "w": 7, "k": 64})
    for stride, case in ((st, c) for st in (1, 2) for c in cases):
        case = {**case, "r": 3, "s": 3, "pad_h": 1, "pad_w": 1}
        s = conv.shape_from_case({**case, "stride_h": stride, "stride_w": stride})
        for value, where, at in ((np.nan, "x", (1, 2, 4, 5)), (np.inf, "x", (0, 1, 0, 0)),
                                 (np.nan, "w", (3, 1, 1, 2)), (np.inf, "w", (4, 2, 0, 0)),
                                 (-np.inf, "w", (2, 0, 2, 1))):
            i = conv.make_inputs(s, dtype, 2)
            i[where][at] = value
            y = kernels.conv2d(i["x"], i["w"], stride=stride, padding=1)
            same_pattern(f"conv stride {stride} {dtype} {value} in {where}", y, conv.reference(s, i))
    # lstm: a NaN or Inf in x at one step and batch row, a NaN in h0 and in a weight
    s = lstm.LstmShape(5, 3, 7, 19)
    for value, where, at in ((np.nan, "x", (1, 0, 2)), (np.inf, "x", (2, 1, 3)), (-np.inf, "x", (0, 2, 0)),
                             (np.nan, "h0", (1, 4)), (np.nan, "w_hh", (30, 5))):
        i = lstm.OP.make_inputs(s, dtype, 3)
        i[where][at] = value
        y, (h_n, c_n) = kernels.lstm(i["x"], i["w_ih"], i["w_hh"], i["b_ih"], i["b_hh"], i["h0"], i["c0"])
        ref = lstm.reference(s, i)
        same_pattern(f"lstm {dtype} {value} in {where}{at} y", y, ref.y)
        same_pattern(f"lstm {dtype} {value} in {where}{at} c_n", c_n, ref.c_n)
print("\n".join(problems) or "ok")
"""


@pytest.mark.parametrize("isa", ISAS)
def test_nan_and_inf_propagate_like_float64(isa: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT.replace("ISA", repr(isa))],
        capture_output=True,
        text=True,
        env={**os.environ, "OPBENCH_ISA": isa},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok", proc.stdout

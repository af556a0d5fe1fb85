"""The TensorFlow backends (tf.function and eager) against the float64 references: GEMM, conv2d with
strides, padding, dilation and groups (NCHW inputs converted to NHWC), Keras LSTM with PyTorch's weights;
FP32 and FP16; device names; and the backends in `opbench sweep` tables."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import FAST_TIMER, import_or_skip, run_cli

from opbench.backends import BACKENDS
from opbench.backends.tensorflow_backend import tf_device
from opbench.errors import BackendUnavailable
from opbench.ops import conv, gemm, lstm

import_or_skip("tensorflow")

MODES = ["tensorflow", "tensorflow-eager"]


@pytest.fixture(scope="module", params=MODES)
def backend(request: pytest.FixtureRequest) -> Any:
    be = BACKENDS[request.param]()
    assert be.unavailable_reason() is None
    be.setup(2, "cpu")
    return be


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("dims", [(1, 1, 1), (17, 33, 65), (64, 31, 129)], ids=str)
def test_gemm(backend: Any, dtype: str, dims: tuple[int, int, int]) -> None:
    shape = gemm.GemmShape(*dims)
    inp = gemm.make_inputs(shape, dtype, seed=3)
    case = backend.prepare("gemm", shape, inp, {})
    out = case.output()
    assert out.shape == (shape.m, shape.n) and out.dtype == inp["a"].dtype
    acc = "fp16" if dtype == "fp16" else "fp32"
    assert gemm.check(shape, out, inp, gemm.reference(shape, inp), dtype, acc)["ok"]
    assert case.run(3) > 0
    assert case.details["execution"].startswith("tf.function" if backend.compiled else "eager")


CONVS = [
    conv.ConvShape(2, 3, 9, 9, 4, 3, 3, pad_h=1, pad_w=1),
    conv.ConvShape(1, 4, 11, 7, 6, 3, 2, stride_h=2, stride_w=1, pad_h=1, pad_w=0),
    conv.ConvShape(2, 4, 10, 10, 6, 3, 3, dil_h=2, dil_w=2, pad_h=2, pad_w=2),
    conv.ConvShape(1, 6, 8, 8, 4, 1, 1, groups=2),
    conv.ConvShape(3, 5, 13, 13, 7, 5, 5, stride_h=3, stride_w=3),
]


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("shape", CONVS, ids=lambda s: s.label())
def test_conv2d_layouts(backend: Any, dtype: str, shape: conv.ConvShape) -> None:
    inp = conv.make_inputs(shape, dtype, seed=4)
    case = backend.prepare("conv", shape, inp, {})
    out = case.output()
    assert out.shape == (shape.n, shape.k, shape.out_h, shape.out_w)  # back in NCHW for the comparison
    acc = "fp16" if dtype == "fp16" else "fp32"
    assert conv.check(shape, out, inp, conv.reference(shape, inp), dtype, acc)["ok"]
    assert "NHWC" in case.details["layout"]


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("dims", [(1, 1, 1, 1), (5, 3, 7, 9), (25, 4, 61, 67)], ids=str)
def test_keras_lstm_takes_pytorchs_weights(backend: Any, dtype: str, dims: tuple[int, int, int, int]) -> None:
    shape = lstm.LstmShape(*dims)
    inp = lstm.OP.make_inputs(shape, dtype, seed=5)
    case = backend.prepare("lstm", shape, inp, {})
    y, (h, c) = case.output()
    assert y.shape == (shape.seq_len, shape.batch, shape.hidden)
    assert h.shape == c.shape == (shape.batch, shape.hidden)
    acc = "fp16" if dtype == "fp16" else "fp32"
    assert lstm.OP.check(shape, (y, (h, c)), inp, lstm.reference(shape, inp), dtype, acc)["ok"]


def test_a_wrong_gate_order_would_be_caught(backend: Any) -> None:
    # Exchanging the i and f blocks of every weight must fail the check (the tolerance can fail).
    shape = lstm.LstmShape(4, 3, 6, 8)
    inp = lstm.OP.make_inputs(shape, "fp32", seed=6)
    h = shape.hidden
    swapped = dict(inp)
    for name in ("w_ih", "w_hh", "b_ih", "b_hh"):
        v = inp[name].copy()
        v[:h], v[h : 2 * h] = inp[name][h : 2 * h], inp[name][:h]
        swapped[name] = v
    out = backend.prepare("lstm", shape, swapped, {}).output()
    assert not lstm.OP.check(shape, out, inp, lstm.reference(shape, inp), "fp32", "fp32")["ok"]


def test_device_names() -> None:
    assert tf_device("cpu", 0) == "/CPU:0"
    assert tf_device("cuda", 1) == "/GPU:0" and tf_device("cuda:1", 2) == "/GPU:1"
    with pytest.raises(BackendUnavailable, match="sees 0 GPU"):
        tf_device("cuda", 0)
    with pytest.raises(BackendUnavailable, match="unknown device"):
        tf_device("cuda:x", 1)
    with pytest.raises(BackendUnavailable, match="unsupported device 'tpu'"):
        tf_device("tpu", 0)


@pytest.mark.parametrize("op", ["conv", "lstm"])
def test_tensorflow_appears_in_sweep_tables(op: str, tmp_path: Any) -> None:
    axes = {
        "conv": ["--batch", "1", "--input-size", "6", "--in-channels", "3", "--out-channels", "4"],
        "lstm": ["--batch", "2", "--seq-len", "3", "--input-size", "5", "--hidden", "6"],
    }[op]
    proc = run_cli(
        [
            "sweep",
            op,
            *axes,
            "--dtype",
            "fp32",
            "--backend",
            "cpp,tensorflow,tensorflow-eager",
            "--threads",
            "2",
            "--out",
            str(tmp_path),
            *FAST_TIMER,
        ]
    )
    assert proc.returncode == 0, proc.stderr
    assert "tensorflow-eager" in proc.stdout and "tensorflow " in proc.stdout
    (path,) = tmp_path.glob(f"{op}-*.json")
    doc = json.loads(path.read_text())
    ran = [r for r in doc["records"] if r["backend"].startswith("tensorflow")]
    assert ran and all(r["status"] == "ok" and r["verify"]["ok"] for r in ran)
    assert doc["machine"]["libraries"]["keras"]
    assert doc["backends"]["tensorflow"]["version"]

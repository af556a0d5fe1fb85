"""Backends `tensorflow` and `tensorflow-eager`: tf.linalg.matmul, tf.nn.conv2d and the Keras SimpleRNN, GRU
and LSTM layers.

`tensorflow` runs each op inside a `tf.function` (a traced graph, without XLA), traced once before timing;
`tensorflow-eager` calls the same ops eagerly. Both appear side by side in one table when asked for.

Layouts: TensorFlow's CPU convolution is NHWC (filters R x S x C/groups x K) and Keras' LSTM is
batch-major with one bias and transposed weights; inputs are converted to those layouts when the case is
prepared, outside the timed region, and outputs converted back for verification only. Gate order (i, f, g, o)
and activations (sigmoid, tanh) match PyTorch's; the bias is b_ih + b_hh.

Timing: every call's output is a new tensor. A `tf.function` call costs its Python dispatch (0.3 ms on the
2-vCPU development VM, against 0.03 ms for an eager op), which the timing includes: that is what a caller
of a compiled TensorFlow op pays per call. After the timed loop `tf.test.experimental.sync_devices()`
waits for every device to finish, so the clock stops after the work (on the CPU, ops already return
finished). Threads: `tf.config.threading` intra-op = the sweep's threads, inter-op = 1, which TensorFlow
accepts only before its runtime starts (otherwise the result says so).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, ClassVar

import numpy as np

from opbench.backends.base import Backend, KeptOutput, Prepared, host_timed
from opbench.documents import Params
from opbench.dtypes import Array, Inputs, Output
from opbench.errors import BackendUnavailable
from opbench.ops.base import Shape, shape_of
from opbench.ops.conv_shape import ConvShape
from opbench.ops.gemm import GemmShape


class _TfCase(KeptOutput, Prepared):
    def __init__(
        self,
        call: Callable[[], Any],
        to_numpy: Callable[[Any], Any],
        sync: Callable[[], None],
        details: dict[str, Any],
    ) -> None:
        self._call = call
        self._to_numpy = to_numpy
        self._sync = sync
        self.details = details

    clock = "host clock (time.perf_counter) around the calls, then tf.test.experimental.sync_devices()"

    def run(self, loops: int) -> float:
        self._sync()
        return host_timed(self._call, loops, finish=self._sync, keep=self.keep)

    def output(self) -> Output:
        return self._to_numpy(self._call())


def tf_device(device: str, gpus: int) -> str:
    """opbench's device name -> TensorFlow's: cpu -> /CPU:0, cuda or cuda:N -> /GPU:N (which must exist)."""
    if device == "cpu":
        return "/CPU:0"
    if device == "cuda" or device.startswith("cuda:"):
        index_text = device.partition(":")[2] or "0"
        if not index_text.isdigit():
            raise BackendUnavailable(f"unknown device '{device}' (cpu, cuda or cuda:N)")
        index = int(index_text)
        if index >= gpus:
            raise BackendUnavailable(f"TensorFlow sees {gpus} GPU(s), so '{device}' is not available")
        return f"/GPU:{index}"
    raise BackendUnavailable(f"unsupported device '{device}' for tensorflow (cpu, cuda or cuda:N)")


@contextlib.contextmanager
def native_stderr_captured(lines: list[str] | None = None) -> Iterator[None]:
    """TensorFlow's C++ runtime logs to file descriptor 2 before it reads TF_CPP_MIN_LOG_LEVEL (absl's
    pre-initialisation lines, oneDNN's notices); point the descriptor at a temporary file meanwhile, so that
    opbench's one-line errors and tables stay the only output, and hand what was said to `lines`."""
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+") as log:
        try:
            os.dup2(log.fileno(), 2)
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if lines is not None:
                log.seek(0)
                lines.extend(
                    line.strip() for line in log if line.strip() and "absl::InitializeLog" not in line
                )


def _nhwc(a: Array) -> Array:
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1))


def _rsck(w: Array) -> Array:
    return np.ascontiguousarray(w.transpose(2, 3, 1, 0))


class TensorFlowBackend(Backend):
    ops = Backend.ops_with_backward
    name: ClassVar[str] = "tensorflow"
    compiled: ClassVar[bool] = True
    # Its fp16 conv backward on a CPU adds partial results in fp16: 450-520x the error an fp32 sum rounded
    # once allows, within the fp16 bound (benchmarks/verification_power.py, TensorFlow 2.21).
    accumulate_ops: ClassVar[dict[tuple[str, str], str]] = {("conv:bwd", "fp16"): "fp16"}

    def __init__(self) -> None:
        self._tf: ModuleType = ModuleType("tensorflow")  # the framework, once setup() imported it
        self._device = "/CPU:0"
        self._details: dict[str, Any] = {}

    def device_name(self, index: int) -> str | None:
        try:
            with native_stderr_captured():
                # the framework, imported only where its backend runs (pyproject.toml: no framework below)
                import tensorflow as tf

                gpus = tf.config.list_physical_devices("GPU")
        except ImportError:
            return None
        if index >= len(gpus):
            return None
        return str(tf.config.experimental.get_device_details(gpus[index]).get("device_name") or "") or None

    def unavailable_reason(self) -> str | None:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # no C++ info/warning lines on import
        try:
            with native_stderr_captured():
                import tensorflow  # noqa: F401
        except ImportError as e:
            return f"TensorFlow is not installed ({e}); pip install 'opbench[tensorflow]' (tensorflow-cpu)"
        except Exception as e:  # a broken install: report it, do not crash the sweep
            return f"TensorFlow fails to import: {type(e).__name__}: {e}"
        return None

    def version(self) -> str | None:
        # the framework, imported only where its backend runs (pyproject.toml: no framework below)
        import tensorflow as tf

        return str(tf.__version__)

    def setup(self, threads: int, device: str) -> None:
        # the framework, imported only where its backend runs (pyproject.toml: no framework below)
        import tensorflow as tf

        with native_stderr_captured():
            gpus = len(tf.config.list_physical_devices("GPU"))
        self._device = tf_device(device, gpus)
        note = None
        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(1)
        except RuntimeError:  # the runtime already started in this process
            note = "thread counts could not be changed: TensorFlow's runtime had already started"
        self._tf = tf
        self._details = {
            "device": self._device,
            "execution": "tf.function (graph, traced before timing; no XLA)" if self.compiled else "eager",
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
            "TF_ENABLE_ONEDNN_OPTS": os.environ.get(
                "TF_ENABLE_ONEDNN_OPTS", "unset (oneDNN on: TF's x86 default)"
            ),
        }
        if note:
            self._details["thread_note"] = note

    def _conv_fn(self, shape: Shape) -> Callable[[Any, Any], Any]:
        """tf.nn.conv2d in NHWC with the case's geometry (RSCK filter)."""
        tf, shape = self._tf, shape_of(shape, ConvShape)
        padding = [[0, 0], [shape.pad_h, shape.pad_h_end], [shape.pad_w, shape.pad_w_end], [0, 0]]
        strides = [1, shape.stride_h, shape.stride_w, 1]
        dilations = [1, shape.dil_h, shape.dil_w, 1]

        def conv(x: Any, w: Any) -> Any:
            return tf.nn.conv2d(x, w, strides, padding, data_format="NHWC", dilations=dilations)

        return conv

    def _backward(
        self, op: str, shape: Any, inputs: dict[str, Array]
    ) -> tuple[Callable[[], Any], Callable[[Any], Any], str]:
        """The gradients of the op's two inputs for its upstream gradient, from a GradientTape."""
        tf = self._tf
        if op == "gemm:bwd":
            fwd: Callable[[Any, Any], Any] = tf.linalg.matmul
            leaves = [tf.constant(inputs["a"]), tf.constant(inputs["b"])]
            upstream = tf.constant(inputs["dc"])
            text = "tf.GradientTape over tf.linalg.matmul; tape.gradient(c, [a, b], dc)"
        else:
            if shape.groups > 1 and self._device.startswith("/CPU"):
                # TensorFlow's own error, raised up front (the sweep reads it as a missing path).
                raise ValueError("gradients for grouped convolutions are not supported on CPU by TensorFlow")
            fwd = self._conv_fn(shape)
            leaves = [tf.constant(_nhwc(inputs["x"])), tf.constant(_rsck(inputs["w"]))]
            upstream = tf.constant(_nhwc(inputs["dy"]))
            text = "tf.GradientTape over tf.nn.conv2d (NHWC); tape.gradient(y, [x, w], dy)"

        def grads(a: Any, b: Any, up: Any) -> Any:
            with tf.GradientTape() as tape:
                tape.watch(a)
                tape.watch(b)
                out = fwd(a, b)
            return tape.gradient(out, [a, b], output_gradients=up)

        grads_fn = self._compile(grads)

        def to_numpy(res: Any) -> Output:
            first, second = (np.asarray(r.numpy()) for r in res)
            if op == "conv:bwd":  # NHWC / RSCK back to NCHW / KCRS
                return first.transpose(0, 3, 1, 2), second.transpose(3, 2, 0, 1)
            return first, second

        return (lambda: grads_fn(*leaves, upstream)), to_numpy, text

    def _bwd_timed(self, recurrent: bool = False) -> str:
        if recurrent:  # the gradients need the forward's activations: the graph keeps the whole forward
            return "forward + backward (the tape records the layer's forward inside each call)"
        if self.compiled:
            # Seen at 1024^3 on this VM: the traced call took 1.7x the forward's time, not 3x.
            return "the backward: the traced graph prunes the forward op (its output is not used)"
        return "forward + backward (eager: the tape records the forward inside each call)"

    def notes(self, op: str, dtype: str) -> list[str]:
        recurrent = op.partition(":")[0] in ("rnn", "gru", "lstm")
        if op.endswith(":bwd") and (recurrent or not self.compiled):
            return [f"{self.name} {op}: forward + backward timed; FLOPs count the backward only"]
        return []

    def _compile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return self._tf.function(fn) if self.compiled else fn

    def prepare(self, op: str, shape: Shape, inputs: Inputs, params: Params) -> Prepared:
        tf, dev = self._tf, self._device
        details = dict(self._details)
        sync = tf.test.experimental.sync_devices

        def host(x: Any) -> Array:
            return np.asarray(x.numpy())

        runtime_log: list[str] = []
        with tf.device(dev), native_stderr_captured(runtime_log):
            if op == "gemm":
                a, b = tf.constant(inputs["a"]), tf.constant(inputs["b"])

                def product(a: Any, b: Any) -> Any:  # a Python function: tf.function dispatches it faster
                    return tf.linalg.matmul(a, b)

                matmul = self._compile(product)
                call: Callable[[], Any] = lambda: matmul(a, b)  # noqa: E731
                to_numpy: Callable[[Any], Any] = host
                details["call"] = "tf.linalg.matmul (output allocated per call)"
                if shape_of(shape, GemmShape).batch > 1:
                    details["call"] = (
                        "tf.linalg.matmul, batch x M x K by batch x K x N (output allocated per call)"
                    )
            elif op == "conv":
                # NCHW / KCRS -> NHWC / RSCK, here, outside the timed region.
                x, w = tf.constant(_nhwc(inputs["x"])), tf.constant(_rsck(inputs["w"]))
                conv = self._conv_fn(shape)

                conv_fn = self._compile(conv)
                call = lambda: conv_fn(x, w)  # noqa: E731

                def to_numpy(res: Any) -> Output:
                    return host(res).transpose(0, 3, 1, 2)

                details["call"] = "tf.nn.conv2d(data_format='NHWC') (output allocated per call)"
                details["layout"] = "NHWC input, RSCK filter (converted from NCHW/KCRS before timing)"
            elif op in ("gemm:bwd", "conv:bwd"):
                call, to_numpy, details["call"] = self._backward(op, shape, inputs)
                details["timed"] = self._bwd_timed()
                if op == "conv:bwd":
                    details["layout"] = "NHWC x and dy, RSCK filter (converted before timing); gradients back"
            elif op.partition(":")[0] in ("rnn", "gru", "lstm"):
                base, _, pass_name = op.partition(":")
                call, to_numpy, details["call"], bias_note = self._recurrent(
                    base, shape, inputs, pass_name == "bwd"
                )
                if pass_name == "bwd":
                    details["timed"] = self._bwd_timed(recurrent=True)
                details["layout"] = f"x batch-major (B, T, I), converted before timing; {bias_note}"
            else:
                raise ValueError(f"tensorflow has no {op} adapter")
            call()  # trace the tf.function (and warm the eager path) before anything is timed
        # What TensorFlow's runtime said while tracing and running the op once (e.g. that oneDNN has no fp16
        # kernels for this CPU and Eigen's run instead), kept in the result rather than on the terminal.
        if runtime_log:
            details["runtime_log"] = [line.split("] ", 1)[-1] for line in runtime_log[-5:]]
        device_call = call

        def on_device() -> Any:
            with tf.device(dev):
                return device_call()

        return _TfCase(on_device, to_numpy, sync, details)

    def _recurrent(
        self, op: str, shape: Any, inputs: dict[str, Array], backward: bool = False
    ) -> tuple[Callable[[], Any], Callable[[Any], Any], str, str]:
        """A Keras layer given torch's weights: SimpleRNN (activation tanh or relu), GRU(reset_after=True),
        whose gates are z, r, n where torch's are r, z, n, with its two biases kept apart, and LSTM with
        one bias. Returns the call, the conversion of its result, and what was called and how the biases
        went in. With `backward`, the call is the layer's gradients for the upstream ones instead."""
        tf = self._tf
        # float32, float16 or bfloat16 (ml_dtypes' name is Keras's). The weights are set below, so the layers
        # start at zeros: Keras's default orthogonal initializer runs a QR, which has no bfloat16 kernel.
        init = {
            "kernel_initializer": "zeros",
            "recurrent_initializer": "zeros",
            "dtype": inputs["x"].dtype.name,
        }
        units = shape.hidden
        w_ih, w_hh, b_ih, b_hh = (inputs[n] for n in ("w_ih", "w_hh", "b_ih", "b_hh"))
        if op == "gru":
            order = np.r_[units : 2 * units, 0:units, 2 * units : 3 * units]  # (r, z, n) -> (z, r, n)
            layer = tf.keras.layers.GRU(
                units, reset_after=True, return_sequences=True, return_state=True, **init
            )
            weights = [w_ih[order].T, w_hh[order].T, np.stack([b_ih[order], b_hh[order]])]
            call_text = "tf.keras.layers.GRU(reset_after=True, return_sequences, return_state)"
            bias_note = "gates reordered r, z, n -> z, r, n; input and recurrent biases apart"
        else:
            bias = (b_ih.astype(np.float32) + b_hh.astype(np.float32)).astype(inputs["x"].dtype)
            weights = [w_ih.T, w_hh.T, bias]
            bias_note = "bias = b_ih + b_hh"
            if op == "rnn":
                act = shape.nonlinearity
                layer = tf.keras.layers.SimpleRNN(
                    units, activation=act, return_sequences=True, return_state=True, **init
                )
                call_text = f"tf.keras.layers.SimpleRNN(activation='{act}', return_sequences, return_state)"
            else:
                layer = tf.keras.layers.LSTM(units, return_sequences=True, return_state=True, **init)
                call_text = "tf.keras.layers.LSTM(return_sequences, return_state)"
        x = tf.constant(np.ascontiguousarray(inputs["x"].transpose(1, 0, 2)))
        state = [tf.constant(inputs["h0"])] + ([tf.constant(inputs["c0"])] if op == "lstm" else [])
        layer.build(x.shape)
        layer.set_weights(weights)
        if backward:
            grads_fn, convert = self._recurrent_backward(op, layer, inputs, order if op == "gru" else None)
            text = call_text + " on batch-major x; tape.gradient(outputs, [x, states, weights], upstream)"
            return (lambda: grads_fn(x, *state)), convert, text, bias_note

        def recurrent(x: Any, *state: Any) -> Any:
            return layer(x, initial_state=list(state))

        fn = self._compile(recurrent)

        def to_numpy(res: Any) -> Output:
            y, *final = (np.asarray(t.numpy()) for t in res)
            y = y.transpose(1, 0, 2)
            return (y, (final[0], final[1])) if op == "lstm" else (y, final[0])

        return (lambda: fn(x, *state)), to_numpy, call_text + " on batch-major x", bias_note

    def _recurrent_backward(
        self, op: str, layer: Any, inputs: dict[str, Array], order: Array | None
    ) -> tuple[Callable[..., Any], Callable[[Any], Any]]:
        """A tape over the Keras layer: gradients of (y, h_n[, c_n]) for (dy, dh_n[, dc_n]) with respect to
        x, the initial states and the layer's weights, converted back to torch's layouts (transposed; the
        GRU's gates reordered back to r, z, n; one Keras bias is both b_ih's and b_hh's gradient)."""
        tf = self._tf
        ups = [
            tf.constant(np.ascontiguousarray(inputs["dy"].transpose(1, 0, 2))),
            tf.constant(inputs["dh_n"]),
        ]
        if op == "lstm":
            ups.append(tf.constant(inputs["dc_n"]))
        variables = layer.trainable_weights  # kernel, recurrent_kernel, bias

        def grads(x: Any, *states: Any) -> Any:
            with tf.GradientTape() as tape:
                tape.watch(x)
                for st in states:
                    tape.watch(st)
                outs = layer(x, initial_state=list(states))
            return tape.gradient(list(outs), [x, *states, *variables], output_gradients=ups)

        fn = self._compile(grads)
        n_states = 2 if op == "lstm" else 1

        def to_numpy(res: Any) -> Output:
            arrays = [np.asarray(t.numpy()) for t in res]
            dx, dstates = arrays[0].transpose(1, 0, 2), arrays[1 : 1 + n_states]
            dk, drk, dbias = arrays[1 + n_states :]
            if order is None:
                dw_ih, dw_hh, db_ih, db_hh = dk.T, drk.T, dbias, dbias
            else:  # Keras column j is torch row order[j]
                dw_ih, dw_hh = np.empty_like(dk.T), np.empty_like(drk.T)
                db_ih, db_hh = np.empty_like(dbias[0]), np.empty_like(dbias[1])
                dw_ih[order], dw_hh[order], db_ih[order], db_hh[order] = dk.T, drk.T, dbias[0], dbias[1]
            return (dx, dw_ih, dw_hh, db_ih, db_hh, *dstates)

        return fn, to_numpy


class TensorFlowEagerBackend(TensorFlowBackend):
    name = "tensorflow-eager"
    compiled = False

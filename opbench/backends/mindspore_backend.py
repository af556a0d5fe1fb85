"""Backend `mindspore`: ops.matmul, ops.conv2d and nn.RNN/GRU/LSTM in PyNative mode, each call run to
completion. On the CPU by default; `--device cuda[:N]` asks for MindSpore's GPU target and `ascend[:N]`
for Ascend, where MindSpore reports them available (neither has run yet: no such machine was at hand).

MindSpore's PyNative CPU execution is asynchronous and `mindspore.runtime.synchronize()` does not
support the CPU, so the adapter calls `runtime.launch_blocking()`: every op returns only once it has
finished, and the clock can stop right after the loop. Its two runtime threads are pinned one per CPU
(`details.thread_placement`): left to the scheduler they sometimes share a CPU for a whole process.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from opbench.backends.base import Backend, KeptOutput, Prepared, event_timed, host_timed
from opbench.documents import Params
from opbench.dtypes import Array, Inputs, Output
from opbench.errors import BackendUnavailable
from opbench.machine import spread_threads
from opbench.ops.base import Shape, shape_of
from opbench.ops.conv_shape import ConvShape
from opbench.ops.gemm import GemmShape
from opbench.ops.recurrent_shape import RecurrentShape
from opbench.ops.rnn import RnnShape

# MindSpore 2.10's CPU runtime threads: the actor that runs a PyNative op, and its kernel pool.
MS_THREADS = ("ActorThread", "KernelThread")
# How long setup waits for the runtime threads to appear before giving up on placing them.
PLACE_WAIT_S = 2.0


# What a backward case times: PyNative keeps no graph between calls, and a vjp function called again
# recomputes its forward, so each timed call is the forward and the backward.
FWD_AND_BWD = (
    "forward + backward (PyNative keeps no graph between calls: each gradient call runs the forward)"
)


def _conv(ms: ModuleType, shape: Shape) -> tuple[Callable[[Any, Any], Any], str]:
    """conv(x, w) with the case's geometry, and what it calls: ops.conv2d, which pads both sides alike, or,
    where the sides differ, the ops.Conv2D primitive with its (top, bottom, left, right) padding."""
    shape = shape_of(shape, ConvShape)
    stride, dilation = (shape.stride_h, shape.stride_w), (shape.dil_h, shape.dil_w)
    if shape.symmetric:
        conv2d, padding = ms.ops.conv2d, (shape.pad_h, shape.pad_w)

        def fn(x: Any, w: Any) -> Any:
            return conv2d(x, w, None, stride, "pad", padding, dilation, shape.groups)

        return fn, "ops.conv2d(pad_mode='pad')"
    prim = ms.ops.Conv2D(
        out_channel=shape.k, kernel_size=(shape.r, shape.s), mode=1, pad_mode="pad", pad=shape.padding,
        stride=stride, dilation=dilation, group=shape.groups,
    )  # fmt: skip

    def sides(x: Any, w: Any) -> Any:  # a function, as mindspore.vjp wants
        return prim(x, w)

    return sides, "ops.Conv2D(pad_mode='pad', pad=(top, bottom, left, right))"


# The recurrent ops and the mindspore.nn layer of each (weights named as torch names them).
RECURRENT = {"rnn": "RNN", "gru": "GRU", "lstm": "LSTM"}


class _MindSporeCase(KeptOutput, Prepared):
    def __init__(
        self,
        call: Callable[[], Any],
        to_numpy: Callable[[Any], Any],
        details: dict[str, Any],
        events: Callable[..., Any] | None = None,
    ) -> None:
        self._call = call
        self._to_numpy = to_numpy
        self.details = details
        self._events = events  # mindspore.runtime.Event on a GPU or Ascend; None on the CPU
        if events is not None:
            self.clock = "device events (mindspore.runtime.Event) recorded around the calls"

    clock = "host clock (time.perf_counter) around the calls; launch_blocking: each op returns finished"

    def run(self, loops: int) -> float:
        if self._events is not None:
            self._last = None  # the events bracket the calls: their results are not kept
            return event_timed(self._events, self._call, loops)
        return host_timed(self._call, loops, keep=self.keep)

    def output(self) -> Output:
        return self._to_numpy(self._call())


def ms_device(device: str) -> tuple[str, int]:
    """opbench's device name -> MindSpore's target and id: cpu, cuda[:N] -> GPU, ascend[:N] -> Ascend."""
    kind, _, index = device.partition(":")
    target = {"cpu": "CPU", "cuda": "GPU", "ascend": "Ascend"}.get(kind)
    if target is None or (index and not index.isdigit()) or (kind == "cpu" and index):
        raise BackendUnavailable(f"unsupported device '{device}' for mindspore (cpu, cuda[:N] or ascend[:N])")
    return target, int(index or 0)


class MindSporeBackend(Backend):
    name = "mindspore"
    ops = Backend.ops_with_backward
    # Its CPU tanh is an approximation: off by up to 1.0e-4 in fp32 (near |x| = 5; its sigmoid within 14
    # ulps), which its recurrent layers carry (benchmarks/verification_power.py; MindSpore 2.10).
    activation_error = 1.1e-4

    def __init__(self) -> None:
        self._ms: ModuleType = ModuleType("mindspore")  # the framework, once setup() imported it
        self._details: dict[str, Any] = {}
        self._events: Callable[..., Any] | None = None

    def unavailable_reason(self) -> str | None:
        os.environ.setdefault("GLOG_v", "3")  # MindSpore logs warnings on import unless told not to
        try:
            import mindspore  # noqa: F401
        except ImportError as e:
            return f"MindSpore is not installed ({e}); pip install 'opbench[mindspore]' (needs numpy<2)"
        except Exception as e:  # e.g. built against NumPy 1.x while NumPy 2 is installed
            return f"MindSpore fails to import: {type(e).__name__}: {e}"
        return None

    def version(self) -> str | None:
        # the framework, imported only where its backend runs (pyproject.toml: no framework below)
        import mindspore

        return str(mindspore.__version__)

    def setup(self, threads: int, device: str) -> None:
        # the framework, imported only where its backend runs (pyproject.toml: no framework below)
        import mindspore as ms

        target, index = ms_device(device)
        if target != "CPU":
            contexts = {"GPU": ms.device_context.gpu, "Ascend": ms.device_context.ascend}
            if not contexts[target].is_available():
                raise BackendUnavailable(
                    f"MindSpore reports no {target} here, so '{device}' is not available"
                )
            ms.set_device(target, index)  # not run yet on a GPU or Ascend machine
        else:
            ms.set_device("CPU")
        ms.set_context(mode=ms.PYNATIVE_MODE)
        note = None
        try:
            ms.device_context.cpu.op_tuning.threads_num(threads)
        except RuntimeError:  # can be set once per process
            note = "threads_num was already set in this process"
        if target == "CPU":
            try:
                ms.runtime.launch_blocking()
            except RuntimeError:
                pass  # already blocking
        self._events = ms.runtime.Event if target != "CPU" else None
        self._ms = ms
        self._details = {
            "device": f"{target}:{index}",
            "mode": "PyNative, launch_blocking" if target == "CPU" else "PyNative, device events",
            "threads_num": threads,
            "thread_note": note
            or "MindSpore 2.10's CPU kernels ignore threads_num; the process CPU affinity bounds them",
        }
        if target == "CPU":
            # The runtime's threads start with the first op, and may take a moment to appear (and get their
            # names) on a busy machine: place them one per CPU (machine.spread_threads) once they are there.
            deadline = time.monotonic() + PLACE_WAIT_S
            while True:
                ms.ops.add(ms.Tensor(np.ones(4, np.float32)), 1.0).asnumpy()
                self._place_threads()
                if "thread_placement" in self._details or time.monotonic() >= deadline:
                    break
                time.sleep(0.01)

    def _place_threads(self) -> None:
        placed = spread_threads(MS_THREADS)
        if placed:
            self._details["thread_placement"] = {
                "pinned": placed,
                "why": "one MindSpore runtime thread per CPU: left to the scheduler, the two sometimes "
                "share a CPU and the op runs up to 1.6x slower for the rest of the process",
            }

    def unsupported_reason(self, op: str, dtype: str) -> str | None:
        if dtype == "bf16":
            # Seen with MindSpore 2.10: "Select CPU operator[MatMul] fail! Unsupported data type!" (it lists
            # float32, float64, integer and complex types), and the same for Conv2D (float32 only); the
            # recurrent layers run on MatMul. Its GPU and Ascend bf16 paths were never run here.
            return (
                "MindSpore's CPU kernels have no bfloat16 MatMul or Conv2D (MindSpore 2.10); "
                "its devices' are untried"
            )
        if op == "lstm:bwd" and dtype == "fp16" and self._events is None:
            # Seen with MindSpore 2.10 on the CPU: every gradient of an fp16 nn.LSTM comes back zero.
            return "MindSpore's CPU LSTM backward in float16 returns zero gradients (MindSpore 2.10)"
        return super().unsupported_reason(op, dtype)

    def notes(self, op: str, dtype: str) -> list[str]:
        return (
            [f"mindspore {op}: {FWD_AND_BWD}; FLOPs count the backward only"] if op.endswith(":bwd") else []
        )

    def _recurrent_backward(
        self,
        op: str,
        layer: Any,
        weights: list[Any],
        x: Any,
        starts: list[Any],
        t: dict[str, Any],
        details: dict[str, Any],
    ) -> Prepared:
        """BPTT of a mindspore.nn recurrent layer: mindspore.grad of the upstream gradients' inner product
        with (y, h_n[, c_n]) (the vector-Jacobian product), with respect to x, the initial states and the
        four parameters; each call runs the forward again (PyNative keeps no graph)."""
        ms = self._ms
        dy, dh_n = t["dy"], ms.Tensor(t["dh_n"].asnumpy()[None])
        dc_n = ms.Tensor(t["dc_n"].asnumpy()[None]) if op == "lstm" else None

        def inner(x: Any, *states: Any) -> Any:
            y, final = layer(x, tuple(states) if op == "lstm" else states[0])
            total = (y * dy).sum()
            if op == "lstm":
                return total + (final[0] * dh_n).sum() + (final[1] * dc_n).sum()
            return total + (final * dh_n).sum()

        grad_fn = ms.grad(inner, grad_position=tuple(range(1 + len(starts))), weights=weights)
        details["call"] += "; mindspore.grad of <(y, h_n[, c_n]), upstream> (a vector-Jacobian product)"
        details["timed"] = FWD_AND_BWD

        # to_float(float16) keeps the parameters in fp32 and casts them to fp16 inside the cell: their
        # gradients are the fp16 ones widened by that cast's backward, returned as the case's dtype.
        dtype = dy.asnumpy().dtype

        def to_numpy(res: Any) -> Output:
            inputs, params = res
            dx, *dstates = (np.asarray(g.asnumpy()) for g in inputs)
            return (dx, *(np.asarray(g.asnumpy()).astype(dtype) for g in params), *(d[0] for d in dstates))

        return _MindSporeCase(lambda: grad_fn(x, *starts), to_numpy, details, self._events)

    def prepare(self, op: str, shape: Shape, inputs: Inputs, params: Params) -> Prepared:
        ms = self._ms
        if self._events is None and "thread_placement" in self._details:
            self._place_threads()  # a runtime thread started since setup is placed too
        t = {k: ms.Tensor(v) for k, v in inputs.items()}
        details = dict(self._details)

        def host(x: Any) -> Array:
            return x.asnumpy()

        if op == "gemm":
            matmul, a, b = ms.ops.matmul, t["a"], t["b"]
            details["call"] = "ops.matmul (output allocated per call)"
            if shape_of(shape, GemmShape).batch > 1:
                matmul = ms.ops.BatchMatMul()
                details["call"] = "ops.BatchMatMul() (output allocated per call)"
            return _MindSporeCase(lambda: matmul(a, b), host, details, self._events)
        if op in ("gemm:bwd", "conv:bwd"):
            vjp = ms.vjp
            if op == "gemm:bwd":
                fn, leaves, upstream = ms.ops.matmul, (t["a"], t["b"]), t["dc"]
                details["call"] = "mindspore.vjp(ops.matmul, a, b)[1](dc)"
            else:
                fn, called = _conv(ms, shape)
                leaves, upstream = (t["x"], t["w"]), t["dy"]
                details["call"] = f"mindspore.vjp({called}, x, w)[1](dy)"
            details["timed"] = FWD_AND_BWD

            def grads(res: Any) -> Output:
                return host(res[0]), host(res[1])

            return _MindSporeCase(lambda: vjp(fn, *leaves)[1](upstream), grads, details, self._events)
        if op == "conv":
            (conv2d, called), x, w = _conv(ms, shape), t["x"], t["w"]
            details["call"] = f"{called} (output allocated per call)"
            return _MindSporeCase(lambda: conv2d(x, w), host, details, self._events)
        base, _, pass_name = op.partition(":")
        if base in RECURRENT:
            r, cls = shape_of(shape, RecurrentShape), RECURRENT[base]
            extra = {"nonlinearity": r.nonlinearity} if isinstance(r, RnnShape) else {}
            layer = getattr(ms.nn, cls)(
                r.input_size, r.hidden, num_layers=1, has_bias=True, batch_first=False, **extra
            )
            if inputs["x"].dtype == np.float16:
                layer.to_float(ms.float16)
            params_by_name = {p.name: p for p in layer.get_parameters()}
            pnames = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")
            for name, pname in zip(("w_ih", "w_hh", "b_ih", "b_hh"), pnames, strict=True):
                params_by_name[pname].set_data(t[name])
            x = t["x"]
            starts = [ms.Tensor(inputs["h0"][None])] + (
                [ms.Tensor(inputs["c0"][None])] if base == "lstm" else []
            )
            options = "".join(f", {k}='{v}'" for k, v in extra.items())
            details["call"] = f"nn.{cls}(batch_first=False{options})" + (
                ", to_float(float16)" if x.dtype == ms.float16 else ""
            )
            if pass_name == "bwd":
                weights = [params_by_name[n] for n in pnames]
                return self._recurrent_backward(base, layer, weights, x, starts, t, details)
            state = tuple(starts) if base == "lstm" else starts[0]

            def to_numpy(res: Any) -> Output:
                y, final = res
                if base == "lstm":
                    return host(y), (host(final[0])[0], host(final[1])[0])
                return host(y), host(final)[0]

            return _MindSporeCase(lambda: layer(x, state), to_numpy, details, self._events)
        raise ValueError(f"mindspore has no {op} adapter")

"""Backend `torch`: torch.mm into a preallocated output, F.conv2d and nn.RNN, nn.GRU and nn.LSTM, on a chosen
device, under inference_mode; threads via torch.set_num_threads."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from opbench.backends.base import Backend, KeptOutput, Prepared, event_timed, host_timed
from opbench.documents import Params
from opbench.dtypes import NUMPY_DTYPES, Array, Inputs, Output
from opbench.errors import BackendUnavailable
from opbench.ops.base import Shape, shape_of
from opbench.ops.conv_shape import ConvShape
from opbench.ops.gemm import GemmShape
from opbench.ops.recurrent_shape import RecurrentShape
from opbench.ops.rnn import RnnShape

if TYPE_CHECKING:  # the framework's types; the module itself is imported where the backend runs
    from torch import Tensor
    from torch.cuda import CUDAGraph
    from torch.nn import Module

# Calls per captured CUDA graph: enough to hide one replay's launch, few enough to capture quickly.
GRAPH_CALLS = 16


def _tensor(torch: ModuleType, v: Array) -> Tensor:
    """A CPU tensor sharing v's memory. torch.from_numpy knows no ml_dtypes.bfloat16: its bits are viewed as
    int16 and the tensor as torch.bfloat16 (the same format, bit for bit)."""
    if v.dtype.name == "bfloat16":
        return torch.from_numpy(v.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(v)


def _array(torch: ModuleType, x: Tensor) -> Array:
    """A CPU tensor as numpy; bfloat16 as ml_dtypes.bfloat16 (the inverse of _tensor)."""
    if x.dtype == torch.bfloat16:
        return np.asarray(x.contiguous().view(torch.int16).numpy().view(NUMPY_DTYPES["bf16"]))
    return np.asarray(x.numpy())


def _conv(torch: ModuleType, shape: Shape, x: Tensor, w: Tensor) -> Tensor:
    """F.conv2d with the case's geometry (no bias). F.conv2d pads both sides alike: where the case's sides
    differ, it pads the smaller of each pair and F.pad the rest first (a copy of x inside the call)."""
    shape = shape_of(shape, ConvShape)
    top, bottom, left, right = shape.padding
    ph, pw = min(top, bottom), min(left, right)
    if not shape.symmetric:
        x = torch.nn.functional.pad(x, (left - pw, right - pw, top - ph, bottom - ph))
    return torch.nn.functional.conv2d(
        x, w, None, (shape.stride_h, shape.stride_w), (ph, pw), (shape.dil_h, shape.dil_w), shape.groups
    )


# Where a case's sides are padded differently (details["padding"]; how the timed call pays for it follows).
ASYMMETRIC_NOTE = (
    "F.conv2d pads both sides alike: the padding one side has beyond the other is added by F.pad"
)


# The recurrent ops and the torch.nn layer of each (weights named weight_ih_l0 ... bias_hh_l0 in all three).
RECURRENT = {"rnn": "RNN", "gru": "GRU", "lstm": "LSTM"}


class _TorchCase(KeptOutput, Prepared):
    """`call()` performs one operation on tensors already on the device; `to_numpy(result)` converts it."""

    def __init__(
        self,
        torch: ModuleType,
        device: str,
        call: Callable[[], Any],
        to_numpy: Callable[[Any], Output],
        details: dict[str, Any],
        autograd: bool = False,
        targets: dict[str, list[Tensor]] | None = None,
    ) -> None:
        self._torch = torch
        # name -> the tensors the op reads that input from (refill); None where it cannot be refilled
        self._targets = targets
        self._autograd = autograd  # a backward pass: autograd on, not inference mode
        self._cuda = device.startswith("cuda")
        self._device = device
        self._call = call
        self._to_numpy = to_numpy
        self.details = details
        self._graph: CUDAGraph | Literal[False] | None = None  # captured; False once capture failed
        if self._cuda:
            self.clock = "CUDA events (torch.cuda.Event) recorded on the stream around the calls"

    def _captured(self) -> CUDAGraph | Literal[False]:
        """A CUDA graph of GRAPH_CALLS calls, captured once (after warm-up calls on a side stream, as
        capture requires); False where the op cannot be captured or OPBENCH_CUDA_GRAPHS=0."""
        if self._graph is not None:
            return self._graph
        torch = self._torch
        self._graph = False
        if os.environ.get("OPBENCH_CUDA_GRAPHS", "1") == "0":
            self.clock = "CUDA events around eager launches (CUDA graphs off: OPBENCH_CUDA_GRAPHS=0)"
            return False
        try:
            side = torch.cuda.Stream(self._device)
            side.wait_stream(torch.cuda.current_stream(self._device))
            with torch.cuda.stream(side):
                for _ in range(3):
                    self._call()
            torch.cuda.current_stream(self._device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(GRAPH_CALLS):
                    self._call()
            torch.cuda.synchronize(self._device)
        except Exception as e:  # an op that cannot be captured: time eager launches instead, and say so
            self.clock = (
                "CUDA events around eager launches (CUDA graph capture failed: "
                f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})"
            )
            return False
        self._graph = graph
        self.clock = (
            f"CUDA events around replays of a CUDA graph of {GRAPH_CALLS} calls (kernels back to back, "
            "no host launch gaps; the remainder of the loop launched eagerly)"
        )
        return graph

    def _mode(self) -> AbstractContextManager[object]:
        return self._torch.enable_grad() if self._autograd else self._torch.inference_mode()

    def run(self, loops: int) -> float:
        torch = self._torch
        with self._mode():
            if not self._cuda:
                return host_timed(self._call, loops, keep=self.keep)
            # Device-side timing: the events bracket the kernels on the stream, not the host's launches.
            # Kernels of a few microseconds are launch-bound when launched one by one from Python (the
            # GPU idles between them and the host's jitter becomes the measurement): whole graphs of calls
            # are replayed instead where the op can be captured.
            graph = self._captured() if loops >= GRAPH_CALLS else False
            torch.cuda.synchronize(self._device)
            if not graph:
                return event_timed(torch.cuda.Event, self._call, loops)

            def replays() -> None:
                for _ in range(loops // GRAPH_CALLS):
                    graph.replay()
                for _ in range(loops % GRAPH_CALLS):
                    self._call()

            return event_timed(torch.cuda.Event, replays, 1)

    def cache_flush(self) -> tuple[Callable[[], None], str] | None:
        if not self._cuda:
            return None
        torch = self._torch
        l2 = int(getattr(torch.cuda.get_device_properties(self._device), "L2_cache_size", 0)) or 64 << 20
        scratch = torch.empty(2 * l2, dtype=torch.uint8, device=self._device)
        return (
            lambda: scratch.zero_()
        ), f"{2 * l2 >> 20} MiB zeroed on the device (2x its L2) before each sample"

    def output(self) -> Output:
        with self._mode():
            return self._to_numpy(self._call())

    def refill(self, inputs: dict[str, Array]) -> bool:
        if self._targets is None:
            return False
        torch = self._torch
        with torch.no_grad():
            for name, values in inputs.items():
                for target in self._targets[name]:
                    target.copy_(_tensor(torch, values))
        return True


def _spin_up(torch: ModuleType, device: str, seconds: float = 1.0) -> None:
    """Keep the GPU busy for about `seconds` before the first case: an idle GPU sits at a low clock (345 MHz
    on the H100 seen here, boost 1980 MHz) and the first case's samples would catch it ramping up."""
    a = torch.ones((2048, 2048), device=device)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(8):
            a @ a
        torch.cuda.synchronize(device)


class TorchBackend(Backend):
    ops = Backend.ops_with_backward
    name = "torch"
    # Its fp16 conv backward on a CPU adds partial results in fp16: 150-200x the error an fp32 sum rounded
    # once allows, within the fp16 bound (benchmarks/verification_power.py, torch 2.13).
    accumulate_ops = {("conv:bwd", "fp16"): "fp16"}

    def __init__(self) -> None:
        self._device = "cpu"
        self._torch: ModuleType = ModuleType("torch")  # the framework, once setup() imported it

    def unavailable_reason(self) -> str | None:
        try:
            import torch  # noqa: F401
        except ImportError as e:
            return f"PyTorch is not installed ({e}); pip install 'torch==2.13.0' (CPU wheel)"
        return None

    def device_name(self, index: int) -> str | None:
        try:
            # the framework, imported only where its backend runs (pyproject.toml: no framework below)
            import torch
        except ImportError:
            return None
        if torch.cuda.is_available() and index < torch.cuda.device_count():
            return str(torch.cuda.get_device_name(index))
        return None

    def version(self) -> str | None:
        # the framework, imported only where its backend runs (pyproject.toml: no framework below)
        import torch

        return str(torch.__version__)

    def setup(self, threads: int, device: str) -> None:
        # the framework, imported only where its backend runs (pyproject.toml: no framework below)
        import torch

        if device.startswith("cuda") and not torch.cuda.is_available():
            raise BackendUnavailable(f"torch has no usable CUDA device for '{device}'")
        if device.startswith("cuda:") and int(device.partition(":")[2]) >= torch.cuda.device_count():
            raise BackendUnavailable(f"torch sees {torch.cuda.device_count()} CUDA device(s), not '{device}'")
        if device != "cpu" and not device.startswith("cuda"):
            raise BackendUnavailable(f"unsupported device '{device}' for torch")
        torch.set_num_threads(threads)
        if device.startswith("cuda"):
            # fp32 means IEEE fp32: cuDNN convolutions default to TF32 on Ampere and later (10-bit mantissa),
            # which fails the fp32 error bound and would be measured against the fp32 peak. cuBLAS's default
            # is already off; both are pinned here and recorded with every result.
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            _spin_up(torch, device)
        self._torch = torch
        self._device = device

    def _recurrent_backward(
        self,
        op: str,
        layer: Module,
        params: list[Tensor],
        x: Tensor,
        starts: list[Tensor],
        t: dict[str, Tensor],
        details: dict[str, Any],
        cpu: Callable[[Tensor], Array],
    ) -> Prepared:
        """BPTT of a torch.nn recurrent layer: its forward once (graph kept), each call autograd.grad of
        (y, h_n[, c_n]) for (dy, dh_n[, dc_n]) with respect to x, the four parameters and the initial
        states."""
        torch = self._torch
        leaves = [x.requires_grad_(True), *params, *(s.detach().requires_grad_(True) for s in starts)]
        with torch.enable_grad():
            y, final = layer(x, tuple(leaves[5:]) if op == "lstm" else leaves[5])
        outs = [y, *(final if op == "lstm" else (final,))]
        ups = [t["dy"], t["dh_n"][None], *([t["dc_n"][None]] if op == "lstm" else [])]
        grad = torch.autograd.grad
        details["call"] += ", torch.autograd.grad(outputs, (x, weights, biases, states), upstream)"
        details["timed"] = "the backward only (the forward's graph is built once, before timing)"

        def to_numpy(res: tuple[Tensor, ...]) -> Output:
            return tuple(cpu(g[0] if k >= 5 else g) for k, g in enumerate(res))

        def backward() -> tuple[Tensor, ...]:
            return grad(outs, leaves, ups, retain_graph=True)

        return _TorchCase(torch, self._device, backward, to_numpy, details, True)

    def prepare(self, op: str, shape: Shape, inputs: Inputs, params: Params) -> Prepared:
        torch, dev = self._torch, self._device
        t = {k: _tensor(torch, v).to(dev).contiguous() for k, v in inputs.items()}
        if ":" not in op and dev == "cpu":
            # A forward pass's own tensors, which refill() rewrites (on the CPU they would share the numpy
            # inputs' memory, which the sweep shares among a case's backends).
            t = {k: v.clone() for k, v in t.items()}
        targets = {k: [v] for k, v in t.items()}
        details: dict[str, Any] = {"device": dev}
        if dev.startswith("cuda"):
            details.update(
                gpu=torch.cuda.get_device_name(torch.device(dev)),
                cuda=torch.version.cuda,
                cudnn=torch.backends.cudnn.version(),
                tf32={
                    "matmul": torch.backends.cuda.matmul.allow_tf32,
                    "cudnn": torch.backends.cudnn.allow_tf32,
                },
                fp16_reduced_precision_reduction=torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
            )
        else:
            details.update(num_threads=torch.get_num_threads(), mkldnn=torch.backends.mkldnn.is_available())

        def cpu(x: Tensor) -> Array:
            return _array(torch, x.detach().cpu())

        if op == "gemm":
            g = shape_of(shape, GemmShape)
            out = torch.empty(g.operands[2], dtype=t["a"].dtype, device=dev)
            a, b, mm = t["a"], t["b"], torch.mm if g.batch == 1 else torch.bmm
            details["call"] = f"torch.{mm.__name__}(a, b, out=c)"
            return _TorchCase(torch, dev, lambda: mm(a, b, out=out), cpu, details, targets=targets)
        if op in ("gemm:bwd", "conv:bwd"):
            # The forward runs once here, outside the timed region; each timed call is the backward only.
            if op == "gemm:bwd":
                leaves, upstream = (t["a"], t["b"]), t["dc"]
                details["call"] = "torch.autograd.grad(torch.mm(a, b), (a, b), dc, retain_graph=True)"
            else:
                leaves, upstream = (t["x"], t["w"]), t["dy"]
                details["call"] = "torch.autograd.grad(F.conv2d(x, w, ...), (x, w), dy, retain_graph=True)"
                if not shape_of(shape, ConvShape).symmetric:
                    details["padding"] = f"{ASYMMETRIC_NOTE}, a copy of x (its backward timed)"
            for leaf in leaves:
                leaf.requires_grad_(True)
            with torch.enable_grad():
                out = torch.mm(*leaves) if op == "gemm:bwd" else _conv(torch, shape, *leaves)
            grad = torch.autograd.grad
            details["timed"] = "the backward only (the forward's graph is built once, before timing)"

            def both(res: tuple[Tensor, ...]) -> Output:
                return cpu(res[0]), cpu(res[1])

            def backward() -> tuple[Tensor, ...]:
                return grad(out, leaves, upstream, retain_graph=True)

            return _TorchCase(torch, dev, backward, both, details, True)
        if op == "conv":
            x, w = t["x"], t["w"]
            details["call"] = "torch.nn.functional.conv2d (output allocated per call)"
            if not shape_of(shape, ConvShape).symmetric:
                details["padding"] = f"{ASYMMETRIC_NOTE}, a copy of x inside each timed call"
            if dev == "cpu":
                details["mkldnn_conv"] = torch.backends.mkldnn.is_available()
            else:
                details["cudnn_enabled"] = torch.backends.cudnn.enabled
            return _TorchCase(torch, dev, lambda: _conv(torch, shape, x, w), cpu, details, targets=targets)
        base, _, pass_name = op.partition(":")
        if base in RECURRENT:
            r, cls = shape_of(shape, RecurrentShape), RECURRENT[base]
            extra = {"nonlinearity": r.nonlinearity} if isinstance(r, RnnShape) else {}
            layer = getattr(torch.nn, cls)(r.input_size, r.hidden, num_layers=1, bias=True, **extra)
            layer = layer.to(device=dev, dtype=t["x"].dtype)
            weights = [getattr(layer, f"{n}_l0") for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            with torch.no_grad():
                for weight, name in zip(weights, ("w_ih", "w_hh", "b_ih", "b_hh"), strict=True):
                    weight.copy_(t[name])
            x = t["x"]
            starts = [t["h0"][None]] + ([t["c0"][None]] if base == "lstm" else [])
            details["call"] = (
                f"torch.nn.{cls}(batch_first=False" + "".join(f", {k}='{v}'" for k, v in extra.items()) + ")"
            )
            if pass_name == "bwd":
                return self._recurrent_backward(base, layer, weights, x, starts, t, details, cpu)
            state = tuple(starts) if base == "lstm" else starts[0]

            def to_numpy(res: tuple[Tensor, Any]) -> Output:  # (y, h_n) or (y, (h_n, c_n))
                y, final = res
                if base == "lstm":
                    return cpu(y), (cpu(final[0][0]), cpu(final[1][0]))
                return cpu(y), cpu(final[0])

            # the layer reads its weights from its own parameters, copied from t when it was built
            for weight, name in zip(weights, ("w_ih", "w_hh", "b_ih", "b_hh"), strict=True):
                targets[name] = [weight]
            return _TorchCase(torch, dev, lambda: layer(x, state), to_numpy, details, targets=targets)
        raise ValueError(f"torch has no {op} adapter")

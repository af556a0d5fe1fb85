"""The shapes a torch model runs (`opbench shapes --torch MODULE:FACTORY`): the model is run once on random
inputs, and every GEMM, conv and recurrent layer it calls is read off as an opbench shape.

Two of torch's own mechanisms, together:
- a `TorchDispatchMode` sees the aten ops each call reaches, whatever Python called them (an `nn.Linear`, a
  functional `x @ w`, `torch.einsum`): mm, addmm, mv, addmv, bmm, baddbmm, convolution, and the fused
  scaled-dot-product attention kernels, which are written as their two batched GEMMs (scores and context);
- forward hooks on every module name the module that made each call (its qualified name in the model), and
  read the recurrent layers (`nn.RNN`, `nn.GRU`, `nn.LSTM`) whole: one problem per layer and direction,
  the aten ops inside them left out (torch runs a GRU as one addmm per step, an LSTM as mkldnn's layer).

The model runs with autograd on (its inputs do not require it): under no_grad `nn.TransformerEncoderLayer`
takes a fused fast path whose one aten op hides its GEMMs. Nothing is trained and no gradient is computed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opbench.errors import BackendUnavailable, UsageError
from opbench.ops import OPS
from opbench.ops.base import Shape
from opbench.ops.conv_shape import ConvShape
from opbench.ops.gemm import GemmShape

if TYPE_CHECKING:  # the framework's types; the module itself is imported where a model runs
    from types import ModuleType

    from torch import Tensor
    from torch._ops import OpOverload
    from torch.nn import Module

INPUT_DTYPES = ("float32", "float64", "bfloat16", "float16", "int64", "int32")
MAX_INPUT_ELEMENTS = 1 << 28  # an input's elements: shapes do not need a bigger one, and random data is made
_GEMM_OPS = {"mm": 0, "addmm": 1, "bmm": 0, "baddbmm": 1, "mv": 0, "addmv": 1}  # -> where A is in args
_ATTENTION_OPS = (
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_fused_attention_overrideable",
)
_HIDING_OPS = {  # fused ops whose GEMMs no aten op shows
    "_transformer_encoder_layer_fwd": "torch's fused transformer layer (its fast path) hides its GEMMs",
    "_native_multi_head_attention": "torch's fused attention (its fast path) hides its GEMMs",
}


@dataclass(frozen=True)
class Call:
    """One GEMM, conv or recurrent layer the model ran: its op, shape, the module that ran it and how
    (`source`: linear/matmul as `mm`, `conv2d`, `attention:scores`, `lstm`...)."""

    op: str
    shape: Shape
    module: str
    source: str


@dataclass
class Capture:
    """Every call, in order, and the calls read but not run by opbench (a 3-D or transposed conv, a
    projection LSTM, a packed sequence), each with its module and reason."""

    calls: list[Call] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class InputSpec:
    """`--input 2x3x224x224` or `--input 8x128:int64` (integer inputs hold 0 and 1: token ids of any
    vocabulary)."""

    dims: tuple[int, ...]
    dtype: str = "float32"

    @staticmethod
    def parse(text: str) -> InputSpec:
        dims_text, _, dtype = text.partition(":")
        dtype = dtype or "float32"
        if dtype not in INPUT_DTYPES:
            raise UsageError(f"--input {text}: unknown dtype '{dtype}' (one of {', '.join(INPUT_DTYPES)})")
        parts = dims_text.lower().split("x")
        if not all(p.isdigit() and int(p) > 0 for p in parts):
            raise UsageError(f"--input {text}: expected sizes like 1x3x224x224 (positive integers)")
        dims = tuple(int(p) for p in parts)
        if math.prod(dims) > MAX_INPUT_ELEMENTS:
            raise UsageError(f"--input {text}: {math.prod(dims)} elements, more than 2^28 (1 GiB of fp32)")
        return InputSpec(dims, dtype)


def _gemm(a: Tensor, b: Tensor, batched: bool) -> GemmShape:
    if b.dim() == 1:  # mv: a GEMV, one column
        return GemmShape(int(a.shape[0]), 1, int(a.shape[1]))
    if batched:
        return GemmShape(int(a.shape[1]), int(b.shape[2]), int(a.shape[2]), int(a.shape[0]))
    return GemmShape(int(a.shape[0]), int(b.shape[1]), int(a.shape[1]))


def _attention(q: Tensor, k: Tensor, v: Tensor) -> list[tuple[str, GemmShape]]:
    """Fused attention as the two batched GEMMs an unfused one runs: Q K^T, then P V."""
    batch = math.prod(int(d) for d in q.shape[:-2])
    length, depth = int(q.shape[-2]), int(q.shape[-1])
    keys, v_depth = int(k.shape[-2]), int(v.shape[-1])
    return [
        ("attention:scores", GemmShape(length, keys, depth, batch)),
        ("attention:context", GemmShape(length, v_depth, keys, batch)),
    ]


def _conv(args: tuple[Any, ...]) -> ConvShape | str:
    """aten.convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    a ConvShape, or why opbench does not run it."""
    x, w = args[0], args[1]
    stride, padding, dilation, transposed, groups = args[3], args[4], args[5], args[6], args[8]
    if transposed:
        return "a transposed conv is not an opbench op"
    if x.dim() == 5:
        return "a 3-D conv is not an opbench op"
    if x.dim() == 3:  # a 1-D conv, run as 2-D with height 1 (as the descriptors read one)
        return ConvShape(
            int(x.shape[0]), int(x.shape[1]), 1, int(x.shape[2]), int(w.shape[0]), 1, int(w.shape[2]),
            1, int(stride[0]), 0, int(padding[0]), 1, int(dilation[0]), int(groups),
        )  # fmt: skip
    if x.dim() != 4:
        return f"a conv of {x.dim()}-D input"
    return ConvShape(
        int(x.shape[0]), int(x.shape[1]), int(x.shape[2]), int(x.shape[3]), int(w.shape[0]),
        int(w.shape[2]), int(w.shape[3]), int(stride[0]), int(stride[1]), int(padding[0]),
        int(padding[1]), int(dilation[0]), int(dilation[1]), int(groups),
    )  # fmt: skip


def _torch() -> ModuleType:
    """torch (a framework: imported where a model runs, BackendUnavailable where it is missing)."""
    try:
        import torch
    except ImportError as e:
        raise BackendUnavailable(f"opbench shapes --torch needs torch: {e}") from None
    return torch


def _recurrent(module: Module, x: object) -> tuple[list[tuple[str, Shape]], str | None]:
    """An nn.RNN / nn.GRU / nn.LSTM call: (layer-and-direction name, shape) per layer and direction, or
    why not."""
    torch = _torch()
    mode = str(module.mode)  # RNN_TANH, RNN_RELU, GRU, LSTM
    op = {"RNN_TANH": "rnn", "RNN_RELU": "rnn", "GRU": "gru", "LSTM": "lstm"}[mode]
    sizes = getattr(x, "shape", None)
    if isinstance(x, torch.nn.utils.rnn.PackedSequence) or sizes is None:
        return [], "a packed sequence (variable lengths): pad it to capture its shape"
    if getattr(module, "proj_size", 0):
        return [], f"a projection LSTM (proj_size {module.proj_size}) is not an opbench op"
    dims = [int(d) for d in sizes]
    if len(dims) == 2:  # one sequence, unbatched
        seq, batch = dims[0], 1
    else:
        seq, batch = (dims[1], dims[0]) if module.batch_first else (dims[0], dims[1])
    hidden, layers = int(str(module.hidden_size)), int(str(module.num_layers))
    directions = 2 if module.bidirectional else 1
    out: list[tuple[str, Shape]] = []
    for layer in range(layers):
        size = int(str(module.input_size)) if layer == 0 else hidden * directions
        fields = {"seq_len": seq, "batch": batch, "input_size": size, "hidden": hidden}
        shape = OPS[op].shape_from_case({**fields, "relu": 1} if mode == "RNN_RELU" else fields)
        for d in range(directions):
            out.append((f"{op}:l{layer}" + (":reverse" if d else ""), shape))
    return out, None


def capture(model: Module, inputs: list[Tensor]) -> Capture:
    """Run `model(*inputs)` once and read off every GEMM, conv and recurrent layer it calls."""
    torch = _torch()
    from torch.utils._python_dispatch import TorchDispatchMode  # torch's, imported above when it is there

    names = {id(m): name or "model" for name, m in model.named_modules()}
    stack: list[Module] = []
    result = Capture()

    def where() -> str:
        return names.get(id(stack[-1]), type(stack[-1]).__name__) if stack else "model"

    def inside_recurrent() -> bool:
        return any(isinstance(m, torch.nn.RNNBase) for m in stack)

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(
            self,
            func: OpOverload,
            types: object,
            args: tuple[Any, ...] = (),
            kwargs: dict[str, object] | None = None,
        ) -> object:
            if not inside_recurrent():
                _record(str(func.overloadpacket.__name__), args, where(), result)
            return func(*args, **(kwargs or {}))

    def pre(module: Module, args: tuple[object, ...]) -> None:
        stack.append(module)

    def post(module: Module, args: tuple[Any, ...], output: object) -> None:
        stack.pop()
        if isinstance(module, torch.nn.RNNBase) and not inside_recurrent():
            shapes, why = _recurrent(module, args[0])
            name = names.get(id(module), "model")
            if why is not None:
                result.skipped.append((name, why))
            for source, shape in shapes:
                result.calls.append(Call(source.split(":")[0], shape, name, source))

    handles = [m.register_forward_pre_hook(pre) for m in model.modules()]
    handles += [m.register_forward_hook(post) for m in model.modules()]
    try:
        with torch.enable_grad(), Mode():
            model(*inputs)
    finally:
        for h in handles:
            h.remove()
    return result


def _record(name: str, args: tuple[Any, ...], module: str, result: Capture) -> None:
    if name in _GEMM_OPS:
        at = _GEMM_OPS[name]
        batched = name in ("bmm", "baddbmm")
        result.calls.append(Call("gemm", _gemm(args[at], args[at + 1], batched), module, name))
    elif name == "convolution":
        shape = _conv(args)
        if isinstance(shape, str):
            result.skipped.append((module, shape))
        else:
            result.calls.append(Call("conv", shape, module, "conv2d" if args[0].dim() == 4 else "conv1d"))
    elif name in _HIDING_OPS:
        result.skipped.append((module, _HIDING_OPS[name]))
    elif name in _ATTENTION_OPS:
        for source, gemm in _attention(args[0], args[1], args[2]):
            result.calls.append(Call("gemm", gemm, module, source))


def random_inputs(specs: list[InputSpec], seed: int = 0) -> list[Tensor]:
    torch = _torch()
    gen = torch.Generator().manual_seed(seed)
    out = []
    for s in specs:
        kind = getattr(torch, s.dtype)
        if s.dtype.startswith("int"):
            out.append(torch.randint(0, 2, s.dims, generator=gen, dtype=kind))
        else:
            out.append(torch.randn(s.dims, generator=gen).to(kind))
    return out


def model_from(factory: Callable[[], object]) -> Module:
    """The module FACTORY makes (a function or a class called with no arguments), in eval mode."""
    torch = _torch()
    model = factory()
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"--torch: the factory returned a {type(model).__name__}, not a torch.nn.Module")
    return model.eval()

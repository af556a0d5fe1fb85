"""Backend `cpp`: opbench's own kernels (tiled GEMM, implicit-GEMM conv, LSTM); the timed loop runs inside C++
with the GIL released."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np

from opbench import __version__, kernels
from opbench.backends.base import Backend, Prepared, copied
from opbench.documents import Fields, Params, Scalar
from opbench.dtypes import Array, Inputs, Output
from opbench.errors import BackendUnavailable
from opbench.kernels._args import _conv_path
from opbench.ops import get_op
from opbench.ops.base import Shape, shape_of
from opbench.ops.conv_shape import ConvShape
from opbench.ops.gemm import GemmShape
from opbench.ops.recurrent_shape import RecurrentShape
from opbench.tiles import PATH_KEYS, TILE_KEYS, Tiles
from opbench.tuned import tuned

TILES = tuple(TILE_KEYS)


@functools.lru_cache(maxsize=1)
def extension_hash() -> str:
    """A short hash of our compiled kernels (the _core extension's file), so that a rebuilt kernel is a new
    case rather than a change of the machine (history.py)."""
    digest = hashlib.sha256()
    with open(kernels.extension_file(), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


class _CppCase(Prepared):
    """One kernels.Plan, made once on the case's own copy of the inputs: timed by `run`, verified by
    `output()` (one call, copied out so that the timing never overwrites a verified answer), and its timed
    calls' result read back by `timed_output()` (Plan.last). `refill` rewrites the copy the plan reads in
    place (a forward pass; a backward plan ran its training forward when prepared).

    `plan(tiles)` builds a plan with the given tiles (None: the op derives them). `dims`, the GEMM's
    sizes, clamp the tiles reported as effective for GEMM and LSTM; conv's plan reports its own."""

    clock = "C++ steady_clock around the calls, inside the extension (no Python between calls)"

    def __init__(
        self,
        plan: Callable[[Tiles], Any],
        params: dict[str, Any],
        dims: dict[str, int] | None,
        algorithm: str,
        inputs: dict[str, Array] | None = None,
    ) -> None:
        given: dict[str, int | str | None] = {t: params.get(t) or None for t in TILES}
        # the path thresholds and conv_path are passed on only where a case gives them (0 is a value)
        given.update({t: params[t] for t in PATH_KEYS if params.get(t) is not None})
        self._plan = plan(Tiles.of({k: v for k, v in given.items() if v is not None}))
        self._inputs = inputs  # what the plan reads at every call, or None where it cannot be refilled
        self._timed = False
        info = self._plan.tiles()
        used = {t: info[t] if dims is None else min(info[t], dims[t]) for t in TILES}
        used.update({t: info[t] for t in PATH_KEYS if info.get(t) not in (None, "")})  # "": no way named
        self.details = {
            "isa": info["isa"],
            "kernel": info["kernel"],
            "algorithm": algorithm,
            "mr": info["mr"],
            "nr": info["nr"],
            "tiles": {t: given[t] or info[t] for t in TILES},
            "tiles_effective": used,
            **({"path": info["path"]} if "path" in info else {}),
            **({"step_threads": info["step_threads"]} if "step_threads" in info else {}),
            "tiles_source": params.get("tiles_note") or ("given" if any(given.values()) else "cache model"),
        }

    def run(self, loops: int) -> float:
        self._timed = True
        return float(self._plan.run(loops))

    def output(self) -> Output:
        return copied(self._plan.output())

    def timed_output(self) -> Output:
        return copied(self._plan.last()) if self._timed else self.output()

    def refill(self, inputs: dict[str, Array]) -> bool:
        if self._inputs is None:
            return False
        for name, values in inputs.items():
            np.copyto(self._inputs[name], values)
        return True


class CppBackend(Backend):
    name = "cpp"
    ops = Backend.ops_with_backward
    # fp16 is widened in packing and accumulated in fp32, bf16 pairs multiplied exactly and summed in fp32
    # (the base class's assumption); the recurrent cells' gates and state stay fp32, only h and c rounded
    half_cells = False
    param_names = ("tile_m", "tile_n", "tile_k", "isa", "accumulate", "conv_path")

    def __init__(self) -> None:
        self._threads = 1

    def unavailable_reason(self) -> str | None:
        error = kernels.load_error()
        if error is not None:
            return f"the C++ extension is not built ({error}); reinstall with: pip install -e ."
        return None

    def version(self) -> str | None:
        return __version__

    def setup(self, threads: int, device: str) -> None:
        if device != "cpu":
            raise BackendUnavailable(f"cpp kernels run on the CPU only, not on {device}")
        self._threads = threads

    def parse_param(self, name: str, text: str) -> Scalar:
        if name.startswith("tile_"):
            if not text.isdigit() or int(text) < 1:
                raise ValueError(f"{name} must be an integer >= 1, got '{text}'")
            return int(text)
        if name == "conv_path":
            return _conv_path(text)  # the facade's own check, against the compiled names
        if name == "isa":
            if text not in kernels.known_isas():
                raise ValueError(f"unknown isa '{text}' (known: {', '.join(kernels.known_isas())})")
            return text
        if text not in ("fp32", "fp16"):
            raise ValueError(f"accumulate must be fp32 or fp16, got '{text}'")
        return text

    def case_params(self, options: Fields, op: str, shape: Shape, dtype: str, threads: int) -> Params:
        """The run's tiles, ISA and accumulation for our kernels. With --tuned (options["tuned"]) the tiles
        `opbench tune` recorded for this case on this machine are looked up here, once per case when it is
        built (the kernels do not read the tuner's records), and named in the record's tiles_source."""
        params: Params = {k: v for k, v in options.items() if k != "tuned"}
        if options.get("tuned"):
            tiles, note = tuned(op, shape, dtype, threads)
            params.update(tiles, tiles_note=note)
        return params

    def build(self) -> str | None:
        """A short hash of our compiled kernels (the _core extension's file)."""
        return extension_hash()

    def repro_args(self, params: dict[str, Any], details: dict[str, Any]) -> tuple[list[str], list[str]]:
        """The tiles and kernel set that ran (as the record's details name them), so that the repro does not
        depend on the cache model or the tuner's records of the day."""
        args = ["--backend", "cpp"]
        tiles = details.get("tiles") or {t: params.get(t) for t in TILES}
        for t in TILES:
            if tiles.get(t):
                args += [f"--{t.replace('_', '-')}", str(tiles[t])]
        isa = details.get("isa") or params.get("isa")
        if isa:
            args += ["--isa", str(isa)]
        if params.get("accumulate") == "fp16":
            args += ["--accumulate", "fp16"]
        if params.get("conv_path"):
            args += ["--conv-path", str(params["conv_path"])]
        return ["opbench"], args

    def user_call(self, op: str, shape: Shape, inputs: Inputs) -> tuple[Callable[[], object], str] | None:
        """opbench.kernels' plain call (every default), not the prepared plan a case times."""
        i = inputs
        if op == "gemm":
            return (lambda: kernels.gemm(i["a"], i["b"])), "opbench.kernels.gemm(a, b)"
        if op == "conv":
            c = shape_of(shape, ConvShape)
            stride, dilation = (c.stride_h, c.stride_w), (c.dil_h, c.dil_w)

            def conv() -> object:
                return kernels.conv2d(
                    i["x"], i["w"], stride=stride, padding=c.padding, dilation=dilation, groups=c.groups
                )

            return conv, "opbench.kernels.conv2d(x, w, ...)"
        weights = (i["x"], i["w_ih"], i["w_hh"], i["b_ih"], i["b_hh"], i["h0"])
        if op == "lstm":
            return (lambda: kernels.lstm(*weights, i["c0"])), "opbench.kernels.lstm(x, w_ih, ..., h0, c0)"
        if op == "gru":
            return (lambda: kernels.gru(*weights)), "opbench.kernels.gru(x, w_ih, ..., h0)"
        if op == "rnn":
            return (lambda: kernels.rnn(*weights)), "opbench.kernels.rnn(x, w_ih, ..., h0)"
        return None

    def prepare(self, op: str, shape: Shape, inputs: Inputs, params: Params) -> Prepared:
        if op not in ALGORITHMS:
            raise ValueError(f"cpp has no {op} adapter")
        isa = str(params["isa"]) if params.get("isa") else None
        threads, accumulate = self._threads, "fp32"
        algorithm = ALGORITHMS[op]
        if op == "gemm" and params.get("accumulate") == "fp16" and inputs["a"].dtype == np.float16:
            # accumulate="fp16" applies to fp16 inputs (fp32 inputs always accumulate in fp32).
            info = kernels.default_tiles(isa)["fp16_accumulate"]
            if not info["available"]:
                raise ValueError(f"not supported here: {info['reason']}")
            accumulate = "fp16"
            algorithm += ", fp16 accumulation per tile_k block"
        elif op == "conv" and (shape_of(shape, ConvShape).stride_h, shape_of(shape, ConvShape).stride_w) != (
            1,
            1,
        ):
            algorithm = "implicit GEMM, B micro-panels gathered from the padded image"
        ours = get_op(op)
        # The plan holds raw pointers into its inputs: its own copy, which refill() may rewrite (the sweep
        # shares one set among a case's backends). A backward plan ran its training forward when prepared.
        own = {k: np.array(v, copy=True) for k, v in inputs.items()}
        case = _CppCase(
            lambda tiles: ours.plan(shape, own, tiles.running(threads, isa), accumulate),
            params,
            _clamp_dims(op, shape),
            algorithm,
            own if ":" not in op else None,
        )
        if accumulate == "fp16":
            case.details["accumulate"] = f"fp16:{case.details['tiles_effective']['tile_k']}"
        return case


ALGORITHMS = {
    "gemm": "GEMM: blocked (BLIS loops) or, by shape, a path that packs less (details.path says which)",
    "gemm:bwd": "two blocked GEMMs: dA = dC B^T (B^T read in place), dB = A^T dC (A^T packed from A)",
    "conv:bwd": "dW^T from the image's stride phases read in place against dY's transposed panels (im2col "
    "tiles on the GEMM where x holds NaN or Inf); dX: flipped-filter implicit-GEMM conv at stride 1, else "
    "W^T dY per block scattered back (col2im); depthwise: direct plane loops (details.path says which)",
    **{
        f"{op}:bwd": "BPTT over the activations a training forward saved (run once when prepared): one "
        "GEMM per step for dh, three over all steps for dW_hh, dW_ih and dx"
        for op in ("rnn", "gru", "lstm")
    },
    "conv": "implicit GEMM, B rows read in place from the padded image; by shape a direct depthwise loop, "
    "pixels as rows (A read in place or gathered), or 1x1 on the batched GEMM (details.path says which)",
    "rnn": "input GEMM for all steps + recurrent GEMM per step + fused activation",
    "gru": "input GEMM for all steps + recurrent GEMM per step (own buffer) + fused cell (state in fp32)",
    "lstm": "input GEMM for all steps + recurrent GEMM per step + fused cell (cell state in fp32)",
}


def _unit_stride(shape: ConvShape) -> bool:
    return shape.stride_h == 1 and shape.stride_w == 1


def _clamp_dims(op: str, shape: Shape) -> dict[str, int] | None:
    """The sizes that bound the tiles reported as effective (conv's plan reports its own)."""
    if op == "gemm":
        g = shape_of(shape, GemmShape)
        return {"tile_m": g.m, "tile_n": g.n, "tile_k": g.k}
    if op.partition(":")[0] in ("rnn", "gru", "lstm"):
        r = shape_of(shape, RecurrentShape)
        return {"tile_m": r.batch, "tile_n": r.GATES * r.hidden, "tile_k": max(r.input_size, r.hidden)}
    return None

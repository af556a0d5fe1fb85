"""Backend `cpp`: opbench's own kernels (tiled GEMM, implicit-GEMM conv, LSTM); the timed loop runs inside C++
with the GIL released."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from opbench.backends.base import Backend, Prepared
from opbench.errors import BackendUnavailable

TILES = ("tile_m", "tile_n", "tile_k")


class _CppCase(Prepared):
    """One kernels.Plan, made once with the case's output buffers (timed by `run`) and again with fresh
    ones for each `output()`, so that a verified answer is never overwritten by the timing.

    `plan(tiles, reuse)` builds a plan with the given tiles (None: the op derives them). `dims`, the GEMM's
    sizes, clamp the tiles reported as effective for GEMM and LSTM; conv's plan reports its own."""

    clock = "C++ steady_clock around the calls, inside the extension (no Python between calls)"

    def __init__(
        self,
        plan: Callable[[dict[str, int | None], bool], Any],
        params: dict[str, Any],
        dims: dict[str, int] | None,
        algorithm: str,
    ) -> None:
        given = {t: params.get(t) or None for t in TILES}
        self._make = lambda: plan(given, False)
        self._plan = plan(given, True)
        info = self._plan.tiles()
        used = {t: info[t] if dims is None else min(info[t], dims[t]) for t in TILES}
        self.details = {
            "isa": info["isa"],
            "kernel": info["kernel"],
            "algorithm": algorithm,
            "mr": info["mr"],
            "nr": info["nr"],
            "tiles": {t: given[t] or info[t] for t in TILES},
            "tiles_effective": used,
            "tiles_source": params.get("tiles_note") or ("given" if any(given.values()) else "cache model"),
        }

    def run(self, loops: int) -> float:
        return float(self._plan.run(loops))

    def output(self) -> Any:
        return self._make().output()


class CppBackend(Backend):
    name = "cpp"
    accumulate = {"fp32": "fp32", "fp16": "fp32"}  # fp16 is widened in packing and accumulated in fp32

    def __init__(self) -> None:
        self._threads = 1

    def unavailable_reason(self) -> str | None:
        try:
            from opbench import kernels  # noqa: F401  (imports the extension)
        except ImportError as e:
            return f"the C++ extension is not built ({e}); reinstall with: pip install -e ."
        return None

    def version(self) -> str | None:
        from opbench import __version__

        return __version__

    def setup(self, threads: int, device: str) -> None:
        if device != "cpu":
            raise BackendUnavailable(f"cpp kernels run on the CPU only, not on {device}")
        self._threads = threads

    def prepare(self, op: str, shape: Any, inputs: dict[str, np.ndarray], params: dict[str, Any]) -> Prepared:
        from opbench import kernels

        isa, threads = params.get("isa") or None, self._threads
        if op == "gemm":
            a, b = inputs["a"], inputs["b"]
            out = np.empty((shape.m, shape.n), a.dtype)
            # accumulate="fp16" applies to fp16 inputs (fp32 inputs always accumulate in fp32).
            f16_acc = params.get("accumulate") == "fp16" and a.dtype == np.float16
            if f16_acc:
                info = kernels.default_tiles(isa)["fp16_accumulate"]
                if not info["available"]:
                    raise ValueError(f"not supported here: {info['reason']}")
            accumulate = "fp16" if f16_acc else "fp32"

            def gemm(t: dict[str, int | None], reuse: bool) -> Any:
                return kernels.prepare_gemm(
                    a,
                    b,
                    out=out if reuse else None,
                    tile_m=t["tile_m"],
                    tile_n=t["tile_n"],
                    tile_k=t["tile_k"],
                    threads=threads,
                    isa=isa,
                    accumulate=accumulate,
                )

            dims = {"tile_m": shape.m, "tile_n": shape.n, "tile_k": shape.k}
            algorithm = "blocked GEMM (BLIS loops)" + (
                ", fp16 accumulation per tile_k block" if f16_acc else ""
            )
            case = _CppCase(gemm, params, dims, algorithm)
            if f16_acc:
                case.details["accumulate"] = f"fp16:{case.details['tiles_effective']['tile_k']}"
            return case
        if op == "conv":
            x, w = inputs["x"], inputs["w"]
            y = np.empty((shape.n, shape.k, shape.out_h, shape.out_w), x.dtype)

            def conv(t: dict[str, int | None], reuse: bool) -> Any:
                return kernels.prepare_conv2d(
                    x,
                    w,
                    stride=(shape.stride_h, shape.stride_w),
                    padding=(shape.pad_h, shape.pad_w),
                    dilation=(shape.dil_h, shape.dil_w),
                    groups=shape.groups,
                    tile_m=t["tile_m"],
                    tile_n=t["tile_n"],
                    tile_k=t["tile_k"],
                    out=y if reuse else None,
                    threads=threads,
                    isa=isa,
                )

            stride1 = shape.stride_h == 1 and shape.stride_w == 1
            algorithm = (
                "implicit GEMM, B rows read in place from the padded image"
                if stride1
                else "implicit GEMM, B micro-panels gathered from the padded image"
            )
            return _CppCase(conv, params, None, algorithm)
        if op == "lstm":
            args = tuple(inputs[n] for n in ("x", "w_ih", "w_hh", "b_ih", "b_hh", "h0", "c0"))
            dt = inputs["x"].dtype
            t, b, h = shape.seq_len, shape.batch, shape.hidden
            outs = (np.empty((t, b, h), dt), np.empty((b, h), dt), np.empty((b, h), dt))

            def lstm(t: dict[str, int | None], reuse: bool) -> Any:
                return kernels.prepare_lstm(
                    *args,
                    outs=outs if reuse else None,
                    tile_m=t["tile_m"],
                    tile_n=t["tile_n"],
                    tile_k=t["tile_k"],
                    threads=threads,
                    isa=isa,
                )

            dims = {"tile_m": b, "tile_n": 4 * h, "tile_k": max(shape.input_size, h)}
            algorithm = "input GEMM for all steps + recurrent GEMM per step + fused cell (cell state in fp32)"
            return _CppCase(lstm, params, dims, algorithm)
        raise ValueError(f"cpp has no {op} adapter")

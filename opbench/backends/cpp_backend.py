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
    """Calls one _core entry point: `call(*args, out..., tiles, threads, isa)` for the answer and
    `timed(*args, out..., tiles, threads, isa, loops)` for the timing. Tiles not given are passed as None
    when `effective` is set (the op derives its own and `effective(tiles)` reports them), else as the
    kernel set's cache-model defaults."""

    def __init__(
        self,
        call: Callable[..., Any],
        timed: Callable[..., float],
        args: tuple[Any, ...],
        outs: tuple[np.ndarray, ...],
        extra: tuple[Any, ...],
        threads: int,
        params: dict[str, Any],
        gemm_dims: dict[str, int] | None,
        algorithm: str,
        effective: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        keywords: dict[str, Any] | None = None,
        columns: int = 0,
    ) -> None:
        from opbench import _core

        self._call, self._timed = call, timed
        self._args, self._outs, self._extra = args, outs, extra
        self._threads = threads
        self._keywords = keywords or {}
        self._isa = params.get("isa") or ""
        info = _core.kernel_info(self._isa, columns)  # columns: a GEMM's N picks its register tile
        given = {t: params.get(t) or None for t in TILES}
        if effective is None:
            assert gemm_dims is not None, "tiles clamp to the GEMM's dimensions unless the op reports its own"
            self._tiles = {t: given[t] or info[t] for t in TILES}
            used = {t: min(v, gemm_dims[t]) for t, v in self._tiles.items()}
            kernel, mr, nr = info["description"], info["mr"], info["nr"]
        else:
            self._tiles = given
            resolved = effective(given)
            used = {t: resolved[t] for t in TILES}
            kernel, mr, nr = resolved["kernel"], resolved["mr"], resolved["nr"]
        self.details = {
            "isa": info["isa"],
            "kernel": kernel,
            "algorithm": algorithm,
            "mr": mr,
            "nr": nr,
            "tiles": {t: self._tiles[t] or used[t] for t in TILES},
            "tiles_effective": used,
            "tiles_source": params.get("tiles_note") or ("given" if any(given.values()) else "cache model"),
        }

    def _tail(self) -> tuple[Any, ...]:
        t = self._tiles
        return (*self._extra, t["tile_m"], t["tile_n"], t["tile_k"], self._threads, self._isa)

    clock = "C++ steady_clock around the calls, inside the extension (no Python between calls)"

    def run(self, loops: int) -> float:
        return float(self._timed(*self._args, *self._outs, *self._tail(), loops, **self._keywords))

    def output(self) -> Any:
        return self._call(*self._args, *(None for _ in self._outs), *self._tail(), **self._keywords)


class CppBackend(Backend):
    name = "cpp"
    accumulate = {"fp32": "fp32", "fp16": "fp32"}  # fp16 is widened in packing and accumulated in fp32

    def __init__(self) -> None:
        self._threads = 1

    def unavailable_reason(self) -> str | None:
        try:
            from opbench import _core  # noqa: F401
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
        from opbench import _core

        if op == "gemm":
            a, b = inputs["a"], inputs["b"]
            out = np.empty((shape.m, shape.n), a.dtype)
            dims = {"tile_m": shape.m, "tile_n": shape.n, "tile_k": shape.k}
            # accumulate="fp16" applies to fp16 inputs (fp32 inputs always accumulate in fp32).
            f16_acc = params.get("accumulate") == "fp16" and a.dtype == np.float16
            case = _CppCase(
                _core.gemm,
                _core.time_gemm,
                (a, b),
                (out,),
                (),
                self._threads,
                params,
                dims,
                "blocked GEMM (BLIS loops)" + (", fp16 accumulation per tile_k block" if f16_acc else ""),
                keywords={"accumulate": "fp16"} if f16_acc else None,
                columns=shape.n,
            )
            if f16_acc:
                info = _core.kernel_info(params.get("isa") or "")["fp16_accumulate"]
                if not info["available"]:
                    raise ValueError(f"not supported here: {info['reason']}")
                case.details.update(kernel=info["description"], mr=info["mr"], nr=info["nr"])
                case.details["accumulate"] = f"fp16:{case.details['tiles_effective']['tile_k']}"
            return case
        if op == "conv":
            x, w = inputs["x"], inputs["w"]
            out = np.empty((shape.n, shape.k, shape.out_h, shape.out_w), x.dtype)
            extra = (
                (shape.stride_h, shape.stride_w),
                (shape.pad_h, shape.pad_w),
                (shape.dil_h, shape.dil_w),
                shape.groups,
            )
            stride1 = shape.stride_h == 1 and shape.stride_w == 1
            algo = (
                "implicit GEMM, B rows read in place from the padded image"
                if stride1
                else "implicit GEMM, B micro-panels gathered from the padded image"
            )
            isa, threads = params.get("isa") or "", self._threads

            def effective(tiles: dict[str, Any]) -> dict[str, Any]:
                stride, padding, dilation, groups = extra
                return dict(
                    _core.conv2d_tiles(
                        x,
                        w,
                        stride,
                        padding,
                        dilation,
                        groups,
                        tiles["tile_m"],
                        tiles["tile_n"],
                        tiles["tile_k"],
                        threads,
                        isa,
                    )
                )

            return _CppCase(
                _core.conv2d, _core.time_conv2d, (x, w), (out,), extra, threads, params, None, algo, effective
            )
        if op == "lstm":
            names = ("x", "w_ih", "w_hh", "b_ih", "b_hh", "h0", "c0")
            dt = inputs["x"].dtype
            t, b, h = shape.seq_len, shape.batch, shape.hidden
            outs = (np.empty((t, b, h), dt), np.empty((b, h), dt), np.empty((b, h), dt))
            dims = {"tile_m": b, "tile_n": 4 * h, "tile_k": max(shape.input_size, h)}
            return _CppCase(
                _core.lstm,
                _core.time_lstm,
                tuple(inputs[n] for n in names),
                outs,
                (),
                self._threads,
                params,
                dims,
                "input GEMM for all steps + recurrent GEMM per step + fused cell (cell state in fp32)",
            )
        raise ValueError(f"cpp has no {op} adapter")

"""Backend `cpp`: opbench's own tiled C++ GEMM; the timed loop runs inside C++ with the GIL released."""

from __future__ import annotations

from typing import Any

import numpy as np

from opbench.backends.base import Backend, Prepared
from opbench.errors import BackendUnavailable


class _CppGemm(Prepared):
    def __init__(self, a: np.ndarray, b: np.ndarray, threads: int, params: dict[str, Any]) -> None:
        from opbench import _core

        self._core = _core
        self._a, self._b = a, b
        self._out = np.empty((a.shape[0], b.shape[1]), dtype=a.dtype)
        self._threads = threads
        self._isa = params.get("isa") or ""
        info = _core.kernel_info(self._isa)
        tiles = {t: params.get(t) or info[t] for t in ("tile_m", "tile_n", "tile_k")}
        self._tiles = tiles
        dims = {"tile_m": a.shape[0], "tile_n": b.shape[1], "tile_k": a.shape[1]}
        self.details = {
            "isa": info["isa"],
            "kernel": info["description"],
            "mr": info["mr"],
            "nr": info["nr"],
            "tiles": tiles,
            "tiles_effective": {t: min(v, dims[t]) for t, v in tiles.items()},
            "tiles_source": "given" if any(params.get(t) for t in tiles) else "cache model",
        }

    def run(self, loops: int) -> float:
        t = self._tiles
        return float(
            self._core.time_gemm(
                self._a,
                self._b,
                self._out,
                t["tile_m"],
                t["tile_n"],
                t["tile_k"],
                self._threads,
                self._isa,
                loops,
            )
        )

    def output(self) -> np.ndarray:
        t = self._tiles
        return self._core.gemm(
            self._a, self._b, None, t["tile_m"], t["tile_n"], t["tile_k"], self._threads, self._isa
        )


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

    def prepare(self, op: str, inputs: dict[str, np.ndarray], params: dict[str, Any]) -> Prepared:
        return _CppGemm(
            np.ascontiguousarray(inputs["a"]), np.ascontiguousarray(inputs["b"]), self._threads, params
        )

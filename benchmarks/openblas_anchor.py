"""OpenBLAS 0.3.34 as a benchmark anchor: the strongest BLAS available on these machines, from the
`scipy-openblas32` package, called through ctypes. Benchmarks only: opbench never depends on it.

    pip install scipy-openblas32      # then benchmarks/small_shapes.py times it beside the frameworks

Its calls are timed in a C loop (a few lines compiled once with the system's cc into a cache directory),
as our kernels are, so tiny problems are not charged a Python call per product. Where no compiler is found
the loop runs in Python and the details say so.

Two sides: `openblas` (cblas_sgemm, row-major) for every GEMM, and `openblas-gemv` (cblas_sgemv) for
shapes with M = 1 or N = 1, the call a GEMV user would make.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from opbench import backends
from opbench.backends.base import Backend, Prepared
from opbench.errors import BackendUnavailable

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112

# The timed loop: calls the library's entry point `loops` times and returns the seconds (CLOCK_MONOTONIC).
_LOOP_C = r"""
#include <time.h>
typedef void (*sgemm_t)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                        float*, int);
typedef void (*sgemv_t)(int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
double anchor_sgemm(void* fn, long loops, int m, int n, int k, const float* a, const float* b, float* c) {
  double t0 = now();
  for (long i = 0; i < loops; ++i) ((sgemm_t)fn)(101, 111, 111, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
  return now() - t0;
}
double anchor_sgemv(void* fn, long loops, int trans, int rows, int cols, const float* a, const float* x,
                    float* y) {
  double t0 = now();
  for (long i = 0; i < loops; ++i) ((sgemv_t)fn)(101, trans, rows, cols, 1.0f, a, cols, x, 1, 0.0f, y, 1);
  return now() - t0;
}
"""


def _library() -> tuple[ctypes.CDLL, str]:
    try:
        import scipy_openblas32
    except ImportError as e:
        raise BackendUnavailable("scipy-openblas32 is not installed (pip install scipy-openblas32)") from e
    path = os.path.join(scipy_openblas32.get_lib_dir(), f"lib{scipy_openblas32.get_library()}.so")
    return ctypes.CDLL(path), scipy_openblas32.get_openblas_config()


def _loop_library() -> ctypes.CDLL | None:
    """The C timing loop, compiled once per source text into ~/.cache/opbench (None without a compiler)."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        return None
    digest = hashlib.sha256(_LOOP_C.encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "opbench"
    # Not named after OpenBLAS: threadpoolctl takes any loaded library called "openblas*" for one.
    target = cache / f"anchor_timed_loop_{digest}.so"
    if not target.exists():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "loop.c"
            src.write_text(_LOOP_C)
            built = Path(tmp) / target.name
            done = subprocess.run(
                [cc, "-O2", "-shared", "-fPIC", str(src), "-o", str(built)], capture_output=True
            )
            if done.returncode != 0:
                return None
            os.replace(built, target)  # atomic: a concurrent run sees the old file or the whole new one
    lib = ctypes.CDLL(str(target))
    p = ctypes.c_void_p
    lib.anchor_sgemm.restype = ctypes.c_double
    lib.anchor_sgemm.argtypes = [p, ctypes.c_long, ctypes.c_int, ctypes.c_int, ctypes.c_int, p, p, p]
    lib.anchor_sgemv.restype = ctypes.c_double
    lib.anchor_sgemv.argtypes = [p, ctypes.c_long, ctypes.c_int, ctypes.c_int, ctypes.c_int, p, p, p]
    return lib


class _Call(Prepared):
    def __init__(self, timed: Any, once: Any, out: np.ndarray, details: dict[str, Any]) -> None:
        self._timed, self._once, self._out = timed, once, out
        self.details = details

    def run(self, loops: int) -> float:
        return float(self._timed(loops))

    def output(self) -> np.ndarray:
        self._once()
        return self._out.copy()


class OpenBlasBackend(Backend):
    """cblas_sgemm (or, as `openblas-gemv`, cblas_sgemv) on float32 row-major arrays."""

    name = "openblas"
    ops = ("gemm",)
    gemv = False

    def __init__(self) -> None:
        self._lib: ctypes.CDLL | None = None
        self._loop: ctypes.CDLL | None = None
        self._config = ""
        self._threads = 1

    def unavailable_reason(self) -> str | None:
        try:
            _library()
        except BackendUnavailable as e:
            return str(e)
        return None

    def version(self) -> str | None:
        return self._config or None

    def setup(self, threads: int, device: str) -> None:
        if device != "cpu":
            raise BackendUnavailable("OpenBLAS runs on the CPU only")
        if self._lib is None:
            self._lib, self._config = _library()
            self._loop = _loop_library()
        self._lib.scipy_openblas_set_num_threads(ctypes.c_int(threads))
        self._threads = threads

    def unsupported_reason(self, op: str, dtype: str) -> str | None:
        if op != "gemm":
            return f"OpenBLAS is a BLAS: no {op}"
        if dtype != "fp32":
            return "the anchor is sgemm (fp32 only)"
        return None

    def prepare(self, op: str, shape: Any, inputs: dict[str, np.ndarray], params: dict[str, Any]) -> Prepared:
        assert self._lib is not None, "setup() first"
        a = np.ascontiguousarray(inputs["a"], dtype=np.float32)
        b = np.ascontiguousarray(inputs["b"], dtype=np.float32)
        m, k = a.shape
        n = b.shape[1]
        c = np.empty((m, n), dtype=np.float32)
        ptr = [x.ctypes.data_as(ctypes.c_void_p) for x in (a, b, c)]
        details: dict[str, Any] = {"library": self._config, "threads": self._threads}
        if self.gemv:
            if m == 1:  # y^T = a^T B: B (k x n) transposed times the vector
                fn_name, args = "scipy_cblas_sgemv", (TRANS, k, n, ptr[1], ptr[0], ptr[2])
            elif n == 1:  # y = A b
                fn_name, args = "scipy_cblas_sgemv", (NO_TRANS, m, k, ptr[0], ptr[1], ptr[2])
            else:
                raise ValueError("openblas-gemv needs M = 1 or N = 1")
        else:
            fn_name, args = "scipy_cblas_sgemm", (m, n, k, *ptr)
        fn = getattr(self._lib, fn_name)
        addr = ctypes.cast(fn, ctypes.c_void_p)
        details["call"] = fn_name
        if self._loop is not None:
            loop = self._loop.anchor_sgemv if self.gemv else self._loop.anchor_sgemm
            details["timed"] = "C loop around the call"
            return _Call(lambda loops: loop(addr, loops, *args), lambda: loop(addr, 1, *args), c, details)
        details["timed"] = "Python loop around a ctypes call (no C compiler found)"
        if self.gemv:
            trans, rows, cols, mat, x, y = args
            full = (ROW_MAJOR, trans, rows, cols, ctypes.c_float(1), mat, cols, x, 1, ctypes.c_float(0), y, 1)
        else:
            mm, nn, kk, pa, pb, pc = args
            full = (ROW_MAJOR, NO_TRANS, NO_TRANS, mm, nn, kk, ctypes.c_float(1), pa, kk, pb, nn,
                    ctypes.c_float(0), pc, nn)  # fmt: skip

        def timed(loops: int) -> float:
            t0 = time.perf_counter()
            for _ in range(loops):
                fn(*full)
            return time.perf_counter() - t0

        return _Call(timed, lambda: fn(*full), c, details)


class OpenBlasGemvBackend(OpenBlasBackend):
    name = "openblas-gemv"
    gemv = True


def register() -> list[str]:
    """Registers the anchor's sides for this process; returns the names that can run here (none when
    scipy-openblas32 is missing, with the reason printed by the caller)."""
    backends.register(OpenBlasBackend.name, OpenBlasBackend)
    backends.register(OpenBlasGemvBackend.name, OpenBlasGemvBackend)
    return [] if OpenBlasBackend().unavailable_reason() else [OpenBlasBackend.name, OpenBlasGemvBackend.name]


def main() -> int:
    """Says whether the anchor runs here and how: the library, its configuration and how calls are timed."""
    import argparse

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    backend = OpenBlasBackend()
    reason = backend.unavailable_reason()
    if reason:
        print(f"OpenBLAS anchor not available: {reason}")
        return 1
    backend.setup(args.threads, "cpu")
    from opbench.ops import gemm

    shape = gemm.GemmShape(256, 256, 256)
    inputs = gemm.make_inputs(shape, "fp32", 0)
    case = backend.prepare("gemm", shape, inputs, {})
    ok = gemm.check(shape, case.output(), inputs, gemm.reference(shape, inputs), "fp32", "fp32")["ok"]
    seconds = min(case.run(20) / 20 for _ in range(5))
    print(f"{case.details['library']}; {case.details['call']}, {case.details['timed']}")
    print(
        f"256^3 on {args.threads} thread(s): {gemm.flops(shape) / seconds / 1e9:.1f} GFLOPS, verified: {ok}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Two builds of our kernels side by side: the installed extension against another build of it (an older
commit, other flags), loaded into the same process and timed interleaved, round after round, on the same
arrays. For a change that must not move the kernels' speed (a refactor), or one that should.

Prints per case the median per-call time of each build and the median and quartiles of the per-round
ratio new / old. Builds before the prepared-call binding (commit 5d0e73a and earlier) are driven through
their time_gemm / time_conv2d / time_lstm entry points, later ones through prepare_*(...).run (with one
_core.Tiles argument since issue 40).

    cmake -S <old checkout> -B /tmp/old-build -DCMAKE_BUILD_TYPE=Release \\
        -Dpybind11_DIR=$(python -m pybind11 --cmakedir) && cmake --build /tmp/old-build -j2
    python benchmarks/ab_builds.py --old /tmp/old-build/_core.cpython-311-x86_64-linux-gnu.so [--rounds 21]

Two rows of the micro-architecture table on one build: `--old installed --old-env OPBENCH_MICROARCH="Emerald
Rapids"` loads a copy of the installed build (a second dlopen of one file would share its statics) with that
variable set as it starts, so each build keeps the row it read first.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import os
import shutil
import statistics
import tempfile
from collections.abc import Callable
from typing import Any
from unittest.mock import patch

import ml_dtypes
import numpy as np


def load_build(path: str, env: dict[str, str] | None = None) -> Any:
    """Another build of opbench._core, loaded beside the installed one (its init symbol is PyInit__core).
    Each path gets its own module name: a second build loaded under the same name came back as the first
    module, and an A/B of two such builds compared one build with itself."""
    name = f"ab_build_{abs(hash(path))}._core"
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    # The environment holds while the library is opened too, so that what it reads as it loads (static
    # initializers) sees it.
    with patch.dict(os.environ, env or {}):
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        module.kernel_info()  # the build reads $OPBENCH_MICROARCH once, on its first use of the table
    return module


def env_pairs(pairs: list[str]) -> dict[str, str]:
    """KEY=VALUE arguments as a dict."""
    return dict(pair.split("=", 1) for pair in pairs)


def timed_calls(core: Any, threads: int, isa: str = "") -> dict[str, Callable[..., Callable[[int], float]]]:
    """Per op, a function from the case's arrays to run(loops) -> seconds, for either binding (`isa`: a
    kernel set other than the default, for builds with one Tiles argument)."""
    if hasattr(core, "Tiles"):  # one Tiles argument since issue 40
        tiles = core.Tiles(threads=threads, isa=isa)
        return {
            "gemm": lambda a, b, out: core.prepare_gemm(a, b, out, tiles).run,
            "conv": lambda x, w, y: core.prepare_conv2d(x, w, y, (1, 1), (1, 1, 1, 1), (1, 1), 1, tiles).run,
            "conv 1x1": lambda x, w, y: (
                core.prepare_conv2d(x, w, y, (1, 1), (0, 0, 0, 0), (1, 1), 1, tiles).run
            ),
            "conv stem": lambda x, w, y: (
                core.prepare_conv2d(x, w, y, (2, 2), (3, 3, 3, 3), (1, 1), 1, tiles).run
            ),
            "conv s2": lambda x, w, y: (
                core.prepare_conv2d(x, w, y, (2, 2), (1, 1, 1, 1), (1, 1), 1, tiles).run
            ),
            # (x, w, dy, padding, groups, stride)
            "conv:bwd": lambda x, w, dy, pad, groups, stride=1: (
                core.prepare_conv2d_backward(
                    x, w, dy, (stride, stride), (pad,) * 4, (1, 1), groups, None, None, tiles
                ).run
            ),
            "lstm": lambda *arrays: core.prepare_rnn("lstm", *arrays, tiles).run,
        }
    if hasattr(core, "prepare_gemm"):
        # padding: (top, bottom, left, right) since padding per side (issue 44), (h, w) before
        pad = (1, 1, 1, 1) if "FixedSize(4)" in (core.prepare_conv2d.__doc__ or "") else (1, 1)
        return {
            "gemm": lambda a, b, out: core.prepare_gemm(a, b, out, None, None, None, threads).run,
            "conv": lambda x, w, y: (
                core.prepare_conv2d(x, w, y, (1, 1), pad, (1, 1), 1, None, None, None, threads).run
            ),
            # prepare_rnn(cell, ...) replaced prepare_lstm when the GRU and Elman cells joined it.
            "lstm": (
                (lambda *arrays: core.prepare_rnn("lstm", *arrays, None, None, None, threads).run)
                if hasattr(core, "prepare_rnn")
                else (lambda *arrays: core.prepare_lstm(*arrays, None, None, None, threads).run)
            ),
        }
    return {
        "gemm": lambda a, b, out: (
            lambda loops: core.time_gemm(a, b, out, None, None, None, threads, "", loops)
        ),
        "conv": lambda x, w, y: (
            lambda loops: core.time_conv2d(
                x, w, y, (1, 1), (1, 1), (1, 1), 1, None, None, None, threads, "", loops
            )
        ),
        "lstm": lambda *arrays: lambda loops: core.time_lstm(*arrays, None, None, None, threads, "", loops),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", required=True, help="the other build's _core*.so, or 'installed'")
    p.add_argument("--old-env", action="append", default=[], help="KEY=VALUE set as the old build loads")
    p.add_argument("--new-env", action="append", default=[], help="KEY=VALUE set as the new build loads")
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--only", default="", help="run only the cases whose name contains one of these (a,b,...)")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32", help="the arrays' dtype")
    p.add_argument("--isa", default="", help="the kernel set both builds run (default: the CPU's best)")
    p.add_argument("--gemm", default="", help="more GEMM cases, MxNxK,... (--only gemm runs only GEMMs)")
    p.add_argument(
        "--b-offset",
        type=int,
        default=-1,
        help="place each GEMM's B this many bytes into a page (numpy's arrays start 16 bytes past a line "
        "or on one, by the heap's state, so which a case gets can change from run to run)",
    )
    p.add_argument("--conv", default="", help="more 3x3 padding-1 convs, NxCxHWxK,... (batch, C, size, K)")
    args = p.parse_args()

    from opbench import _core, kernels, layout
    from opbench.machine import cpu_model, pin_to_cpus

    pin_to_cpus(args.threads)

    def installed_copy() -> str:
        return shutil.copy(_core.__file__, tempfile.mkdtemp(prefix="ab_builds_"))

    old = load_build(installed_copy() if args.old == "installed" else args.old, env_pairs(args.old_env))
    new = load_build(installed_copy(), env_pairs(args.new_env)) if args.new_env else _core
    rng = np.random.default_rng(0)
    dtype = ml_dtypes.bfloat16 if args.dtype == "bf16" else np.float32

    def arr(*shape: int) -> np.ndarray:
        return rng.uniform(-1, 1, shape).astype(dtype)

    arrays: dict[str, tuple[str, tuple[np.ndarray, ...]]] = {}
    for m, n, k in (
        (64, 64, 64),
        (96, 96, 96),
        (128, 128, 128),
        (160, 160, 160),
        (192, 192, 192),
        (256, 256, 256),
        (128, 1000, 2048),
        (512, 512, 512),
        (1024, 16, 1024),
        (448, 1024, 1024),
        (256, 4096, 1024),
        (4096, 16, 1024),
        (7680, 2, 2560),
        (16, 4096, 1024),
        (16, 1024, 4096),
        (12, 4096, 4096),
        *(tuple(int(d) for d in shape.split("x")) for shape in args.gemm.split(",") if shape),
    ):
        b = arr(k, n) if args.b_offset < 0 else layout.place(arr(k, n), args.b_offset)
        arrays[f"gemm {m}x{n}x{k}"] = ("gemm", (arr(m, k), b, np.empty((m, n), dtype)))
    for n, c, hw, k in (
        (4, 64, 28, 64),
        (8, 64, 56, 64),
        (8, 128, 28, 128),
        (8, 256, 14, 256),
        (2, 512, 7, 512),
        *(tuple(int(d) for d in shape.split("x")) for shape in args.conv.split(",") if shape),
    ):
        arrays[f"conv N{n} C{c} {hw}x{hw} K{k} 3x3 p1"] = (
            "conv",
            (arr(n, c, hw, hw), arr(k, c, 3, 3), np.empty((n, k, hw, hw), dtype)),
        )
    for n in (8, 1):
        arrays[f"conv N{n} C3 224x224 K64 7x7 s2 p3"] = (
            "conv stem",
            (arr(n, 3, 224, 224), arr(64, 3, 7, 7), np.empty((n, 64, 112, 112), dtype)),
        )
    for n, c, hw in ((8, 128, 56), (8, 256, 28)):
        arrays[f"conv N{n} C{c} {hw}x{hw} K{c} 3x3 s2 p1"] = (
            "conv s2",
            (arr(n, c, hw, hw), arr(c, c, 3, 3), np.empty((n, c, hw // 2, hw // 2), dtype)),
        )
    for n, c, hw, k in ((8, 256, 56, 64), (8, 64, 56, 256), (8, 1024, 14, 256)):
        arrays[f"conv N{n} C{c} {hw}x{hw} K{k} 1x1"] = (
            "conv 1x1",
            (arr(n, c, hw, hw), arr(k, c, 1, 1), np.empty((n, k, hw, hw), dtype)),
        )
    arrays["conv:bwd N8 C32 56x56 3x3 p1 g32"] = (
        "conv:bwd",
        (arr(8, 32, 56, 56), arr(32, 1, 3, 3), arr(8, 32, 56, 56), 1, 32),
    )
    arrays["conv:bwd N8 C144 56x56 3x3 s2 p1 g144"] = (
        "conv:bwd",
        (arr(8, 144, 56, 56), arr(144, 1, 3, 3), arr(8, 144, 28, 28), 1, 144, 2),
    )
    arrays["conv:bwd N8 C64 56x56 K128 3x3 s2 p1"] = (
        "conv:bwd",
        (arr(8, 64, 56, 56), arr(128, 64, 3, 3), arr(8, 128, 28, 28), 1, 1, 2),
    )
    for n, c, hw in ((8, 64, 56), (8, 128, 28), (8, 512, 7)):
        arrays[f"conv:bwd N{n} C{c} {hw}x{hw} K{c} 3x3 p1"] = (
            "conv:bwd",
            (arr(n, c, hw, hw), arr(c, c, 3, 3), arr(n, c, hw, hw), 1, 1),
        )
    arrays["conv:bwd N8 C256 56x56 K64 1x1"] = (
        "conv:bwd",
        (arr(8, 256, 56, 56), arr(64, 256, 1, 1), arr(8, 64, 56, 56), 0, 1),
    )
    arrays["conv:bwd N8 C64 56x56 K256 1x1"] = (
        "conv:bwd",
        (arr(8, 64, 56, 56), arr(256, 64, 1, 1), arr(8, 256, 56, 56), 0, 1),
    )
    t, b, i, h = 25, 16, 256, 256
    lstm_in = (arr(t, b, i), arr(4 * h, i), arr(4 * h, h), arr(4 * h), arr(4 * h), arr(b, h), arr(b, h))
    lstm_out = (np.empty((t, b, h), dtype), np.empty((b, h), dtype), np.empty((b, h), dtype))
    arrays["lstm T25 B16 I256 H256"] = ("lstm", lstm_in + lstm_out)

    builds = (timed_calls(old, args.threads, args.isa), timed_calls(new, args.threads, args.isa))
    only = args.only.split(",")
    # (the conv 1x1, stem and conv:bwd cases need a build with one Tiles argument)
    runs = {
        case: tuple(b[op](*a) for b in builds)
        for case, (op, a) in arrays.items()
        if op in builds[0]
        and any(part in case for part in only)
        and not (args.dtype == "bf16" and op == "conv:bwd")  # (the backward passes take fp32 and fp16)
    }
    loops = {}
    for case, (_, run_new) in runs.items():
        n = 1
        while run_new(n) < 0.01:  # a sample of at least 10 ms
            n *= 2
        loops[case] = n
    per_call: dict[str, tuple[list[float], list[float]]] = {case: ([], []) for case in runs}
    for r in range(args.rounds):
        for case, pair in runs.items():
            order = (0, 1) if r % 2 == 0 else (1, 0)  # alternate which build goes first
            for which in order:
                per_call[case][which].append(pair[which](loops[case]) / loops[case])

    print(
        f"{cpu_model()}, {args.threads} thread(s), kernel set {args.isa or kernels.default_tiles()['isa']}, "
        f"{args.dtype}, "
        f"{args.rounds} interleaved rounds"
    )
    print(f"{'case':34} {'old us':>9} {'new us':>9} {'new/old':>8}  quartiles of the per-round ratio")
    for case, (o, n) in per_call.items():
        ratios = [y / x for x, y in zip(o, n, strict=True)]
        q = statistics.quantiles(ratios, n=4)
        print(
            f"{case:34} {1e6 * statistics.median(o):9.1f} {1e6 * statistics.median(n):9.1f} "
            f"{statistics.median(ratios):8.3f}  {q[0]:.3f}-{q[2]:.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

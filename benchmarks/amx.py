"""AMX-BF16 (issue 43): our bf16 GEMM on the AMX tiles against torch's bf16 matmul (oneDNN, itself on AMX
where the CPU has it) and against our AVX512-BF16 kernel, interleaved in one process, with the AMX peak
measured beside them.

    python benchmarks/amx.py --threads 1            # BERT-base GEMMs and 1024-4096 squares
    python benchmarks/amx.py --threads 16 --kc 256,512,1024 --rounds 5
    python benchmarks/amx.py --threads 16 --build old=/tmp/old-build/_core.cpython-312-x86_64-linux-gnu.so
    python benchmarks/amx.py --threads 16 --layouts 1x2,1x4,4x1,1x2k2   # the tile space's layouts
    python benchmarks/amx.py --isa amx-emu --gemm 48x40x70 --layouts 1x4  # a dry run anywhere (emulated)

For each shape every side is checked against float64 on a sample of rows, then timed round after round, the
sides one after the other in each round; each figure is the side's median GFLOPS over the rounds. --kc adds
our AMX kernel at other K blocks (Tiles k) beside its default; --build NAME=PATH another build of
opbench._core (an older commit: benchmarks/ab_builds.py) on its AMX kernel, as side "amx NAME"; --layouts
our AMX kernel on other micro-kernel layouts (amx_rows x amx_cols, kK for K steps a load: _core.amx_shapes),
as sides "amx RxC". Needs an AMX CPU (`opbench peak` lists its tdpbf16ps loop); elsewhere it says why and
exits 2, unless --isa amx-emu runs our sides on the exact emulator, whose timings say nothing of AMX.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import ml_dtypes
import numpy as np
from ab_builds import load_build

from opbench import _core, kernels
from opbench.machine import cpu_model
from opbench.tiles import Tiles

BF16 = ml_dtypes.bfloat16
BERT = [(t, n, k) for t in (128, 512, 1024) for n, k in ((2304, 768), (768, 768), (3072, 768), (768, 3072))]
SQUARES = [(s, s, s) for s in (1024, 2048, 4096)]


def _timed(call: Callable[[], object], min_s: float = 0.05) -> float:
    call()
    reps, t = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(reps):
            call()
        t = time.perf_counter() - t0
        if t >= min_s:
            return t / reps
        reps *= 2


def _layout(name: str) -> dict[str, int]:
    """ "1x4" or "1x2k2" as Tiles' amx_rows, amx_cols and amx_ksteps (checked by the kernel facade)."""
    size, _, ksteps = name.partition("k")
    rows, _, cols = size.partition("x")
    return {"amx_rows": int(rows), "amx_cols": int(cols), "amx_ksteps": int(ksteps or 1)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--kc", default="", help="extra K blocks for our AMX kernel, comma-separated")
    p.add_argument("--shapes", default="bert,squares")
    p.add_argument("--build", action="append", default=[], metavar="NAME=PATH", help="another build's _core")
    p.add_argument("--layouts", default="", help="other AMX layouts, RxC or RxCkK, comma-separated")
    p.add_argument("--gemm", default="", help="these shapes MxNxK,... instead of --shapes")
    p.add_argument("--isa", choices=("amx", "amx-emu"), default="amx")
    args = p.parse_args()
    why = _core.cpu_info()["amx_unavailable"]
    if why and args.isa == "amx":
        print(f"opbench: AMX-BF16 cannot run here: {why}", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(args.threads)
    shapes = (BERT if "bert" in args.shapes else []) + (SQUARES if "squares" in args.shapes else [])
    if args.gemm:
        shapes = [(m, n, k) for m, n, k in (map(int, g.split("x")) for g in args.gemm.split(","))]
    layouts = {f"amx {name}": _layout(name) for name in args.layouts.split(",") if name}
    head = f"# {cpu_model()}; {args.threads} thread(s); torch {torch.__version__}"
    gf: float | None = None
    if args.isa == "amx":
        gf, name = kernels.fma_peak("bf16", args.threads, 0.2, 3)
        print(f"{head}; bf16 peak {gf:.0f} GFLOPS ({name})")
    else:
        print(f"{head}; our sides on the AMX emulator: these times say nothing of AMX")
    extra = [int(k) for k in args.kc.split(",") if k]
    builds = {f"amx {name}": load_build(path) for name, _, path in (b.partition("=") for b in args.build)}
    beside = ["avx512bf16"] if "avx512" in kernels.available_isas() else []
    sides = ["amx", *(f"amx k{k}" for k in extra), *layouts, *builds, *beside, "torch"]
    print("| M x N x K | " + " | ".join(sides) + " | amx / torch | amx % peak |")
    print("|---" * (len(sides) + 3) + "|")
    ratios = []
    for m, n, k in shapes:
        rng = np.random.default_rng(0)
        a = rng.standard_normal((m, k)).astype(BF16)
        b = rng.standard_normal((k, n)).astype(BF16)
        ta = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
        tb = torch.from_numpy(b.view(np.int16)).view(torch.bfloat16)
        calls: dict[str, Callable[[], object]] = {}
        outs: dict[str, Callable[[], np.ndarray]] = {}
        for side in sides:
            if side == "torch":
                calls[side] = lambda ta=ta, tb=tb: torch.mm(ta, tb)
                outs[side] = lambda ta=ta, tb=tb: torch.mm(ta, tb).float().numpy()
                continue
            if side in builds:
                core = builds[side]
                out = np.empty((m, n), BF16)
                other = core.prepare_gemm(a, b, out, core.Tiles(threads=args.threads, isa="amx"))
                calls[side] = lambda other=other: other.run(1)
                outs[side] = lambda other=other, out=out: (other.run(1), out.astype(np.float32))[1]
                continue
            isa = "avx512" if side == "avx512bf16" else args.isa
            tiles = Tiles(isa=isa, threads=args.threads, k=int(side.split(" k")[1]) if " k" in side else None)
            if side in layouts:
                tiles = Tiles(isa=isa, threads=args.threads, **layouts[side])
            plan = kernels.prepare_gemm(a, b, tiles=tiles)
            calls[side] = lambda plan=plan: plan.run(1)
            outs[side] = lambda plan=plan: (plan.run(1), plan.output().astype(np.float32))[1]
        rows = np.arange(0, m, max(1, m // 16))
        exact = a[rows].astype(np.float64) @ b.astype(np.float64)
        scale = np.abs(a[rows].astype(np.float64)) @ np.abs(b.astype(np.float64))
        for side in sides:
            err = float(np.max(np.abs(outs[side]()[rows] - exact) / scale))
            if err > 2.0**-7:
                print(f"opbench: {side} is wrong at {m}x{n}x{k}: error {err:.3g} of |A| |B|", file=sys.stderr)
                return 1
        times: dict[str, list[float]] = {s: [] for s in sides}
        for _ in range(args.rounds):
            for side in sides:
                times[side].append(_timed(calls[side]))
        g = {s: 2.0 * m * n * k / statistics.median(times[s]) / 1e9 for s in sides}
        ratios.append(g["amx"] / g["torch"])
        cells = " | ".join(f"{g[s]:.0f}" for s in sides)
        share = f"{100 * g['amx'] / gf:.0f}%" if gf else "-"
        print(f"| {m}x{n}x{k} | {cells} | {g['amx'] / g['torch']:.2f} | {share} |")
    geo = float(np.exp(np.mean(np.log(ratios))))
    print(f"\namx / torch: geomean {geo:.2f}, min {min(ratios):.2f} over {len(ratios)} shapes")
    return 0


if __name__ == "__main__":
    sys.exit(main())

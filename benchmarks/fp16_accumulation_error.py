"""How large the error of fp16 accumulation is, by block size: max relative error vs float64 of
kernels.gemm(accumulate="fp16") for several K and tile_k, beside fp32 accumulation of the same fp16 inputs.

    python benchmarks/fp16_accumulation_error.py [--m 64 --n 64 --k 256,1024,4096 --tile-k 32,216,K]

Runs the exact emulation (isa="ref": every FMA rounded once to fp16, the order the AVX512-FP16 kernel uses,
so its results are bit-identical), which works on any CPU; on a CPU with AVX512-FP16 it also runs the fast
kernel and checks that the two agree. Inputs are uniform in [-1, 1) (ops.gemm.make_inputs); the error is
max |C - C_64| / max |C_64|, and "bound" the largest error the verification allows relative to the same.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from opbench import kernels
from opbench.ops import gemm
from opbench.ops.numerics import compare
from opbench.tiles import Tiles


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--m", type=int, default=64)
    p.add_argument("--n", type=int, default=64)
    p.add_argument("--k", default="256,1024,4096")
    p.add_argument("--tile-k", default="32,216,K", help="block sizes; K: one block (plain fp16)")
    args = p.parse_args()
    fast = kernels.default_tiles()["fp16_accumulate"]
    where = "yes" if fast["available"] else f"no ({fast['reason']})"
    print(f"# fast fp16 accumulation on this CPU: {where}")
    print("\n| M x N x K | accumulation | max rel err | bound (rel) |")
    print("|---|---|---|---|")
    for k in map(int, args.k.split(",")):
        shape = gemm.GemmShape(args.m, args.n, k)
        inp = gemm.make_inputs(shape, "fp16", seed=0)
        ref = gemm.reference(shape, inp)
        scale = float(np.max(np.abs(ref)))

        rows = [("fp32", kernels.gemm(inp["a"], inp["b"]), "fp32")]
        for text in args.tile_k.split(","):
            tk = k if text == "K" else min(int(text), k)
            c = kernels.gemm(
                inp["a"],
                inp["b"],
                tiles=Tiles(isa="ref", k=tk),
                accumulate="fp16",
            )
            if fast["available"]:
                c_fast = kernels.gemm(inp["a"], inp["b"], accumulate="fp16", tiles=Tiles(k=tk))
                if not np.array_equal(c, c_fast):
                    print(f"MISMATCH: the AVX512-FP16 kernel differs from the emulation at tile_k={tk}")
                    return 1
            rows.append((f"fp16 in blocks of {tk}" + (" (plain fp16)" if tk == k else ""), c, f"fp16:{tk}"))
        for label, c, acc in rows:
            bound = gemm.error_bound(inp, ref, acc, "fp16")
            r = compare({"c": c}, {"c": ref}, {"c": bound}, "fp16")
            rel_bound = float(np.max(bound)) / scale
            print(f"| {shape.label()} | {label} | {r['max_rel_err']:.2e} | {rel_bound:.2e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""conv2d's ways measured by our own tuner, per kernel set and thread count (issue 41): the table of measured
choices the planner's model is held to (tuning/choices/conv_paths.json, tests/test_conv_paths.py).

    python benchmarks/conv_paths.py                       # the default shapes, 1 and 2 threads
    python benchmarks/conv_paths.py --threads 2 --rounds 7 --shapes stem,s2-28
    python benchmarks/conv_paths.py --read-only           # the table from studies already in --out

For each (shape, threads) it runs `opbench tune conv SHAPE --space conv_paths --params conv_path --sampler
grid`: every way once, then all of them and the model's default re-measured over --rounds interleaved rounds
in fresh processes (the tuner's confirmation). The row keeps each way's confirmed GFLOPS and 95% interval,
the way the model takes (asked from the planner), the best way and the ways near it (within TOLERANCE of
its median, or with an interval that reaches its interval). Rows replace those of the same CPU, kernel set,
threads and shape in --table; the other CPUs' rows stay. The tuner's own records go to --out, not
tuning/records.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from opbench import kernels
from opbench.machine import identity, identity_label, utc_stamp
from opbench.ops.conv_shape import ConvShape
from opbench.tiles import Tiles
from opbench.tune.config import default_study_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
# the ways the search space lists (a grid of them: a trial and a confirmation slot each)
WAYS = tuple(
    tomllib.loads((ROOT / "tuning" / "spaces" / "conv_paths.toml").read_text())["params"]["conv_path"][
        "values"
    ]
)
# name -> (batch, input size, in channels, out channels, filter, stride, padding): ResNet-50's stem, its
# strided 3x3s, and its 3x3s at 56², 28², 14² and 7² (the small-spatial ones at batch 4, as in small_shapes).
SHAPES = {
    "stem": (8, 224, 3, 64, 7, 2, 3),
    "s2-28": (8, 56, 128, 128, 3, 2, 1),
    "s2-14": (8, 28, 256, 256, 3, 2, 1),
    "3x3-56": (8, 56, 64, 64, 3, 1, 1),
    "3x3-28": (8, 28, 128, 128, 3, 1, 1),
    "3x3-14": (4, 14, 256, 256, 3, 1, 1),
    "3x3-7": (4, 7, 512, 512, 3, 1, 1),
}
# A way within this share of the best's median, or whose interval reaches the best's, is near the best: the
# spread of one way between processes on these VMs (7x7 512 ch on one Zen 4 core: columns ahead of the rows
# by 10% in one session, the rows ahead by 3% in the next) is wider than what a model could be held to.
TOLERANCE = 0.05
FLAGS = (
    "--batch",
    "--input-size",
    "--in-channels",
    "--out-channels",
    "--filter-size",
    "--stride",
    "--padding",
)


def shape_args(dims: tuple[int, ...]) -> list[str]:
    return [a for flag, v in zip(FLAGS, dims, strict=True) for a in (flag, str(v))]


def study_name(dims: tuple[int, ...], threads: int) -> str:
    """The tuner's own name for the study (default_study_name), so that studies run by hand are read too."""
    n, hw, c, k, f, stride, pad = dims
    shape = ConvShape(n, c, hw, hw, k, f, f, stride, stride, pad, pad, 1, 1, 1)
    return default_study_name("conv", shape, "fp32", threads)


def model_way(dims: tuple[int, ...], threads: int, isa: str) -> str:
    """The way the planner's model takes for the shape (zeros: the plan depends on the geometry only)."""
    n, hw, c, k, f, stride, pad = dims
    x, w = np.zeros((n, c, hw, hw), np.float32), np.zeros((k, c, f, f), np.float32)
    tiles = Tiles(threads=threads, isa=isa)
    return str(kernels.prepare_conv2d(x, w, stride=stride, padding=pad, tiles=tiles).tiles()["conv_path"])


def confirmed(storage: str, study: str) -> dict[str, Any]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return dict(optuna.load_study(study_name=study, storage=storage).user_attrs["confirmation"])


def row(
    name: str, dims: tuple[int, ...], threads: int, confirmation: dict[str, Any], isa: str
) -> dict[str, Any]:
    ways = {
        r["tiles"]["conv_path"]: {
            "gflops": round(r["gflops"], 1),
            "ci": [round(v, 1) for v in r["gflops_ci"]],
        }
        for r in confirmation["rows"]
        if r["name"] != "default" and "gflops" in r and (r.get("tiles") or {}).get("conv_path")
    }
    default = confirmation["default"]
    model = model_way(dims, threads, isa)
    if model not in ways and "gflops" in default:  # the model's way, measured as the default only
        ways[model] = {
            "gflops": round(default["gflops"], 1),
            "ci": [round(v, 1) for v in default["gflops_ci"]],
        }
    best = max(ways, key=lambda w: ways[w]["gflops"])
    low, floor = ways[best]["ci"][0], (1 - TOLERANCE) * ways[best]["gflops"]
    return {
        "name": name,
        "problem": " ".join(shape_args(dims)),
        "threads": threads,
        "kernel_set": isa,
        "ways": ways,
        "default_gflops": round(default["gflops"], 1) if "gflops" in default else None,
        "model": model,
        "best": best,
        "near_best": sorted(w for w, v in ways.items() if v["ci"][1] >= low or v["gflops"] >= floor),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated of {', '.join(SHAPES)}")
    ap.add_argument("--rounds", type=int, default=5, help="the confirmation's interleaved rounds (default 5)")
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "conv_paths", help="the studies' folder")
    ap.add_argument("--table", type=Path, default=ROOT / "tuning" / "choices" / "conv_paths.json")
    ap.add_argument("--read-only", action="store_true", help="build the table from the studies in --out")
    args = ap.parse_args()
    names = args.shapes.split(",")
    unknown = [n for n in names if n not in SHAPES]
    if unknown:
        ap.error(f"unknown shape(s) {', '.join(unknown)} (known: {', '.join(SHAPES)})")
    isa = str(kernels.default_tiles()["isa"])
    storage = f"sqlite:///{(args.out / 'tuning' / 'studies.db').resolve()}"
    env = {**os.environ, "OPBENCH_RECORDS_DIR": str(args.out / "records")}
    rows = []
    for threads in (int(t) for t in args.threads.split(",")):
        for name in names:
            dims = SHAPES[name]
            if not args.read_only:
                tune = [sys.executable, "-m", "opbench", "tune", "conv", *shape_args(dims)]
                tune += ["--threads", str(threads), "--space", "conv_paths", "--params", "conv_path"]
                tune += ["--sampler", "grid", "--trials", str(len(WAYS)), "--confirm-top", str(len(WAYS))]
                tune += ["--confirm-rounds", str(args.rounds), "--out", str(args.out)]
                print("$", " ".join(tune[1:]), flush=True)
                subprocess.run(tune, env=env, check=True)
            rows.append(row(name, dims, threads, confirmed(storage, study_name(dims, threads)), isa))
            rows[-1]["measured_utc"] = utc_stamp()
            rows[-1]["command"] = (
                f"python benchmarks/conv_paths.py --threads {threads} --shapes {name} --rounds {args.rounds}"
            )
            r = rows[-1]
            print(
                f"{name} t{threads}: model {r['model']}, best {r['best']}, near {', '.join(r['near_best'])}"
            )
    me = identity()
    old = json.loads(args.table.read_text()) if args.table.is_file() else {"machines": []}
    machines = [m for m in old["machines"] if not (m["identity"] == me and m["kernel_set"] == isa)]
    kept = next((m["rows"] for m in old["machines"] if m["identity"] == me and m["kernel_set"] == isa), [])
    fresh = {(r["name"], r["threads"]) for r in rows}
    machines.append(
        {
            "cpu": identity_label(me),
            "identity": me,
            "kernel_set": isa,
            "rows": [r for r in kept if (r["name"], r["threads"]) not in fresh] + rows,
        }
    )
    table = {
        "what": "conv2d's ways confirmed by opbench tune (benchmarks/conv_paths.py), per CPU and kernel set; "
        f"tests/test_conv_paths.py holds the planner's model to a way in each row's near_best (within "
        f"{TOLERANCE:.0%} of the best's median, or an interval reaching the best's)",
        "machines": machines,
    }
    args.table.parent.mkdir(parents=True, exist_ok=True)
    args.table.write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {args.table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

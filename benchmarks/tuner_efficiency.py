"""How many measurements each sampler needs to come within 5% of the best tiling, against random search
and the exhaustive grid.

For each shape the whole grid is measured once with `opbench tune --sampler grid` (real worker, real
timings); then every sampler replays that table (opbench.tune.replay) over several seeds through the
tuner's own objective, so they all see the same numbers. Cost = distinct tilings measured (a tiling met
again reuses its value and costs nothing). Target: TPE or GP within 5% of the grid best in at most 20%
of the grid's count (median over seeds).

    python benchmarks/tuner_efficiency.py [--seeds 10] [--threads 2] [--ops gemm,conv,lstm]

The AMX tile space (issue 43; tuning/spaces/gemm_amx.toml) on BERT-base's 1024x3072x768 in bf16, the
layouts beside tile_n and tile_k (9 x 5 x 11 = 495 points, each measured once: about 15 minutes), on a
machine with AMX-BF16:

    python benchmarks/tuner_efficiency.py --amx [--isa amx] [--threads 16] [--gemm MxNxK,...]

(`--isa amx-emu --gemm 48x96x128` runs the same on the exact emulator anywhere, 88 points in a few minutes:
its timings say nothing of AMX.)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import optuna
from side_by_side import print_markdown

from opbench import __version__
from opbench.machine import cpu_model
from opbench.ops import get_op
from opbench.ops.conv import ConvShape
from opbench.ops.gemm import GemmShape
from opbench.ops.lstm import LstmShape
from opbench.tune import study as tuner
from opbench.tune.replay import ReplayRunner

# A square and a skinny GEMM, a ResNet-like 3x3 conv (28x28, 64 channels, padding 1) and the LSTM sweep's
# base point (T25 B16 I256 H256).
SHAPES: list[tuple[str, Any]] = [
    ("gemm", GemmShape(1024, 1024, 1024)),
    ("gemm", GemmShape(35, 8457, 1760)),
    ("conv", ConvShape(n=4, c=64, h=28, w=28, k=64, r=3, s=3, pad_h=1, pad_w=1)),
    ("lstm", LstmShape(seq_len=25, batch=16, input_size=256, hidden=256)),
]
SAMPLERS = ["tpe", "gp", "cmaes", "random"]
AMX_SHAPES = [GemmShape(1024, 3072, 768)]


# --amx: bf16 on the AMX tile space, the layouts beside the panel and depth blocking.
AMX = {
    "dtype": "bf16",
    "space": "gemm_amx",
    "params": ("tile_n", "tile_k", "amx_rows", "amx_cols", "amx_ksteps"),
}
FP32: dict[str, Any] = {"dtype": "fp32"}


def measure_grid(
    op: str, shape: Any, threads: int, storage: str, space: dict[str, Any]
) -> tuple[dict[str, float | None], float]:
    cfg = tuner.TuneConfig(
        op=get_op(op),
        shape=shape,
        threads=threads,
        study_name=f"grid-{op}-{shape.label()}",
        storage_url=storage,
        trials=100_000,
        sampler="grid",
        seed=0,
        confirm_top=1,
        confirm_rounds=1,
        **space,
    )
    tuner.run(cfg, lambda kind, info: None)
    study = tuner.load_existing(cfg.study_name, storage)
    table: dict[str, float | None] = {}
    for t in study.trials:
        if "key" in t.user_attrs and "reused_from" not in t.user_attrs:
            table[t.user_attrs["key"]] = t.user_attrs.get("gflops")
    best = max(v for v in table.values() if v is not None)
    return table, best


def measurements_to_targets(
    op: str,
    shape: Any,
    table: dict[str, float | None],
    targets: tuple[float, ...],
    sampler: str,
    seed: int,
    budget: int,
    threads: int,
    space: dict[str, Any],
) -> list[int | None]:
    """For each target GFLOPS, the number of distinct measurements after which it was first reached."""
    cfg = tuner.TuneConfig(
        op=get_op(op),
        shape=shape,
        threads=threads,
        study_name="replay",
        storage_url="",
        sampler=sampler,
        seed=seed,
        **space,
    )
    space, _ = tuner.build_space(cfg)
    runner = ReplayRunner(table, get_op(op).flops(shape))
    reached: dict[float, int] = {}

    def on_trial(info: dict[str, Any]) -> None:
        if info.get("reused_from") is None:
            for target in targets:
                if target not in reached and info.get("gflops", 0.0) >= target:
                    reached[target] = len(runner.measured)

    objective = tuner.Objective(cfg, space, runner, on_trial)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study = optuna.create_study(direction="maximize", sampler=tuner._sampler(cfg, space))

        def stop(study: Any, trial: Any) -> None:
            if len(reached) == len(targets) or len(set(runner.measured)) >= budget:
                study.stop()

        study.optimize(objective, n_trials=20 * budget, catch=(tuner.CandidateFailed,), callbacks=[stop])
    return [reached.get(t) for t in targets]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ops", default="gemm,conv,lstm", help="the shapes of these ops only")
    p.add_argument("--amx", action="store_true", help="bf16 GEMM on the AMX tile space (gemm_amx)")
    p.add_argument("--isa", default=None, help="with --amx: amx (default) or amx-emu")
    p.add_argument("--gemm", default=None, help="GEMM shapes MxNxK,... instead of the defaults")
    args = p.parse_args()
    ops = {"gemm"} if args.amx else set(args.ops.split(","))
    space = {**AMX, "isa": args.isa or "amx"} if args.amx else FP32
    shapes = SHAPES if not args.amx else [("gemm", s) for s in AMX_SHAPES]
    if args.gemm:
        shapes = [("gemm", GemmShape(*map(int, g.split("x")))) for g in args.gemm.split(",")]
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    print(f"# {cpu_model()}; opbench {__version__}; {args.threads} thread(s); {args.seeds} seeds per sampler")
    print(f"# {space}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        storage = f"sqlite:///{Path(tmp) / 'grid.db'}"
        for op, shape in shapes:
            if op not in ops:
                continue
            table, best = measure_grid(op, shape, args.threads, storage, space)
            grid = len(table)
            print(
                f"{op} {shape.label()}: grid of {grid} tilings measured, best {best:.1f} GFLOPS", flush=True
            )
            for sampler in SAMPLERS:
                runs = [
                    measurements_to_targets(
                        op,
                        shape,
                        table,
                        (0.95 * best, 0.99 * best),
                        sampler,
                        seed,
                        grid // 2,
                        args.threads,
                        space,
                    )
                    for seed in range(args.seeds)
                ]
                row = [f"{op} {shape.label()}", sampler, grid]
                for i, label in enumerate(("95%", "99%")):
                    needed = [r[i] for r in runs]
                    med = statistics.median([n if n is not None else grid for n in needed])
                    hits = sum(n is not None for n in needed)
                    row += [f"{med:g} ({100 * med / grid:.1f}%)", f"{hits}/{len(needed)}"]
                    print(
                        f"  {sampler:>6}: to {label} of best: median {med:g} measurements "
                        f"({100 * med / grid:.1f}% of the grid); "
                        f"{hits}/{len(needed)} seeds within half the grid",
                        flush=True,
                    )
                rows.append(row)
    print_markdown(
        [
            "shape",
            "sampler",
            "grid size",
            "median measurements to 95% of best (share of grid)",
            "seeds reaching 95% within half the grid",
            "median measurements to 99% of best",
            "seeds reaching 99%",
        ],
        rows,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

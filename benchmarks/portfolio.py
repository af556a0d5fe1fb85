"""A portfolio of K tilings (`opbench tune --portfolio K`) against per-shape tuning, on a model's shapes.

Sets: `bert` (BERT-base's six GEMMs at 128, 256, 512, 1024 and 2048 tokens, read off examples/models.py's
encoder by `opbench shapes`), `resnet50` (ResNet-50's convs at minibatch 2, from examples/models.py, with
their counts), `user` (examples/blocked_gemm.py, a user kernel, on the bert set's plain GEMMs at 128-512
tokens). For the set:
1. **Per-shape tuning**, the reference: a TPE study of --per-shape-trials trials for every shape (its
   cache-model default measured first, as the portfolio's studies do).
2. **The portfolio**: the tuner's own run (tune/portfolio_run.py) with --trials per shape, K members and
   --holdout of the shapes held out, its confirmation off (step 3 is the confirmation).
3. **Interleaved rounds** on every shape, in one worker per shape: the per-shape best, the portfolio's
   member and the default, --rounds rounds in a shuffled order (tune/confirmation.confirm_points).
Printed: each shape's loss (member time / per-shape best time - 1) and the default's, their count-weighted
geomeans (searched and held-out shapes apart), the loss curve over K = 1..8 on the search's measurements,
and the cost: the portfolio's measurements against what per-shape TPE needed to reach the portfolio's
quality (on each searched shape, the trials until its best so far came within the portfolio's geomean loss
of its final best), and against its whole budget.

Targets (issue 42): K = 4 within 3% of per-shape tuning (geomean), at most 25% of the measurements.

    python benchmarks/portfolio.py --set bert|resnet50|user [--k 4] [--trials 10] [--per-shape-trials 30]
        [--holdout 0.25] [--rounds 3] [--threads N] [--work DIR]

--work keeps the studies (SQLite): a rerun resumes and measures only what is missing.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from side_by_side import print_markdown

from opbench import __version__
from opbench.batchfiles import read_batch
from opbench.kernels import default_threads
from opbench.machine import cpu_model
from opbench.ops import OPS
from opbench.texts import loss_text, point_label
from opbench.tune import portfolio_run
from opbench.tune.config import TuneConfig, worker_init
from opbench.tune.confirmation import confirm_points
from opbench.tune.isolation import IsolatedRunner
from opbench.tune.portfolio_search import PortfolioConfig, Search
from opbench.userkernel import parse_kernel

ROOT = Path(__file__).resolve().parent.parent
TOKENS = (128, 256, 512, 1024, 2048)


def _capture(factory: str, inputs: list[str], out: Path) -> None:
    """`opbench shapes` for each input, one batch file per input."""
    for i, size in enumerate(inputs):
        target = out.with_suffix(f".{i}.batch")
        if not target.exists():
            model = f"{ROOT / 'examples/models.py'}:{factory}"
            argv = ["shapes", "--torch", model, "--input", size, "--out", str(target)]
            subprocess.run([sys.executable, "-m", "opbench", *argv], check=True)


def shapes_of(name: str, work: Path) -> tuple[str, list[Any], list[float]]:
    """(op, shapes, counts) of a set."""
    if name == "resnet50":
        _capture("resnet50", ["2x3x224x224"], work / "resnet50")
        files = [work / "resnet50.0.batch"]
        op = "conv"
    else:
        _capture("bert_base", [f"1x{t}x768" for t in TOKENS], work / "bert")
        files = [work / f"bert.{i}.batch" for i in range(len(TOKENS))]
        op = "gemm"
    counts: dict[Any, float] = {}
    for f in files:
        for p in read_batch(f, op).problems:
            counts[p.shape] = counts.get(p.shape, 0.0) + p.count
    if (
        name == "user"
    ):  # the user kernel multiplies 2-D matrices, at up to 512 tokens (it is numpy, per block)
        counts = {s: c for s, c in counts.items() if s.batch == 1 and s.m <= 512}
    return op, list(counts), list(counts.values())


def _geomean_loss(pairs: list[tuple[float, float]]) -> float:
    """exp(sum w log r / sum w) - 1 over (weight, time ratio) pairs."""
    total = sum(w for w, _ in pairs)
    return math.exp(sum(w * math.log(r) for w, r in pairs) / total) - 1.0 if total else float("nan")


def to_quality(s: Search, i: int, loss: float) -> int:
    """The measurements shape i's per-shape study took until its best so far came within `loss` of its
    final best: the default first (as measured), then the trials in order, a reused one costing nothing."""
    st = s.state(i)
    times = []
    default = next((v for k, v in st.study.user_attrs.items() if k.startswith("cell:")), None)
    if default is not None and "median_s" in default:
        times.append(float(default["median_s"]))
    for t in sorted(st.study.trials, key=lambda t: t.number):
        if "reused_from" in t.user_attrs or "key" not in t.user_attrs:
            continue
        times.append(float(t.user_attrs["median_s"]) if "median_s" in t.user_attrs else math.inf)
    final = min(times)
    best = math.inf
    for n, t in enumerate(times, start=1):
        best = min(best, t)
        if best <= final * (1.0 + max(loss, 0.0)):
            return n
    return len(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", required=True, choices=("bert", "resnet50", "user"))
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--trials", type=int, default=10, help="the portfolio's trials per shape")
    ap.add_argument("--per-shape-trials", type=int, default=30)
    ap.add_argument("--holdout", type=float, default=0.25)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--limit", type=int, default=0, help="the set's first N shapes only (a quick check)")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="opbench-portfolio-"))
    work.mkdir(parents=True, exist_ok=True)
    threads = args.threads or default_threads()
    op, shapes, counts = shapes_of(args.set, work)
    if args.limit:
        shapes, counts = shapes[: args.limit], counts[: args.limit]
    kernel = space = None
    if args.set == "user":
        kernel = parse_kernel(f"{ROOT / 'examples/blocked_gemm.py'}:blocked_gemm")
        space = str(ROOT / "examples/blocked_gemm.toml")
    base = TuneConfig(
        shape=shapes[0], dtype="fp32", threads=threads, study_name="ref",
        storage_url=f"sqlite:///{work}/s.db", trials=args.per_shape_trials, seed=0, op=OPS[op],
        kernel=kernel, space=space, confirm_rounds=args.rounds, confirm_processes=1, command=tuple(sys.argv),
    )  # fmt: skip
    what = f"{len(shapes)} {op} shapes ({sum(counts):g} calls)"
    print(f"# {args.set}: {what}, {cpu_model()}, {threads} threads, opbench {__version__}", flush=True)

    def quiet(kind: str, event: dict[str, object]) -> None:
        pass

    # 1. per-shape tuning
    ref = Search(PortfolioConfig(base, tuple(shapes), tuple(counts), 1), quiet)
    best: list[Any] = []
    for i in range(len(shapes)):
        cells = ref.explore(i, [], args.per_shape_trials)
        key = min(cells, key=lambda k: cells[k])
        best.append(ref.points[key])
        print(f"per-shape {shapes[i].label():22} best {cells[key] * 1e3:.3f} ms", flush=True)
    # 2. the portfolio
    pcfg = PortfolioConfig(
        replace(base, study_name=f"pf-k{args.k}", trials=args.trials, confirm_rounds=0), tuple(shapes),
        tuple(counts), args.k, args.holdout,
    )  # fmt: skip
    doc = portfolio_run.run(pcfg, quiet)
    # 3. interleaved rounds: per-shape best, member, default
    rows = []
    for i, shape in enumerate(shapes):
        row = doc["shapes"][[r["label"] for r in doc["shapes"]].index(shape.label())]
        member = doc["members"][row["member"]] if row.get("member") is not None else None
        st = ref.state(i)
        runner = IsolatedRunner(worker_init(st.cfg))
        named = [("default", st.default), ("per-shape", best[i]), ("portfolio", member)]
        try:
            conf = confirm_points(st.cfg, runner, named, "default")
        finally:
            runner.close()
        t = {r["name"]: r.get("median_s", math.inf) for r in conf["rows"]}
        rows.append((shape, counts[i], row["held_out"], t["portfolio"] / t["per-shape"],
                     t["default"] / t["per-shape"], member))  # fmt: skip
        print(f"{shape.label():22} member {t['portfolio'] / t['per-shape'] - 1:+.1%}, default "
              f"{t['default'] / t['per-shape'] - 1:+.1%}", flush=True)  # fmt: skip
    searched = [(w, r) for _, w, h, r, _, _ in rows if not h]
    held = [(w, r) for _, w, h, r, _, _ in rows if h]
    loss = _geomean_loss(searched)
    per_shape_cost = sum(to_quality(ref, i, loss) for i, r in enumerate(rows) if not r[2])
    per_shape_budget = sum(ref.measured_in(i) for i in range(len(shapes)) if not rows[i][2])
    head = ["shape", "count", "member", "loss against per-shape", "default's loss"]
    table = [
        [s.label() + (" (held out)" if h else ""), f"{w:g}", point_label(m), f"{r - 1:+.1%}", f"{d - 1:+.1%}"]
        for s, w, h, r, d, m in rows
    ]
    print_markdown(head, table)
    default = _geomean_loss([(w, d) for _, w, h, _, d, _ in rows if not h])
    print(f"\nsearched shapes: portfolio of {len(doc['members'])} loses {loss:+.2%} (geomean) against "
          f"per-shape tuning; the default {default:+.2%}")  # fmt: skip
    if held:
        print(f"held-out shapes (the rule): {_geomean_loss(held):+.2%}; the default "
              f"{_geomean_loss([(w, d) for _, w, h, _, d, _ in rows if h]):+.2%}")  # fmt: skip
    print("loss by K on the search's measurements: "
          + ", ".join(f"K={int(c['k'])} {loss_text(c['speed'])}" for c in doc["curve"]))  # fmt: skip
    print(f"cost: the portfolio measured {doc['measurements']}; per-shape TPE took {per_shape_cost} to reach "
          f"the same quality ({doc['measurements'] / max(per_shape_cost, 1):.0%}) of its {per_shape_budget} "
          f"({doc['measurements'] / max(per_shape_budget, 1):.0%})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

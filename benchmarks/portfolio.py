"""A portfolio of K tilings (`opbench tune --portfolio K`) against per-shape tuning, on a model's shapes.

Sets: `bert` (BERT-base's six GEMMs at 128, 256, 512, 1024 and 2048 tokens, read off examples/models.py's
encoder by `opbench shapes`), `resnet50` (ResNet-50's convs at minibatch 2, from examples/models.py, with
their counts), `user` (examples/blocked_gemm.py, a user kernel, on the bert set's plain GEMMs at 128-512
tokens). For the set:
1. **Per-shape tuning**, the reference: a TPE study of --per-shape-trials trials for every shape (its
   cache-model default measured first, as the portfolio's studies do).
2. **The portfolio**: the tuner's own run (tune/portfolio_run.py) with --trials per shape, K members and
   --holdout of the shapes held out, confirmed as `opbench tune` confirms it: a shape whose member is not
   faster than the default beyond both 95% intervals falls back to the default.
3. **Interleaved rounds** on every shape, in one worker per shape: the default, the portfolio's member,
   per-shape TPE's best after n = 1, 2, 4, ..., 32 measurements and after all of them, --rounds rounds
   (tune/confirmation.confirm_points), each distinct point once.
Printed: each shape's loss (member time / per-shape best time - 1) and the default's, their count-weighted
geomeans (searched and held-out shapes apart), the loss curve over K = 1..8 on the search's measurements,
per-shape TPE's loss when every shape stops at n, and the cost: the portfolio's measurements against what
per-shape TPE took to reach the portfolio's quality,
- stopping every shape at the first n whose geomean loss (re-measured in 3) is no worse: what a user who
  runs `opbench tune --trials n` per shape pays;
- stopping each shape as soon as its best so far came within the portfolio's loss of its final best (on
  the search's measurements; an oracle, since the final best is known only afterwards);
and against its whole budget.

Targets (issue 42): K = 4 within 3% of per-shape tuning (geomean), at most 25% of the measurements.

    python benchmarks/portfolio.py --set bert|resnet50|user [--k 4] [--trials 10] [--per-shape-trials 30]
        [--holdout 0.25] [--rounds 3] [--threads N] [--work DIR] [--name pf]

--work keeps the studies (SQLite): a rerun resumes and measures only what is missing; the per-shape
studies are shared by every run in it, the portfolio's are named after --name and --trials.
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
from opbench.secrets import mask_argv
from opbench.texts import loss_text, point_label
from opbench.tune import portfolio_run
from opbench.tune.config import TuneConfig, worker_init
from opbench.tune.confirmation import confirm_points
from opbench.tune.isolation import IsolatedRunner
from opbench.tune.portfolio_search import PortfolioConfig, Search
from opbench.userkernel import parse_kernel

ROOT = Path(__file__).resolve().parent.parent
TOKENS = (128, 256, 512, 1024, 2048)
BUDGETS = (1, 2, 4, 8, 16, 32)  # per-shape TPE stopped after this many measurements (the default the first)


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


def history(s: Search, i: int) -> list[tuple[float, Any]]:
    """Shape i's per-shape study as it measured: (seconds, point), the default first, then the trials in
    order, a reused one (which cost nothing) left out."""
    st = s.state(i)
    out = []
    default = next((v for k, v in st.study.user_attrs.items() if k.startswith("cell:")), None)
    if default is not None:
        out.append((float(default.get("median_s", math.inf)), default["point"]))
    attr = "params" if st.cfg.kernel is not None else "tiles"
    for t in sorted(st.study.trials, key=lambda t: t.number):
        if "reused_from" in t.user_attrs or "key" not in t.user_attrs:
            continue
        out.append((float(t.user_attrs.get("median_s", math.inf)), t.user_attrs.get(attr)))
    return out


def best_at(h: list[tuple[float, Any]], n: int) -> Any:
    """The point per-shape TPE would have kept after n measurements."""
    return min(h[:n], key=lambda x: x[0])[1]


def to_quality(h: list[tuple[float, Any]], loss: float) -> int:
    """The measurements a per-shape study took until its best so far came within `loss` of its final best
    (on the search's own measurements: an oracle that knows when to stop)."""
    final = min(t for t, _ in h)
    best = math.inf
    for n, (t, _) in enumerate(h, start=1):
        best = min(best, t)
        if best <= final * (1.0 + max(loss, 0.0)):
            return n
    return len(h)


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
    ap.add_argument("--name", default="pf", help="what the portfolio's studies are named after")
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
        kernel=kernel, space=space, confirm_rounds=args.rounds, confirm_processes=1,
        command=tuple(mask_argv(sys.argv)),
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
    # 2. the portfolio, confirmed as the tuner confirms it (a member not faster than the default beyond both
    # 95% intervals falls back to the default); its studies are named after the trials per shape
    pcfg = PortfolioConfig(
        replace(base, study_name=f"{args.name}-k{args.k}-t{args.trials}", trials=args.trials), tuple(shapes),
        tuple(counts), args.k, args.holdout, prefix=f"{args.name}-t{args.trials}",
    )  # fmt: skip
    doc = portfolio_run.run(pcfg, quiet)
    # 3. interleaved rounds: the default, per-shape TPE's best after each budget, the member
    rows, curve, histories = [], [], []
    for i, shape in enumerate(shapes):
        row = doc["shapes"][[r["label"] for r in doc["shapes"]].index(shape.label())]
        member = doc["members"][row["member"]] if row.get("member") is not None else None
        st = ref.state(i)
        h = history(ref, i)
        histories.append(h)
        named = [("default", st.default), ("portfolio", member)]
        named += [(f"tpe@{n}", best_at(h, n)) for n in BUDGETS if n < len(h)] + [("per-shape", best[i])]
        unique = {}  # a point measured once, under the first name it has
        for name, point in named:
            unique.setdefault(ref.key(st, point), (name, point))
        runner = IsolatedRunner(worker_init(st.cfg))
        try:
            conf = confirm_points(st.cfg, runner, list(unique.values()), "default")
        finally:
            runner.close()
        measured = {r["name"]: r.get("median_s", math.inf) for r in conf["rows"]}
        t = {name: measured[unique[ref.key(st, point)][0]] for name, point in named}
        own = t["per-shape"]
        rows.append((shape, counts[i], row["held_out"], t["portfolio"] / own, t["default"] / own, member,
                     bool(row.get("fallback"))))  # fmt: skip
        curve.append({n: t.get(f"tpe@{n}", own) / own for n in BUDGETS})
        budgets = "".join(f", tpe@{n} {v - 1:+.1%}" for n, v in curve[-1].items())
        print(f"{shape.label():22} member {t['portfolio'] / own - 1:+.1%}, default "
              f"{t['default'] / own - 1:+.1%}{budgets}", flush=True)  # fmt: skip
    searched = [(w, r) for _, w, h, r, _, _, _ in rows if not h]
    held = [(w, r) for _, w, h, r, _, _, _ in rows if h]
    loss = _geomean_loss(searched)
    mine = [i for i, r in enumerate(rows) if not r[2]]
    oracle = sum(to_quality(histories[i], loss) for i in mine)
    per_shape_budget = sum(ref.measured_in(i) for i in mine)
    by_budget = {n: _geomean_loss([(counts[i], curve[i][n]) for i in mine]) for n in BUDGETS}
    enough = next((n for n in BUDGETS if by_budget[n] <= loss), None)
    fixed = sum(min(enough, len(histories[i])) for i in mine) if enough is not None else per_shape_budget
    head = ["shape", "count", "member", "loss against per-shape", "default's loss"]
    table = [
        [s.label() + (" (held out)" if h else ""), f"{w:g}", point_label(m) + (" (fallback)" if fb else ""),
         f"{r - 1:+.1%}", f"{d - 1:+.1%}"]
        for s, w, h, r, d, m, fb in rows
    ]  # fmt: skip
    print_markdown(head, table)
    default = _geomean_loss([(w, d) for _, w, h, _, d, _, _ in rows if not h])
    fell = sum(r[6] for r in rows)
    print(f"\nsearched shapes: portfolio of {len(doc['members'])} loses {loss:+.2%} (geomean) against "
          f"per-shape tuning; the default {default:+.2%}; {fell} fell back to the default")  # fmt: skip
    if held:
        print(f"held-out shapes (the rule): {_geomean_loss(held):+.2%}; the default "
              f"{_geomean_loss([(w, d) for _, w, h, _, d, _, _ in rows if h]):+.2%}")  # fmt: skip
    print("loss by K on the search's measurements (unmeasured cells estimated): "
          + ", ".join(f"K={int(c['k'])} {loss_text(c['speed'])}" for c in doc["curve"]))  # fmt: skip
    print("per-shape TPE stopped after n measurements, re-measured with the rest (searched shapes): "
          + ", ".join(f"n={n} {v:+.2%}" for n, v in by_budget.items()))  # fmt: skip
    spent = doc["measurements"]
    print(f"cost: the portfolio measured {spent} on the searched shapes. Per-shape TPE at the same quality: "
          f"{fixed} stopping every shape at n={enough or 'all'} ({spent / max(fixed, 1):.0%}); {oracle} "
          f"stopping each where it came within {loss:+.2%} of its final best, known afterwards "
          f"({spent / max(oracle, 1):.0%}); its whole budget {per_shape_budget} "
          f"({spent / max(per_shape_budget, 1):.0%})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

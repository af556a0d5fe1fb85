"""Figures of the report, drawn with matplotlib from the data model; each is rendered once to SVG (inlined
in the HTML) and to PNG (beside the Markdown)."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from opbench.case import DOUBT_MARK
from opbench.report.figures import Plot, plt
from opbench.report.figures import render as _render
from opbench.report.model import geomean_text
from opbench.report.parts import Report, Roofline, Section, StudySection
from opbench.report.portfolio_plots import portfolio_plots

COLORS = {
    "cpp": "#1f77b4",
    "torch": "#ff7f0e",
    "mindspore": "#2ca02c",
    "tensorflow": "#d62728",
    "tensorflow-eager": "#e377c2",
    "numpy": "#9467bd",
}
MARKERS = {"gemm": "o", "conv": "s", "rnn": "v", "gru": "D", "lstm": "^"}
# A point or bar built from a flagged case (case.doubts) is drawn hollow or hatched, and the legend says so.
FLAGGED_HATCH = "///"
FLAGGED_LABEL = f"{DOUBT_MARK} flagged case (hollow / hatched)"
MIN_PARTS_APART = 4  # sections, the roofline and studies: from this many, drawn in worker processes


def _color(backend: str) -> str:
    return COLORS.get(backend, "#7f7f7f")


def _plain_log(ax: Axes, axis: str = "y", suffix: str = "") -> None:
    """Log scale with tick labels as plain numbers (0.3, 2, 500) instead of powers of ten."""
    target = ax.yaxis if axis == "y" else ax.xaxis
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    target.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}{suffix}"))
    target.set_minor_formatter(NullFormatter())


def _hollow(ax: Axes, xs: list[Any], ys: list[float], color: str, marker: str) -> None:
    """Points of flagged cases drawn over as hollow markers (one legend entry per axes: _legend)."""
    ax.scatter(xs, ys, marker=marker, facecolors="white", edgecolors=color, s=30, zorder=3, linewidths=1.2)


def _legend(ax: Axes, flagged: bool, **kw: object) -> None:
    """The axes' legend, with the hollow marker's entry where some point was drawn hollow."""
    if flagged:
        ax.scatter([], [], marker="o", facecolors="white", edgecolors="gray", label=FLAGGED_LABEL)
    ax.legend(**kw)


def factor_plots(section: Section) -> list[Plot]:
    """GFLOPS and utilization against each swept factor, one line per backend (the study's figures); a
    backward pass dashed in its backend's colour."""
    plots = []
    for s in section["series"]:
        for metric, label in (("gflops", "GFLOPS"), ("utilization", "utilization of peak (%)")):
            fig, ax = plt.subplots(figsize=(5.2, 3.4))
            flagged = False
            for name, line in s["lines"].items():
                scale = 100.0 if metric == "utilization" else 1.0
                values = line["gflops"] if metric == "gflops" else line["utilization"]
                ys = [float("nan") if v is None else scale * v for v in values]
                backend, _, pass_name = name.partition(" ")  # "torch bwd": torch's colour, dashed
                style = "--" if pass_name else "-"
                xs = [str(x) for x in line["x"]]
                ax.plot(xs, ys, marker="o", color=_color(backend), label=name, linestyle=style)
                doubted = [i for i, d in enumerate(line.get("doubts") or []) if d]
                if doubted:
                    flagged = True
                    _hollow(ax, [xs[i] for i in doubted], [ys[i] for i in doubted], _color(backend), "o")
            ax.set_xlabel(s["axis"].replace("_", " "))
            ax.set_ylabel(label)
            ax.set_title(
                f"{section['op']} {section['dtype']}: {label} vs {s['axis'].replace('_', ' ')}", fontsize=9
            )
            ax.grid(alpha=0.3)
            _legend(ax, flagged, fontsize=8)
            plots.append(_render(fig, f"{section['id']}-{s['axis']}-{metric}", ax.get_title()))
    return plots


def cases_plot(section: Section, limit: int = 24) -> Plot | None:
    """For a list of cases (not one-factor): GFLOPS per shape, bars grouped by backend."""
    ok = [r for r in section["rows"] if r["status"] == "ok" and r["gflops"]]
    shapes = list(dict.fromkeys(r["shape"] for r in ok))[:limit]
    backends = list(dict.fromkeys(r["backend"] for r in ok))
    if not shapes or section["series"]:
        return None
    fig, ax = plt.subplots(figsize=(max(5.2, 0.5 * len(shapes) * len(backends) / 2), 3.6))
    width = 0.8 / max(1, len(backends))
    for i, backend in enumerate(backends):
        vals = {r["shape"]: r for r in ok if r["backend"] == backend}
        xs = [j + i * width for j in range(len(shapes))]
        heights = [(vals[s]["gflops"] or 0.0) if s in vals else 0.0 for s in shapes]
        hatches = [FLAGGED_HATCH if s in vals and vals[s]["doubts"] else "" for s in shapes]
        ax.bar(xs, heights, width=width, color=_color(backend), hatch=hatches)
    ax.set_xticks(
        [j + 0.4 - width / 2 for j in range(len(shapes))], shapes, rotation=45, ha="right", fontsize=7
    )
    ax.set_ylabel("GFLOPS")
    _plain_log(ax)
    ax.set_title(f"{section['op']} {section['dtype']}: GFLOPS per shape", fontsize=9)
    # The legend from plain patches: a backend's first bar may be hatched.
    handles = [Patch(color=_color(b), label=b) for b in backends]
    if any(r["doubts"] for r in ok if r["shape"] in shapes):
        handles.append(Patch(facecolor="white", edgecolor="gray", hatch=FLAGGED_HATCH, label=FLAGGED_LABEL))
    ax.legend(handles=handles, fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return _render(fig, f"{section['id']}-cases", ax.get_title())


def process_plot(section: Section, limit: int = 40) -> Plot | None:
    """Each case measured in several processes (--processes): its processes' GFLOPS as a strip (one dot per
    process) beside its median (a bar), so that a case whose processes disagree shows it."""
    rows = [r for r in section["rows"] if r["status"] == "ok" and len(r.get("process_gflops") or []) > 1]
    rows = rows[:limit]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(max(5.2, 0.28 * len(rows)), 3.8))
    for j, r in enumerate(rows):
        color = _color(r["backend"])
        ys = r["process_gflops"]
        xs = [j + 0.12 * (i - (len(ys) - 1) / 2) for i in range(len(ys))]
        if r["doubts"]:
            _hollow(ax, xs, ys, color, "o")
        else:
            ax.scatter(xs, ys, color=color, s=14, zorder=3)
        ax.plot([j - 0.3, j + 0.3], [r["gflops"] or 0.0] * 2, color=color, linewidth=1.2)
    labels = [f"{r['shape']} {r['backend']}" for r in rows]
    ax.set_xticks(range(len(rows)), labels, rotation=60, ha="right", fontsize=6)
    ax.set_ylabel("GFLOPS per process (dots), median (bar)")
    _plain_log(ax)
    ax.set_title(f"{section['op']} {section['dtype']}: each case's processes", fontsize=9)
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    handles = [Patch(color=_color(b), label=b) for b in backends]
    if any(r["doubts"] for r in rows):
        handles.append(Patch(facecolor="white", edgecolor="gray", label=FLAGGED_LABEL))
    ax.legend(handles=handles, fontsize=7)
    ax.grid(alpha=0.3, axis="y")
    return _render(fig, f"{section['id']}-processes", ax.get_title())


def comparison_plot(section: Section) -> Plot | None:
    c = section["comparison"]
    if not c:
        return None
    items = [(b, g) for b, g in c["geomean"].items() if g]
    if len(items) < 2:
        return None
    fig, ax = plt.subplots(figsize=(4.6, 3.0))
    hatches = [FLAGGED_HATCH if c["flagged"].get(b) else "" for b, _ in items]
    ax.bar([b for b, _ in items], [g for _, g in items], color=[_color(b) for b, _ in items], hatch=hatches)
    ax.axhline(1.0, color="black", linewidth=0.8)
    _plain_log(ax, suffix="x")
    ax.set_ylabel(f"speed-up over {c['baseline']} (geometric mean)")
    ax.set_title(f"{section['op']} {section['dtype']}: backends relative to {c['baseline']}", fontsize=9)
    values = [g for _, g in items]
    ax.set_ylim(min(min(values), 1.0) / 1.6, max(max(values), 1.0) * 1.6)  # room for the labels
    for i, (b, g) in enumerate(items):
        text = geomean_text(g, c["flagged"].get(b, 0), c["cases"].get(b, 0)).replace(" (", "\n(", 1)
        ax.annotate(text, (i, g), ha="center", va="bottom", fontsize=7)
    return _render(fig, f"{section['id']}-speedup", ax.get_title())


def roofline_plot(roofline: Roofline) -> Plot | None:
    points = roofline["points"]
    if not points:
        return None
    fig, ax = plt.subplots(figsize=(7.6, 4.2))
    xs = [p["intensity"] for p in points]
    lo, hi = min(xs) / 2, max(xs) * 2
    bw = roofline["bandwidth"]
    roofs: dict[float, list[str]] = {}  # dtypes computed on the same units share one roof
    for dtype, peak in sorted(roofline["peaks"].items()):
        roofs.setdefault(round(peak, 1), []).append(dtype)
    for peak, dtypes in roofs.items():
        label = f"{', '.join(dtypes)} peak {peak:.0f} GFLOPS"
        ax.plot([lo, hi], [peak, peak], linestyle="--", linewidth=1, label=label)
    if bw:
        ridge_hi = max(roofline["peaks"].values() or [bw * hi])
        ax.plot(
            [lo, ridge_hi / bw],
            [bw * lo, ridge_hi],
            color="black",
            linewidth=1,
            label=f"memory {bw:.0f} GB/s (triad)",
        )
    # one collection per backend and op (a sweep of thousands of cases draws as fast as one of ten)
    groups: dict[tuple[str, str], list[Any]] = {}
    for p in points:
        groups.setdefault((p["backend"], p["op"]), []).append(p)
    flagged = False
    for (backend, op), group in groups.items():
        color, marker = _color(backend), MARKERS.get(op, "o")
        xs, ys = [p["intensity"] for p in group], [p["gflops"] for p in group]
        ax.scatter(xs, ys, color=color, marker=marker, s=18, alpha=0.8, label=f"{backend} {op}")
        doubted = [i for i, p in enumerate(group) if p.get("doubts")]
        if doubted:
            flagged = True
            _hollow(ax, [xs[i] for i in doubted], [ys[i] for i in doubted], color, marker)
    _plain_log(ax, "x")
    _plain_log(ax, "y")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte of compulsory traffic)")
    ax.set_ylabel("GFLOPS")
    ax.set_title("roofline: measured compute peaks and memory bandwidth", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    _legend(ax, flagged, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return _render(fig, "roofline", ax.get_title())


def study_plots(study: StudySection, index: int) -> list[Plot]:
    plots = []
    stem = f"study{index}"
    if study["history"]:
        fig, ax = plt.subplots(figsize=(5.2, 3.2))
        h = study["history"]
        ax.scatter([t["number"] for t in h], [t["gflops"] for t in h], s=12, color="#1f77b4", label="trial")
        ax.step(
            [t["number"] for t in h],
            [t["best"] for t in h],
            where="post",
            color="#d62728",
            label="best so far",
        )
        default = next(
            (r for r in (study["confirmation"] or {}).get("rows", []) if r.get("name") == "default"), None
        )
        if default and default.get("gflops"):
            ax.axhline(default["gflops"], color="#555555", linestyle=":", label="cache-model default")
        ax.set_xlabel("trial")
        ax.set_ylabel("GFLOPS")
        ax.set_title(f"{study['name']}: optimisation history", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        plots.append(_render(fig, f"{stem}-history", ax.get_title()))
    if study["importances"]:
        fig, ax = plt.subplots(figsize=(4.6, 2.6))
        items = sorted(study["importances"].items(), key=lambda kv: kv[1])
        ax.barh([k for k, _ in items], [v for _, v in items], color="#1f77b4")
        ax.set_xlabel("importance (fANOVA)")
        ax.set_title(f"{study['name']}: parameter importances", fontsize=9)
        plots.append(_render(fig, f"{stem}-importances", ax.get_title()))
    hm = study["heatmap"]
    if hm:
        fig, ax = plt.subplots(figsize=(5.6, 3.8))

        data = np.array([[np.nan if v is None else v for v in row] for row in hm["values"]], dtype=float)
        im = ax.imshow(data, origin="lower", aspect="auto", cmap="viridis")
        ax.set_xticks(range(len(hm["xs"])), [str(x) for x in hm["xs"]], fontsize=7)
        ax.set_yticks(range(len(hm["ys"])), [str(y) for y in hm["ys"]], fontsize=7)
        ax.set_xlabel(hm["x"])
        ax.set_ylabel(hm["y"])
        lo, hi = float(np.nanmin(data)), float(np.nanmax(data))
        for i, row in enumerate(hm["values"]):
            for j, v in enumerate(row):
                if v is not None:  # dark text on the bright (high) end of viridis, white on the dark end
                    bright = hi > lo and (v - lo) / (hi - lo) > 0.6
                    ax.text(
                        j,
                        i,
                        f"{v:.0f}",
                        ha="center",
                        va="center",
                        fontsize=6,
                        color="black" if bright else "white",
                    )
        fig.colorbar(im, ax=ax, label="GFLOPS (best over other tiles)")
        ax.set_title(f"{study['name']}: {hm['y']} x {hm['x']}", fontsize=9)
        plots.append(_render(fig, f"{stem}-heatmap", ax.get_title()))
    return plots


def _section_plots(section: Section) -> list[Plot]:
    plots = factor_plots(section)
    return plots + [p for p in (cases_plot(section), comparison_plot(section), process_plot(section)) if p]


def _roofline_plots(roofline: Roofline) -> list[Plot]:
    roof = roofline_plot(roofline)
    return [roof] if roof else []


def all_plots(model: Report, workers: int | None = None) -> dict[str, list[Plot]]:
    """Plots keyed by where they go: a section id, 'roofline', or 'studyN'. A section's or a study's plots
    are drawn in one of `workers` processes (default: one per CPU this process may use, at most one per
    part; 1: all here). matplotlib draws text on one core, about half a second a plot, so a report of a
    suite's dozens of sections waits minutes on one core."""
    jobs: list[tuple[str, Callable[..., list[Plot]], tuple[Any, ...]]] = [
        *((s["id"], _section_plots, (s,)) for s in model["sections"]),
        ("roofline", _roofline_plots, (model["roofline"],)),
        *((f"study{i}", study_plots, (study, i)) for i, study in enumerate(model["studies"])),
        *((f"portfolio{i}", portfolio_plots, (doc, i)) for i, doc in enumerate(model["portfolios"])),
    ]
    if workers is None:
        # (machine.allowed_cpus' count; that module loads the compiled kernels, which a report runs without)
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        # a worker imports matplotlib (about a second): a report of few parts draws them here
        workers = min(cpus, len(jobs)) if len(jobs) >= MIN_PARTS_APART else 1
    if workers <= 1:
        return {key: draw(*args) for key, draw, args in jobs}
    # spawned, not forked: this process may hold threads (a study's database pool), which a fork would copy
    # mid-flight
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        drawn = [pool.submit(draw, *args) for _, draw, args in jobs]
        return {key: future.result() for (key, _, _), future in zip(jobs, drawn, strict=True)}

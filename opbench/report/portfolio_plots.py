"""A portfolio's figures (`opbench report --study PORTFOLIO`): the shapes x tilings heat map of relative
speed, each shape's loss (its member's and the default's), and the geomean loss against the portfolio's
size K."""

from __future__ import annotations

import math

import numpy as np

from opbench.report.figures import Plot, plt, render
from opbench.texts import point_label
from opbench.tuning_documents import PortfolioDoc, PortfolioShape


def _loss_pct(speed: float | None) -> float:
    return float("nan") if not speed or speed <= 0 else 100.0 * (1.0 / speed - 1.0)


def _short(label: str, limit: int = 34) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "~"


def heat_plot(doc: PortfolioDoc, stem: str) -> Plot | None:
    heat = doc.get("heat") or {}
    tilings = [str(t) for t in heat.get("tilings", [])]
    rows = [row for row in heat.get("speeds", []) if isinstance(row, list)]
    speeds = [[math.nan if v is None else float(v) for v in row] for row in rows]  # NaN: not measured
    if not tilings or not speeds:
        return None
    searched = [r for r in doc["shapes"] if not r["held_out"]]
    data = np.ma.masked_invalid(np.array(speeds, dtype=float))
    fig, ax = plt.subplots(
        figsize=(min(14.0, 3.0 + 0.55 * len(tilings)), min(14.0, 1.6 + 0.28 * len(speeds)))
    )
    im = ax.imshow(data, aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0)
    ax.set_xticks(range(len(tilings)), [_short(t) for t in tilings], fontsize=6, rotation=60, ha="right")
    ax.set_yticks(range(len(searched)), [r["label"] for r in searched], fontsize=6)
    members = [point_label(m) for m in doc["members"]]
    for i, row in enumerate(searched):  # each shape's member framed
        member = row.get("member")
        if member is not None and members[member] in tilings:
            j = tilings.index(members[member])
            ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.2))
    if data.size <= 400:
        for i in range(data.shape[0]):
            for j in range(data.shape[1]):
                v = data[i, j]
                if v is np.ma.masked:
                    continue
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=5,
                        color="black" if v > 0.6 else "white")  # fmt: skip
    fig.colorbar(im, ax=ax, label="own best's time / this (0: failed; blank: not measured)")
    ax.set_title(f"{doc['name']}: shapes x tilings (red: the shape's member)", fontsize=9)
    return render(fig, f"{stem}-heat", ax.get_title())


def _speed(row: PortfolioShape, name: str, searched: str) -> float:
    confirmed = (row.get("confirmed") or {}).get(name)
    if confirmed is not None:
        return float(confirmed)
    return float(row["speed"] if searched == "speed" else row["default_speed"])


def loss_plot(doc: PortfolioDoc, stem: str) -> Plot:
    rows = doc["shapes"]
    labels = [r["label"] + (" (held out)" if r["held_out"] else "") for r in rows]
    member = [_loss_pct(_speed(r, "portfolio_speed", "speed")) for r in rows]
    default = [_loss_pct(_speed(r, "default_speed", "default_speed")) for r in rows]
    y = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(6.4, 1.4 + 0.26 * len(rows)))
    ax.barh(y - 0.2, member, height=0.4, color="#1f77b4", label="its member")
    ax.barh(y + 0.2, default, height=0.4, color="#bbbbbb", label="the cache-model default")
    ax.set_yticks(y, labels, fontsize=6)
    ax.invert_yaxis()
    ax.axvline(0, color="black", linewidth=0.6)
    confirmed = any(r.get("confirmed") for r in rows)
    ax.set_xlabel(
        "time lost against the shape's own best, % (" + ("confirmed" if confirmed else "search") + ")"
    )
    ax.set_title(f"{doc['name']}: loss per shape", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, axis="x")
    return render(fig, f"{stem}-loss", ax.get_title())


def curve_plot(doc: PortfolioDoc, stem: str) -> Plot | None:
    curve = doc.get("curve") or []
    if not curve:
        return None
    fig, ax = plt.subplots(figsize=(4.8, 3.0))
    ks = [int(c["k"]) for c in curve]
    ax.plot(ks, [_loss_pct(c["speed"]) for c in curve], marker="o", color="#1f77b4", label="portfolio of K")
    ax.axhline(_loss_pct(doc["default_speed"]), color="#555555", linestyle=":", label="cache-model default")
    ax.axvline(doc["k"], color="#d62728", linewidth=0.8, linestyle="--", label=f"K asked ({doc['k']})")
    ax.set_xticks(ks)
    ax.set_xlabel("K (tilings in the portfolio)")
    ax.set_ylabel("geomean loss, %")
    ax.set_title(f"{doc['name']}: loss against K (unmeasured cells estimated)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return render(fig, f"{stem}-curve", ax.get_title())


def portfolio_plots(doc: PortfolioDoc, index: int) -> list[Plot]:
    stem = f"portfolio{index}"
    return [p for p in (heat_plot(doc, stem), loss_plot(doc, stem), curve_plot(doc, stem)) if p is not None]

"""`opbench tune` and `opbench studies` on the terminal: one line per trial, the accuracy/speed front, the
confirmation, a study's history and the list of studies."""

from __future__ import annotations

from rich.table import Table

from opbench.texts import speed_text, tiles_text
from opbench.tuning_documents import (
    Confirmation,
    ParetoRow,
    PortfolioDoc,
    PortfolioShape,
    StudyRow,
    TrialEvent,
    TrialRow,
)


def trial_line(info: TrialEvent) -> str:
    """One trial as it finishes: its tiles, then GFLOPS (and error), its failure, or the trial it reused."""
    head = f"#{info['number']:<4} {tiles_text(info.get('tiles')):40}"
    if info.get("reused_from") is not None:
        value = info.get("failure") or f"{info.get('gflops', 0):.1f} GFLOPS"
        return f"{head} {value} (already measured in trial {info['reused_from']})"
    if info.get("failure"):
        return f"{head} failed: {info['failure']}"
    err = f", max rel err {info['max_rel_err']:.2e}" if info.get("max_rel_err") is not None else ""
    return f"{head} {info['gflops']:.1f} GFLOPS{err}"


def pareto_table(pareto: list[ParetoRow]) -> Table:
    table = Table(
        title="accuracy/speed front (Pareto-optimal trials)", title_justify="left", header_style="bold"
    )
    for col in ("trial", "tiles", "GFLOPS", "max rel err vs float64"):
        table.add_column(col)
    for p in sorted(pareto, key=lambda p: -p["gflops"]):
        table.add_row(
            str(p["number"]), tiles_text(p["tiles"]), f"{p['gflops']:.1f}", f"{p['max_rel_err']:.3e}"
        )
    return table


def confirmation_table(conf: Confirmation, top: int, rounds: int) -> Table:
    table = Table(
        title=f"confirmation: top {top} and the default, re-measured in {rounds} interleaved rounds",
        title_justify="left",
        header_style="bold",
    )
    for col in ("", "tiles", "GFLOPS", "95% CI", "samples", "machine speed", "flags"):
        table.add_column(col)
    for r in conf["rows"]:
        if "failure" in r:
            table.add_row(r["name"], tiles_text(r["tiles"]), "-", r["failure"], "-", "-", "")
        else:
            lo, hi = r["gflops_ci"]
            speed = r.get("machine_speed")
            table.add_row(
                r["name"],
                tiles_text(r["tiles"]),
                f"{r['gflops']:.1f}",
                f"{lo:.1f} - {hi:.1f}",
                str(r["n_samples"]),
                "-" if speed is None else f"{100 * speed:.0f}%",
                ", ".join(r.get("flags") or []),
            )
    return table


def best_line(conf: Confirmation) -> str | None:
    """The confirmed best tiling and its speed-up over the cache-model default; None without one."""
    best = conf.get("best")
    if not best:
        return None
    lo, hi = best["gflops_ci"]
    line = f"best: {tiles_text(best['tiles'])}: {best['gflops']:.1f} GFLOPS (95% CI {lo:.1f}-{hi:.1f})"
    if conf.get("speedup") is not None:
        base = conf.get("baseline_name") or "the cache-model default"
        line += f", {conf['speedup']:.3f}x {base} ({conf['default']['gflops']:.1f} GFLOPS)"
    return line


def history_table(rows: list[TrialRow]) -> Table:
    """A study's trials (tune/study.py trial_rows)."""
    table = Table(title="history", title_justify="left", header_style="bold")
    for col in ("trial", "state", "tiles", "GFLOPS", "note"):
        table.add_column(col)
    for r in rows:
        note = r["failure"] or ""
        if r["reused_from"] is not None:
            note = (note + "; " if note else "") + f"value of trial {r['reused_from']}"
        if r["retry_of"] is not None:
            note = (note + "; " if note else "") + f"retry of trial {r['retry_of']} (its worker stopped)"
        gf = f"{r['gflops']:.1f}" if r["gflops"] is not None else "-"
        table.add_row(str(r["number"]), r["state"], tiles_text(r["tiles"]), gf, note)
    return table


def studies_table(where: str, rows: list[StudyRow]) -> Table:
    """The studies in a storage (tune/study.py list_studies); `where` is its URL, password masked."""
    table = Table(title=f"studies in {where}", title_justify="left", header_style="bold")
    for col in ("study", "problem", "trials", "best GFLOPS", "best tiles", "started"):
        table.add_column(col)
    for r in rows:
        shape = r.get("label") or "x".join(str(v) for v in (r["shape"] or {}).values())
        problem = f"{shape} {r['dtype'] or ''} t{r['threads']}" if shape else "-"
        best = f"{r['best_value']:.1f}" if r["best_value"] is not None else "-"
        table.add_row(
            r["name"],
            problem,
            str(r["trials"]),
            best,
            tiles_text(r["best_tiles"]) if r["best_tiles"] else "-",
            r["started"] or "-",
        )
    return table


def _confirmed(row: PortfolioShape, name: str) -> float | None:
    return (row.get("confirmed") or {}).get(name)


def portfolio_table(doc: PortfolioDoc) -> Table:
    """Each shape's member and its speed against the shape's own best (the search's measurement and the
    confirmation's), the default's beside it."""
    table = Table(
        title=f"portfolio {doc['name']}: {len(doc['members'])} tilings; speed = own best's time / this time",
        title_justify="left",
        header_style="bold",
    )
    for col in ("shape", "count", "member", "speed (search)", "speed (confirmed)", "default (confirmed)", ""):
        table.add_column(col)
    for r in doc["shapes"]:
        member = r.get("member")
        table.add_row(
            r["label"],
            f"{r['count']:g}",
            "-"
            if member is None
            else f"{member + 1}: {tiles_text(doc['members'][member])}"
            + (" (fallback)" if r.get("fallback") else ""),
            speed_text(r["speed"]),
            speed_text(_confirmed(r, "portfolio_speed")),
            speed_text(_confirmed(r, "default_speed")),
            "held out" if r["held_out"] else "",
        )
    return table

"""Writing a report: HTML (one self-contained file), Markdown with PNG images beside it, CSV and JSON, all
inside one sanitised output directory that is never replaced without --force."""

from __future__ import annotations

import base64
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, cast

from jinja2 import Environment, PackageLoader, StrictUndefined

from opbench.case import DOUBT_MARK
from opbench.documents import Scalar
from opbench.errors import UsageError
from opbench.escape import csv_text, md
from opbench.files import atomic_write_bytes, atomic_write_text, check_writable_dir, current_umask, json_text
from opbench.report.ab import AbResult, to_markdown
from opbench.report.model import doubt_notes, geomean_text, ratio_cell
from opbench.report.parts import Report
from opbench.texts import format_seconds, portfolio_lines, speed_text
from opbench.tuning_documents import PortfolioDoc

if TYPE_CHECKING:  # the type only: plots loads matplotlib, which rendering text does not need
    from opbench.report.plots import Plot

FORMATS = ("html", "md", "csv", "json")
IMAGES = "images"


def sanitize(name: str) -> str:
    """A report name safe as a directory name: letters, digits, '.', '_' and '-' only, no leading dot."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")
    if not clean:
        raise UsageError(f"--out: '{name}' leaves no usable report name")
    return clean


REPORT_FILES = (
    "report.html",
    "report.md",
    "report.csv",
    "report.json",
    "compare.md",
    "compare.csv",
    "compare.json",
)


def output_dir(out: str, force: bool) -> Path:
    """The report directory: --out with its last component sanitised. Refuses a file, an existing
    non-empty directory unless force, and with force a directory that is not an opbench report (so
    `--out . --force` can never wipe a working directory)."""
    path = Path(out)
    target = path.parent / sanitize(path.name)
    if target.exists() and not target.is_dir():
        raise UsageError(f"--out {target} exists and is not a directory")
    check_writable_dir(target, "--out")
    if target.is_dir() and any(target.iterdir()):
        if not force:
            raise UsageError(f"report {target} already exists; use --force to replace it (or another --out)")
        foreign = [p.name for p in target.iterdir() if p.name not in (*REPORT_FILES, IMAGES)]
        if foreign:
            raise UsageError(
                f"--out {target} holds files that are not an opbench report "
                f"({', '.join(sorted(foreign)[:3])}); not replacing it"
            )
    return target


def replace_dir(target: Path, fill: Callable[[Path], None]) -> None:
    """Write a directory's content into a fresh sibling, then swap it in, so a failure or a kill midway
    leaves the previous report (or nothing) in place, never a mix."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        os.chmod(staging, 0o777 & ~current_umask())
        fill(staging)
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
            os.replace(target, old / target.name)
            os.replace(staging, target)
            shutil.rmtree(old)
        else:
            os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def _inside(root: Path, relative: str) -> Path:
    target = (root / relative).resolve()
    if root.resolve() not in target.parents:
        raise UsageError(f"refusing to write {relative} outside {root}")  # names are ours; this is a guard
    return target


def _tiles(tiles: Mapping[str, Scalar] | None) -> str:
    return " ".join(f"{k}={v}" for k, v in (tiles or {}).items()) or "-"


def render_html(model: Report, plots: dict[str, list[Plot]]) -> str:
    env = Environment(
        loader=PackageLoader("opbench.report", "templates"),
        # Always on: every text in a report comes from results files, which may come from anyone.
        # (select_autoescape(["html"]) matched no template: they are named *.html.j2.)
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["datauri"] = lambda p: "data:image/svg+xml;base64," + base64.b64encode(p.svg).decode()
    env.filters["seconds"] = format_seconds
    env.filters["tiles"] = _tiles
    env.globals.update(
        ratio_cell=ratio_cell,
        geomean_text=geomean_text,
        doubt_notes=doubt_notes,
        mark=DOUBT_MARK,
        portfolio_lines=portfolio_lines,
        portfolio_rows=portfolio_rows,
        portfolio_columns=PORTFOLIO_COLUMNS,
    )
    return env.get_template("report.html.j2").render(m=model, plots=plots)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def portfolio_rows(doc: PortfolioDoc) -> list[list[str]]:
    """A portfolio's shapes as the report's table shows them: shape, count, member, and the speed against
    the shape's own best as the search measured it, as the confirmation did, and the default's."""
    rows = []
    for r in doc["shapes"]:
        member = r.get("member")
        confirmed = r.get("confirmed") or {}
        rows.append(
            [
                r["label"] + (" (held out)" if r["held_out"] else ""),
                f"{r['count']:g}",
                "-" if member is None else f"{member + 1}" + (" (fallback)" if r.get("fallback") else ""),
                speed_text(r["speed"]),
                speed_text(confirmed.get("portfolio_speed")),
                speed_text(confirmed.get("default_speed")),
            ]
        )
    return rows


PORTFOLIO_COLUMNS = ("shape", "count", "member", "speed (search)", "speed (confirmed)", "default (confirmed)")


def _portfolio_markdown(doc: PortfolioDoc) -> list[str]:
    out = [
        f"## Portfolio: {md(doc['name'])}",
        "",
        f"{md(doc['op'])} {md(doc['dtype'])}, {doc['threads']} thread(s): {len(doc['members'])} tilings for "
        f"{len(doc['shapes'])} shapes. Speed is the shape's own best time over its member's (1: no loss).",
        "",
        *[f"- {md(line)}" for line in portfolio_lines(doc)],
        "",
        "| member | tiles |",
        "|---|---|",
        *[
            f"| {n + 1} | {md(_tiles(m) if m else 'the cache-model default')} |"
            for n, m in enumerate(doc["members"])
        ],
        "",
        "| " + " | ".join(PORTFOLIO_COLUMNS) + " |",
        "|" + "---|" * len(PORTFOLIO_COLUMNS),
    ]
    out += ["| " + " | ".join(md(c) for c in row) + " |" for row in portfolio_rows(doc)]
    return out


def render_markdown(model: Report, plots: dict[str, list[Plot]]) -> str:
    out = [
        f"# {md(model['title'])}",
        "",
        f"Generated {md(model['generated_utc'])} by opbench {md(model['opbench_version'])}.",
        "",
    ]
    out += [
        "## Run provenance",
        "",
        "| file | op | date (UTC) | CPU | ISA | threads | peaks used | memory | opbench / git |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for p in model["provenance"]:
        peaks = "; ".join(
            f"{md(d)}: {pk['gflops']:.1f} GFLOPS {md(pk['source'])}" for d, pk in p["peaks"].items() if pk
        )
        bw = f"{p['bandwidth']['gbs']:.1f} GB/s" if p["bandwidth"] else "-"
        git = f" / {md(p['git_sha'])}" if p["git_sha"] else ""
        run = " | ".join(md(p[k]) for k in ("file", "op", "created_utc", "cpu_model", "isa", "threads"))
        out.append(f"| {run} | {peaks} | {bw} | {md(p['opbench_version'])}{git} |")
    for s in model["sections"]:
        out += [
            "",
            f"## {md(s['op'])} {md(s['dtype'])}",
            "",
            f"{md(s['flop_note'])}. Mode: {md(s['mode'])}. Best per shape in bold.",
            "",
            "| shape | backend | median | ±IQR | GFLOPS | utilization | stability / flags |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in s["rows"]:
            case = f"{md(r['shape'])} | {md(r['backend'])}"
            if r["status"] != "ok":
                out.append(f"| {case} | - | - | - | - | {md(r['status'])}: {md(r['reason'])} |")
                continue
            gflops = f"**{r['gflops']:.1f}**" if r["best"] else f"{r['gflops']:.1f}"
            flags = md(r["stability"]) + (f" ({md(', '.join(r['flags']))})" if r["flags"] else "")
            out.append(
                f"| {case} | {format_seconds(r['median_s'])} | {_pct(r['rel_iqr'])} "
                f"| {gflops} | {_pct(r['utilization'])} | {flags} |"
            )
        repros = [r for r in s["rows"] if r.get("repro")]
        if repros:
            out += ["", "Repro, one command per case:", ""]
            out += [f"- {md(r['shape'])} {md(r['backend'])}: {md(r['repro'])}" for r in repros]
        c = s["comparison"]
        if c:
            out += [
                "",
                f"### Speed-up relative to {md(c['baseline'])}",
                "",
                "| shape | " + " | ".join(md(b) for b in c["backends"]) + " |",
                "|---|" + "---|" * len(c["backends"]),
            ]
            for row in c["table"]:
                cells = [md(ratio_cell(row, b)) for b in c["backends"]]
                out.append(f"| {md(row['shape'])} | " + " | ".join(cells) + " |")
            geo = [md(geomean_text(c["geomean"][b], c["flagged"][b], c["cases"][b])) for b in c["backends"]]
            out.append("| geometric mean | " + " | ".join(geo) + " |")
            notes = doubt_notes(c)
            if notes:
                out += ["", f"{DOUBT_MARK} built from a flagged case (its flags say why it may not repeat):"]
                out += [""]
                out += [f"- {md(n)}" for n in notes]
        if s["passes"]:
            out += [
                "",
                "### Forward and backward",
                "",
                "Per shape and backend measured in both passes: median times and the backward / forward "
                "ratio (about 2 in FLOPs).",
                "",
                "| shape | backend | fwd median | bwd median | bwd / fwd | fwd GFLOPS | bwd GFLOPS |",
                "|---|---|---|---|---|---|---|",
            ]
            for both in s["passes"]:
                out.append(
                    f"| {md(both['shape'])} | {md(both['backend'])} | {format_seconds(both['fwd_s'])} "
                    f"| {format_seconds(both['bwd_s'])} | {both['ratio']:.2f} | {both['fwd_gflops']:.1f} "
                    f"| {both['bwd_gflops']:.1f} |"
                )
        for plot in plots.get(s["id"], []):
            out += ["", f"![{md(plot.title)}]({IMAGES}/{plot.name}.png)"]
    if plots.get("roofline"):
        out += [
            "",
            "## Roofline",
            "",
            "Measured FMA peaks and triad bandwidth as roofs; each case at its arithmetic "
            "intensity (FLOPs per byte of compulsory traffic).",
            "",
            f"![roofline]({IMAGES}/roofline.png)",
        ]
    for i, st in enumerate(model["studies"]):
        out += [
            "",
            f"## Tuning: {md(st['name'])}",
            "",
            f"{md(st['op'])} {md(st['label'])} {md(st['dtype'])}, {md(st['threads'])} thread(s): "
            f"{md(st['trials'])} trials, {md(st['measured'])} measured of {md(st['valid_points'])} "
            "valid tilings.",
        ]
        conf = st["confirmation"]
        if conf and conf.get("best"):
            out += ["", "| | tiles | GFLOPS | 95% CI |", "|---|---|---|---|"]
            for cr in conf["rows"]:
                if "gflops" in cr:
                    out.append(
                        f"| {md(cr['name'])} | {md(_tiles(cr['tiles']))} | {cr['gflops']:.1f} | "
                        f"{cr['gflops_ci'][0]:.1f} - {cr['gflops_ci'][1]:.1f} |"
                    )
            if conf.get("speedup"):
                mark = f"{DOUBT_MARK} ({md(', '.join(st['speedup_doubts']))})" if st["speedup_doubts"] else ""
                out += ["", f"Best tiling: **{conf['speedup']:.3f}x**{mark} the cache-model default."]
        for plot in plots.get(f"study{i}", []):
            out += ["", f"![{md(plot.title)}]({IMAGES}/{plot.name}.png)"]
    for i, doc in enumerate(model["portfolios"]):
        out += ["", *_portfolio_markdown(doc)]
        for plot in plots.get(f"portfolio{i}", []):
            out += ["", f"![{md(plot.title)}]({IMAGES}/{plot.name}.png)"]
    for section in model["ab"]:
        out += ["", to_markdown(cast(AbResult, section)).rstrip("\n")]  # an ab file's document
    return "\n".join(out) + "\n"


CSV_COLUMNS = (
    "op",
    "pass",
    "dtype",
    "shape",
    "backend",
    "status",
    "reason",
    "median_s",
    "rel_iqr",
    "gflops",
    "utilization",
    "stability",
    "flags",
    "best",
    "speedup_vs_baseline",
    "baseline",
    "speedup_doubts",
)


def render_csv(model: Report) -> str:
    rows = []
    for s in model["sections"]:
        speed = {row["shape"]: row for row in (s["comparison"]["table"] if s["comparison"] else [])}
        for r in s["rows"]:
            rows.append(
                {
                    "op": s["op"],
                    "pass": r["pass"],
                    "dtype": s["dtype"],
                    "shape": r["shape"],
                    "backend": r["backend"],
                    "status": r["status"],
                    "reason": r["reason"] or "",
                    "median_s": r["median_s"],
                    "rel_iqr": r["rel_iqr"],
                    "gflops": r["gflops"],
                    "utilization": r["utilization"],
                    "stability": r["stability"],
                    "flags": ";".join(r["flags"]),
                    "best": r["best"],
                    "speedup_vs_baseline": speed.get(r["shape"], {}).get(r["backend"]),
                    "baseline": model["baseline"],
                    "speedup_doubts": ";".join(
                        speed.get(r["shape"], {}).get("doubts", {}).get(r["backend"], [])
                    ),
                }
            )
    return csv_text(CSV_COLUMNS, rows)


def render_json(model: Report, plots: dict[str, list[Plot]]) -> str:
    images = {k: [f"{IMAGES}/{p.name}.png" for p in v] for k, v in plots.items()}
    return json_text({"kind": "opbench.report", "schema_version": 1, **model, "images": images})


def write(model: Report, plots: dict[str, list[Plot]], target: Path, formats: list[str]) -> dict[str, Path]:
    """Write the chosen formats as the directory target (replacing a previous report whole); returns
    format -> path."""
    renderers = {
        "html": lambda: render_html(model, plots),
        "md": lambda: render_markdown(model, plots),
        "csv": lambda: render_csv(model),
        "json": lambda: render_json(model, plots),
    }

    def fill(d: Path) -> None:
        if {"md", "json"} & set(formats):  # both name the PNGs by path; HTML embeds SVGs, CSV has none
            for plist in plots.values():
                for p in plist:
                    atomic_write_bytes(_inside(d, f"{IMAGES}/{p.name}.png"), p.png)
        for fmt in formats:
            atomic_write_text(_inside(d, f"report.{fmt}"), renderers[fmt]())

    replace_dir(target, fill)
    return {fmt: target / f"report.{fmt}" for fmt in formats}

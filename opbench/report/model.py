"""The report's data model, built from sweep documents and studies: plain dicts and lists (JSON-serialisable)
that the plots and every output format are drawn from, so all formats show the same numbers. Each part is a
TypedDict of report/parts.py (Report, Section, ReportRow, ...)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import TypedDict, cast

from opbench import __version__
from opbench.case import DOUBT_MARK, Result, doubts, marked, named_doubts
from opbench.documents import MachineBlock, ResultsDoc, Scalar
from opbench.machine import utc_now
from opbench.ops import shape_label
from opbench.report.ab import AbResult
from opbench.report.parts import (
    AbSection,
    Comparison,
    ComparisonRow,
    Heatmap,
    HistoryPoint,
    PassRow,
    Provenance,
    Report,
    ReportRow,
    Roofline,
    Section,
    Series,
    SeriesLine,
    StudySection,
)
from opbench.texts import speedup_text, summary_text
from opbench.tuning_documents import Confirmation, PortfolioDoc, StudyDoc


class _Group(TypedDict):
    """One (op, dtype) of the input files while the sections are built."""

    op: str
    dtype: str
    rows: list[ReportRow]
    modes: Counter[str]
    flop_note: str | None


def _geomean(values: list[float]) -> float | None:
    vals = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def geomean_text(g: float | None, flagged: int, cases: int) -> str:
    """A geometric mean's text: how many of the ratios it took came from flagged cases, when any did."""
    if not g:
        return "-"
    return f"{g:.2f}x" + (f" ({flagged} of {cases} flagged {DOUBT_MARK})" if flagged else "")


def ratio_cell(row: ComparisonRow, backend: str) -> str:
    """A speed-up table's cell: the ratio, marked where it was built from a flagged case."""
    value = row.get(backend)
    return "-" if value is None else f"{value:.2f}x" + marked(row["doubts"].get(backend) or ())


def doubt_notes(comparison: Comparison) -> list[str]:
    """One line per marked ratio of a speed-up table: its shape and backend, and the flags behind it."""
    return [
        f"{row['shape']} {b}: {', '.join(row['doubts'][b])}"
        for row in comparison["table"]
        for b in comparison["backends"]
        if row["doubts"].get(b)
    ]


def provenance(doc: ResultsDoc) -> Provenance:
    m = doc.get("machine") or MachineBlock()
    git = m.get("git")
    threads = (doc.get("settings") or {}).get("threads")
    return {
        "file": doc["_path"],
        "op": doc.get("op"),
        "suite": (doc.get("suite") or {}).get("name"),
        "scale": doc.get("scale"),
        "mode": doc.get("mode"),
        "created_utc": doc.get("created_utc"),
        "cpu_model": m.get("cpu_model"),
        "isa": m.get("selected_isa"),
        "kernel": kernel.get("description") if (kernel := m.get("kernel")) else None,
        "threads": threads if isinstance(threads, int) else None,
        "opbench_version": m.get("opbench_version"),
        "git_sha": (git.get("sha") or "")[:12] + ("+dirty" if git.get("dirty") else "") if git else None,
        "libraries": {k: v for k, v in (m.get("libraries") or {}).items() if v},
        "peaks": {d: p.get("used") for d, p in (doc.get("peaks") or {}).items()},
        "datasheet": {d: p.get("datasheet") for d, p in (doc.get("peaks") or {}).items()},
        "bandwidth": doc.get("bandwidth"),
        "flop_note": doc.get("flop_note"),
        "complete": doc.get("complete"),
    }


def _row(r: Result) -> ReportRow:
    t = r.time
    return {
        "shape": r.case.label,
        "pass": r.case.pass_name,
        "backend": r.case.backend,
        "status": r.status.value,
        "reason": r.outcome.text,
        "why": r.reason.value if r.reason else None,
        "median_s": t.median_s if t else None,
        "rel_iqr": t.rel_iqr if t else None,
        "gflops": r.gflops,
        # each worker process's GFLOPS (--processes: the report's strip plot), from its median
        "process_gflops": [
            r.gflops * t.median_s / p["median_s"]
            for p in (t.per_process or () if t else ())
            if p.get("median_s") and r.gflops and t and t.median_s
        ],
        "utilization": r.utilization,
        "stability": t.stability if t else None,
        "flags": [f for f in r.flags if not t or f != t.stability],  # stability has its own column
        "doubts": doubts(r.flags),  # what marks every number built from this case (case.DOUBT_MARK)
        "factors": dict(r.case.factors),
        "arithmetic_intensity": r.arithmetic_intensity,
        "repro": r.repro,
    }


def _factor_series(rows: list[ReportRow], mode: str) -> list[Series]:
    """For one-factor sweeps: per axis with several levels, the backends' GFLOPS and utilization along that
    axis with every other factor at the base point (the first record's factors), one line per backend and
    pass."""
    ok = [r for r in rows if r["status"] == "ok" and r["factors"]]
    if mode != "one-factor" or not ok:
        return []
    base = rows[0]["factors"]
    series: list[Series] = []
    for axis in base:
        levels = sorted({r["factors"][axis] for r in ok}, key=lambda v: (isinstance(v, str), v))
        if len(levels) < 2:
            continue
        lines: dict[str, SeriesLine] = defaultdict(
            lambda: {"x": [], "gflops": [], "utilization": [], "doubts": []}
        )
        for r in sorted(ok, key=lambda r: (isinstance(r["factors"][axis], str), r["factors"][axis])):
            if all(r["factors"].get(a) == v for a, v in base.items() if a != axis):
                # One line per backend and pass: a backward pass is its own line ("torch bwd").
                line = lines[r["backend"] + ("" if r["pass"] == "fwd" else f" {r['pass']}")]
                line["x"].append(r["factors"][axis])
                line["gflops"].append(r["gflops"])
                line["utilization"].append(r["utilization"])
                line["doubts"].append(r["doubts"])
        series.append({"axis": axis, "levels": levels, "lines": dict(lines)})
    return series


def _comparison(rows: list[ReportRow], baseline: str) -> Comparison | None:
    """Each backend's GFLOPS over the baseline's, per shape and as a geometric mean. A ratio built from a
    flagged case (the backend's or the baseline's) lists its doubts (`doubts[backend]`: "torch: noisy"),
    and each geometric mean counts the ratios it took that have some (`flagged` of `cases`)."""
    by_shape: dict[str, dict[str, tuple[float, list[str]]]] = defaultdict(dict)
    for r in rows:
        if r["status"] == "ok" and r["gflops"]:
            by_shape[r["shape"]][r["backend"]] = (r["gflops"], r["doubts"])
    if not any(baseline in v for v in by_shape.values()):
        return None
    backends = sorted({b for v in by_shape.values() for b in v})
    table: list[ComparisonRow] = []
    for shape, vals in by_shape.items():
        if baseline not in vals:
            continue
        base_gflops, base_doubts = vals[baseline]
        row: ComparisonRow = {"shape": shape, "doubts": {}}
        for b in backends:
            row[b] = vals[b][0] / base_gflops if b in vals else None
            if b in vals and b != baseline:  # the baseline's own 1.00x is exact
                named = named_doubts((b, vals[b][1]), (baseline, base_doubts))
                if named:
                    row["doubts"][b] = named
        table.append(row)
    geomean = {b: _geomean([row[b] for row in table if row.get(b) is not None]) for b in backends}
    cases = {b: sum(row.get(b) is not None for row in table) for b in backends}
    flagged = {b: sum(row.get(b) is not None and b in row["doubts"] for row in table) for b in backends}
    return {
        "baseline": baseline,
        "backends": backends,
        "table": table,
        "geomean": geomean,
        "cases": cases,
        "flagged": flagged,
    }


def _passes(rows: list[ReportRow]) -> list[PassRow]:
    """Forward and backward side by side: per shape and backend measured in both passes, the two median
    times and the backward / forward time ratio (a backward costs about twice the forward in FLOPs)."""
    fwd = {(r["shape"], r["backend"]): r for r in rows if r["pass"] == "fwd" and r["status"] == "ok"}
    table: list[PassRow] = []
    for r in rows:
        if r["pass"] == "fwd" or r["status"] != "ok":
            continue
        shape = r["shape"].removesuffix(f" {r['pass']}")
        f = fwd.get((shape, r["backend"]))
        if f and f["median_s"] and r["median_s"]:
            table.append(
                {
                    "shape": shape,
                    "backend": r["backend"],
                    "pass": r["pass"],
                    "fwd_s": f["median_s"],
                    "bwd_s": r["median_s"],
                    "ratio": r["median_s"] / f["median_s"],
                    "fwd_gflops": f["gflops"],
                    "bwd_gflops": r["gflops"],
                }
            )
    return table


def build(
    docs: list[ResultsDoc],
    studies: list[StudyDoc],
    baseline: str | None,
    title: str,
    command: list[str],
    ab_docs: list[AbResult] | None = None,
    portfolios: list[PortfolioDoc] | None = None,
) -> Report:
    """The whole report. Sections are per (op, dtype) across all input files; an A/B section per `opbench
    ab` file (report/ab.py's rows, with their verdicts)."""
    groups: dict[tuple[str, str], _Group] = {}
    for doc in docs:
        for rec in doc["records"]:
            r = Result.from_record(rec)
            key = (r.case.op.name, r.case.dtype)
            g = groups.setdefault(
                key,
                {
                    "op": r.case.op.name,
                    "dtype": r.case.dtype,
                    "rows": [],
                    "modes": Counter(),
                    "flop_note": doc.get("flop_note"),
                },
            )
            g["rows"].append(_row(r))
            g["modes"][doc.get("mode") or "product"] += 1
    backends_seen = Counter(r["backend"] for g in groups.values() for r in g["rows"] if r["status"] == "ok")
    base = baseline or ("torch" if "torch" in backends_seen else (next(iter(backends_seen), None)))
    sections: list[Section] = []
    for (op, dtype), g in groups.items():
        rows = g["rows"]
        best: dict[str, tuple[float, str]] = {}
        for row in rows:
            gflops = row["gflops"]
            if row["status"] == "ok" and gflops and gflops > best.get(row["shape"], (0.0, ""))[0]:
                best[row["shape"]] = (gflops, row["backend"])
        for row in rows:  # (a backend is never named "")
            row["best"] = best.get(row["shape"], (0.0, ""))[1] == row["backend"] and row["status"] == "ok"
        mode = g["modes"].most_common(1)[0][0]
        sections.append(
            {
                "id": f"{op}-{dtype}",
                "op": op,
                "dtype": dtype,
                "mode": mode,
                "flop_note": g["flop_note"],
                "rows": rows,
                "series": _factor_series(rows, mode),
                "comparison": _comparison(rows, base) if base else None,
                "passes": _passes(rows),
            }
        )
    roofline: Roofline = {"points": [], "peaks": {}, "bandwidth": None}
    for doc in docs:
        prov = provenance(doc)
        for d, p in prov["peaks"].items():
            if p:
                roofline["peaks"][d] = max(roofline["peaks"].get(d, 0.0), p["gflops"])
        if prov["bandwidth"]:
            roofline["bandwidth"] = max(roofline["bandwidth"] or 0.0, prov["bandwidth"]["gbs"])
    for s in sections:
        for row in s["rows"]:
            if row["status"] == "ok" and row["gflops"] and row["arithmetic_intensity"]:
                roofline["points"].append(
                    {
                        "op": s["op"],
                        "dtype": s["dtype"],
                        "backend": row["backend"],
                        "shape": row["shape"],
                        "intensity": row["arithmetic_intensity"],
                        "gflops": row["gflops"],
                        "doubts": row["doubts"],
                    }
                )
    return {
        "title": title,
        "generated_utc": utc_now(),
        "opbench_version": __version__,
        "command": command,
        "baseline": base,
        "provenance": [provenance(d) for d in docs],
        "sections": sections,
        "roofline": roofline,
        "studies": [_study_section(s) for s in studies],
        "portfolios": list(portfolios or []),
        "ab": [_ab_section(d) for d in ab_docs or []],
    }


def _ab_section(doc: AbResult) -> AbSection:
    section = cast(AbSection, {k: v for k, v in doc.items() if k != "rows"})  # the document's other fields
    section["rows"] = [{**r, "speedup_text": speedup_text(r)} for r in doc.get("rows", [])]
    section["summary_text"] = summary_text(doc)
    return section


def _study_section(study: StudyDoc) -> StudySection:
    done = [(t, g) for t in study["trials"] if t["state"] == "COMPLETE" and (g := t["gflops"]) is not None]
    history: list[HistoryPoint] = []
    best_so_far = 0.0
    for t, g in sorted(done, key=lambda d: d[0]["number"]):
        best_so_far = max(best_so_far, g)
        history.append({"number": t["number"], "gflops": g, "best": best_so_far})
    # A 2-D map of the two most varied tile parameters (e.g. tile_n x tile_k), best GFLOPS over the rest.
    heatmap: Heatmap | None = None
    tiled = [(tiles, g) for t, g in done if (tiles := t["tiles"])]
    if tiled:
        varied = sorted(tiled[0][0], key=lambda p: -len({tiles[p] for tiles, _ in tiled}))
        varied = [p for p in varied if len({tiles[p] for tiles, _ in tiled}) > 1][:2]
        if len(varied) == 2:
            px, py = varied[1], varied[0]
            xs = sorted({tiles[px] for tiles, _ in tiled}, key=_ordered)
            ys = sorted({tiles[py] for tiles, _ in tiled}, key=_ordered)
            grid: list[list[float | None]] = [[None] * len(xs) for _ in ys]
            for tiles, g in tiled:
                i, j = ys.index(tiles[py]), xs.index(tiles[px])
                grid[i][j] = max(grid[i][j] or 0.0, g)
            heatmap = {"x": px, "y": py, "xs": xs, "ys": ys, "values": grid}
    failures = Counter(f for t in study["trials"] if (f := t.get("failure")))
    fp = study["fingerprint"]
    op = fp.get("op") or "gemm"
    return {
        "name": study["name"],
        "op": op,
        "shape": fp.get("shape"),
        "label": shape_label(op, fp.get("shape")) if fp.get("shape") else "-",
        "dtype": fp.get("dtype"),
        "threads": fp.get("threads"),
        "cpu_model": fp.get("cpu_model"),
        "valid_points": study["valid_points"],
        "trials": len(study["trials"]),
        "measured": len(done),
        "failures": dict(failures),
        "history": history,
        "heatmap": heatmap,
        "importances": study["importances"],
        "confirmation": study["confirmation"],
        "speedup_doubts": _confirmation_doubts(study["confirmation"]),
    }


def _ordered(value: Scalar) -> tuple[int, float, str]:
    """A heatmap axis's order: numbers by value (a space's values are numbers), anything else after them by
    its text."""
    if isinstance(value, (int, float)):
        return 0, float(value), ""
    return 1, 0.0, str(value)


def _confirmation_doubts(conf: Confirmation | None) -> list[str]:
    """The flags of the confirmation's best and default rows, which its speed-up is built from."""
    rows = [conf.get("best"), conf.get("default")] if conf else []
    return named_doubts(*((r["name"], r.get("flags") or ()) for r in rows if r))

"""Flags reach every derived number (issue 39): a speed-up, geometric mean or plot point built from a case
flagged noisy, drifting, contended, ... carries case.DOUBT_MARK and names the flags, in the report's
HTML, Markdown, CSV and JSON, in compare and in ab; a geometric mean says how many of its ratios were
flagged. Real results files (a two-case sweep) with their flags set by hand, so that which case is
flagged is known."""

from __future__ import annotations

import copy
import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import tiny_gemm_results

from opbench.case import DOUBT_MARK, Result, doubts
from opbench.report import ab, compare, inputs, model, plots, render


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real cpp + numpy sweep of two shapes, every flag cleared (a real run's flags vary)."""
    path = tiny_gemm_results(tmp_path_factory.mktemp("doubts") / "run")
    loaded = inputs.load_results(path)
    for r in loaded["records"]:
        r["flags"] = []
        r["time"]["stability"] = "stable"
    return loaded


def _flag(doc: dict[str, Any], backend: str, label: str, *flags: str) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    (rec,) = [r for r in out["records"] if r["backend"] == backend and r["label"] == label]
    rec["flags"] = list(flags)
    return out


def _comparison(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    m = model.build([doc], [], "numpy", "t", ["opbench", "report"])
    (section,) = m["sections"]
    return m, section["comparison"]


def test_doubts_leave_out_only_what_describes_the_backend() -> None:
    assert doubts(["slow", "noisy", "contended", "noisy"]) == ["contended", "noisy"]
    assert doubts(["slow"]) == []


def test_a_flagged_case_marks_its_ratio_and_its_geomean_in_every_format(doc: dict[str, Any]) -> None:
    labels = [r["label"] for r in doc["records"] if r["backend"] == "cpp"]
    assert len(labels) == 2
    clean, c = _comparison(doc)
    assert all(not row["doubts"] for row in c["table"]) and c["flagged"]["cpp"] == 0
    flagged_doc = _flag(doc, "cpp", labels[0], "noisy", "drifting", "slow")
    m, c = _comparison(flagged_doc)
    rows = {row["shape"]: row for row in c["table"]}
    assert rows[labels[0]]["doubts"] == {"cpp": ["cpp: drifting", "cpp: noisy"]}
    assert rows[labels[1]]["doubts"] == {}
    assert (c["flagged"]["cpp"], c["cases"]["cpp"]) == (1, 2)
    assert model.ratio_cell(rows[labels[0]], "cpp").endswith(f"x{DOUBT_MARK}")
    assert not model.ratio_cell(rows[labels[1]], "cpp").endswith(DOUBT_MARK)
    assert model.ratio_cell(rows[labels[0]], "numpy") == "1.00x"  # the baseline's own ratio is exact
    geo = model.geomean_text(c["geomean"]["cpp"], 1, 2)
    assert geo.endswith(f"(1 of 2 flagged {DOUBT_MARK})")
    # Markdown: the marked cell, the geometric mean's count and the note naming the flags
    figures = plots.all_plots(m)
    md = render.render_markdown(m, figures)
    assert f"| {model.ratio_cell(rows[labels[0]], 'cpp')} |" in md and geo in md
    assert f"- {labels[0]} cpp: cpp: drifting, cpp: noisy" in md
    assert md.count(f"x{DOUBT_MARK} |") == 1
    # CSV: the flags behind each case's speed-up, on its row only
    got = {
        (r["shape"], r["backend"]): r["speedup_doubts"]
        for r in csv.DictReader(io.StringIO(render.render_csv(m)))
    }
    assert got[(labels[0], "cpp")] == "cpp: drifting;cpp: noisy"
    assert got[(labels[1], "cpp")] == "" and got[(labels[0], "numpy")] == ""
    # HTML: the cell is marked, its title names the flags; the geomean says how many
    html = render.render_html(m, figures)
    assert (
        f'class="doubt" title="cpp: drifting; cpp: noisy">{model.ratio_cell(rows[labels[0]], "cpp")}<' in html
    )
    assert html.count('class="doubt"') == 1 and geo in html
    # JSON: the model as written
    back = json.loads(render.render_json(m, figures))
    assert back["sections"][0]["comparison"]["flagged"] == {"cpp": 1, "numpy": 0}
    # Without any flag nothing is marked anywhere
    clean_figures = plots.all_plots(clean)
    assert DOUBT_MARK not in render.render_markdown(clean, clean_figures) + render.render_html(
        clean, clean_figures
    )


def test_a_flagged_baseline_marks_every_ratio_of_its_shape(doc: dict[str, Any]) -> None:
    label = doc["records"][0]["label"]
    _, c = _comparison(_flag(doc, "numpy", label, "contended"))
    rows = {row["shape"]: row for row in c["table"]}
    assert rows[label]["doubts"] == {"cpp": ["numpy: contended"]}
    assert c["flagged"] == {"cpp": 1, "numpy": 0}


def test_plot_points_of_flagged_cases_are_drawn_apart(doc: dict[str, Any]) -> None:
    """The roofline and bars draw a flagged case hollow or hatched: the figure differs from the clean one
    by exactly that, and the geomean bar's label counts it."""
    label = doc["records"][0]["label"]
    clean, _ = _comparison(doc)
    flagged, c = _comparison(_flag(doc, "cpp", label, "contended"))
    assert [
        p["doubts"] for p in flagged["roofline"]["points"] if p["shape"] == label and p["backend"] == "cpp"
    ] == [["contended"]]
    a, b = plots.roofline_plot(clean["roofline"]), plots.roofline_plot(flagged["roofline"])
    assert a is not None and b is not None and a.svg != b.svg
    a2, b2 = plots.cases_plot(clean["sections"][0]), plots.cases_plot(flagged["sections"][0])
    assert a2 is not None and b2 is not None and a2.svg != b2.svg


def test_compare_marks_a_change_measured_on_a_flagged_case(doc: dict[str, Any], tmp_path: Path) -> None:
    label = doc["records"][0]["label"]
    new = _flag(doc, "cpp", label, "unstable")
    result = compare.compare(doc, new, 0.1)
    rows = {(r["shape"], r["backend"]): r for r in result["rows"]}
    assert rows[(label, "cpp")]["doubts"] == "new: unstable"
    assert compare.change_text(rows[(label, "cpp")]).endswith(DOUBT_MARK)
    assert not any(r["doubts"] for k, r in rows.items() if k != (label, "cpp"))
    assert result["flagged"] == 1
    md = compare.to_markdown(result)
    assert f"{DOUBT_MARK} 1 change(s) measured on a case flagged" in md
    assert md.count(f"%{DOUBT_MARK} |") == 1
    got = list(csv.DictReader(io.StringIO(compare.to_csv(result))))
    assert [r["doubts"] for r in got if r["backend"] == "cpp" and r["shape"] == label] == ["new: unstable"]


def test_ab_marks_its_speedups_and_counts_them_in_the_geomean(doc: dict[str, Any]) -> None:
    label = doc["records"][0]["label"]
    records = _flag(doc, "numpy", label, "throttled")["records"]
    result = ab.analyse([Result.from_record(r) for r in records], "cpp", "numpy", 0.05)
    rows = {r["label"]: r for r in result["rows"]}
    assert rows[label]["doubts"] == ["B: throttled"]
    other = next(k for k in rows if k != label)
    assert rows[other]["doubts"] == []
    assert DOUBT_MARK in ab.speedup_text(rows[label]) and DOUBT_MARK not in ab.speedup_text(rows[other])
    s = result["summary"]
    assert (s["geomean_flagged"], s["geomean_cases"]) == (1, 2)
    assert f"(1 of 2 flagged {DOUBT_MARK})" in ab.summary_text(result)
    got = list(csv.DictReader(io.StringIO(ab.to_csv(result))))
    assert {r["label"]: r["speedup_doubts"] for r in got} == {label: "B: throttled", other: ""}
    assert ab.to_markdown(result).count(DOUBT_MARK) == 2  # the summary's count and the one row


def test_a_confirmation_speedup_names_the_flags_of_its_rows() -> None:
    conf = {
        "best": {"name": "trial 3", "flags": ["contended"]},
        "default": {"name": "default", "flags": ["slow"]},
    }
    assert model._confirmation_doubts(conf) == ["trial 3: contended"]
    assert model._confirmation_doubts({"best": None, "default": {"name": "default", "flags": []}}) == []
    assert model._confirmation_doubts(None) == []

"""A results file is data, never code: every free-text field of a real results file is given a script payload,
and the report made from it (title included) is opened in a real headless Chromium. No script runs (the flag
each payload would set stays unset) and the payload text is visible on the page. The Markdown holds no raw
HTML, link or table break from the payloads, and no CSV cell opbench writes starts like a formula."""

from __future__ import annotations

import csv
import json
import re
from typing import Any

import pytest
from conftest import chromium, run_cli, tiny_gemm_results

PAYLOADS = (
    "<script>window.__pwned = 'script'</script>",
    '"><img src=x onerror="window.__pwned = \'img\'">',
    "<svg onload=\"window.__pwned = 'svg'\"></svg>",
    "[click](javascript:window.__pwned='md') | x |",
    '=HYPERLINK("http://evil.example","x")',
)
KEEP = {"kind", "status", "stability"}  # what the report branches on; everything else is free text


def _poison(value: Any, key: str, counter: list[int]) -> Any:
    if isinstance(value, dict):
        return {k: _poison(v, k, counter) for k, v in value.items()}
    if isinstance(value, list):
        return [_poison(v, key, counter) for v in value]
    if isinstance(value, str) and key not in KEEP:
        counter[0] += 1
        return value + PAYLOADS[counter[0] % len(PAYLOADS)]
    return value


@pytest.fixture(scope="module")
def poisoned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("poisoned")
    clean = tiny_gemm_results(root / "run")
    doc = json.loads(clean.read_text())
    counter = [0]
    bad = _poison(doc, "", counter)
    assert counter[0] > 50  # CPU model, libraries, labels, backends, reasons, notes, flop note, ...
    for r in bad["records"]:  # and text that starts like a spreadsheet formula
        r["label"] = PAYLOADS[4] + r["label"]
        r["backend"] = "@SUM(1+1)*cmd|' /C calc'!A0" + r["backend"]
    path = root / "from-someone-else.json"
    path.write_text(json.dumps(bad))
    out = root / "report"
    title = "weekly <script>window.__pwned = 'title'</script> | # heading"
    proc = run_cli(
        ["report", str(path), "--out", str(out), "--title", title, "--baseline", bad["records"][0]["backend"]]
    )
    assert proc.returncode == 0, proc.stderr
    other = json.loads(path.read_text())
    for r in other["records"]:
        if r["status"] == "ok":
            r["time"]["median_s"] *= 2
            r["time"]["samples_s"] = [2 * v for v in r["time"]["samples_s"]]
    slower = root / "slower.json"
    slower.write_text(json.dumps(other))
    proc = run_cli(["compare", str(path), str(slower), "--out", str(root / "cmp")])
    assert proc.returncode == 0, proc.stderr
    return {"out": out, "compare": root / "cmp", "results_csv": next((root / "run").glob("gemm-*.csv"))}


def test_no_script_runs_in_the_report_and_the_payload_is_shown(poisoned: dict[str, Any]) -> None:
    driver = chromium()
    try:
        driver.get((poisoned["out"] / "report.html").as_uri())
        assert driver.execute_script("return window.__pwned === undefined"), driver.execute_script(
            "return window.__pwned"
        )
        assert driver.execute_script("return document.scripts.length") == 0
        text = driver.execute_script("return document.body.innerText")
        for payload in PAYLOADS[:3]:
            assert payload in text
        assert "weekly <script>" in driver.title
    finally:
        driver.quit()


def test_markdown_holds_no_markup_or_table_break_from_the_data(poisoned: dict[str, Any]) -> None:
    for md in (poisoned["out"] / "report.md", poisoned["compare"] / "compare.md"):
        text = md.read_text()
        for raw in ("<script", "<img", "<svg"):
            assert raw not in text, (md.name, raw)
        assert not re.search(r"(?<!\\)\]\(javascript:", text), md.name  # a link only when unescaped
        # Every table row keeps its column count: no '|' from the data splits a cell.
        tables: dict[int, set[int]] = {}
        table = 0
        for line in text.splitlines():
            if line.startswith("|"):
                cells = len(line.replace("\\|", "").split("|"))
                tables.setdefault(table, set()).add(cells)
            else:
                table += 1
        assert all(len(widths) == 1 for widths in tables.values()), (md.name, tables)


def test_no_csv_cell_starts_like_a_formula(poisoned: dict[str, Any]) -> None:
    for path in (
        poisoned["out"] / "report.csv",
        poisoned["compare"] / "compare.csv",
        poisoned["results_csv"],
    ):
        with path.open(newline="") as f:
            for row in csv.reader(f):
                for cell in row:
                    assert not cell.startswith(("=", "+", "@", "\t", "\r")), (path.name, cell)
                    assert not (cell.startswith("-") and not _number(cell)), (path.name, cell)
    for path in (poisoned["out"] / "report.csv", poisoned["compare"] / "compare.csv"):
        text = path.read_text()
        assert "'=HYPERLINK" in text and "'@SUM" in text, path.name  # shown, neutralised


def _number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False

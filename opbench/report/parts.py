"""The report's parts, typed: what model.build() makes and every format (render.py, plots.py, the HTML
template) reads. Plain dicts and lists (JSON-serialisable), declared as TypedDicts so that mypy checks the
keys the renderers and plots read."""

from __future__ import annotations

from typing import Any, TypedDict

from opbench.documents import BandwidthDict, PeakDict, Scalar
from opbench.report.ab import AbResult, AbRow
from opbench.tuning_documents import Confirmation, PortfolioDoc

# A row of a speed-up table: its shape, each backend's ratio to the baseline under the backend's name, and
# `doubts` per backend: the table's keys are the run's backends, so it stays a plain dict.
ComparisonRow = dict[str, Any]


# One case of a section, as every format shows it ("pass" is a keyword, hence the functional form).
ReportRow = TypedDict(
    "ReportRow",
    {
        "shape": str,
        "pass": str,
        "backend": str,
        "status": str,
        "reason": str | None,
        "why": str | None,
        "median_s": float | None,
        "rel_iqr": float | None,
        "gflops": float | None,
        "process_gflops": list[float],
        "utilization": float | None,
        "stability": str | None,
        "flags": list[str],
        "doubts": list[str],
        "factors": dict[str, Scalar],
        "arithmetic_intensity": float | None,
        "repro": str | None,
        "best": bool,
    },
    total=False,
)


class SeriesLine(TypedDict):
    x: list[Any]
    gflops: list[float | None]
    utilization: list[float | None]
    doubts: list[list[str]]


class Series(TypedDict):
    """One axis of a one-factor sweep: its levels and a line per backend and pass."""

    axis: str
    levels: list[Any]
    lines: dict[str, SeriesLine]


class Comparison(TypedDict):
    """Each backend's GFLOPS over the baseline's, per shape, and their geometric means."""

    baseline: str
    backends: list[str]
    table: list[ComparisonRow]
    geomean: dict[str, float | None]
    cases: dict[str, int]
    flagged: dict[str, int]


PassRow = TypedDict(
    "PassRow",
    {
        "shape": str,
        "backend": str,
        "pass": str,
        "fwd_s": float,
        "bwd_s": float,
        "ratio": float,
        "fwd_gflops": float | None,
        "bwd_gflops": float | None,
    },
)


class Section(TypedDict):
    """One (op, dtype) across every input file."""

    id: str
    op: str
    dtype: str
    mode: str
    flop_note: str | None
    rows: list[ReportRow]
    series: list[Series]
    comparison: Comparison | None
    passes: list[PassRow]


class RooflinePoint(TypedDict):
    op: str
    dtype: str
    backend: str
    shape: str
    intensity: float
    gflops: float
    doubts: list[str]


class Roofline(TypedDict):
    points: list[RooflinePoint]
    peaks: dict[str, float]
    bandwidth: float | None


class Report(TypedDict):
    """The whole report: what every format renders."""

    title: str
    generated_utc: str
    opbench_version: str
    command: list[str]
    baseline: str | None
    provenance: list[Provenance]
    sections: list[Section]
    roofline: Roofline
    studies: list[StudySection]
    portfolios: list[PortfolioDoc]  # tune --portfolio's documents (tune/portfolio_run.py), as saved
    ab: list[AbSection]


class Provenance(TypedDict):
    """One input file's run: where and when it ran, on what, with which peaks (model.provenance)."""

    file: str
    op: str | None
    suite: str | None
    scale: float | None
    mode: str | None
    created_utc: str | None
    cpu_model: str | None
    isa: str | None
    kernel: str | None
    threads: int | None
    opbench_version: str | None
    git_sha: str | None
    libraries: dict[str, str | None]
    peaks: dict[str, PeakDict | None]
    datasheet: dict[str, PeakDict | None]
    bandwidth: BandwidthDict | None
    flop_note: str | None
    complete: bool | None


class HistoryPoint(TypedDict):
    number: int
    gflops: float
    best: float


class Heatmap(TypedDict):
    """The best GFLOPS over the two most varied tile parameters (the rest at their best)."""

    x: str
    y: str
    xs: list[Scalar]
    ys: list[Scalar]
    values: list[list[float | None]]


class StudySection(TypedDict):
    """A tuning study as the report shows it (model._study_section)."""

    name: str
    op: str
    shape: dict[str, Scalar] | None
    label: str
    dtype: str | None
    threads: int | None
    cpu_model: str | None
    valid_points: int | None
    trials: int
    measured: int
    failures: dict[str, int]
    history: list[HistoryPoint]
    heatmap: Heatmap | None
    importances: dict[str, float]
    confirmation: Confirmation | None
    speedup_doubts: list[str]


class AbSectionRow(AbRow, total=False):
    speedup_text: str


class AbSection(AbResult, total=False):
    """An `opbench ab` file as the report shows it: its document, each row's speed-up text and the
    summary's."""

    rows: list[AbSectionRow]  # type: ignore[misc]  # the document's rows, each with its text
    summary_text: str

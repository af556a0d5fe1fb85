"""A sweep on the terminal: progress while it runs (runs.Observer), the results table at its end and the
summary lines under it."""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from opbench.documents import BatchLines, Record, ResultsDoc
from opbench.record_blocks import TimeBlock
from opbench.texts import format_seconds, spread


def _best_per_group(records: list[Record]) -> set[int]:
    best: dict[tuple[str, str], tuple[float, int]] = {}
    for i, r in enumerate(records):
        gflops = r.get("gflops")
        if r["status"] != "ok" or gflops is None:
            continue
        key = (r["label"], r["dtype"])
        if key not in best or gflops > best[key][0]:
            best[key] = (gflops, i)
    return {i for _, i in best.values()}


def results_table(records: list[Record], title: str) -> Table:
    table = Table(title=title, title_justify="left", header_style="bold")
    for col, justify in (
        ("shape", "left"),
        ("dtype", "left"),
        ("backend", "left"),
        ("median", "right"),
        ("spread", "right"),
        ("GFLOPS", "right"),
        ("util", "right"),
        ("flags / reason", "left"),
    ):
        table.add_column(col, justify=justify, no_wrap=col != "flags / reason")  # type: ignore[arg-type]
    best = _best_per_group(records)
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, r in enumerate(records):
        groups[(r["label"], r["dtype"])].append(i)
    first_group = True
    for (label, dtype), idxs in groups.items():
        if not first_group:
            table.add_section()
        first_group = False
        for i in idxs:
            r = records[i]
            style = "bold green" if i in best else ""
            if r["status"] != "ok":
                table.add_row(
                    label,
                    dtype,
                    r["backend"],
                    "-",
                    "-",
                    "-",
                    "-",
                    Text(f"{r['status']}: {r['reason']}", style="yellow"),
                )
                continue
            t, util, gflops = r.get("time") or TimeBlock(), r.get("utilization"), r.get("gflops")
            table.add_row(
                label,
                dtype,
                Text(r["backend"], style=style),
                format_seconds(t["median_s"]),
                f"{100 * spread(t):.1f}%",
                Text("-" if gflops is None else f"{gflops:.1f}", style=style),
                "-" if util is None else f"{100 * util:.1f}%",
                Text(", ".join(r["flags"]), style="magenta") if r["flags"] else "",
            )
    return table


def print_summary(console: Console, doc: ResultsDoc, paths: Mapping[str, Path]) -> None:
    records = doc["records"]
    machine = doc["machine"]
    title = f"opbench sweep {doc['op']}"
    suite = doc.get("suite")
    if suite:
        title += f" — suite {suite['name']}"
    if doc.get("scale"):
        title += f" (scaled x{doc['scale']:g}: batch and input size)"
    title += (
        f" — {machine['cpu_model']}, {doc['settings']['threads']} thread(s), {doc.get('mode') or 'cases'}"
    )
    console.print(results_table(records, title))
    peaks = [(r["dtype"], b) for r in records if (b := r.get("peak"))]
    in_run = [(dtype, b["gflops"]) for dtype, b in peaks if b.get("source") == "in-run"]
    for dtype, p in doc["peaks"].items():
        used = p.get("used")
        if not used:
            continue
        probes = sorted(gflops for d, gflops in in_run if d == dtype)
        if probes:
            line = (
                f"peak {dtype}: the best in-run FMA probe, slowed by the machine's speed beside each "
                f"case (FMA and cache probes, to the case's sensitivity), {probes[0]:.1f}-{probes[-1]:.1f} "
                f"GFLOPS; cached {used['source']} peak {used['gflops']:.1f}"
            )
        else:
            line = f"peak {dtype}: {used['gflops']:.1f} GFLOPS {used['source']} — {used['name']}"
        if ds := p.get("datasheet"):
            line += f"; datasheet estimate {ds['gflops']:.1f} ({ds['name']})"
        console.print(line, style="dim")
    speeds = sorted(s for r in records if (s := r.get("machine_speed")) is not None)
    if speeds:
        console.print(
            f"machine speed while measuring (in-run probe / best this machine has shown): "
            f"{100 * speeds[0]:.0f}%-{100 * speeds[-1]:.0f}%, median {100 * speeds[len(speeds) // 2]:.0f}%",
            style="dim",
        )
    used_what = "the in-run peak above, per case" if in_run else "peak above"
    console.print(doc["flop_note"] + f"; utilization = achieved / {used_what}.", style="dim")
    for warning in (doc.get("environment") or {}).get("warnings", []):
        console.print(f"warning: {warning}", style="yellow")
    for name, summary in doc["backends"].items():
        if not summary["available"]:
            console.print(f"backend {name} skipped: {summary['reason']}", style="yellow")
    print_call_overheads(console, doc)
    notes = sorted({(r["backend"], n) for r in records for n in r.get("notes", [])})
    for backend, note in notes:
        console.print(f"note ({backend}): {note}", style="dim")
    lines = suite.get("lines") if suite else None
    if lines:
        base = doc["op"].split(":")[0]
        print_batch_lines(console, lines, ("recurrent" if base in ("rnn", "gru", "lstm") else base,))
    for fmt, path in paths.items():
        console.print(f"wrote {fmt.upper()}: {path}")


def print_call_overheads(console: Console, doc: ResultsDoc) -> None:
    """One user's call of the op on a tiny case, per backend (the header's call_overhead_s): what a
    framework's checks and dispatch cost beside the prepared calls the table times."""
    timed = {n: s for n, s in doc["backends"].items() if s.get("call_overhead_s") is not None}
    if timed:
        case = next(iter(timed.values())).get("call_overhead_case")
        costs = ", ".join(f"{n} {1e6 * float(s['call_overhead_s'] or 0):.1f} us" for n, s in timed.items())
        console.print(f"one call from Python on a tiny case ({case}), best per call: {costs}", style="dim")
    for name, s in doc["backends"].items():
        if s.get("available") and "call_overhead_s" in s and s["call_overhead_s"] is None:
            console.print(f"call overhead of {name} not timed: {s.get('call_overhead_call')}", style="dim")


# Skipped problems listed one a row under a table; the rest are counted (all are in the results file).
MAX_SKIPPED_ROWS = 20


def print_batch_lines(console: Console, lines: BatchLines, families: tuple[str, ...]) -> None:
    """A batch file's lines: how many ran and were skipped (by kind), a table per descriptor form in
    `families` (conv, gemm, recurrent) of the problems of that form that were skipped, the notes and the
    options ignored."""
    kinds = ", ".join(f"{n} {kind}" for kind, n in lines["skipped_by_kind"].items())
    console.print(
        f"batch file: {lines['lines']} problem lines, {lines['lines_run']} run, "
        f"{lines['lines_skipped']} skipped" + (f"; problems skipped: {kinds}" if kinds else ""),
        style="yellow" if lines["lines_skipped"] else "dim",
    )
    for family in families:
        mine = [s for s in lines["skipped"] if s["family"] == family]
        if not mine:
            continue
        table = Table(title=f"skipped {family} problems (FILE:LINE, problem, why)", title_justify="left")
        for col in ("where", "problem", "why"):
            table.add_column(col, overflow="fold")
        for s in mine[:MAX_SKIPPED_ROWS]:
            table.add_row(s["where"], s["text"], s["reason"])
        console.print(table)
        if len(mine) > MAX_SKIPPED_ROWS:
            console.print(f"... and {len(mine) - MAX_SKIPPED_ROWS} more (suite.lines.skipped in the JSON)")
    for note in lines["notes"][:MAX_SKIPPED_ROWS]:
        console.print(f"note: {note}", style="dim")
    if lines["ignored_options"]:
        ignored = ", ".join(f"{k} ({n})" for k, n in lines["ignored_options"].items())
        console.print(f"options ignored (they change nothing opbench measures): {ignored}", style="dim")


class RichObserver:
    """Progress on stderr while a sweep runs, the table on stdout when it ends (paths only with --quiet)."""

    def __init__(self, quiet: bool, verbose: bool = False) -> None:

        # Rich assumes 80 columns when stdout is not a terminal; the table needs about 110.
        self.console = Console(quiet=quiet, width=None if sys.stdout.isatty() else 120, markup=False)
        self.err_console = Console(stderr=True, quiet=quiet, markup=False)
        self.quiet, self.verbose = quiet, verbose
        self._advance: Callable[[str], None] | None = None

    def status(self, text: str) -> AbstractContextManager[object]:
        return self.err_console.status(text)

    @contextmanager
    def sweep_started(self, op: str, visits: int) -> Iterator[None]:
        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.err_console,
            transient=True,
        )
        with progress:
            task = progress.add_task(op, total=visits)
            self._advance = lambda description: progress.update(task, description=description, advance=1)
            try:
                yield
            finally:
                self._advance = None

    def visit_started(self, description: str) -> None:
        if self._advance is not None:
            self._advance(description)

    def sweep_finished(self, doc: ResultsDoc, paths: dict[str, Path]) -> None:
        print_summary(self.console, doc, paths)
        if self.verbose:
            self.console.print("repro, one command per case:")
            for r in doc["records"]:
                if r.get("repro"):
                    self.console.print(
                        f"  {r['label']} {r['dtype']} {r['backend']}: {r['repro']}", soft_wrap=True
                    )
        if self.quiet:
            for path in paths.values():
                print(path)

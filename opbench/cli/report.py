"""`opbench report`, `opbench compare` and `opbench suites`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from opbench.cli.common import storage_url
from opbench.errors import UsageError


def cmd_report(args: argparse.Namespace) -> int:
    from rich.console import Console

    from opbench.report import inputs, model, plots, render
    from opbench.results import parse_formats

    formats = parse_formats(args.format, render.FORMATS)
    if not args.results and not args.study:
        raise UsageError("opbench report needs results files and/or --study NAME")
    target = render.output_dir(args.out, args.force)
    docs = [inputs.load_results(p) for p in args.results]
    studies = [inputs.load_study(name, storage_url(args.storage, "reports")) for name in args.study]
    backends = {r["backend"] for d in docs for r in d["records"]}
    if args.baseline and args.baseline not in backends:
        raise UsageError(
            f"--baseline {args.baseline} is not among the backends in these results "
            f"({', '.join(sorted(backends)) or 'none'})"
        )
    m = model.build(docs, studies, args.baseline, args.title, args.command_line)
    figures = plots.all_plots(m)
    written = render.write(m, figures, target, formats)
    console = Console(markup=False, highlight=False)
    n_plots = sum(len(v) for v in figures.values())
    console.print(
        f"report: {len(m['sections'])} op/dtype sections, {len(m['studies'])} studies, {n_plots} plots"
    )
    for fmt, path in written.items():
        console.print(f"wrote {fmt.upper()}: {path}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from opbench.files import atomic_write_text, json_text
    from opbench.report import compare, inputs, render
    from opbench.results import parse_formats

    formats = parse_formats(args.format, ("md", "csv", "json")) if args.out else []
    target = render.output_dir(args.out, args.force) if args.out else None
    result = compare.compare(inputs.load_results(args.old), inputs.load_results(args.new), args.threshold)
    console = Console(markup=False, highlight=False, width=None if sys.stdout.isatty() else 170)
    table = Table(
        title=f"{args.old} -> {args.new} (significant: over {100 * args.threshold:.0f}% and outside "
        "both runs' IQRs)",
        title_justify="left",
        header_style="bold",
    )
    for col in (
        *("op", "shape", "dtype", "backend", "old", "new", "GFLOPS change", "noise old/new"),
        *("util old/new", "machine new/old", "verdict"),
    ):
        table.add_column(col)
    from opbench.display import format_seconds

    styles = {"regression": "bold red", "improvement": "bold green"}
    for r in result["rows"]:
        measured = (
            [
                format_seconds(r["old_median_s"]),
                format_seconds(r["new_median_s"]),
                f"{100 * r['gflops_change']:+.1f}%",
                f"{100 * r['old_rel_iqr']:.1f}% / {100 * r['new_rel_iqr']:.1f}%",
                compare.util_text(r),
                compare.ratio_text(r.get("reference_ratio")),
            ]
            if "time_ratio" in r
            else ["-"] * 6
        )
        verdict = r["verdict"] + (f" ({r['note']})" if r.get("note") else "")
        table.add_row(
            r["op"],
            r["shape"],
            r["dtype"],
            r["backend"],
            *measured,
            Text(verdict, style=styles.get(r["verdict"], "")),
        )
    console.print(table)
    for w in result["warnings"]:
        console.print(f"warning: {w}")
    c = result["counts"]
    console.print(
        f"{c['regression']} regression(s), {c['improvement']} improvement(s), {c['unchanged']} unchanged"
    )
    if target is not None:
        texts = {
            "md": lambda: compare.to_markdown(result),
            "csv": lambda: compare.to_csv(result),
            "json": lambda: json_text(result),
        }

        def fill(d: Path) -> None:
            for fmt in formats:
                atomic_write_text(d / f"compare.{fmt}", texts[fmt]())

        render.replace_dir(target, fill)
        console.print(f"wrote {', '.join(formats)} to {target}")
    return 1 if args.fail_on_regression and c["regression"] else 0


def cmd_suites(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from opbench.specs import load_suite, suite_names

    table = Table(
        title="built-in suites (opbench sweep --suite NAME [--scale F])",
        title_justify="left",
        header_style="bold",
        show_lines=True,
    )
    for col in ("suite", "sweeps", "description"):
        table.add_column(col)
    for name in suite_names():
        spec = load_suite(name)
        sweeps = "\n".join(f"{p.op}: {len(p.shapes)} shapes ({p.mode})" for p in spec.plans)
        table.add_row(name, sweeps, spec.description + (f"\nsource: {spec.source}" if spec.source else ""))
    Console(markup=False, width=None if sys.stdout.isatty() else 120).print(table)
    return 0

"""`opbench report`, `opbench compare` and `opbench suites`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from opbench.case import DOUBT_MARK
from opbench.cli.common import storage_url
from opbench.display.report import compare_table, suites_table
from opbench.errors import UsageError
from opbench.files import atomic_write_text, json_text
from opbench.report import compare, inputs, model, render
from opbench.results import parse_formats
from opbench.specs import load_suite, suite_names


def cmd_report(args: argparse.Namespace) -> int:
    formats = parse_formats(args.format, render.FORMATS)
    if not args.results and not args.study:
        raise UsageError("opbench report needs results files and/or --study NAME")
    target = render.output_dir(args.out, args.force)
    ab_paths = [p for p in args.results if inputs.kind_of(p) == "opbench.ab"]
    docs = [inputs.load_results(p) for p in args.results if p not in ab_paths]
    ab_docs = [inputs.load_ab(p) for p in ab_paths]
    storage = storage_url(args.storage, "reports")
    portfolios, studies = inputs.load_studies(args.study, storage)
    backends = {r["backend"] for d in docs for r in d["records"]}
    if args.baseline and args.baseline not in backends:
        raise UsageError(
            f"--baseline {args.baseline} is not among the backends in these results "
            f"({', '.join(sorted(backends)) or 'none'})"
        )
    m = model.build(docs, studies, args.baseline, args.title, args.command_line, ab_docs, portfolios)
    from opbench.report import plots  # matplotlib (about 0.3 s to import): only a report draws

    figures = plots.all_plots(m) if set(formats) != {"csv"} else {}
    written = render.write(m, figures, target, formats)
    console = Console(markup=False, highlight=False)
    n_plots = sum(len(v) for v in figures.values())
    console.print(
        f"report: {len(m['sections'])} op/dtype sections, {len(m['ab'])} A/B runs, {len(m['studies'])} "
        f"studies, {len(m['portfolios'])} portfolios, {n_plots} plots"
    )
    for fmt, path in written.items():
        console.print(f"wrote {fmt.upper()}: {path}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    formats = parse_formats(args.format, ("md", "csv", "json")) if args.out else []
    target = render.output_dir(args.out, args.force) if args.out else None
    result = compare.compare(inputs.load_results(args.old), inputs.load_results(args.new), args.threshold)
    console = Console(markup=False, highlight=False, width=None if sys.stdout.isatty() else 170)
    console.print(compare_table(result, args.old, args.new, args.threshold))
    for w in result["warnings"]:
        console.print(f"warning: {w}")
    c = result["counts"]
    flagged = f"; {result['flagged']} on a flagged case ({DOUBT_MARK})" if result["flagged"] else ""
    console.print(
        f"{c['regression']} regression(s), {c['improvement']} improvement(s), {c['unchanged']} unchanged"
        + flagged
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
    table = suites_table([(name, load_suite(name)) for name in suite_names()])
    Console(markup=False, width=None if sys.stdout.isatty() else 120).print(table)
    return 0

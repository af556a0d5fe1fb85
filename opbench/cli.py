"""Command line: argument parsing and validation -> library calls. No measurement logic lives here.

Every invalid input ends in one line on stderr and exit code 2, before anything is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, NoReturn

from opbench.errors import UsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got '{text}'") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got '{text}'") from None
    if not v > 0:  # also rejects nan
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="opbench", description="Operator-level micro-benchmarks and tiling autotuner.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("sweep", help="measure an operator over shapes, dtypes and backends")
    s.add_argument("op", help="operator to sweep (gemm)")
    s.add_argument("--m", help="sizes: 64,128 or 64:1024:x2 or 64:512:+64 (default: a built-in shape set)")
    s.add_argument("--n", help="sizes for N (unset dimensions default to 1024 when any is given)")
    s.add_argument("--k", help="sizes for K")
    s.add_argument("--dtype", default="fp32,fp16", help="fp32, fp16 or both (default: fp32,fp16)")
    s.add_argument("--backend", default="cpp,torch,mindspore,numpy", help="comma-separated backends")
    s.add_argument("--threads", type=_positive_int, help="threads for every backend (default: all cores)")
    s.add_argument("--device", default="cpu", help="cpu (default) or cuda[:i] for backends that support it")
    s.add_argument("--out", default="reports", help="output directory (default: reports/)")
    s.add_argument("--format", default="json,csv", help="json, csv or both (default: json,csv)")
    s.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    s.add_argument("--no-verify", action="store_true", help="skip checking outputs against float64")
    s.add_argument("--cold-cache", action="store_true", help="flush caches before every sample (1 call each)")
    s.add_argument("--min-sample-ms", type=_positive_float, default=10.0)
    s.add_argument("--max-time-s", type=_positive_float, default=1.0, help="sampling cap per case")
    s.add_argument(
        "--call-budget-s", type=_positive_float, default=1.0,
        help="a call slower than this is timed once and flagged single_sample",
    )  # fmt: skip
    s.add_argument("--tile-m", type=_positive_int, help="cpp backend: tile_m (default: cache model)")
    s.add_argument("--tile-n", type=_positive_int, help="cpp backend: tile_n")
    s.add_argument("--tile-k", type=_positive_int, help="cpp backend: tile_k")
    s.add_argument("--isa", choices=("avx512", "avx2", "ref"), help="cpp backend: force a kernel set")
    s.add_argument("--quiet", action="store_true", help="no progress bar or table; print only file paths")

    pk = sub.add_parser("peak", help="measure (and cache) peak FLOPS per dtype and thread count")
    pk.add_argument("--dtype", default="fp32,fp16")
    pk.add_argument("--threads", help="thread counts, e.g. 1,2 (default: 1 and all cores)")
    pk.add_argument("--refresh", action="store_true", help="measure again instead of using the cache")

    sub.add_parser("info", help="CPU features, kernel dispatch, default tiles and backend availability")
    return p


def _shapes(args: argparse.Namespace, op_module: Any) -> list[Any]:
    from opbench.ranges import parse_sizes

    if args.m is None and args.n is None and args.k is None:
        return list(op_module.DEFAULT_SHAPES)
    ms = parse_sizes(args.m, "--m") if args.m else [1024]
    ns = parse_sizes(args.n, "--n") if args.n else [1024]
    ks = parse_sizes(args.k, "--k") if args.k else [1024]
    count = len(ms) * len(ns) * len(ks)
    if count > 10_000:
        raise UsageError(f"--m/--n/--k expand to {count} shapes (limit 10000)")
    return [op_module.GemmShape(m, n, k) for m in ms for n in ns for k in ks]


def _check_memory(shapes: list[Any], dtypes: list[str], op_module: Any) -> None:
    from opbench.machine import available_memory_bytes

    budget = int(available_memory_bytes() * 0.8)
    for shape in shapes:
        for d in dtypes:
            need = op_module.memory_bytes(shape, d)
            if need > budget:
                raise UsageError(
                    f"shape {shape.label()} ({d}) needs about {need / 2**30:.1f} GiB, more than the "
                    f"{budget / 2**30:.1f} GiB available (80% of MemAvailable)"
                )


def _check_out_dir(out: str) -> Path:
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {out} exists and is not a directory")
    return path


def cmd_sweep(args: argparse.Namespace) -> int:
    from opbench.backends import parse_backends
    from opbench.dtypes import parse_dtypes
    from opbench.ops import get_op
    from opbench.results import parse_formats
    from opbench.timing import TimerConfig

    op_module = get_op(args.op)
    if args.op != "gemm" and (args.m or args.n or args.k):
        raise UsageError(f"--m/--n/--k apply to gemm, not {args.op}")
    shapes = _shapes(args, op_module)
    dtypes = parse_dtypes(args.dtype)
    backends = parse_backends(args.backend)
    formats = parse_formats(args.format)
    out_dir = _check_out_dir(args.out)
    if args.device != "cpu" and not args.device.startswith("cuda"):
        raise UsageError(f"unknown device '{args.device}' (expected cpu or cuda[:index])")
    _check_memory(shapes, dtypes, op_module)

    from opbench.kernels import default_threads

    threads = args.threads or default_threads()
    timer = TimerConfig(
        min_sample_s=args.min_sample_ms / 1e3,
        max_time_s=args.max_time_s,
        call_budget_s=args.call_budget_s,
        cold_cache=args.cold_cache,
    )
    cpp_params = {"tile_m": args.tile_m, "tile_n": args.tile_n, "tile_k": args.tile_k, "isa": args.isa}
    from opbench.sweep import SweepConfig

    cfg = SweepConfig(
        op=args.op, shapes=tuple(shapes), dtypes=tuple(dtypes), backends=tuple(backends), threads=threads,
        device=args.device, timer=timer, verify=not args.no_verify, seed=args.seed, cpp_params=cpp_params,
    )  # fmt: skip
    return _run_sweep(cfg, out_dir, formats, quiet=args.quiet)


def _sweep_header(
    cfg: Any, states: dict[str, Any], peak_table: dict[str, Any], cpus: list[int]
) -> dict[str, Any]:
    from dataclasses import asdict

    from opbench import machine, sweep
    from opbench.ops import get_op

    return {
        "op": cfg.op,
        "shape_fields": list(cfg.shapes[0].to_dict()),
        "command": ["opbench", *sys.argv[1:]],
        "flop_note": get_op(cfg.op).FLOP_NOTE,
        "settings": {
            "threads": cfg.threads,
            "device": cfg.device,
            "dtypes": list(cfg.dtypes),
            "backends": list(cfg.backends),
            "verify": cfg.verify,
            "seed": cfg.seed,
            "timer": asdict(cfg.timer),
            "cpp": {k: v for k, v in cfg.cpp_params.items() if v is not None},
        },
        "machine": machine.provenance(cfg.threads, cpus),
        "peaks": peak_table,
        "backends": sweep.backend_summary(states),
    }


def _run_sweep(cfg: Any, out_dir: Path, formats: list[str], quiet: bool) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from opbench import machine, sweep
    from opbench.display import print_summary
    from opbench.machine import utc_now
    from opbench.results import ResultsWriter

    # Rich assumes 80 columns when stdout is not a terminal; the table needs about 110.
    console = Console(quiet=quiet, width=None if sys.stdout.isatty() else 120, markup=False)
    err_console = Console(stderr=True, quiet=quiet, markup=False)
    writer: ResultsWriter | None = None
    try:
        cpus = machine.pin_to_cpus(cfg.threads) if cfg.device == "cpu" else machine.allowed_cpus()
        with err_console.status("measuring peak FLOPS (cached per machine)..."):
            peak_table = sweep.resolve_peaks(cfg)
        with err_console.status("loading backends..."):
            states = sweep.setup_backends(cfg)
        stem = f"{cfg.op}-{utc_now().replace(':', '').replace('-', '').replace('+0000', '')}"
        writer = ResultsWriter(out_dir, stem, formats, _sweep_header(cfg, states, peak_table, cpus))
        progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=err_console, transient=True,
        )  # fmt: skip
        with progress:
            task = progress.add_task("sweep", total=cfg.n_cases)

            def on_record(rec: dict[str, Any]) -> None:
                assert writer is not None
                writer.add(rec)
                progress.advance(task)

            sweep.run_sweep(cfg, states, peak_table, on_record,
                            lambda d: progress.update(task, description=d))  # fmt: skip
    except KeyboardInterrupt:
        if writer is None:
            print("opbench: interrupted before any case ran; nothing written", file=sys.stderr)
        else:
            kept = ", ".join(str(p) for p in writer.paths.values())
            print(f"opbench: interrupted; {len(writer.doc['records'])} finished case(s) kept in {kept}",
                  file=sys.stderr)  # fmt: skip
        return 130
    writer.finish()
    print_summary(console, writer.doc, writer.paths)
    if quiet:
        for path in writer.paths.values():
            print(path)
    return 0


def cmd_peak(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from opbench import peak
    from opbench.dtypes import parse_dtypes
    from opbench.kernels import default_threads
    from opbench.ranges import parse_sizes

    dtypes = parse_dtypes(args.dtype)
    counts = parse_sizes(args.threads, "--threads") if args.threads else sorted({1, default_threads()})
    table = Table(title="peak FLOPS", title_justify="left", header_style="bold")
    for col in ("dtype", "threads", "measured GFLOPS", "datasheet GFLOPS", "measured / datasheet"):
        table.add_column(col, justify="left" if col in ("dtype", "threads") else "right")
    console = Console(markup=False, width=None if sys.stdout.isatty() else 120)
    notes: dict[str, None] = {}  # ordered set
    with Console(stderr=True).status("running FMA-throughput loops..."):
        for d in dtypes:
            for t in counts:
                m = peak.measured(d, t, refresh=args.refresh)
                ds = peak.datasheet(d, t)
                ratio = f"{m.gflops / ds.gflops:.2f}" if ds else "-"
                table.add_row(d, str(t), f"{m.gflops:.1f}", f"{ds.gflops:.1f}" if ds else "-", ratio)
                notes[f"{d} measured: {m.name}; {m.detail.split(', best')[0]}"] = None
                notes[f"{d} datasheet: {ds.detail}" if ds else f"{d} datasheet: clock frequency unknown"] = (
                    None
                )
    console.print(table)
    for note in notes:
        console.print(note, style="dim")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from rich.console import Console

    from opbench import kernels
    from opbench.backends import BACKENDS
    from opbench.machine import cpu_model

    console = Console(markup=False)
    f = kernels.cpu_features()
    console.print(f"CPU: {cpu_model()} ({f['vendor']}), {f['logical_cpus']} logical CPUs, "
                  f"{kernels.default_threads()} usable")  # fmt: skip
    console.print("features: " + ", ".join(k for k, v in f["features"].items() if v))
    console.print(f"kernel sets: {', '.join(f['isas'])}; selected: {f['selected_isa']}")
    c = f["caches"]
    console.print(
        f"caches ({f['cache_source']}): L1d {c['l1d']['size_bytes'] // 1024} KiB {c['l1d']['ways']}-way, "
        f"L2 {c['l2']['size_bytes'] // 1024} KiB {c['l2']['ways']}-way, "
        f"L3 {c['l3']['size_bytes'] // 2**20} MiB {c['l3']['ways']}-way"
    )
    for isa in f["isas"]:
        t = kernels.default_tiles(isa)
        console.print(
            f"  {isa}: {t['description']}; default tiles m={t['tile_m']} n={t['tile_n']} k={t['tile_k']}"
        )
    for name, cls in BACKENDS.items():
        reason = cls().unavailable_reason()
        console.print(f"backend {name}: " + ("available" if reason is None else f"unavailable ({reason})"))
    return 0


COMMANDS = {"sweep": cmd_sweep, "peak": cmd_peak, "info": cmd_info}


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except UsageError as e:
        msg = str(e)
        print(msg if msg.startswith("opbench") else f"opbench: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

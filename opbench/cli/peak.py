"""`opbench peak` and `opbench info`."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from opbench import gpu, kernels, peak
from opbench.accelerators import ACCELERATORS
from opbench.backends import BACKENDS, accelerator_name, make_backend, plugin_origin, plugins
from opbench.cli.types import threads_within_bound
from opbench.display.peak import cpu_peak_table, datasheet_table, gpu_peak_table
from opbench.dtypes import parse_dtypes
from opbench.errors import UsageError
from opbench.kernels import default_threads
from opbench.machine import cpu_model
from opbench.ranges import parse_sizes


def _print_datasheets() -> int:
    console = Console(markup=False, width=None if sys.stdout.isatty() else 160)
    console.print(datasheet_table(ACCELERATORS))
    console.print(
        "Sparse (2:4) figures are never used. fp16/bf16 are tensor-core or cube peaks; fp32 is the CUDA-core "
        "peak (TF32 is listed apart). A sweep with --device cuda uses the row matching the device's name."
    )
    return 0


def _gpu_peak(device: str) -> int:
    if gpu.device_index(device) is None:
        raise UsageError(f"unknown device '{device}' for opbench peak (expected cpu or cuda[:index])")
    try:
        result = gpu.measure_peaks(device)
    except (ImportError, RuntimeError) as e:
        raise UsageError(f"cannot measure peaks on '{device}': {e}") from None
    name = accelerator_name(device) or device
    rows = []
    for dtype, achieved in result["gemm_gflops"].items():
        ds = peak.accelerator_datasheet(name, dtype, 1)
        rows.append((dtype, achieved, ds.gflops if ds else None))
    console = Console(markup=False, width=None if sys.stdout.isatty() else 120)
    console.print(gpu_peak_table(name, rows))
    console.print(
        f"torch.matmul {result['gemm_size']}^3, {result['timing']}; TF32 for fp32 matmul: "
        f"{result['tf32_matmul']}. Device copy: {result['copy_gb_s']:.0f} GB/s (read + write)."
    )
    return 0


def cmd_peak(args: argparse.Namespace) -> int:
    if args.datasheets:
        return _print_datasheets()
    if args.device != "cpu":
        return _gpu_peak(args.device)
    dtypes = parse_dtypes(args.dtype)
    counts = parse_sizes(args.threads, "--threads") if args.threads else sorted({1, default_threads()})
    for count in counts:
        try:
            threads_within_bound(count)
        except argparse.ArgumentTypeError as e:
            raise UsageError(f"--threads: {e}") from None
    rows = []
    console = Console(markup=False, width=None if sys.stdout.isatty() else 120)
    notes: dict[str, None] = {}  # ordered set
    with Console(stderr=True).status("running FMA-throughput loops..."):
        for d in dtypes:
            for t in counts:
                m = peak.measured(d, t, refresh=args.refresh)
                ds = peak.datasheet(d, t)
                rows.append((d, t, m.gflops, ds.gflops if ds else None))
                notes[f"{d} measured: {m.name}; {m.detail.split(', best')[0]}"] = None
                notes[f"{d} datasheet: {ds.detail}" if ds else f"{d} datasheet: clock frequency unknown"] = (
                    None
                )
    console.print(cpu_peak_table(rows))
    for note in notes:
        console.print(note, style="dim")
    for t in counts:
        b = peak.bandwidth(t, refresh=args.refresh)
        console.print(f"memory bandwidth, {t} thread(s): {b.gbs:.1f} GB/s measured ({b.detail})")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    console = Console(markup=False, soft_wrap=True)  # one line per fact, however long (logs, grep)
    f = kernels.cpu_features()
    console.print(
        f"CPU: {cpu_model()} ({f['vendor']}), {f['logical_cpus']} logical CPUs, "
        f"{kernels.default_threads()} usable"
    )
    console.print("features: " + ", ".join(k for k, v in f["features"].items() if v))
    console.print(f"kernel sets: {', '.join(f['isas'])}; selected: {f['selected_isa']}")
    c = f["caches"]
    console.print(
        f"caches ({f['cache_source']}): L1d {c['l1d']['size_bytes'] // 1024} KiB {c['l1d']['ways']}-way, "
        f"L2 {c['l2']['size_bytes'] // 1024} KiB {c['l2']['ways']}-way, "
        f"L3 {c['l3']['size_bytes'] // 2**20} MiB {c['l3']['ways']}-way"
    )
    row = kernels.default_tiles()
    measured = row["microarch_measured"]
    console.print(
        f"micro-architecture (the kernels' choices by core): {row['microarch']}"
        + ("" if measured == row["microarch"] else f", taking {measured}'s (not measured on this one)")
    )
    for isa in f["isas"]:
        t = kernels.default_tiles(isa)
        console.print(
            f"  {isa}: {t['description']}; default tiles m={t['tile_m']} n={t['tile_n']} k={t['tile_k']}"
        )
    for name, cls in BACKENDS.items():
        reason = cls().unavailable_reason()
        console.print(f"backend {name}: " + ("available" if reason is None else f"unavailable ({reason})"))
    for name, ep in plugins().items():  # installed packages' entry points, group opbench.backends
        reason = make_backend(name).unavailable_reason()
        state = "available" if reason is None else f"unavailable ({reason})"
        console.print(f"backend {name} (plug-in {plugin_origin(ep)}): {state}")
    return 0

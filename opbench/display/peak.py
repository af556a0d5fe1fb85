"""`opbench peak` on the terminal: the CPU peak table, a GPU's, and the accelerator datasheets."""

from __future__ import annotations

from collections.abc import Iterable

from rich.table import Table

from opbench.accelerators import Accelerator

DATASHEET_DTYPES = ("fp32", "tf32", "fp16", "bf16")


def datasheet_table(accelerators: Iterable[Accelerator]) -> Table:
    """Every accelerator's datasheet peaks (TFLOPS, dense)."""
    table = Table(
        title="accelerator datasheet peaks (TFLOPS, dense)", title_justify="left", header_style="bold"
    )
    for col in ("device", *DATASHEET_DTYPES, "source"):
        table.add_column(col, justify="right" if col in DATASHEET_DTYPES else "left")
    for acc in accelerators:
        cells = [f"{acc.tflops[d]:g}" if d in acc.tflops else "-" for d in DATASHEET_DTYPES]
        table.add_row(acc.name, *cells, acc.source)
    return table


def gpu_peak_table(name: str, rows: list[tuple[str, float, float | None]]) -> Table:
    """rows: (dtype, achieved GFLOPS, datasheet GFLOPS or None)."""
    table = Table(title=f"peak FLOPS on {name}", title_justify="left", header_style="bold")
    for col in ("dtype", "achieved GFLOPS", "datasheet GFLOPS", "achieved / datasheet"):
        table.add_column(col, justify="left" if col == "dtype" else "right")
    for dtype, achieved, datasheet in rows:
        ratio = f"{achieved / datasheet:.2f}" if datasheet else "-"
        table.add_row(dtype, f"{achieved:.0f}", f"{datasheet:.0f}" if datasheet else "-", ratio)
    return table


def cpu_peak_table(rows: list[tuple[str, int, float, float | None]]) -> Table:
    """rows: (dtype, threads, measured GFLOPS, datasheet GFLOPS or None)."""
    table = Table(title="peak FLOPS", title_justify="left", header_style="bold")
    for col in ("dtype", "threads", "measured GFLOPS", "datasheet GFLOPS", "measured / datasheet"):
        table.add_column(col, justify="left" if col in ("dtype", "threads") else "right")
    for dtype, threads, measured, datasheet in rows:
        ratio = f"{measured / datasheet:.2f}" if datasheet else "-"
        table.add_row(dtype, str(threads), f"{measured:.1f}", f"{datasheet:.1f}" if datasheet else "-", ratio)
    return table

"""Tuned tile records: the best tiling per (machine, op, dtype, shape, threads), as plain JSON under
tuning/records/ (one file per machine), written by `opbench tune` and read by kernels.gemm(tiles="tuned")
and `opbench sweep gemm --tuned`.

File format (schema_version 1): {"schema_version": 1, "machine": {...}, "records": [{"op", "dtype", "shape",
"threads", "tiles", "isa", "kernel", "gflops", "gflops_ci", "default_gflops", "speedup", "study",
"opbench_version", "created_utc"}, ...]}.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

from opbench.files import atomic_write_text
from opbench.machine import cpu_model, utc_now

SCHEMA_VERSION = 1


def records_dir() -> Path:
    """$OPBENCH_RECORDS_DIR, else the source tree's tuning/records, else ~/.local/share/opbench/records."""
    if os.environ.get("OPBENCH_RECORDS_DIR"):
        return Path(os.environ["OPBENCH_RECORDS_DIR"])
    source = Path(__file__).resolve().parents[2] / "tuning"
    if source.is_dir() and os.access(source, os.W_OK):
        return source / "records"
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "opbench" / "records"


def machine() -> dict[str, Any]:
    """The part of the fingerprint a tuned tiling belongs to: CPU and the kernel set that ran."""
    from opbench import kernels

    f = kernels.cpu_features()
    return {
        "cpu_model": cpu_model(),
        "logical_cpus": f["logical_cpus"],
        "isa": f["selected_isa"],
        "kernel": f["kernel"]["description"],
    }


def _path() -> Path:
    key = hashlib.sha256(json.dumps(machine(), sort_keys=True).encode()).hexdigest()[:12]
    return records_dir() / f"{key}.json"


def load() -> list[dict[str, Any]]:
    try:
        doc = json.loads(_path().read_text())
    except (OSError, ValueError):
        return []
    return list(doc.get("records", [])) if doc.get("schema_version") == SCHEMA_VERSION else []


def save(record: dict[str, Any]) -> Path:
    """Insert or replace the record for its (op, dtype, shape, threads)."""
    key = (record["op"], record["dtype"], json.dumps(record["shape"], sort_keys=True), record["threads"])
    kept = [
        r
        for r in load()
        if (r["op"], r["dtype"], json.dumps(r["shape"], sort_keys=True), r["threads"]) != key
    ]
    doc = {
        "schema_version": SCHEMA_VERSION,
        "machine": machine(),
        "records": [*kept, {**record, "created_utc": utc_now()}],
    }
    path = _path()
    atomic_write_text(path, json.dumps(doc, indent=1) + "\n")
    return path


def lookup(op: str, dtype: str, shape: dict[str, int], threads: int) -> tuple[dict[str, Any], str] | None:
    """The record for exactly this problem, else the nearest tuned shape of the same op and dtype (distance:
    sum of |log ratio| over the dimensions, same thread count preferred); with a note saying which."""
    candidates = [
        r for r in load() if r["op"] == op and r["dtype"] == dtype and set(r["shape"]) == set(shape)
    ]
    if not candidates:
        return None

    def distance(r: dict[str, Any]) -> tuple[float, int]:
        d = sum(abs(math.log(r["shape"][k] / shape[k])) for k in shape)
        return d, int(r["threads"] != threads)

    best = min(candidates, key=distance)
    label = "x".join(str(best["shape"][k]) for k in shape)
    exact = distance(best) == (0.0, 0)
    how = "exact" if exact else f"nearest tuned shape {label}, {best['threads']} thread(s)"
    return best, f"tuned record ({how}) from study {best['study']}"

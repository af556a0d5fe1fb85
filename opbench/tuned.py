"""Tuned tile records: the best tiling per (machine, op, dtype, shape, threads), as plain JSON under
tuning/records/ (one file per machine), written by `opbench tune` and read by tuned() (and its helpers for
gemm, conv2d and recurrent-layer arrays) and `opbench sweep OP --tuned`. Saves are locked (filelock,
`<file>.lock` beside it) and atomic; a file that cannot be read is moved aside, never overwritten.

File format (schema_version 1): {"schema_version": 1, "machine": {...}, "records": [{"op", "dtype", "shape",
"threads", "tiles", "isa", "kernel", "gflops", "gflops_ci", "default_gflops", "speedup", "study",
"opbench_version", "created_utc"}, ...]}.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path

from filelock import FileLock

from opbench import kernels
from opbench.documents import int_fields
from opbench.dtypes import Array, dtype_name
from opbench.files import atomic_write_text, json_text
from opbench.machine import identity, identity_label, kernel_ran_on, utc_now, utc_stamp
from opbench.ops import OPS, RECURRENT, shape_label
from opbench.ops.base import Shape
from opbench.ops.conv import ConvShape
from opbench.ops.gemm import GemmShape
from opbench.tiles import CONV_PATHS, THRESHOLDS, Tiles
from opbench.tuning_documents import TunedMachine, TunedRecord

SCHEMA_VERSION = 1


def records_dir() -> Path:
    """$OPBENCH_RECORDS_DIR, else the source tree's tuning/records, else ~/.local/share/opbench/records."""
    if os.environ.get("OPBENCH_RECORDS_DIR"):
        return Path(os.environ["OPBENCH_RECORDS_DIR"])
    source = Path(__file__).resolve().parents[1] / "tuning"  # opbench/tuned.py -> the checkout's tuning/
    if source.is_dir() and os.access(source, os.W_OK):
        return source / "records"
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "opbench" / "records"


def machine() -> TunedMachine:
    """The part of the fingerprint a tuned tiling belongs to: the machine's identity (vendor, family, model,
    stepping, caches, ISA flags, hypervisor: a Zen 4 and a Zen 5 both called "AMD EPYC" differ) and the
    kernel set that ran."""
    return {"identity": identity(), **kernel_ran_on()}


def _path() -> Path:
    key = hashlib.sha256(json.dumps(machine(), sort_keys=True).encode()).hexdigest()[:12]
    return records_dir() / f"{key}.json"


def other_machines(op: str, dtype: str) -> list[str]:
    """The machines (in words) that have tuned records for op and dtype in the records directory but are not
    this one: their tiles are never applied here, and a caller says so."""
    here = _path()
    out = []
    for path in sorted(records_dir().glob("*.json")):
        if path == here or ".unreadable-" in path.name:
            continue
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            recs = [r for r in doc["records"] if r.get("op") == op and r.get("dtype") == dtype]
            ident = doc.get("machine", {}).get("identity")
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
            continue
        if recs:
            out.append(
                identity_label(ident) if ident else f"{doc['machine'].get('cpu_model')} (older record)"
            )
    return out


class Unreadable(Exception):
    """The records file exists but cannot be used (not JSON, not a records document, another schema)."""


def _read(path: Path) -> list[TunedRecord]:
    """The records in `path` ([] when there is no file); Unreadable when the file cannot be used."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as e:
        raise Unreadable(f"cannot read it ({e})") from None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise Unreadable(f"not JSON ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
        raise Unreadable("not a tuned-records document")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise Unreadable(f"schema version {doc.get('schema_version')!r}, this opbench reads {SCHEMA_VERSION}")
    good = [r for r in doc["records"] if _well_formed(r)]
    if len(good) != len(doc["records"]):
        raise Unreadable(f"{len(doc['records']) - len(good)} malformed record(s)")
    return good


def _well_formed(r: object) -> bool:
    """Our kernels' records carry positive integer tiles; a user kernel's its parameters (any scalars)."""
    if not (
        isinstance(r, dict)
        and isinstance(r.get("op"), str)
        and isinstance(r.get("dtype"), str)
        and isinstance(r.get("shape"), dict)
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in r["shape"].values())
        and isinstance(r.get("threads"), int)
    ):
        return False
    if "user_kernel" in r:
        return isinstance(r["user_kernel"], dict) and isinstance(r.get("params"), dict)
    return isinstance(r.get("tiles"), dict) and all(
        v in CONV_PATHS
        if k == "conv_path"
        else isinstance(v, int) and not isinstance(v, bool) and v >= (0 if k in THRESHOLDS else 1)
        for k, v in r["tiles"].items()
    )


def load() -> list[TunedRecord]:
    """This machine's records. An unreadable file is left alone (a warning on the 'opbench' logger) and
    read as no records; the next save moves it aside."""
    path = _path()
    try:
        return _read(path)
    except Unreadable as e:
        logging.getLogger("opbench").warning("tuned records %s ignored: %s", path, e)
        return []


def _lock(path: Path) -> FileLock:
    return FileLock(str(path) + ".lock", timeout=60)


def _problem(record: TunedRecord) -> tuple[object, ...]:
    """What a record is for: a save replaces the record of the same (op, dtype, shape, threads) and kernel
    (ours, or a user kernel of the same name and content)."""
    user = record.get("user_kernel") or {}
    return (
        record["op"],
        record["dtype"],
        json.dumps(record["shape"], sort_keys=True),
        record["threads"],
        user.get("func"),
        user.get("sha256"),
    )


def save(record: TunedRecord) -> tuple[Path, str | None]:
    """Insert or replace the record for its (op, dtype, shape, threads), under a lock (concurrent tuners on
    one machine never lose each other's records) and atomically (a kill leaves the old or the new file).
    A records file that cannot be read is never overwritten: it is moved aside to
    `<name>.unreadable-<UTC time>.json` and a new file started. Returns the path and a warning (or None)."""
    path = _path()
    path.parent.mkdir(parents=True, exist_ok=True)
    key = _problem(record)
    warning = None
    with _lock(path):
        try:
            existing = _read(path)
        except Unreadable as e:
            aside = path.with_name(f"{path.stem}.unreadable-{utc_stamp()}.json")
            os.replace(path, aside)
            warning = f"the tuned-records file {path} could not be used ({e}); it was moved to {aside}"
            existing = []
        kept = [r for r in existing if _problem(r) != key]
        doc = {
            "schema_version": SCHEMA_VERSION,
            "machine": machine(),
            "records": [*kept, {**record, "created_utc": utc_now()}],
        }
        atomic_write_text(path, json_text(doc))
    return path, warning


# Shape fields a record must match exactly to stand for a nearby shape: a conv of another filter size,
# stride, padding, dilation or grouping is another algorithm's problem, not a nearby size (and a conv_path
# recorded for one may not run the other: pointwise_gemm is for 1x1 filters only); so is an RNN of another
# activation and a batched GEMM of another product count (the threads split the batch or each product).
EXACT_FIELDS = frozenset(
    {
        "r",
        "s",
        "stride_h",
        "stride_w",
        "pad_h",
        "pad_w",
        "pad_h_end",
        "pad_w_end",
        "dil_h",
        "dil_w",
        "groups",
        "relu",
        "batch",
    }
)


def shape_distance(a: Mapping[str, int], b: Mapping[str, int]) -> float | None:
    """How far apart two shapes of one op are: the sum of |log ratio| over their sizes; None where they
    differ in a field of EXACT_FIELDS (or in their fields, or a size is under 1): no nearness between them.
    A record stands for the nearest shape by it (`lookup`), and so does a portfolio's rule."""
    if set(a) != set(b) or any(a[k] != b[k] for k in a if k in EXACT_FIELDS):
        return None
    sizes = [k for k in a if k not in EXACT_FIELDS]
    if any(a[k] < 1 or b[k] < 1 for k in sizes):
        return None
    return sum(abs(math.log(a[k] / b[k])) for k in sizes)


def lookup(op: str, dtype: str, shape: dict[str, int], threads: int) -> tuple[TunedRecord, str] | None:
    """The record for exactly this problem, else the nearest tuned shape of the same op and dtype (and, for
    conv, the same stride, padding, dilation and groups; for rnn the same activation; distance: sum of
    |log ratio| over the sizes, same thread count preferred); with a note saying which."""
    records = load()
    near = [
        (d, int(r["threads"] != threads), n)
        for n, r in enumerate(records)
        if r["op"] == op
        and "user_kernel" not in r  # our kernels' tiles only
        and r["dtype"] == dtype
        and (d := shape_distance(r["shape"], shape)) is not None
    ]
    if not near:
        return None
    distance = min(near)
    best = records[distance[2]]
    label = shape_label(op, best["shape"])
    exact = distance[:2] == (0.0, 0)
    how = "exact" if exact else f"nearest tuned shape {label}, {best['threads']} thread(s)"
    if portfolio := best.get("portfolio"):  # a portfolio's member (tune/portfolio_run.py): say which
        member = f"member {int(portfolio['member']) + 1} of {portfolio['members']}"
        whose = "listed for this shape" if exact else f"by its rule, the nearest listed shape {label}"
        return best, f"portfolio {portfolio['name']}, {member}, {whose}"
    return best, f"tuned record ({how}) from study {best['study']}"


def tuned(op: str, shape: Shape, dtype: str, threads: int | None = None) -> tuple[dict[str, int | str], str]:
    """The tiles `opbench tune` recorded for this op and shape (the op's shape dataclass) on this machine, or
    for the nearest tuned shape, and a note saying which. Without a record: no tiles ({}: the cache model
    decides, as it does untuned) and a note saying so (and naming other machines' records, never applied):
    a record's tile dict, as `sweep --tuned` passes it on; tuned_tiles and its siblings give it as Tiles."""
    nthreads = kernels.default_threads() if threads is None else threads
    found = lookup(op, dtype, int_fields(shape.to_dict()), nthreads)
    if found is None:
        others = other_machines(op, dtype)
        foreign = (
            f" (records tuned on {', '.join(dict.fromkeys(others))} are not applied to another machine)"
            if others
            else ""
        )
        return {}, f"no tuned record for {op} {dtype} on this machine: cache-model default tiles{foreign}"
    record, note = found
    return dict(record["tiles"]), note


def _as_tiles(found: tuple[dict[str, int | str], str], threads: int | None) -> tuple[Tiles, str]:
    """tuned()'s tiles as the Tiles kernels.gemm / conv2d / rnn / gru / lstm(..., tiles=...) take, run on
    `threads` (None: the kernels' default)."""
    tiles, note = found
    return Tiles.of(tiles, threads), note


def tuned_tiles(
    m: int, n: int, k: int, dtype: str, threads: int | None = None, batch: int = 1
) -> tuple[Tiles, str]:
    """tuned() for a GEMM of m x k by k x n (batch of them: a batched GEMM)."""
    return _as_tiles(tuned("gemm", GemmShape(m, n, k, batch), dtype, threads), threads)


def tuned_conv2d_tiles(
    x: Array, w: Array, stride: int | tuple[int, int] = 1, padding: kernels.Padding = 0,
    dilation: int | tuple[int, int] = 1, groups: int = 1, threads: int | None = None,
) -> tuple[Tiles, str]:  # fmt: skip
    """tuned() for kernels.conv2d(x, w, stride=..., padding=..., dilation=..., groups=...)'s problem."""

    def pair(v: int | tuple[int, int]) -> tuple[int, int]:
        return (int(v[0]), int(v[1])) if isinstance(v, (tuple, list)) else (int(v), int(v))

    (sh, sw), (dh, dw) = pair(stride), pair(dilation)
    ph, pb, pw, pr = kernels.padding_sides(padding)
    n, c, h, wd = x.shape
    shape = ConvShape(
        n, c, h, wd, w.shape[0], w.shape[2], w.shape[3], sh, sw, ph, pw, dh, dw, int(groups), pb, pr
    )
    return _as_tiles(tuned("conv", shape, dtype_name(x.dtype), threads), threads)


def tuned_recurrent_tiles(
    op: str, x: Array, w_hh: Array, threads: int | None = None, nonlinearity: str = "tanh"
) -> tuple[Tiles, str]:
    """tuned() for kernels.rnn / gru / lstm(x, w_ih, w_hh, ...)'s problem (op "rnn", "gru" or "lstm"; x is
    T x B x I, w_hh gates*H x H)."""
    if op not in RECURRENT:
        raise ValueError(f"op must be one of {', '.join(RECURRENT)}, got {op!r}")
    t, b, i = x.shape
    h = int(w_hh.shape[1])
    fields = {"seq_len": t, "batch": b, "input_size": i, "hidden": h}
    if op == "rnn":
        fields["relu"] = int(nonlinearity == "relu")
    return _as_tiles(tuned(op, OPS[op].shape_from_case(fields), dtype_name(x.dtype), threads), threads)


def tuned_lstm_tiles(x: Array, w_hh: Array, threads: int | None = None) -> tuple[Tiles, str]:
    """tuned_recurrent_tiles for kernels.lstm(x, w_ih, w_hh, ...)."""
    return tuned_recurrent_tiles("lstm", x, w_hh, threads)

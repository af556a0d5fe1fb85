"""Sweep result files: one versioned JSON document (provenance + records) and a flat CSV beside it.

Both are rewritten atomically after every case, so a crash or kill leaves complete files holding every
case finished so far (with "complete": false).

Schema history (bump SCHEMA_VERSION and add a dated line for every change):
  1 (2026-11-21): first version (gemm).
  2 (2026-11-22): ops conv and lstm (their shape fields in `shape`); header fields `suite`, `scale`, `mode`
                  and `description`; settings `max_memory_bytes`, `max_call_s`, `verify_max_gflop`;
                  `verify` may be {"skipped": reason}; skip reasons for memory and predicted call time.
  3 (2026-11-23): numbers you can trust on a shared machine (measure.py, reference.py, contention.py):
                  settings.rounds; records carry `machine_speed` and `reference` (in-run probes), `peak` may
                  have source "in-run"; time gains `rounds`, `per_round`, `rel_iqr_within`,
                  `rel_spread_rounds`, `dropped_rounds`, `first_call`; flags `drifting`, `throttled`,
                  `contended`; header `environment` (contention, load, frequency, `warnings`, probe summary)
                  and machine `identity` / `identity_key`.
                  Same day, same fields: a probe in `time.per_round[].probes.after` is now the next probe
                  taken on a settled machine, its `age_s` the seconds from the visit's end to it (before:
                  from the probe to the visit's start); the mindspore backend's `details.thread_placement`.
  4 (2026-11-23): the hand-off probe (reference.py): `reference.handoff_ns`, `time.per_round[].handoff_ns`
                  and `.apart`, flag `apart` (every round ran while our vCPUs sat apart), header
                  `environment.reference.handoff_probe`, `apart_above` and `handoff_apart`; flag
                  `unlike_earlier_runs` (history.py: the median is over 15% from an earlier run's).
  5 (2026-11-23): ops rnn and gru (shape fields seq_len, batch, input_size, hidden; rnn also relu, 0 for
                  tanh and 1 for ReLU); training passes: records carry `pass` (fwd or bwd; a bwd record's
                  label ends in " bwd"), the header `passes`, the CSV a `pass` column.
  6 (2026-11-24): dtype bf16 (records' `dtype`, the header's `dtypes`, `verify.accumulate_assumed`).
  7 (2026-11-24): records carry `repro` (the command that measures the case again: repro.py) and `guards`
                  (what the checks for results too good to be true saw: the output's share of exact zeros,
                  the FLOPs a padding-skipping kernel must do, the best peer); flags `mistrusted` and
                  `suspect` (`over_peak` is folded into `suspect`; older files keep it);
                  `time.per_round[].kept` (whether the round's samples are in `samples_s`, in round order:
                  A/B runs split them).
  8 (2026-11-25): `verify.timed`: each visit's check of the output of its timed calls (round, ok,
                  max_err_ratio, inputs: new values or the first ones, checked: the seeded part recomputed;
                  reason when wrong, skipped when over --verify-max-gflop), beside a full check or its
                  `skipped`; `verify.accumulate_assumed` may also name a blocked precision (fp16:256) or a
                  recurrent unit whose cells compute in the dtype (fp16-cells, bf16-cells),
                  with "+act=E" where a backend's activations are approximations within E.
  9 (2026-11-26): benchdnn's batch files as they are (descriptors.py): `suite.lines` (lines run and
                  skipped, each skipped problem's FILE:LINE, kind and reason, notes, options ignored); conv
                  shapes may carry `pad_h_end` / `pad_w_end` (bottom and right padding, where they differ
                  from the top and left), gemm shapes `batch` (a batched GEMM, where over 1).
 10 (2026-11-26): each case measured across worker processes (--processes, issue 39): `settings.processes`;
                  `time.interval_s` and `time.interval_over` (a bootstrap over processes, then rounds, then
                  samples), `time.processes`, `time.per_process` (each process's median, rounds, samples
                  and spread) and `time.between_processes`; `time.per_round[].process` and `.offsets`;
                  flag `process_dependent`; the header's `backends.NAME.processes` (each worker's layout)
                  and `.in_process`. A cache probe (a triad in L2) beside every visit:
                  `time.per_round[].cache_gbs`, `reference.cache_gbs` and `.cache_speed`. `utilization` is
                  now against the machine's best FMA probe slowed by the speed index beside each round
                  (the geometric mean of the FMA and cache probes' speeds, `per_round[].speed_index`,
                  `reference.speed_index`) only as far as the case's backend, op and dtype followed it
                  (`reference.sensitivity`); `reference.utilization_beside` is the earlier utilization,
                  beside `reference.utilization_best`, `reference.fma_best_gflops` and `.fma_speed`.
 11 (2026-11-27): the AMX ISAs (issue 43): `machine.isas` may name `amx` (AVX-512's kernel set with AMX-BF16
                  bf16 kernels, first where it runs) and `machine.selected_isa` `amx` or `amx-emu` (the
                  tile emulator, run only when named); `machine.features` gains `amx_tile`. No field moved:
                  files of earlier versions read as before.
 12 (2026-11-27): what one user's call costs (issue 41): the header's `backends.NAME.call_overhead_s`
                  (the backend's own call of the swept op on a tiny case, seconds per call, timed where
                  its cases run: opbench.kernels.gemm(a, b) for ours, the framework's op for the others),
                  `.call_overhead_case` and `.call_overhead_call` (what was called, or why it was not
                  timed). Optional: files of earlier versions read as before.
 13 (2026-11-28): `machine.heap`: whether the measuring process kept freed memory in its C heap
                  (machine.keep_freed_memory), so that a backend that allocates its output per call pays
                  malloc, not fresh pages, in its timed calls. Optional: files of earlier versions (whose
                  peers' per-call outputs could be paged in) read as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opbench.documents import Record, ResultsDoc
from opbench.errors import UsageError
from opbench.escape import csv_text
from opbench.files import atomic_write_text, json_text, reserve
from opbench.machine import utc_now
from opbench.ops import named

if TYPE_CHECKING:
    from opbench.case import Result

SCHEMA_VERSION = 13
FORMATS = ("json", "csv")

# Columns taken from a record's time block, in this order.
TIME_COLUMNS = ("median_s", "iqr_s", "min_s", "mean_s", "std_s", "n_samples", "loops", "rel_iqr", "stability")
CSV_COLUMNS = (
    *("op", "pass", "shape", "dtype", "backend", "threads", "device", "status", "reason"),
    *TIME_COLUMNS,
    *("gflops", "peak_gflops", "peak_source", "utilization", "machine_speed", "max_err_ratio"),
    *("rounds", "rel_iqr_within", "rel_spread_rounds"),
    *("isa", "tile_m", "tile_n", "tile_k", "flags", "notes"),
)


def parse_formats(text: str, allowed: tuple[str, ...] = FORMATS) -> list[str]:
    """'json,csv' -> ['json', 'csv'] (any of `allowed`, each once); anything else is a UsageError."""
    out = [t.strip().lower() for t in text.split(",") if t.strip()]
    for f in out:
        if f not in allowed:
            raise UsageError(f"unknown format '{f}' (available: {', '.join(allowed)})")
    if not out:
        raise UsageError(f"--format is empty (available: {', '.join(allowed)})")
    return list(dict.fromkeys(out))


def schema_path() -> Path:
    return Path(__file__).parent / "schemas" / f"sweep-results.v{SCHEMA_VERSION}.json"


def csv_row(record: Mapping[str, Any], shape_keys: list[str]) -> dict[str, Any]:
    t = record.get("time") or {}
    peak = record.get("peak") or {}
    details = record.get("details") or {}
    tiles = details.get("tiles") or {}
    verify = record.get("verify") or {}
    row: dict[str, Any] = {
        "op": record["op"],
        "pass": record.get("pass", "fwd"),
        "shape": record["label"],
        "dtype": record["dtype"],
        "backend": record["backend"],
        "threads": record["threads"],
        "device": record["device"],
        "status": record["status"],
        "reason": record.get("reason") or "",
        "gflops": record.get("gflops"),
        "peak_gflops": peak.get("gflops"),
        "peak_source": peak.get("source"),
        "utilization": record.get("utilization"),
        "machine_speed": record.get("machine_speed"),
        "max_err_ratio": verify.get("max_err_ratio"),
        "isa": details.get("isa"),
        "flags": ";".join(record.get("flags") or []),
        "notes": "; ".join(record.get("notes") or []),
    }
    for key in (*TIME_COLUMNS, "rounds", "rel_iqr_within", "rel_spread_rounds"):
        row[key] = t.get(key)
    for key in ("tile_m", "tile_n", "tile_k"):
        row[key] = tiles.get(key)
    shape = record["shape"]
    if any(key not in shape for key in shape_keys):  # a field a record leaves out at its default
        full = named(record["op"]).shape_from_case(shape)
        shape = {key: getattr(full, key) for key in shape_keys}
    for key in shape_keys:
        row[key] = shape[key]
    return row


class ResultsWriter:
    """Holds the document of one sweep and keeps its files on disk up to date.

    The files are rewritten after every visit of every case; a record's JSON text is made once each time
    it changes and kept, so a rewrite costs one record's serialisation, not the whole document's (a
    conv sweep's 0.5 MB file was serialised 300 times, 6 s of the run)."""

    def __init__(self, out_dir: Path, stem: str, formats: list[str], header: ResultsDoc) -> None:
        self.paths: dict[str, Path] = {}
        self._slots: dict[int, Record] = {}
        self._record_json: dict[int, str] = {}
        self.doc: ResultsDoc = {
            "schema_version": SCHEMA_VERSION,
            "kind": "opbench.sweep",
            **header,
            "created_utc": utc_now(),
            "finished_utc": None,
            "complete": False,
            "records": [],
        }
        # Created exclusively, already holding the header: two sweeps started in the same second into one
        # directory never share a file, and no reader ever sees an empty one.
        name = reserve(out_dir, stem, self._texts(formats))
        for f in formats:
            self.paths[f] = out_dir / f"{name}.{f}"

    def put(self, results: list[tuple[int, Result]]) -> None:
        """Set the result of each case index (sweep order), replacing what an earlier round wrote, then
        rewrite the files once; records stay in sweep order whatever order the rounds visit them in."""
        self._store([(index, result.to_record()) for index, result in results])

    def refresh(self) -> None:
        """Write again after records were changed in place (history.apply flags them at the end)."""
        self._store(sorted(self._slots.items()))

    def _store(self, records: list[tuple[int, Record]]) -> None:
        for index, record in records:
            self._slots[index] = record
            self._record_json[index] = _indented(json_text(record), RECORD_INDENT)
        self.doc["records"] = [self._slots[i] for i in sorted(self._slots)]
        self.flush()

    def finish(self) -> None:
        self.doc["complete"] = True
        self.doc["finished_utc"] = utc_now()
        self.flush()

    def _json(self) -> str:
        """json_text(self.doc), made from the kept record texts."""
        header = {k: v for k, v in self.doc.items() if k != "records"}
        head = json_text(header).rstrip()
        assert head.endswith("}")
        if not self._slots:
            return json_text(self.doc)
        records = ",\n".join(self._record_json[i] for i in sorted(self._slots))
        return f'{head[:-1].rstrip()},\n "records": [\n{records}\n ]\n}}\n'

    def _texts(self, formats: list[str]) -> dict[str, str]:
        texts = {}
        if "json" in formats:
            texts["json"] = self._json()
        if "csv" in formats:
            shape_keys = list(self.doc.get("shape_fields", []))
            rows = (csv_row(r, shape_keys) for r in self.doc["records"])
            texts["csv"] = csv_text([*shape_keys, *CSV_COLUMNS], rows)
        return texts

    def flush(self) -> None:
        for fmt, text in self._texts(list(self.paths)).items():
            atomic_write_text(self.paths[fmt], text)


# json_text indents by one space per level; a record sits two levels down (document -> records -> record).
RECORD_INDENT = 2


def _indented(text: str, spaces: int) -> str:
    pad = " " * spaces
    return "\n".join(pad + line for line in text.rstrip("\n").split("\n"))

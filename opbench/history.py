"""Earlier runs of the same case on this machine: what a single process cannot see.

A case's rounds are spread over one run, so the rounds agree when the machine holds one state for the
run. Some states last a whole process: on a 2-vCPU Zen 5 guest, our fp16 conv N16 C32 28 K32 f3 read
0.62, 0.73 and 0.62 ms in three processes, each run's three rounds within 3% of each other and every probe
steady. Nothing inside the second run could tell. pyperf's answer is values from many processes; ours is
to keep each case's last HISTORY_KEEP medians per machine (in the cache directory beside the peaks) and
compare every new median with them:

- A case whose median differs by more than HISTORY_DIFF from one of its earlier medians (same machine
  identity, threads, device, backend and its version, tiles, cold or warm cache, and build of our
  kernels) is flagged `unlike_earlier_runs`, with a note naming the earlier value and when it was taken;
  the header's `environment.warnings` counts them.
- A case measured in several processes (--processes) is judged by its process medians: it is unlike an
  earlier run when the range of this run's process medians lies more than HISTORY_DIFF from the earlier
  run's range (each kept as low_s/high_s beside the median), not when one process of either run differs.
- Records already flagged for a known disturbance (contended, throttled, apart) are neither judged nor
  kept: they say why they differ, and would make the next quiet run look wrong.
- The history is written under a file lock, atomically, at the end of a complete run; an interrupted run
  adds nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict, cast

from filelock import FileLock, Timeout

from opbench.documents import BackendSummary, MachineBlock, Record, ResultsDoc
from opbench.files import atomic_write_text, json_text
from opbench.machine import utc_now
from opbench.record_blocks import TimeBlock

HISTORY_KEEP = 5  # medians kept per case
HISTORY_DIFF = 0.15  # a median this far (relative) from an earlier one does not reproduce
HISTORY_MAX_CASES = 5000  # per machine; the least recently measured go first
FLAG = "unlike_earlier_runs"
DISTURBED = frozenset({"contended", "throttled", "apart"})


def case_key(doc: ResultsDoc, record: Record, builds: Mapping[str, str | None]) -> str:
    """What must match for two medians to be the same case measured again (`builds`: per backend name, what
    identifies its own compiled code, Backend.build(): a rebuilt kernel is a new case)."""
    backend = record["backend"]
    version = ((doc.get("backends") or {}).get(backend) or BackendSummary()).get("version")
    details = record.get("details") or {}
    return json.dumps(
        [
            record["op"],
            record["label"],
            record["dtype"],
            backend,
            version,
            builds.get(backend),
            record.get("threads"),
            record.get("device"),
            details.get("tiles_effective") or details.get("tiles"),
            (record.get("time") or TimeBlock()).get("cold_cache"),
        ],
        sort_keys=True,
    )


def _path(cache_dir: Path) -> Path:
    return cache_dir / "history.json"


class Entry(TypedDict):
    """One earlier median of a case: the median, the range of its process medians, and when."""

    median_s: float
    low_s: float
    high_s: float
    utc: str


def _read(path: Path) -> dict[str, Any]:  # the history file as read: each entry checked by _earlier
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _earlier(entries: object) -> list[Entry]:
    if not isinstance(entries, list):
        return []
    return [
        cast(Entry, e) for e in entries if isinstance(e, dict) and isinstance(e.get("median_s"), (int, float))
    ]


def process_range(record: Record) -> tuple[float, float]:
    """The lowest and highest of a record's process medians (--processes), or its median twice."""
    t = record.get("time") or TimeBlock()
    medians = [float(p["median_s"]) for p in t.get("per_process") or [] if p.get("median_s")]
    if len(medians) < 2:
        return float(t["median_s"]), float(t["median_s"])
    return min(medians), max(medians)


def _gap(low: float, high: float, earlier: Entry) -> float:
    """How far (relative, + slower) this run's process medians lie from an earlier run's; 0 where the two
    ranges overlap."""
    e_low = float(earlier.get("low_s") or earlier["median_s"])
    e_high = float(earlier.get("high_s") or earlier["median_s"])
    if low > e_high:
        return low / e_high - 1.0
    if high < e_low:
        return high / e_low - 1.0
    return 0.0


def _judged(record: Record) -> bool:
    t = record.get("time") or TimeBlock()
    return (
        record.get("status") == "ok"
        and isinstance(t.get("median_s"), (int, float))
        and t["median_s"] > 0
        and not DISTURBED & set(record.get("flags") or [])
    )


def apply(doc: ResultsDoc, cache_dir: Path, builds: Mapping[str, str | None] | None = None) -> int:
    """Flag the records of a finished sweep document whose median differs from an earlier run's, then add
    this run's medians to the machine's history (`builds`: see case_key). Returns the number flagged."""
    machine = (doc.get("machine") or MachineBlock()).get("identity_key") or "unknown"
    path = _path(cache_dir)
    flagged = 0
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock", timeout=60):
            history = _read(path)
            cases = history.setdefault(machine, {})
            if not isinstance(cases, dict):
                cases = history[machine] = {}
            when = utc_now()
            for record in doc.get("records", []):
                if not _judged(record):
                    continue
                key = case_key(doc, record, builds or {})
                median = float((record.get("time") or TimeBlock())["median_s"])
                low, high = process_range(record)
                earlier = _earlier(cases.get(key))
                worst = max(earlier, key=lambda e: abs(_gap(low, high, e)), default=None)
                if worst is not None and abs(_gap(low, high, worst)) > HISTORY_DIFF:
                    flagged += 1
                    record.setdefault("flags", []).append(FLAG)
                    change = median / worst["median_s"] - 1.0
                    record.setdefault("notes", []).append(
                        f"median {1e3 * median:.4g} ms is {100 * abs(change):.0f}% "
                        f"{'slower' if change > 0 else 'faster'} than an earlier run of the same case on "
                        f"this machine ({1e3 * worst['median_s']:.4g} ms, {worst.get('utc')}): it does not "
                        "reproduce across processes here"
                    )
                cases.pop(key, None)  # re-inserted last: the dict's order is the order of use
                entry: Entry = {"median_s": median, "low_s": low, "high_s": high, "utc": when}
                cases[key] = [*earlier, entry][-HISTORY_KEEP:]
            while len(cases) > HISTORY_MAX_CASES:
                cases.pop(next(iter(cases)))
            atomic_write_text(path, json_text(history))
    except (OSError, Timeout):
        pass  # an unwritable cache only means no comparison with earlier runs
    return flagged


def warning(flagged: int) -> str:
    return (
        f"{flagged} case(s) differ by more than {100 * HISTORY_DIFF:.0f}% from an earlier run of the same "
        f"case on this machine (same code and settings): flagged {FLAG}; here the spread across processes "
        "is larger than within one run"
    )

"""Concurrent use loses nothing: sweeps started together into one --out each keep their own results file,
concurrent tuned-record saves keep every record, an unreadable records file is moved aside (never
overwritten), and a record is saved only when the confirmation measured the winner faster than the default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import FAST_TIMER

from opbench import tuned as records
from opbench.tune.study import record_verdict


def test_eight_concurrent_sweeps_into_one_out_keep_eight_results(tmp_path: Path) -> None:
    out = tmp_path / "shared"
    args = ["sweep", "gemm", "--m", "8", "--n", "8", "--k", "8", "--dtype", "fp32", "--backend", "numpy"]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "opbench",
                *args,
                "--seed",
                str(i),
                "--threads",
                "1",
                "--out",
                str(out),
                *FAST_TIMER,
                "--quiet",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(8)
    ]
    results = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in results]
    written = sorted(out.glob("gemm-*.json"))
    assert len(written) == 8 and len(list(out.glob("gemm-*.csv"))) == 8, sorted(os.listdir(out))
    seeds = set()
    for path in written:
        doc = json.loads(path.read_text())
        assert doc["complete"] is True and len(doc["records"]) == 1
        seeds.add(doc["settings"]["seed"])
    assert seeds == set(range(8))  # each process's own file, none overwritten
    # Each process printed the paths it wrote, and no two processes claim the same file.
    claimed = [line for out_text, _ in results for line in out_text.split() if line.endswith(".json")]
    assert len(claimed) == len(set(claimed)) == 8


SAVE = """
import sys
from opbench import tuned as records
i = int(sys.argv[1])
records.save({"op": "gemm", "dtype": "fp32", "shape": {"m": 100 + i, "n": 64, "k": 64}, "threads": 1,
              "tiles": {"tile_m": 14, "tile_n": 32, "tile_k": 16}, "study": f"s{i}"})
"""


def test_eight_concurrent_saves_keep_eight_records(tmp_path: Path) -> None:
    env = {**os.environ, "OPBENCH_RECORDS_DIR": str(tmp_path)}
    procs = [
        subprocess.Popen([sys.executable, "-c", SAVE, str(i)], env=env, stderr=subprocess.PIPE, text=True)
        for i in range(8)
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read() if p.stderr else ""
    (path,) = [p for p in tmp_path.glob("*.json")]
    saved = json.loads(path.read_text())["records"]
    assert sorted(r["study"] for r in saved) == [f"s{i}" for i in range(8)]


def _record(m: int) -> dict[str, object]:
    return {
        "op": "gemm",
        "dtype": "fp32",
        "shape": {"m": m, "n": 8, "k": 8},
        "threads": 1,
        "tiles": {"tile_m": 14, "tile_n": 32, "tile_k": 16},
        "study": f"s{m}",
    }


def test_an_unreadable_records_file_is_moved_aside_not_overwritten(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OPBENCH_RECORDS_DIR", str(tmp_path))
    first, _ = records.save(_record(1))
    for content in ("{ not json", json.dumps({"schema_version": 99, "records": [{"op": "gemm"}]})):
        first.write_text(content)
        assert records.load() == []  # read as no records, the file untouched
        assert first.read_text() == content
        path, warning = records.save(_record(2))
        assert path == first and warning is not None and "moved to" in warning
        aside = Path(warning.rsplit("moved to ", 1)[1])
        assert aside.read_text() == content  # kept whole for a person to look at
        assert [r["study"] for r in records.load()] == ["s2"]
        aside.unlink()


def _row(name: str, gflops: float, lo: float, hi: float) -> dict[str, object]:
    return {"name": name, "tiles": {}, "gflops": gflops, "gflops_ci": [lo, hi], "n_samples": 30}


def test_a_record_is_saved_only_when_faster_beyond_the_intervals() -> None:
    default = _row("default", 100.0, 98.0, 102.0)
    faster = _row("#1", 110.0, 106.0, 114.0)
    overlapping = _row("#1", 103.0, 101.0, 105.0)
    slower = _row("#1", 99.6, 97.0, 101.0)
    assert record_verdict({"best": faster, "default": default}) is None
    for best in (overlapping, slower):
        verdict = record_verdict({"best": best, "default": default})
        assert verdict is not None and "not faster than the cache-model default" in verdict
    assert record_verdict({"best": None, "default": default}) == "no candidate was confirmed"
    failed_default = {"name": "default", "tiles": {}, "failure": "crash: SIGSEGV"}
    assert record_verdict({"best": slower, "default": failed_default}) is None

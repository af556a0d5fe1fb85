"""Hostile input on the command line and in files: invalid numbers in results are named, never 'unchanged';
every JSON file opbench writes is strict; work is counted before it is expanded; only regular files under a
size cap are read; every command-line error is one line with exit status 2; and the tuning worker never
imports an `opbench/` folder from the working directory."""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli, tiny_gemm_results


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_gemm_results(tmp_path_factory.mktemp("hostile"))


def _one_line_exit_2(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    line = proc.stderr.strip()
    assert line.count("\n") == 0 and "Traceback" not in line, proc.stderr
    return line


def _edited(src: Path, dest: Path, edit: Any, *, allow_nan: bool = True) -> Path:
    doc = json.loads(src.read_text())
    edit(doc)
    dest.write_text(json.dumps(doc, allow_nan=allow_nan))
    return dest


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("median_s", math.nan),
        ("median_s", math.inf),
        ("median_s", 0.0),
        ("median_s", -1e-3),
        ("samples_s", [1e-6, math.nan]),
        ("samples_s", [1e-6, -2e-6]),
        ("gflops", -3.0),
        ("gflops", math.inf),
        ("median_s", "fast"),
    ],
)
def test_invalid_numbers_are_named_never_unchanged(
    results: Path, tmp_path: Path, field: str, value: Any
) -> None:
    def edit(doc: dict[str, Any]) -> None:
        r = doc["records"][1]
        (r if field == "gflops" else r["time"])[field] = value

    bad = _edited(results, tmp_path / "bad.json", edit)
    for args in (
        ["compare", str(results), str(bad), "--fail-on-regression"],
        ["compare", str(bad), str(results)],
        ["report", str(bad), "--out", str(tmp_path / "r")],
    ):
        line = _one_line_exit_2(run_cli(args))
        assert str(bad) in line and "records[1]" in line and field in line, line
    assert not (tmp_path / "r").exists()


def test_every_json_file_opbench_writes_is_strict(results: Path, tmp_path: Path) -> None:
    def strict(path: Path) -> None:
        json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"{path}: {c} is not JSON"))

    other = _edited(results, tmp_path / "other.json", lambda d: d["records"][0]["time"].update(stability="x"))
    assert run_cli(["report", str(results), "--out", str(tmp_path / "r"), "--format", "json"]).returncode == 0
    assert run_cli(["compare", str(results), str(other), "--out", str(tmp_path / "c")]).returncode == 0
    for path in [results, tmp_path / "r" / "report.json", tmp_path / "c" / "compare.json"]:
        strict(path)
    # A value that is not a number (NaN) is written as null, not as NaN.
    from opbench.files import json_text

    assert json.loads(json_text({"a": math.nan, "b": [math.inf, 1.5]})) == {"a": None, "b": [None, 1.5]}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sweep", "gemm", "--m", "1:2000000000:+1"], "expands to more than 10000 sizes"),
        (["sweep", "gemm", "--m", "1:9000:+1", "--n", "1:9000:+1"], "expand to 81000000 shapes"),
        (
            ["sweep", "conv", "--batch", "1:5000:+1", "--in-channels", "1:5000:+1", "--mode", "product"],
            "expand to 25000000 shapes",
        ),
        (["sweep", "gemm", "--m", "1:100:xinf"], "factor must be a finite number > 1"),
        (["sweep", "gemm", "--m", "99999999999999999999"], "over the limit of 2^40"),
    ],
)
def test_work_is_counted_before_it_is_expanded(args: list[str], message: str, tmp_path: Path) -> None:
    started = time.monotonic()
    line = _one_line_exit_2(run_cli([*args, "--out", str(tmp_path / "o")]))
    assert message in line and time.monotonic() - started < 30
    assert not (tmp_path / "o").exists()


def test_spec_and_space_files_obey_the_same_limits(tmp_path: Path) -> None:
    spec = tmp_path / "big.toml"
    spec.write_text('[[sweep]]\nop = "gemm"\nmode = "product"\naxes = { m = "1:500:+1", n = "1:500:+1" }\n')
    assert "250000 shapes (limit 10000)" in _one_line_exit_2(run_cli(["sweep", "--spec", str(spec)]))
    space = tmp_path / "space.toml"
    space.write_text(
        'op = "gemm"\n[params.tile_m]\nmultiple_of = 1\nstart = 1\nstep = "+1"\nstop = "2**40"\n'
        '[params.tile_n]\nmultiple_of = "nr"\nstart = "nr"\nstop = "n"\n'
        '[params.tile_k]\nmultiple_of = 8\nstart = 16\nstop = "k"\n'
    )
    tune = ["tune", "gemm", "--m", "8", "--n", "8", "--k", "8", "--out", str(tmp_path), "--space"]
    line = _one_line_exit_2(run_cli([*tune, str(space)]))
    assert "over 4096 candidates" in line
    power = tmp_path / "power.toml"
    power.write_text(space.read_text().replace('"2**40"', '"9**9**9"').replace('"+1"', '"x2"'))
    line = _one_line_exit_2(run_cli([*tune, str(power)]))
    assert "out of range" in line


def test_only_regular_files_under_the_cap_are_read(results: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.truncate((256 << 20) + 1)  # sparse: over the cap without using the disk
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    cases = [
        (["report", "/dev/zero"], "not a regular file"),
        (["report", str(fifo)], "not a regular file"),
        (["compare", str(results), str(fifo)], "not a regular file"),
        (["report", str(tmp_path)], "a directory"),
        (["report", str(big)], "over the 256 MiB limit"),
        (["report", str(deep)], "nested too deeply"),
        (["sweep", "--spec", "/dev/zero"], "not a regular file"),
        (["sweep", "--spec", str(fifo)], "not a regular file"),
        (["tune", "gemm", "--m", "8", "--n", "8", "--k", "8", "--space", str(fifo)], "not a regular file"),
    ]
    for args, message in cases:
        started = time.monotonic()
        line = _one_line_exit_2(run_cli(args, timeout=60))
        assert message in line and time.monotonic() - started < 30, (args, line)
    assert stat.S_ISFIFO(fifo.stat().st_mode)  # never opened for writing, never replaced


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sweep", "gemm", "--threads", "1025"], "the limit is"),
        (["sweep", "gemm", "--threads", "99999999999999999999999"], "the limit is"),
        (["tune", "gemm", "--m", "8", "--n", "8", "--k", "8", "--threads", "100000"], "the limit is"),
        (["peak", "--threads", "1,4096"], "the limit is"),
        (["sweep", "gemm", "--m", "8", "--out", "/proc/opbench-out"], "cannot write in /proc"),
        (["sweep", "gemm", "--m", "8", "--out", "/sys/opbench/x"], "cannot write in /sys"),
        (["report", "x.json", "--out", "/proc/r"], "cannot write in /proc"),
        (["compare", "a.json", "b.json", "--out", "/sys/c"], "cannot write in /sys"),
        (["tune", "gemm", "--m", "8", "--n", "8", "--k", "8", "--out", "/proc/t"], "cannot"),
    ],
)
def test_command_line_errors_are_one_line(args: list[str], message: str) -> None:
    assert message in _one_line_exit_2(run_cli(args))


def test_oversubscription_within_the_bound_runs(tmp_path: Path) -> None:
    path = tiny_gemm_results(tmp_path, "cpp", threads=2 * len(os.sched_getaffinity(0)))
    assert json.loads(path.read_text())["complete"] is True


def test_the_tuning_worker_never_imports_an_opbench_folder_from_the_working_directory(tmp_path: Path) -> None:
    decoy = tmp_path / "opbench"
    decoy.mkdir()
    marker = tmp_path / "decoy-was-imported"
    (decoy / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('x')\nraise SystemExit(99)\n")
    for sub in ("tune", "ops", "__main__"):
        (decoy / f"{sub}.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    exe = Path(sys.executable).parent / "opbench"
    assert exe.exists(), "the console script of the installed package"
    proc = subprocess.run(
        [
            str(exe),
            "tune",
            "gemm",
            "--m",
            "16",
            "--n",
            "16",
            "--k",
            "16",
            "--threads",
            "1",
            "--trials",
            "2",
            "--confirm-top",
            "1",
            "--confirm-rounds",
            "1",
            "--out",
            str(tmp_path / "o"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists(), "the decoy opbench/ in the working directory was imported"
    assert "2 trials in the study" in proc.stdout

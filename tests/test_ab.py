"""`opbench ab` (cli/ab.py, report/ab.py): the verdict logic on a fake clock, the paired bootstrap, fast_p,
the guards' say in the verdict, and the command end to end on our kernel and a user kernel."""

from __future__ import annotations

import json
import shlex
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from opbench import backends
from opbench.backends.base import Backend, Prepared
from opbench.blocks import Time
from opbench.case import Result
from opbench.cli.ab import exit_code
from opbench.measure import Bench
from opbench.ops import gemm
from opbench.report import ab
from opbench.sweep import driver
from opbench.sweep.config import SweepConfig, setup_backends
from opbench.timing import Timer, TimerConfig
from tests.conftest import FAST_TIMER, run_cli


@pytest.mark.parametrize(
    ("lo", "hi", "expected"),
    [
        (1.10, 1.30, "FASTER"),
        (0.70, 0.90, "SLOWER"),
        (0.99, 1.02, "SAME"),
        (1.00, 1.10, "AMBIGUOUS"),  # straddles 1.05
        (0.90, 1.01, "AMBIGUOUS"),
        (0.94, 1.06, "AMBIGUOUS"),  # wider than the threshold on both sides: no claim either way
    ],
)
def test_verdict_from_the_interval(lo: float, hi: float, expected: str) -> None:
    assert ab.verdict(lo, hi, 0.05) == expected


def test_the_bootstrap_pairs_rounds_so_a_drifting_machine_cancels() -> None:
    rng = np.random.default_rng(1)
    speeds = (1.0, 1.6, 0.8)  # the machine's speed in each round: 2x apart, as on these VMs
    a = [s * (1e-3 + 1e-5 * rng.standard_normal(8)) for s in speeds]
    b = [s * (0.8e-3 + 1e-5 * rng.standard_normal(8)) for s in speeds]
    point, lo, hi = ab.speedup_interval(a, b)
    assert abs(point - 1.25) < 0.05 and 1.15 < lo <= point <= hi < 1.35
    assert ab.verdict(lo, hi, 0.05) == "FASTER"
    # the same samples with B's rounds in another order (not paired with A's): the drift no longer
    # cancels and the interval says so
    _, lo_unpaired, hi_unpaired = ab.speedup_interval(a, b[::-1])
    assert hi_unpaired - lo_unpaired > 3 * (hi - lo)


def test_round_samples_split_by_kept_rounds() -> None:
    time = Time.from_block({
        "median_s": 3,
        "samples_s": [1, 2, 3, 4, 5],
        "per_round": [
            {"n_samples": 2, "kept": True}, {"n_samples": 4, "kept": False}, {"n_samples": 3, "kept": True},
        ],
    })  # fmt: skip
    assert time is not None
    split = ab.round_samples(time)
    assert [list(r) if r is not None else None for r in split] == [[1, 2], None, [3, 4, 5]]
    schema_6 = Time.from_block({"median_s": 1.5, "samples_s": [1, 2], "per_round": [{"n_samples": 2}]})
    assert schema_6 is not None and len(ab.round_samples(schema_6)) == 1


def test_rounds_are_paired_only_where_both_sides_kept_them() -> None:
    a = [np.full(4, 1.0), np.full(4, 9.0), np.full(4, 2.0)]  # A's round 2 ran on a throttled machine...
    b = [np.full(4, 0.5), None, np.full(4, 1.0)]  # ...and B dropped its own round 2
    point, lo, hi = ab.speedup_interval(a, b)
    assert point == lo == hi == 2.0  # rounds 1 and 3 only: both say 2x


# --- the whole path on a fake clock: a backend whose calls take exactly the time it says -------------------


class _FakeCall(Prepared):
    clock = "fake"

    def __init__(self, seconds: Any, output: Any) -> None:
        self.seconds, self._output, self.details = seconds, output, {}

    def run(self, loops: int) -> float:
        return loops * self.seconds()

    def output(self) -> Any:
        return self._output


class FakeBackend(Backend):
    """Calls of `per_call` seconds, times `jitter` noise; the right answer unless `zeros`."""

    ops = ("gemm",)

    def __init__(self, name: str, per_call: float, jitter: float, zeros: bool = False) -> None:
        self.name = name  # type: ignore[misc]
        self.per_call, self.jitter, self.zeros = per_call, jitter, zeros
        self.rng = np.random.default_rng(zlib.crc32(name.encode()))  # the same jitter in every run

    def unavailable_reason(self) -> str | None:
        return None

    def version(self) -> str | None:
        return "fake"

    def setup(self, threads: int, device: str) -> None:
        return None

    def prepare(self, op: str, shape: Any, inputs: dict[str, Any], params: dict[str, Any]) -> Prepared:
        out = np.zeros((shape.m, shape.n), np.float32) if self.zeros else inputs["a"] @ inputs["b"]
        return _FakeCall(lambda: self.per_call * (1 + self.jitter * self.rng.standard_normal()), out)


def _ab_on_fake_clock(a: FakeBackend, b: FakeBackend, threshold: float | None = None) -> dict[str, Any]:
    for side in (a, b):
        backends.register(side.name, lambda side=side: side)
    cfg = SweepConfig(
        op=gemm.OP,
        shapes=tuple(gemm.GemmShape(m, 16, 16) for m in (3, 8, 13, 16, 31)),
        dtypes=("fp32",),
        backends=(a.name, b.name),
        threads=1,
        timer=TimerConfig(warmup_s=1e-4, min_sample_s=1e-4, max_time_s=0.02),
        rounds=3,
        paired=True,
    )
    states = setup_backends(cfg.backends, 1, "cpu")
    results: dict[int, Result] = {}
    bench = Bench(Timer(cfg.timer))  # no in-run probes: the clock is fake
    driver.run_sweep(cfg, states, {}, lambda rs: results.update(rs), bench=bench)
    return ab.analyse(list(results.values()), a.name, b.name, threshold)


def test_a_faster_b_is_faster_every_time_on_a_noisy_fake_clock() -> None:
    result = _ab_on_fake_clock(FakeBackend("old", 1e-3, 0.03), FakeBackend("new", 0.8e-3, 0.03))
    assert [r["verdict"] for r in result["rows"]] == ["FASTER"] * 5
    for r in result["rows"]:
        lo, hi = r["speedup_ci"]
        assert lo <= r["speedup"] <= hi
        assert lo > 1.1 and hi < 1.45
    s = result["summary"]
    assert s["counts"]["FASTER"] == 5 and abs(s["geomean_speedup"] - 1.25) < 0.06
    assert s["fast_p"] == {"1": 1.0, "1.1": 1.0, "1.5": 0.0}
    assert result["threshold_source"] == "measured noise" and result["threshold"] >= ab.NOISE_FLOOR
    slower = _ab_on_fake_clock(FakeBackend("o2", 0.8e-3, 0.03), FakeBackend("n2", 1e-3, 0.03))
    assert {r["verdict"] for r in slower["rows"]} == {"SLOWER"}


def test_equal_sides_are_never_faster_or_slower() -> None:
    result = _ab_on_fake_clock(FakeBackend("a1", 1e-3, 0.05), FakeBackend("b1", 1e-3, 0.05))
    assert {r["verdict"] for r in result["rows"]} <= {"SAME", "AMBIGUOUS"}
    assert result["summary"]["fast_p"]["1.1"] == 0.0


def test_a_suspect_or_wrong_b_is_never_counted_faster() -> None:
    # 20x faster than A: the peer guard flags it suspect, and the verdict will not call it FASTER
    result = _ab_on_fake_clock(FakeBackend("a2", 1e-3, 0.01), FakeBackend("b2", 0.05e-3, 0.01))
    for r in result["rows"]:
        assert "suspect" in r["b"]["flags"] and r["verdict"] == "AMBIGUOUS"
        assert "never counted as FASTER" in r["reason"]
    assert result["summary"]["fast_p"]["1"] == 0.0
    # a wrong answer is no measurement at all
    wrong = _ab_on_fake_clock(FakeBackend("a3", 1e-3, 0.01), FakeBackend("b3", 0.5e-3, 0.01, zeros=True))
    assert {r["verdict"] for r in wrong["rows"]} == {"FAILED"}
    assert all("B wrong_answer" in r["reason"] for r in wrong["rows"])
    assert wrong["summary"]["fast_p"]["1"] == 0.0


def test_a_given_threshold_is_used() -> None:
    result = _ab_on_fake_clock(FakeBackend("a4", 1e-3, 0.01), FakeBackend("b4", 0.8e-3, 0.01), threshold=0.5)
    assert result["threshold"] == 0.5 and {r["verdict"] for r in result["rows"]} == {"SAME"}


# --- the command -----------------------------------------------------------------------------------------


def test_ab_command_on_two_tilings_and_a_user_kernel(tmp_path: Path) -> None:
    out = tmp_path / "ab"
    proc = run_cli(
        ["ab", "gemm", "--a", "cpp", "--b", "cpp:tile_k=8,tile_n=32", "--problem", "17x40:40x33",
         "--problem", "64x64:64x64", "--dtype", "fp32", "--threads", "1", "--out", str(out), *FAST_TIMER]
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "speed-up" in proc.stdout and "geomean" in proc.stdout
    (path,) = out.glob("ab-*.json")
    doc = json.loads(path.read_text())
    assert doc["kind"] == "opbench.ab" and doc["a"] == "cpp" and doc["b"] == "cpp:tile_k=8,tile_n=32"
    assert len(doc["rows"]) == 2 and (out / path.name.replace(".json", ".csv")).exists()
    for row in doc["rows"]:
        assert row["verdict"] in ab.VERDICTS and len(row["speedup_ci"]) == 2
        assert row["b"]["repro"].count("--tile-k 8") == 1 and "--tile-n 32" in row["b"]["repro"]
        argv = shlex.split(row["repro"])
        assert argv[:3] == ["opbench", "ab", "gemm"] and "--problem" in argv
    (results,) = out.glob("gemm-*.json")  # both sides' records, as a sweep writes them
    assert {r["backend"] for r in json.loads(results.read_text())["records"]} == {
        "cpp",
        "cpp:tile_k=8,tile_n=32",
    }
    # the repro of one case runs that case, both sides
    again = run_cli(
        [*shlex.split(doc["rows"][0]["repro"])[1:], "--out", str(tmp_path / "again"), *FAST_TIMER]
    )
    assert again.returncode == 0, again.stderr
    (one,) = (tmp_path / "again").glob("ab-*.json")
    assert [r["label"] for r in json.loads(one.read_text())["rows"]] == [doc["rows"][0]["label"]]


def test_ab_with_user_kernels(tmp_path: Path) -> None:
    kernel = tmp_path / "mine.py"
    kernel.write_text(
        "import numpy as np\n"
        "def mm(a, b, repeat=1):\n"
        "    for _ in range(repeat):\n"
        "        c = a @ b\n"
        "    return c\n"
    )
    base = ["ab", "gemm", "--problem", "96x96:96x96", "--dtype", "fp32", "--threads", "1", *FAST_TIMER]
    proc = run_cli(
        [*base, "--a", f"{kernel}:mm", "--b", f"{kernel}:mm:repeat=4", "--fail-on", "failed",
         "--out", str(tmp_path / "o")]
    )  # fmt: skip
    # (whether B, doing the work four times, is judged SLOWER rests on timings: benchmarks/ab_calibration.py
    # measures that; here both sides are right, so --fail-on failed passes)
    assert proc.returncode == 0, proc.stderr
    (path,) = (tmp_path / "o").glob("ab-*.json")
    (row,) = json.loads(path.read_text())["rows"]
    assert row["verdict"] in ab.VERDICTS and row["verdict"] != "FAILED" and row["speedup"] > 0
    assert "--kernel-params repeat=4" in row["b"]["repro"]


def test_fail_on_slower_failed_or_both() -> None:
    summary = {"counts": {v: 0 for v in ab.VERDICTS}, "b_failed": 0}
    slower, failed = dict(summary, counts={**summary["counts"], "SLOWER": 1}), dict(summary, b_failed=1)
    options = (frozenset(), frozenset({"slower"}), frozenset({"failed"}), frozenset({"slower", "failed"}))
    assert [exit_code(summary, f) for f in options] == [0, 0, 0, 0]
    assert [exit_code(slower, f) for f in options] == [0, 1, 0, 1]
    assert [exit_code(failed, f) for f in options] == [0, 0, 1, 1]


FAILING_KERNEL = (
    "import numpy as np\n"
    "def mm(a, b, fail=False):\n"
    "    if fail:\n"
    "        raise RuntimeError('this build is broken')\n"
    "    return (a.astype(np.float64) @ b.astype(np.float64)).astype(a.dtype)\n"
)


@pytest.mark.parametrize("failing", ["a", "b"])
def test_ab_survives_either_side_failing_and_fail_on_failed_judges_b(tmp_path: Path, failing: str) -> None:
    kernel = tmp_path / "k.py"
    kernel.write_text(FAILING_KERNEL)
    sides = {"a": f"{kernel}:mm", "b": f"{kernel}:mm:fail=1"}
    if failing == "a":
        sides = {"a": f"{kernel}:mm:fail=1", "b": f"{kernel}:mm"}
    base = ["ab", "gemm", "--problem", "8x16:16x8", "--problem", "5x3:3x7", "--dtype", "fp32",
            "--threads", "1", "--a", sides["a"], "--b", sides["b"], *FAST_TIMER]  # fmt: skip
    for fail_on, want in (
        ("slower", 0),
        ("failed", int(failing == "b")),
        ("slower,failed", int(failing == "b")),
    ):
        out = tmp_path / fail_on.replace(",", "-")
        proc = run_cli([*base, "--fail-on", fail_on, "--out", str(out)])
        assert proc.returncode == want, (fail_on, proc.stderr)
        assert "Traceback" not in proc.stderr
        (path,) = out.glob("ab-*.json")  # written whichever side failed
        doc = json.loads(path.read_text())
        assert [r["verdict"] for r in doc["rows"]] == ["FAILED", "FAILED"]
        assert all("this build is broken" in r["reason"] for r in doc["rows"])
        assert doc["summary"]["b_failed"] == (2 if failing == "b" else 0)
        assert doc["summary"]["fast_p"] == {"1": 0.0, "1.1": 0.0, "1.5": 0.0}


def test_a_wrong_b_through_ab_fails_its_cases(tmp_path: Path) -> None:
    """A kernel right on its first call only, or remembering its first answer, is a wrong answer through ab
    too, and --fail-on failed says so."""
    spec = f"{Path(__file__).parent / 'wrong_answers.py'}:gemm"
    for kind in ("first_only", "memo"):
        out = tmp_path / kind
        proc = run_cli(
            ["ab", "gemm", "--problem", "24x64:64x16", "--dtype", "fp16", "--threads", "1", "--a",
             f"{spec}:kind=right", "--b", f"{spec}:kind={kind}", "--fail-on", "failed", "--rounds", "2",
             "--out", str(out), *FAST_TIMER]
        )  # fmt: skip
        assert proc.returncode == 1, proc.stderr
        (path,) = out.glob("ab-*.json")
        (row,) = json.loads(path.read_text())["rows"]
        assert row["verdict"] == "FAILED" and row["b"]["status"] == "wrong_answer", row
        assert row["a"]["status"] == "ok"


@pytest.mark.parametrize(
    ("side", "message"),
    [
        ("torch:tile_m=4", "torch takes no parameters"),
        ("cpp:tile_q=4", "NAME one of tile_m, tile_n, tile_k, isa, accumulate"),
        ("cpp:tile_m=0", "tile_m must be an integer >= 1"),
        ("cpp:isa=sse9", "unknown isa 'sse9'"),
        ("nothing", "expected a backend"),
        ("/nonexistent/k.py:f", "no such file"),
    ],
)
def test_bad_sides_are_one_line_exit_2(tmp_path: Path, side: str, message: str) -> None:
    proc = run_cli(["ab", "gemm", "--a", "cpp", "--b", side, "--problem", "4x4:4x4", "--out", str(tmp_path)])
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert not list(tmp_path.iterdir())


# --- a side run by another Python environment ------------------------------------------------------------


def test_a_side_run_by_another_environment(tmp_path: Path) -> None:
    import sys

    out = tmp_path / "remote"
    side = f"python={sys.executable}:cpp:tile_k=16"
    proc = run_cli(
        ["ab", "gemm", "--a", "cpp", "--b", side, "--problem", "33x65:65x17", "--dtype", "fp32",
         "--threads", "1", "--out", str(out), *FAST_TIMER]
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (results,) = out.glob("gemm-*.json")
    doc = json.loads(results.read_text())
    by = {r["backend"]: r for r in doc["records"]}
    remote = by[side]
    assert remote["status"] == "ok" and remote["verify"]["ok"]
    assert remote["details"]["environment"] == sys.executable and remote["details"]["tiles"]["tile_k"] == 16
    assert shlex.split(remote["repro"])[:4] == [sys.executable, "-m", "opbench", "sweep"]
    assert "--tile-k 16" in remote["repro"]
    assert (
        "opbench" in doc["backends"][side]["version"] and sys.executable in doc["backends"][side]["version"]
    )


def test_the_remote_worker_never_imports_an_opbench_folder_from_the_working_directory(tmp_path: Path) -> None:
    """The two-builds loop runs from a source checkout: an `opbench/` folder in the working directory must
    not shadow the other environment's installed package in its worker (as for the tuning worker)."""
    import subprocess
    import sys

    decoy = tmp_path / "opbench"
    decoy.mkdir()
    marker = tmp_path / "decoy-was-imported"
    (decoy / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('x')\nraise SystemExit(99)\n")
    (decoy / "backends").mkdir()
    for path in (decoy / "backends" / "__init__.py", decoy / "backends" / "remote_worker.py"):
        path.write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    exe = Path(sys.executable).parent / "opbench"
    assert exe.exists(), "the console script of the installed package"
    side = f"python={sys.executable}:cpp"
    proc = subprocess.run(
        [str(exe), "ab", "gemm", "--a", "cpp", "--b", side, "--problem", "9x13:13x5", "--dtype", "fp32",
         "--threads", "1", "--out", str(tmp_path / "o"), *FAST_TIMER],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists(), "the decoy opbench/ in the working directory was imported"
    (results,) = (tmp_path / "o").glob("gemm-*.json")
    remote = next(r for r in json.loads(results.read_text())["records"] if r["backend"] == side)
    assert remote["status"] == "ok" and remote["verify"]["ok"]
    assert all(t["ok"] and t["inputs"] == "new values" for t in remote["verify"]["timed"])


def test_an_adopted_workers_cpu_time_is_ours_not_contention() -> None:
    import subprocess
    import sys

    from opbench import contention

    before = contention.own_cpu_s()
    spin = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass",
        ]
    )
    contention.adopt(spin.pid)
    try:
        spin_s = 0.0
        while spin.poll() is None:
            spin_s = max(spin_s, contention.own_cpu_s() - before)
    finally:
        contention.release(spin.pid)
    assert spin_s > 0.2  # the child's CPU time counted as this process's while it ran


def test_an_environment_without_opbench_fails_its_cases(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'No module named opbench' >&2\nexit 1\n")
    fake.chmod(0o755)
    out = tmp_path / "o"
    proc = run_cli(
        ["ab", "gemm", "--a", "cpp", "--b", f"python={fake}:cpp", "--problem", "8x8:8x8", "--dtype", "fp32",
         "--threads", "1", "--out", str(out), *FAST_TIMER]
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (path,) = out.glob("ab-*.json")
    (row,) = json.loads(path.read_text())["rows"]
    assert row["verdict"] == "FAILED" and "No module named opbench" in row["reason"]
    bad = run_cli(
        ["ab", "gemm", "--a", "cpp", "--b", "python=/nonexistent/python:cpp", "--problem", "8x8:8x8"]
    )
    assert bad.returncode == 2 and "is not an executable Python interpreter" in bad.stderr


def test_a_killed_worker_fails_one_case_and_the_next_gets_a_new_one() -> None:
    import os
    import signal
    import sys

    from opbench.backends.remote import RemoteBackend, WorkerError

    backend = RemoteBackend("remote", sys.executable, "cpp", {})
    assert backend.unavailable_reason() is None
    backend.setup(1, "cpu")
    shape = gemm.GemmShape(9, 7, 5)
    inputs = gemm.make_inputs(shape, "fp32", 0)
    case = backend.prepare("gemm", shape, inputs, {})
    assert case.run(3) > 0
    first = backend._worker.proc
    assert first is not None
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    with pytest.raises(WorkerError, match="worker exited"):
        case.run(1)
    again = backend.prepare("gemm", shape, inputs, {})  # a fresh worker, set up as the first was
    assert backend._worker.proc is not None and backend._worker.proc.pid != first.pid
    np.testing.assert_allclose(again.output(), inputs["a"] @ inputs["b"], rtol=1e-5)
    backend._worker.stop()


def test_a_workers_run_answers_with_its_clock_as_of_that_run() -> None:
    # A CUDA case's clock says whether it replays a captured graph only after its first long enough run, in
    # the worker: the sweep records what the worker says after each run, not what it said at prepare.
    import sys

    from opbench.backends.remote import RemoteBackend

    backend = RemoteBackend("remote", sys.executable, "cpp", {})
    backend.setup(1, "cpu")
    shape = gemm.GemmShape(9, 7, 5)
    case = backend.prepare("gemm", shape, gemm.make_inputs(shape, "fp32", 0), {})
    case.clock = "stale"
    assert case.run(2) > 0
    assert case.clock != "stale" and case.clock == backend._worker.ask({"run": case._id, "loops": 1})["clock"]
    backend._worker.stop()


def _record(backend: str, per_call: float, speeds: tuple[float, ...]) -> Result:
    """A sweep record of a gemm case whose rounds ran at `per_call` s, with the machine at `speeds`, read
    back as a Result."""
    rng = np.random.default_rng(len(backend))
    rounds = [list(per_call * (1 + 0.002 * rng.standard_normal(5))) for _ in speeds]
    samples = [s for r in rounds for s in r]
    return Result.from_record({
        "op": "gemm", "pass": "fwd", "label": "8x8x8", "dtype": "fp32", "backend": backend, "status": "ok",
        "shape": {"m": 8, "n": 8, "k": 8}, "flags": [], "verify": {"ok": True},
        "time": {"median_s": float(np.median(samples)), "samples_s": samples, "rel_iqr": 0.003,
                 "rel_spread_rounds": 0.003,
                 "per_round": [{"n_samples": 5, "kept": True, "machine_speed": s} for s in speeds]},
    })  # fmt: skip


def test_a_machine_that_moved_between_the_sides_makes_a_verdict_ambiguous_only_if_it_explains_it() -> None:
    # B looks 1.3x faster, but the machine ran 1.3x faster during B's visits: at equal speed, the same
    explained = ab.analyse([_record("A", 1.3e-3, (1.0,) * 3), _record("B", 1e-3, (1.3,) * 3)], "A", "B", 0.05)
    (row,) = explained["rows"]
    assert row["verdict"] == "AMBIGUOUS" and "in-run reference ran +30%" in row["reason"]
    # B is 2x faster and the machine moved by 1.3x: still faster at equal machine speed
    (row,) = ab.analyse([_record("A", 2e-3, (1.0,) * 3), _record("B", 1e-3, (1.3,) * 3)], "A", "B", 0.05)[
        "rows"
    ]
    assert row["verdict"] == "FASTER"


def test_report_adds_an_ab_section_and_refuses_a_broken_ab_file(tmp_path: Path) -> None:
    out = tmp_path / "ab"
    proc = run_cli(
        ["ab", "gemm", "--a", "cpp", "--b", "cpp:tile_k=8", "--problem", "40x40:40x40", "--dtype", "fp32",
         "--threads", "1", "--out", str(out), *FAST_TIMER]
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (ab_file,) = out.glob("ab-*.json")
    (results,) = out.glob("gemm-*.json")
    rep = run_cli(["report", str(results), str(ab_file), "--out", str(tmp_path / "r"), "--format", "md,html"])
    assert rep.returncode == 0, rep.stderr
    assert "1 A/B runs" in rep.stdout
    md = (tmp_path / "r" / "report.md").read_text()
    assert "## A/B: cpp:tile\\_k=8 (B) against cpp (A)" in md and "opbench ab gemm" in md
    assert "Repro, one command per case:" in md and "opbench sweep gemm --problem 40x40:40x40" in md
    html = (tmp_path / "r" / "report.html").read_text()
    assert 'id="ab1"' in html and "speed-up [95% CI]" in html
    broken = json.loads(ab_file.read_text())
    broken["rows"][0]["verdict"] = "BETTER"
    bad = tmp_path / "bad-ab.json"
    bad.write_text(json.dumps(broken))
    refused = run_cli(["report", str(bad), "--out", str(tmp_path / "r2")])
    assert refused.returncode == 2 and "rows[0].verdict: expected one of FASTER" in refused.stderr
    assert not (tmp_path / "r2").exists()


def test_a_worker_that_never_answers_its_hello_is_stopped(tmp_path: Path, monkeypatch: Any) -> None:
    """A worker whose imports hang (here: an interpreter that only sleeps) is a WorkerError after
    START_TIMEOUT_S, its process stopped, instead of a sweep that hangs."""
    import time

    from opbench.backends import remote

    sleeper = tmp_path / "python"
    sleeper.write_text("#!/bin/sh\nexec sleep 60\n")
    sleeper.chmod(0o755)
    monkeypatch.setattr(remote, "START_TIMEOUT_S", 1.0)
    worker = remote._Worker(str(sleeper), "cpp", {})
    t0 = time.monotonic()
    with pytest.raises(remote.WorkerError, match="did not answer its hello within 1 s"):
        worker.start()
    assert time.monotonic() - t0 < 30
    assert worker.proc is not None and worker.proc.poll() is not None  # stopped, not left sleeping

"""`opbench tune`, proven with real parts: real SIGSEGVs, real hangs past the time limit, real wrong answers
(the documented OPBENCH_FAULT_* switch), a real kill -9 and resume, a real PostgreSQL server shared by two
workers; the fingerprint check, password masking and the tuned records."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import FAST_TRIALS, import_or_skip, run_cli

from opbench import kernels

optuna = import_or_skip("optuna")
sqlalchemy_exc = import_or_skip("sqlalchemy.exc")

SMALL = [
    "tune",
    "gemm",
    "--m",
    "64",
    "--n",
    "64",
    "--k",
    "64",
    "--threads",
    "1",
    "--confirm-top",
    "1",
    "--confirm-rounds",
    "1",
]


def _register_tile() -> tuple[int, int]:
    info = kernels.default_tiles(None, 64)
    return int(info["mr"]), int(info["nr"])


# The 64^3 space follows the kernel set this CPU selects (MR x NR: 14x32 on AVX-512, 6x16 on AVX2):
# tile_m in MR, 2MR, 4MR, ... up to 64 and 64 padded to MR; tile_n likewise from NR; tile_k in 16, 32, 64.
MR, NR = _register_tile()
M_TILES = sorted({*(MR << i for i in range(8) if MR << i <= 64), -(-64 // MR) * MR})
N_TILES = sorted({*(NR << i for i in range(8) if NR << i <= 64), -(-64 // NR) * NR})
POINTS = len(M_TILES) * len(N_TILES) * 3


def slow_default(n: int = 64) -> dict[str, str]:
    """Fault injection making the cache-model default tiling (never a point of the space) 2 ms slower per
    call, so the confirmation measures the winner faster beyond the intervals and a record is saved."""
    info = kernels.default_tiles(None, n)
    return {"OPBENCH_FAULT_SLOW": f"{info['tile_m']}x{info['tile_n']}x{info['tile_k']}"}


def load(storage: str, name: str = "gemm-64x64x64-fp32-t1") -> Any:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=name, storage=storage)


def sqlite(out: Path) -> str:
    return f"sqlite:///{(out / 'tuning' / 'studies.db').resolve()}"


def tiles_of(t: Any) -> str | None:
    tiles = t.user_attrs.get("tiles")
    return None if tiles is None else "{tile_m}x{tile_n}x{tile_k}".format(**tiles)


@pytest.mark.usefixtures("fault_build")
def test_a_study_survives_crashes_hangs_and_wrong_answers(tmp_path: Path) -> None:
    # One block holding the whole problem (likely the fastest) is made the wrong answer.
    crash, hang, wrong = f"{M_TILES[1]}x64x32", f"{M_TILES[2]}x{NR}x16", f"{M_TILES[-1]}x64x64"
    env = {
        "OPBENCH_FAULT_CRASH": crash,
        "OPBENCH_FAULT_HANG": hang,
        "OPBENCH_FAULT_WRONG": wrong,
        **slow_default(),
    }
    proc = run_cli(
        [
            *SMALL,
            *FAST_TRIALS,
            "--sampler",
            "grid",
            "--seed",
            "0",
            "--trials",
            str(POINTS + 20),
            "--trial-timeout",
            "3",
            "--out",
            str(tmp_path),
        ],
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"every one of the {POINTS} valid tilings is measured" in proc.stdout
    # each failure is one line of the trial table, without Optuna's traceback of it
    assert "crash: SIGSEGV" in proc.stdout and "Traceback" not in proc.stderr, proc.stderr
    study = load(sqlite(tmp_path))
    by_tiles: dict[str, list[Any]] = {}
    for t in study.trials:
        by_tiles.setdefault(tiles_of(t), []).append(t)
    assert len(by_tiles) == POINTS
    failed = {k: ts[0].user_attrs["failure"] for k, ts in by_tiles.items() if ts[0].state.name == "FAIL"}
    assert failed == {
        crash: "crash: SIGSEGV",
        hang: "timeout: no answer within 3 s",
        wrong: "wrong_answer",
    }
    best = study.best_trial
    assert best.state.name == "COMPLETE" and tiles_of(best) not in failed
    record = json.loads(next(Path(os.environ["OPBENCH_RECORDS_DIR"]).glob("*.json")).read_text())
    # (The records file is per machine and shared with other tests' studies, some tuning fewer parameters.)
    saved = [
        "x".join(str(r["tiles"].get(p)) for p in ("tile_m", "tile_n", "tile_k")) for r in record["records"]
    ]
    assert saved and not set(saved) & set(failed)


def _marked_processes(mark: str) -> list[int]:
    """Live processes whose environment holds OPBENCH_TEST_MARK=mark (ones this test started)."""
    needle = f"OPBENCH_TEST_MARK={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:  # gone, or not ours to read
            continue
    return found


@pytest.mark.usefixtures("fault_build")
def test_a_killed_study_resumes_without_losing_or_repeating_a_trial(tmp_path: Path) -> None:
    storage = sqlite(tmp_path)
    args = [
        sys.executable,
        "-m",
        "opbench",
        *SMALL,
        *FAST_TRIALS,
        "--sampler",
        "grid",
        "--seed",
        "1",
        "--trials",
        str(POINTS + 20),
        "--trial-timeout",
        "600",
        "--heartbeat-s",
        "1",
        "--grace-s",
        "2",
        "--out",
        str(tmp_path),
    ]
    hang = f"{M_TILES[2]}x64x64"
    log = tmp_path / "first-run.log"
    # Our tuner's processes carry this token in their environment (workers inherit it), so the check for a
    # surviving worker looks only at processes this test started, not at every process on the machine.
    mark = f"opbench-test-{os.getpid()}-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        args,
        env={**os.environ, "OPBENCH_FAULT_HANG": hang, "OPBENCH_TEST_MARK": mark},
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.time() + 120
        running = None
        while time.time() < deadline and running is None:
            time.sleep(0.3)
            try:
                trials = load(storage).trials
            except (KeyError, sqlalchemy_exc.SQLAlchemyError):
                continue  # the study is not created yet, or this poll raced the tuner creating the tables
            running = next((t for t in trials if t.state.name == "RUNNING" and tiles_of(t) == hang), None)
        assert running is not None, f"the hanging trial never started: {log.read_text()[-3000:]}"
        before = {
            t.number: (tiles_of(t), t.value) for t in load(storage).trials if t.state.name == "COMPLETE"
        }
        assert len(_marked_processes(mark)) >= 2, "the marker does not find the tuner and its hung worker"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(3)  # past the grace period: the dead process's RUNNING trial is now stale
    assert not _marked_processes(mark), "the hung worker outlived its killed parent"

    rerun = subprocess.run(args, capture_output=True, text=True, timeout=300)  # no fault this time
    assert rerun.returncode == 0, rerun.stderr
    trials = load(storage).trials
    after = {t.number: (tiles_of(t), t.value) for t in trials}
    assert all(after[n] == v for n, v in before.items()), "a completed trial was lost or changed"
    measured = [
        tiles_of(t) for t in trials if t.state.name == "COMPLETE" and "reused_from" not in t.user_attrs
    ]
    assert len(measured) == len(set(measured)) == POINTS, "a tiling was measured twice or never"
    killed = next(t for t in trials if t.number == running.number)
    assert killed.state.name == "FAIL"
    retry = next(t for t in trials if t.system_attrs.get("failed_trial") == running.number)
    assert retry.state.name == "COMPLETE" and tiles_of(retry) == hang


def test_a_different_fingerprint_is_refused_unless_forced(tmp_path: Path) -> None:
    base = [
        "tune",
        "gemm",
        "--m",
        "32",
        "--n",
        "32",
        "--k",
        "32",
        *FAST_TRIALS,
        "--trials",
        "2",
        "--confirm-top",
        "1",
        "--confirm-rounds",
        "1",
        "--study",
        "shared",
        "--out",
        str(tmp_path),
    ]
    assert run_cli([*base, "--threads", "1"]).returncode == 0
    proc = run_cli([*base, "--threads", "2"])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and "recorded for a different machine or problem" in line
    assert "threads: recorded 1, now 2" in line and "--force" in line
    assert run_cli([*base, "--threads", "2", "--force"]).returncode == 0


def test_storage_passwords_are_never_printed(tmp_path: Path) -> None:
    url = "postgresql://opbench:TopSecret-123@127.0.0.1:1/nowhere"
    for args in ([*SMALL, "--storage", url], ["studies", "--storage", url]):
        proc = run_cli(args)
        assert proc.returncode == 2
        assert "TopSecret" not in proc.stdout + proc.stderr
        assert "opbench:***@127.0.0.1:1" in proc.stderr and proc.stderr.strip().count("\n") == 0


def test_tune_errors_are_one_line(tmp_path: Path) -> None:
    for args, message in (
        (["tune", "attention", "--m", "8"], "unknown op 'attention' (available: gemm, conv, rnn, gru, lstm)"),
        (["tune", "conv", "--m", "8"], "--m does not apply to conv"),
        (["tune", "gemm", "--m", "8", "--n", "8"], "needs --k"),
        (
            ["tune", "gemm", "--m", "8", "--n", "8", "--k", "8", "--objectives", "speed"],
            "--objectives must be",
        ),
        (
            ["tune", "gemm", "--m", "8", "--n", "8", "--k", "8", "--params", "tile_q"],
            "unknown parameter(s) tile_q",
        ),
        (["tune", "gemm", "--m", "8", "--n", "8", "--k", "8", "--storage", "here.db"], "must be a URL"),
        (["tune", "gemm", "--show", "--study", "nope", "--out", str(tmp_path)], "no study storage at"),
    ):
        proc = run_cli(args)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, args


@pytest.mark.usefixtures("fault_build")
def test_the_winner_is_recorded_and_used(tmp_path: Path) -> None:
    proc = run_cli(
        [*SMALL, "--sampler", "random", "--seed", "3", "--trials", "8", "--out", str(tmp_path)],
        env=slow_default(),
    )
    assert proc.returncode == 0, proc.stderr
    assert "confirmation" in proc.stdout and "the cache-model default" in proc.stdout
    assert "tuned record saved" in proc.stdout
    from opbench import kernels
    from opbench.tuned import tuned_tiles

    tiles, note = tuned_tiles(64, 64, 64, "fp32", 1)
    assert "exact" in note and set(tiles.record()) == {"tile_m", "tile_n", "tile_k"} and tiles.threads == 1
    near, near_note = tuned_tiles(64, 64, 128, "fp32", 1)
    assert near == tiles and "nearest tuned shape 64x64x64" in near_note
    a = __import__("numpy").ones((64, 64), "float32")
    assert (kernels.gemm(a, a, tiles=tiles) == 64).all()
    with pytest.raises(ValueError, match="tuned_tiles"):  # the facade does not read the tuner's records
        kernels.gemm(a, a, tiles="tuned")  # type: ignore[arg-type]
    sweep_out = tmp_path / "sweep"
    proc = run_cli(
        [
            "sweep",
            "gemm",
            "--m",
            "64",
            "--n",
            "64",
            "--k",
            "64",
            "--dtype",
            "fp32",
            "--backend",
            "cpp",
            "--threads",
            "1",
            "--tuned",
            "--out",
            str(sweep_out),
            "--max-time-s",
            "0.05",
        ]
    )
    assert proc.returncode == 0, proc.stderr
    (doc,) = [json.loads(p.read_text()) for p in sweep_out.glob("*.json")]
    details = doc["records"][0]["details"]
    assert "tuned record (exact)" in details["tiles_source"] and details["tiles"] == tiles.record()


def test_a_source_checkout_keeps_its_records_in_its_tuning_folder(monkeypatch: Any) -> None:
    # Records checked in under tuning/records are this checkout's own: `opbench tune` writes them there and
    # every reader finds them there, unless $OPBENCH_RECORDS_DIR says otherwise.
    from opbench import tuned

    repo = Path(__file__).resolve().parents[1]
    if Path(tuned.__file__).resolve().parents[1] != repo:
        pytest.skip("opbench is not imported from this checkout (not an editable install)")
    monkeypatch.delenv("OPBENCH_RECORDS_DIR")
    assert tuned.records_dir() == repo / "tuning" / "records"
    monkeypatch.setenv("OPBENCH_RECORDS_DIR", "/elsewhere")
    assert tuned.records_dir() == Path("/elsewhere")


def test_show_and_studies_print_without_running(tmp_path: Path) -> None:
    assert run_cli([*SMALL, "--trials", "3", "--out", str(tmp_path)]).returncode == 0
    shown = run_cli(
        [
            "tune",
            "gemm",
            "--m",
            "64",
            "--n",
            "64",
            "--k",
            "64",
            "--threads",
            "1",
            "--show",
            "--out",
            str(tmp_path),
        ]
    )
    assert shown.returncode == 0 and "history" in shown.stdout and "COMPLETE" in shown.stdout
    listed = run_cli(["studies", "--out", str(tmp_path)])
    assert (
        listed.returncode == 0
        and "gemm-64x64x64-fp32-t1" in listed.stdout
        and "64x64x64 fp32 t1" in listed.stdout
    )


def test_fp16_accuracy_speed_front(tmp_path: Path) -> None:
    proc = run_cli(
        [
            *SMALL,
            "--dtype",
            "fp16",
            "--objectives",
            "gflops,error",
            "--trials",
            "6",
            "--seed",
            "2",
            "--out",
            str(tmp_path),
        ]
    )
    assert proc.returncode == 0, proc.stderr
    assert "accuracy/speed front" in proc.stdout
    study = load(sqlite(tmp_path), "gemm-64x64x64-fp16-t1-mo")
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    assert all(0 <= t.values[1] < 1e-2 for t in study.best_trials)


def test_the_ascend_tile_experiment_maps_the_whole_grid(tmp_path: Path) -> None:
    proc = run_cli(
        [
            "tune",
            "gemm",
            "--m",
            "16",
            "--k",
            "256",
            "--n",
            "1024",
            "--sampler",
            "grid",
            "--params",
            "tile_n,tile_k",
            *FAST_TRIALS,
            "--trials",
            "200",
            "--threads",
            "1",
            "--confirm-top",
            "1",
            "--confirm-rounds",
            "1",
            "--out",
            str(tmp_path),
        ]
    )
    assert proc.returncode == 0, proc.stderr
    study = load(sqlite(tmp_path), "gemm-16x1024x256-fp32-t1")
    grid = {
        (t.user_attrs["tiles"]["tile_n"], t.user_attrs["tiles"]["tile_k"])
        for t in study.trials
        if t.state.name == "COMPLETE"
    }
    n_tiles = [NR << i for i in range(8) if NR << i <= 1024]
    assert grid == {(n, k) for n in n_tiles for k in (16, 32, 64, 128, 256)}


@pytest.fixture(scope="module")
def postgres(postgres_server: Any) -> str:
    return str(postgres_server.create_user("opbench", "Pg-Secret-42", "opbench"))


def test_two_workers_share_one_postgresql_study(postgres: str, tmp_path: Path) -> None:
    args = [
        "tune",
        "gemm",
        "--m",
        "96",
        "--n",
        "96",
        "--k",
        "96",
        "--threads",
        "1",
        *FAST_TRIALS,
        "--trials",
        "6",
        "--study",
        "shared-pg",
        "--storage",
        postgres,
        "--confirm-top",
        "1",
        "--confirm-rounds",
        "1",
    ]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "opbench", *args, "--sampler", "random", "--seed", str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (1, 2)
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
        assert "Pg-Secret-42" not in out + err and "opbench:***@" in out
    study = load(postgres, "shared-pg")
    assert len(study.trials) == 12  # 6 + 6: the trial counts add up
    assert all(t.state.name in ("COMPLETE", "FAIL") for t in study.trials)
    listed = run_cli(["studies", "--storage", postgres])
    assert listed.returncode == 0 and "shared-pg" in listed.stdout and "Pg-Secret-42" not in listed.stdout


@pytest.mark.usefixtures("fault_build")
def test_a_worker_killed_from_outside_is_reported_and_replaced() -> None:
    """What the out-of-memory killer does to a worker: SIGKILL from outside, mid-candidate."""
    import threading

    from opbench.tune.isolation import IsolatedRunner

    os.environ["OPBENCH_FAULT_HANG"] = f"{MR}x{NR}x16"
    try:
        runner = IsolatedRunner(
            {
                "op": "gemm",
                "shape": {"m": 32, "n": 32, "k": 32},
                "dtype": "fp32",
                "threads": 1,
                "seed": 0,
                "timer": {"max_time_s": 0.05},
                "verify": True,
            }
        )
        runner._start()
        victim = runner.proc
        assert victim is not None
        threading.Timer(1.0, lambda: os.kill(victim.pid, signal.SIGKILL)).start()
        answer = runner.run({"tiles": {"tile_m": MR, "tile_n": NR, "tile_k": 16}}, timeout_s=60)
        assert answer == {
            "status": "failed",
            "reason": "crash: SIGKILL (killed from outside; out of memory?)",
        }
        again = runner.run({"tiles": {"tile_m": 2 * MR, "tile_n": NR, "tile_k": 32}}, timeout_s=60)
        assert again["status"] == "ok" and runner.spawned == 2
    finally:
        del os.environ["OPBENCH_FAULT_HANG"]
        runner.close()


def test_the_path_thresholds_are_searched_recorded_and_applied(tmp_path: Path) -> None:
    """`--space gemm_paths` searches small_m and parallel_flops beside the tiles: each trial's record of
    what ran carries them, a tuned record with them (0 included) is valid, and a sweep with --tuned runs the
    path the record's thresholds choose."""
    args = ["tune", "gemm", "--m", "8", "--n", "96", "--k", "64", "--threads", "2", "--space", "gemm_paths"]
    args += ["--params", "small_m,parallel_flops", "--sampler", "grid", "--seed", "0", "--trials", "4"]
    args += ["--confirm-top", "1", "--confirm-rounds", "1", "--out", str(tmp_path)]
    proc = run_cli(args)
    assert proc.returncode == 0, proc.stderr
    study = load(sqlite(tmp_path), "gemm-8x96x64-fp32-t2")
    searched = {
        (t.user_attrs["tiles"]["small_m"], t.user_attrs["tiles"]["parallel_flops"]) for t in study.trials
    }
    assert searched == {(0, 0), (0, 131072), (1048576, 0), (1048576, 131072)}

    from opbench import tuned as records
    from opbench.ops import gemm

    shape = gemm.GemmShape(8, 96, 64)
    record = {
        "op": "gemm",
        "dtype": "fp32",
        "shape": shape.to_dict(),
        "threads": 2,
        "tiles": {"tile_m": 14, "tile_n": 96, "tile_k": 64, "small_m": 0, "parallel_flops": 0},
        "isa": "",
        "study": "by hand",
    }
    records.save(record)
    tiles, note = records.tuned("gemm", shape, "fp32", 2)
    assert "exact" in note and tiles["small_m"] == 0 and tiles["parallel_flops"] == 0
    doc_dir = tmp_path / "sweep"
    proc = run_cli(
        ["sweep", "gemm", "--m", "8", "--n", "96", "--k", "64", "--dtype", "fp32", "--backend", "cpp"]
        + ["--threads", "2", "--tuned", "--out", str(doc_dir), "--max-time-s", "0.05"]
    )
    assert proc.returncode == 0, proc.stderr
    (doc,) = [json.loads(p.read_text()) for p in doc_dir.glob("*.json")]
    details = doc["records"][0]["details"]
    assert details["path"].startswith("blocked")  # small_m 0: B packed, although M = 8
    assert details["tiles_effective"]["small_m"] == 0 and details["tiles_effective"]["parallel_flops"] == 0

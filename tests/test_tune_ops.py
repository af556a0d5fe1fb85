"""`opbench tune conv|rnn|gru|lstm`: their search spaces, real studies on small shapes (conv and lstm
resumed after a real kill -9; rnn and gru run whole), the shape options, and tuned records used by the
kernels facade and by sweeps."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import FAST_TRIALS, import_or_skip, quick_sweep, run_cli

from opbench import Tiles, kernels
from opbench.ops import conv, get_op, gru, lstm, rnn

optuna = import_or_skip("optuna")
sqlalchemy_exc = import_or_skip("sqlalchemy.exc")

# Small problems with small grids: 8 output channels (one MR block), 80 GEMM columns over the padded width,
# depth 72; an LSTM of 3 steps, batch 2, I = H = 24.
CONV = ["--batch", "1", "--in-channels", "8", "--out-channels", "8", "--input-size", "8", "--padding", "1"]
LSTM = ["--batch", "2", "--seq-len", "3", "--input-size", "24", "--hidden", "24"]
SHAPES = {
    "conv": (CONV, conv.ConvShape(n=1, c=8, h=8, w=8, k=8, r=3, s=3, pad_h=1, pad_w=1)),
    "rnn": (
        [*LSTM, "--nonlinearity", "relu"],
        rnn.RnnShape(seq_len=3, batch=2, input_size=24, hidden=24, relu=1),
    ),
    "gru": (LSTM, gru.GruShape(seq_len=3, batch=2, input_size=24, hidden=24)),
    "lstm": (LSTM, lstm.LstmShape(seq_len=3, batch=2, input_size=24, hidden=24)),
}
QUICK = ["--threads", "1", "--confirm-top", "1", "--confirm-rounds", "1"]


def _study(out: Path, name: str) -> Any:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(
        study_name=name, storage=f"sqlite:///{(out / 'tuning' / 'studies.db').resolve()}"
    )


def _space(op: str, params: tuple[str, ...] | None = None) -> Any:
    from opbench.tune.config import TuneConfig, build_space

    shape = SHAPES[op][1]
    cfg = TuneConfig(shape=shape, dtype="fp32", threads=1, study_name="x", storage_url="", op=get_op(op))
    return build_space(replace(cfg, params=params))[0]


@pytest.mark.parametrize("op", list(SHAPES))
def test_the_space_file_gives_valid_tilings_up_to_the_padded_dimensions(op: str) -> None:
    from opbench.tune.config import _names

    space = _space(op)
    shape = SHAPES[op][1]
    from opbench.tune.config import TuneConfig

    names = _names(
        TuneConfig(shape=shape, dtype="fp32", threads=1, study_name="x", storage_url="", op=get_op(op))
    )
    mr, nr = names["mr"], names["nr"]
    assert space.param_names == ("tile_m", "tile_n", "tile_k")
    for name, multiple, dim in (("tile_m", mr, names["m"]), ("tile_n", nr, names["n"])):
        values = space.values(name)
        assert all(v % multiple == 0 for v in values), (name, values)
        assert values[-1] == -(-dim // multiple) * multiple  # the padded dimension, nothing past it
    if op == "conv":
        # the implicit GEMM of one image: 8 channels, 8 rows x (8 + 2) padded columns, 8 x 3 x 3 deep
        assert (names["m"], names["n"], names["k"]) == (8, 80, 72)
    else:  # T*B rows, gates*H columns, max(I, H) deep
        assert (names["m"], names["n"], names["k"]) == (6, shape.GATES * 24, 24)
    assert len(space.enumerate()) == np.prod([len(v) for _, v in space.params])


@pytest.mark.parametrize("op", ["conv", "lstm"])
def test_a_killed_study_resumes_without_losing_or_repeating_a_trial(op: str, tmp_path: Path) -> None:
    flags, shape = SHAPES[op]
    # conv's tile_m stays the model's: 16 points of tile_n x tile_k instead of 32 (the LSTM's 6 rows give
    # one tile_m)
    params = ("tile_n", "tile_k")
    points = len(_space(op, params).enumerate())
    name = f"{op}-{shape.label().replace(' ', '_')}-fp32-t1"
    args = [sys.executable, "-m", "opbench", "tune", op, *flags, *QUICK, *FAST_TRIALS, "--sampler", "grid"]
    args += ["--seed", "1", "--params", ",".join(params)]
    args += ["--trials", str(points + 10), "--heartbeat-s", "1", "--grace-s", "2", "--out", str(tmp_path)]
    log = tmp_path / "first-run.log"
    proc = subprocess.Popen(args, stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        deadline, before = time.time() + 120, {}
        while time.time() < deadline and len(before) < 3 and proc.poll() is None:
            time.sleep(0.1)
            try:
                trials = _study(tmp_path, name).trials
            except (KeyError, sqlalchemy_exc.SQLAlchemyError):
                continue  # not created yet, or this poll raced the tuner creating the tables
            before = {
                t.number: (t.user_attrs.get("key"), t.value) for t in trials if t.state.name == "COMPLETE"
            }
        assert proc.poll() is None, f"the study ended before it could be killed: {log.read_text()[-2000:]}"
        assert len(before) >= 3, f"no trials completed: {log.read_text()[-3000:]}"
        os.kill(proc.pid, signal.SIGKILL)  # a real kill -9, mid-study
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(3)  # past the grace period: a trial the killed process left RUNNING is stale now
    rerun = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    trials = _study(tmp_path, name).trials
    after = {t.number: (t.user_attrs.get("key"), t.value) for t in trials}
    assert all(after[n] == v for n, v in before.items()), "a completed trial was lost or changed"
    measured = [
        t.user_attrs["key"]
        for t in trials
        if t.state.name == "COMPLETE" and "reused_from" not in t.user_attrs
    ]
    assert len(measured) == len(set(measured)) == points, "a tiling was measured twice or never"
    assert "confirmation" in rerun.stdout and "the cache-model default" in rerun.stdout
    fingerprint = _study(tmp_path, name).user_attrs["fingerprint"]
    assert fingerprint["op"] == op and fingerprint["shape"] == shape.to_dict()
    storage = f"sqlite:///{(tmp_path / 'tuning' / 'studies.db').resolve()}"
    report = run_cli(
        ["report", "--study", name, "--storage", storage, "--format", "md", "--out", str(tmp_path / "r")]
    )
    assert report.returncode == 0, report.stderr
    text = (tmp_path / "r" / "report.md").read_text()
    assert f"{op} {shape.label()} fp32, 1 thread(s): " in text.replace("\\", "")


def test_shape_options_are_checked_per_op(tmp_path: Path) -> None:
    for args, expected in (
        (["tune", "conv", "--m", "64"], "--m does not apply to conv"),
        (["tune", "lstm", "--padding", "1"], "--padding does not apply to lstm"),
        (["tune", "conv", "--filter-size", "9", "--input-size", "4", "--padding", "0"], "empty"),
        (["tune", "attention"], "unknown op 'attention' (available: gemm, conv, rnn, gru, lstm)"),
        (["tune", "gru", "--nonlinearity", "relu"], "--nonlinearity does not apply to gru"),
        (["tune", "lstm", "--pass", "sideways"], "invalid choice: 'sideways'"),
        (["tune", "lstm", "--hidden", "0"], "--hidden"),
    ):
        proc = run_cli([*args, "--out", str(tmp_path)])
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and expected in lines[0], (args, proc.stderr)


def _record(op: str, shape: Any, tiles: dict[str, int]) -> None:
    from opbench import tuned as records

    records.save(
        {
            "op": op,
            "dtype": "fp32",
            "shape": shape.to_dict(),
            "threads": 1,
            "tiles": tiles,
            "isa": "",
            "gflops": 1.0,
            "study": f"{op}-test",
            "command": [],
        }  # fmt: skip
    )


@pytest.mark.parametrize("op", ["rnn", "gru"])
def test_a_small_rnn_and_gru_study_runs_whole_and_is_confirmed(op: str, tmp_path: Path) -> None:
    flags, shape = SHAPES[op]
    proc = run_cli(
        [
            "tune",
            op,
            *flags,
            *QUICK,
            "--sampler",
            "random",
            "--seed",
            "1",
            "--trials",
            "6",
            "--out",
            str(tmp_path),
        ],
        env={**os.environ, "OPBENCH_RECORDS_DIR": str(tmp_path / "records")},
    )
    assert proc.returncode == 0, proc.stderr
    name = f"{op}-{shape.label().replace(' ', '_')}-fp32-t1"
    study = _study(tmp_path, name)
    assert study.user_attrs["fingerprint"]["op"] == op
    assert study.user_attrs["fingerprint"]["shape"] == shape.to_dict()
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert complete and all(t.user_attrs.get("verify_ok", True) for t in complete)
    assert "confirmation" in proc.stdout and "best: tile_m=" in proc.stdout


@pytest.mark.parametrize(("op", "flags"), [("conv", CONV), ("gemm", ["--m", "64", "--n", "48", "--k", "40"])])
def test_the_backward_pass_is_tuned_and_its_record_reaches_sweep_tuned(
    op: str, flags: list[str], tmp_path: Path, monkeypatch: Any
) -> None:
    env = {**os.environ, "OPBENCH_RECORDS_DIR": str(tmp_path / "records")}
    args = [
        "tune",
        op,
        "--pass",
        "bwd",
        *flags,
        *QUICK,
        "--sampler",
        "random",
        "--seed",
        "1",
        "--trials",
        "5",
    ]
    proc = run_cli([*args, "--out", str(tmp_path)], env=env)
    assert proc.returncode == 0, proc.stderr
    (name,) = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("study ")]
    assert name.startswith(f"{op}-bwd-")
    study = _study(tmp_path, name)
    assert study.user_attrs["fingerprint"]["op"] == f"{op}:bwd"
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert complete, proc.stdout
    # A record of the backward pass is used by a backward sweep (and never by the forward one).
    from opbench.ops import get_op

    shape = get_op(f"{op}:bwd").shape_from_case(study.user_attrs["fingerprint"]["shape"])
    monkeypatch.setenv("OPBENCH_RECORDS_DIR", str(tmp_path / "records2"))
    _record(f"{op}:bwd", shape, {"tile_m": 14, "tile_n": 64, "tile_k": 16})
    env2 = {**os.environ}
    sweep = [
        op,
        *flags,
        "--dtype",
        "fp32",
        "--backend",
        "cpp",
        "--threads",
        "1",
        "--tuned",
        "--pass",
        "fwd,bwd",
    ]
    doc = quick_sweep(sweep, tmp_path / "sweep", env=env2)
    by_pass = {r["pass"]: r for r in doc["records"]}
    assert by_pass["bwd"]["status"] == "ok" and by_pass["bwd"]["verify"]["ok"]
    assert "tuned record (exact)" in by_pass["bwd"]["details"]["tiles_source"]
    assert "no tuned record" in by_pass["fwd"]["details"]["tiles_source"]


def test_tuned_conv_and_lstm_records_reach_the_facade_and_sweeps(tmp_path: Path, monkeypatch: Any) -> None:
    from opbench import tuned as records

    monkeypatch.setenv("OPBENCH_RECORDS_DIR", str(tmp_path / "records"))
    conv_shape, lstm_shape = SHAPES["conv"][1], SHAPES["lstm"][1]
    _record("conv", conv_shape, {"tile_m": 14, "tile_n": 32, "tile_k": 16})
    _record("lstm", lstm_shape, {"tile_m": 14, "tile_n": 32, "tile_k": 16})
    _record("gru", SHAPES["gru"][1], {"tile_m": 14, "tile_n": 32, "tile_k": 16})
    _record("rnn", SHAPES["rnn"][1], {"tile_m": 14, "tile_n": 32, "tile_k": 16})

    inputs = conv.make_inputs(conv_shape, "fp32", 0)
    x, w = inputs["x"], inputs["w"]
    tiles, note = records.tuned_conv2d_tiles(x, w, padding=1, threads=1)
    assert tiles == Tiles(m=14, n=32, k=16, threads=1) and "exact" in note
    y = kernels.conv2d(x, w, padding=1, tiles=tiles)
    assert conv.check(conv_shape, y, inputs, conv.reference(conv_shape, inputs), "fp32", "fp32")["ok"]
    with pytest.raises(ValueError, match="tuned_conv2d_tiles"):  # the facade does not read the records
        kernels.conv2d(x, w, padding=1, tiles="tuned")  # type: ignore[arg-type]
    # A nearby size is the nearest record; another padding is another problem, never matched.
    bigger = np.zeros((2, 8, 9, 9), np.float32)
    near, near_note = records.tuned_conv2d_tiles(bigger, w, padding=1, threads=1)
    assert near == tiles and "nearest tuned shape N1 C8 8 K8 f3 p1" in near_note
    none, none_note = records.tuned_conv2d_tiles(x, w, padding=0, threads=1)
    assert none == Tiles(threads=1) and "no tuned record for conv fp32" in none_note

    lstm_in = lstm.OP.make_inputs(lstm_shape, "fp32", 0)
    tiles, note = records.tuned_lstm_tiles(lstm_in["x"], lstm_in["w_hh"], threads=1)
    assert tiles.n == 32 and tiles.threads == 1 and "exact" in note
    out = kernels.lstm(*(lstm_in[n] for n in lstm.INPUT_NAMES), tiles=tiles)
    assert lstm.OP.check(lstm_shape, out, lstm_in, lstm.reference(lstm_shape, lstm_in), "fp32", "fp32")["ok"]
    # A ReLU RNN's record never stands for the tanh RNN of the same sizes.
    rnn_in = rnn.OP.make_inputs(SHAPES["rnn"][1], "fp32", 0)
    relu_tiles, note = records.tuned_recurrent_tiles("rnn", rnn_in["x"], rnn_in["w_hh"], 1, "relu")
    assert relu_tiles.k == 16 and "exact" in note
    assert records.tuned_recurrent_tiles("rnn", rnn_in["x"], rnn_in["w_hh"], 1, "tanh")[0] == Tiles(threads=1)
    y, h_n = kernels.rnn(*(rnn_in[n] for n in rnn.INPUT_NAMES), nonlinearity="relu", tiles=relu_tiles)
    relu_ref = rnn.reference(SHAPES["rnn"][1], rnn_in)
    assert rnn.OP.check(SHAPES["rnn"][1], (y, h_n), rnn_in, relu_ref, "fp32", "fp32")["ok"]

    env = {**os.environ, "OPBENCH_RECORDS_DIR": str(tmp_path / "records")}
    for op, (flags, _) in SHAPES.items():
        args = [op, *flags, "--dtype", "fp32", "--backend", "cpp", "--threads", "1", "--tuned"]
        doc = quick_sweep(args, tmp_path / f"sweep-{op}", env=env)
        (rec,) = doc["records"]
        assert rec["status"] == "ok" and rec["verify"]["ok"]
        assert "tuned record (exact)" in rec["details"]["tiles_source"]
        assert rec["details"]["tiles"]["tile_k"] == 16

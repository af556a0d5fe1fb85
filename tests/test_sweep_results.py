"""`opbench sweep gemm` end to end with the real backends: the results files match the JSON schema, carry
provenance, FLOPS and utilization, and survive a kill."""

from __future__ import annotations

import csv
import json
import math
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from conftest import FAST_TIMER, missing, run_cli, run_clis

from opbench.case import Reason
from opbench.measure import DRIFT_MIN_REL
from opbench.results import schema_path

# TensorFlow (8 s to import) runs every op through the CLI in the batch of every op (framework_sweeps)
BACKENDS = ["cpp", "torch", "mindspore", "numpy"]


def load_results(out: Path) -> tuple[dict[str, Any], list[dict[str, str]]]:
    (json_path,) = out.glob("gemm-*.json")
    (csv_path,) = out.glob("gemm-*.csv")
    doc = json.loads(json_path.read_text())
    with csv_path.open() as f:
        rows = list(csv.DictReader(f))
    return doc, rows


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], list[dict[str, str]], str]:
    out = tmp_path_factory.mktemp("sweep")
    shapes = ["--m", "1,33", "--n", "17", "--k", "65"]
    backends = ["--backend", ",".join(BACKENDS)]
    proc = run_cli(
        [
            "sweep",
            "gemm",
            *shapes,
            "--dtype",
            "fp32,fp16",
            *backends,
            "--threads",
            "2",
            "--out",
            str(out),
            *FAST_TIMER,
        ]
    )
    assert proc.returncode == 0, proc.stderr
    doc, rows = load_results(out)
    return doc, rows, proc.stdout


def test_json_matches_the_schema(sweep: tuple) -> None:
    doc, _, _ = sweep
    jsonschema.validate(doc, json.loads(schema_path().read_text()))
    assert doc["complete"] is True and doc["finished_utc"]


def test_every_case_is_recorded_once(sweep: tuple) -> None:
    doc, rows, _ = sweep
    keys = [(r["label"], r["dtype"], r["backend"]) for r in doc["records"]]
    assert len(keys) == len(set(keys)) == 2 * 2 * len(BACKENDS)
    assert len(rows) == len(keys)


def test_available_backends_all_ran_and_verified(sweep: tuple) -> None:
    doc, _, _ = sweep
    for r in doc["records"]:
        info = doc["backends"][r["backend"]]
        if not info["available"]:
            assert r["status"] == "skipped" and r["reason"] == info["reason"]
            continue
        assert r["status"] == "ok", r
        assert r["verify"]["ok"] and r["verify"]["max_err_ratio"] <= 1
    # Ours and numpy are always here; the frameworks are installed wherever CI runs.
    assert doc["backends"]["cpp"]["available"] and doc["backends"]["numpy"]["available"]


def test_flops_gflops_and_utilization_are_consistent(sweep: tuple) -> None:
    doc, _, _ = sweep
    for r in doc["records"]:
        if r["status"] != "ok":
            continue
        s = r["shape"]
        assert r["flops"] == 2 * s["m"] * s["n"] * s["k"]
        assert r["gflops"] == pytest.approx(r["flops"] / r["time"]["median_s"] / 1e9)
        # utilization is each round's against the machine's best in-run FMA probe, slowed by the probe
        # beside that round as far as the case follows it (its sensitivity); the cached peak stays in the
        # header
        ref = r["reference"]
        best, speed, s = ref["fma_best_gflops"], ref["fma_speed"], ref["sensitivity"]["used"]
        assert ref["fma_gflops"] == pytest.approx(best * speed) and 0.0 <= s <= 1.0
        assert r["peak"]["source"] == "in-run" and r["peak"]["gflops"] <= best * 1.05
        assert r["utilization"] == pytest.approx(r["gflops"] / r["peak"]["gflops"])
        assert ref["utilization_beside"] == pytest.approx(r["gflops"] / ref["fma_gflops"])
        assert ref["utilization_best"] == pytest.approx(r["gflops"] / best)
        assert doc["peaks"][r["dtype"]]["used"]["source"] == "measured"
        assert 0 < r["machine_speed"] <= 1.0 + 1e-9 or "suspect" in r["flags"]
        t = r["time"]
        # each round's speed index is the geometric mean of its FMA and cache probes against their bests,
        # and the peak follows from the rounds' samples brought to the best by their index to the power s
        cache_best = doc["environment"]["reference"]["best"][f"cache/{r['threads']}"]
        kept_rounds = [v for v in t["per_round"] if v["kept"]]
        for v in kept_rounds:
            assert v["cache_gbs"] > 0
            want = math.sqrt(v["fma_gflops"] / best * v["cache_gbs"] / cache_best)
            assert v["speed_index"] == pytest.approx(want, rel=1e-9)
        samples = iter(t["samples_s"])
        at_best = [
            next(samples) * min(1.0, v["speed_index"]) ** s
            for v in kept_rounds
            for _ in range(v["n_samples"])
        ]
        assert r["peak"]["gflops"] == pytest.approx(
            best * statistics.median(at_best) / t["median_s"], rel=1e-9
        )
        # a throttled (or apart) round is dropped when other rounds were not and it ran more than
        # DRIFT_MIN_REL slower than they did
        fine = [v for v in t["per_round"] if not (v["throttled"] or v["apart"])]
        typical = statistics.median(v["median_s"] for v in fine) if fine else None
        kept = [
            v
            for v in t["per_round"]
            if typical is None
            or not (v["throttled"] or v["apart"])
            or v["median_s"] <= typical * (1 + DRIFT_MIN_REL)
        ]
        assert t["rounds"] == len(kept) and t["n_samples"] == sum(v["n_samples"] for v in kept)
        assert t["rounds"] + t["dropped_rounds"] == len(t["per_round"])
        assert t["min_s"] <= t["median_s"] and t["n_samples"] == len(t["samples_s"])


def test_provenance(sweep: tuple) -> None:
    doc, _, _ = sweep
    m = doc["machine"]
    assert m["cpu_model"] and m["isas"][-1] == "ref" and m["threads"] == 2
    assert m["opbench_version"] and m["libraries"]["numpy"]
    assert m["heap"].startswith("kept") == sys.platform.startswith("linux")
    assert doc["settings"]["threads"] == 2 and doc["command"][:3] == ["opbench", "sweep", "gemm"]
    cpp = next(r for r in doc["records"] if r["backend"] == "cpp" and r["status"] == "ok")
    assert cpp["details"]["isa"] == m["selected_isa"]
    assert set(cpp["details"]["tiles"]) == {"tile_m", "tile_n", "tile_k"}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_kept_heap_pages_in_a_freed_output_once() -> None:
    """machine.keep_freed_memory, as every measuring process sets it: an output of 64 MiB allocated and freed
    five more times is paged in only the first time. Without it (the control) glibc maps each one afresh and
    every allocation faults its pages in again, which a peer that allocates per call paid in its time."""
    script = """
import resource, sys
import numpy as np
from opbench import machine
if sys.argv[1] == "kept":
    assert machine.keep_freed_memory().startswith("kept")
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
a = np.ones(16 << 20, np.float32); del a
before = faults()
for _ in range(5):
    a = np.ones(16 << 20, np.float32); del a
print(faults() - before)
"""
    paged = {
        how: int(subprocess.run([sys.executable, "-c", script, how], capture_output=True, text=True).stdout)
        for how in ("kept", "defaults")
    }
    assert paged["kept"] <= 50 and paged["defaults"] >= 5 * 32, paged  # 32: 2 MiB pages of 64 MiB


def test_each_result_names_its_timing_method(sweep: tuple) -> None:
    doc, _, _ = sweep
    methods = {r["backend"]: r["time"]["method"] for r in doc["records"] if r["status"] == "ok"}
    assert "steady_clock" in methods["cpp"] and "inside the extension" in methods["cpp"]
    assert "perf_counter" in methods["numpy"]
    if "mindspore" in methods:
        assert "launch_blocking" in methods["mindspore"]


def test_mindspores_runtime_threads_run_one_per_cpu(sweep: tuple) -> None:
    """Left to the scheduler, MindSpore's actor and kernel threads sometimes shared one of two CPUs for a
    whole process (the same op 1.5x slower there): the backend pins them apart and says so."""
    doc, _, _ = sweep
    ms = [r for r in doc["records"] if r["backend"] == "mindspore" and r["status"] == "ok"]
    if not ms:
        missing("MindSpore did not run here")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    placement = ms[0]["details"]["thread_placement"]["pinned"]
    assert {"ActorThread_0", "KernelThread_0"} <= set(placement)
    assert placement["ActorThread_0"] != placement["KernelThread_0"]


def test_cold_cache_results_say_what_was_flushed(tmp_path: Path) -> None:
    proc = run_cli(
        ["sweep", "gemm", "--m", "16", "--n", "16", "--k", "16", "--dtype", "fp32", "--backend", "cpp,torch"]
        + ["--cold-cache", "--out", str(tmp_path), *FAST_TIMER]
    )
    assert proc.returncode == 0, proc.stderr
    doc, _ = load_results(tmp_path)
    for r in doc["records"]:
        assert r["time"]["cold_cache"] and r["time"]["loops"] == 1
        assert "cold cache: " in r["time"]["method"] and "MiB written on the host" in r["time"]["method"]


def test_csv_matches_json(sweep: tuple) -> None:
    doc, rows, _ = sweep
    for r, row in zip(doc["records"], rows, strict=True):
        assert (row["m"], row["n"], row["k"]) == tuple(str(r["shape"][x]) for x in "mnk")
        assert (row["backend"], row["dtype"], row["status"]) == (r["backend"], r["dtype"], r["status"])
        if r["status"] == "ok":
            assert math.isclose(float(row["gflops"]), r["gflops"])
            assert math.isclose(float(row["median_s"]), r["time"]["median_s"])


def test_table_is_printed(sweep: tuple) -> None:
    _, _, stdout = sweep
    assert "GFLOPS" in stdout and "util" in stdout and "1x17x65" in stdout
    assert "wrote JSON:" in stdout and "wrote CSV:" in stdout


def test_missing_backend_is_skipped_with_its_reason(tmp_path: Path) -> None:
    fake = tmp_path / "site"
    (fake / "mindspore").mkdir(parents=True)
    (fake / "mindspore" / "__init__.py").write_text(
        "raise ImportError('simulated: MindSpore not installed')\n"
    )
    out = tmp_path / "out"
    env = {"PYTHONPATH": os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")])}
    proc = run_cli(
        [
            "sweep",
            "gemm",
            "--m",
            "8",
            "--n",
            "8",
            "--k",
            "8",
            "--dtype",
            "fp32",
            "--backend",
            "cpp,mindspore",
            "--out",
            str(out),
            *FAST_TIMER,
        ],
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    doc, _ = load_results(out)
    ms = next(r for r in doc["records"] if r["backend"] == "mindspore")
    assert ms["status"] == "skipped" and "not installed" in ms["reason"]
    assert "simulated" in ms["reason"] and not doc["backends"]["mindspore"]["available"]
    assert next(r for r in doc["records"] if r["backend"] == "cpp")["status"] == "ok"
    assert "backend mindspore skipped" in proc.stdout


def test_a_killed_sweep_keeps_every_finished_case(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "opbench",
            "sweep",
            "gemm",
            "--m",
            "16:4096:+16",
            "--n",
            "64",
            "--k",
            "64",
            "--dtype",
            "fp32",
            "--backend",
            "cpp,numpy",
            "--out",
            str(out),
            "--quiet",
            *FAST_TIMER,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 120
        n = 0
        while time.time() < deadline and n < 6:
            time.sleep(0.2)
            for p in out.glob("gemm-*.json"):
                try:
                    n = len(json.loads(p.read_text())["records"])
                except (ValueError, OSError):
                    pytest.fail("the results file was unreadable while the sweep ran")
        assert n >= 6, "the sweep did not record cases in time"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    doc, rows = load_results(out)
    jsonschema.validate(doc, json.loads(schema_path().read_text()))
    assert doc["complete"] is False and len(doc["records"]) >= 6
    assert len(rows) >= len(doc["records"]) - 1  # the CSV is written right after the JSON


def _argv(command: str, out: Path) -> list[str]:
    """`opbench COMMAND` (a shell-style string) with fast timer settings, writing to `out`. The fast timer
    first, so that an option the command gives itself (--rounds 1) wins."""
    words = shlex.split(command)
    return [*words[:1], *FAST_TIMER, *words[1:], "--out", str(out)]


def run_and_load(tmp_path: Path, command: str) -> tuple[dict[str, Any], list[dict[str, str]], str]:
    """Run `opbench COMMAND` with fast timer settings; return its JSON, CSV, stdout."""
    out = tmp_path / "out"
    return _load(run_cli(_argv(command, out)), out)


# The sweeps that start torch, MindSpore and TensorFlow (10-15 s of imports a process, most of such a
# sweep's time), run once for the module, side by side on a CPU each (conftest.run_clis); each test asserts
# on its own op's results. Every op's forward and backward passes in every backend share one process: a
# benchdnn batch file, of which the sweep writes one results file per op.
EVERY_OP_BATCH = """\
17x13:13x31
mb2ic3ih7oc5kh3sh2ph1
--alg=VANILLA_LSTM t4mb3sic7slc5
--alg=LBR_GRU t4mb3sic7slc5
--alg=VANILLA_RNN --activation=RELU t4mb3sic7slc5
--alg=VANILLA_RNN --activation=TANH t4mb1sic17slc5 t4mb3sic17slc5
"""
EVERY_BACKEND = "cpp,torch,mindspore,tensorflow,tensorflow-eager,numpy"
FRAMEWORK_SWEEPS = {
    "every op fwd,bwd": f"sweep --batch-file {{batch}} --pass fwd,bwd --dtype fp32 --backend {EVERY_BACKEND}",
    "conv one-factor": "sweep conv --batch 1,2 --input-size 6 --in-channels 3 --out-channels 4 "
    "--filter-size 1,3 --stride 2 --dtype fp32,fp16 --backend cpp,torch,mindspore",
    "lstm product": "sweep lstm --mode product --batch 1,3 --seq-len 4 --input-size 5 --hidden 6,17 --dtype "
    "fp32 --backend cpp,torch,mindspore,numpy",
}


@pytest.fixture(scope="module")
def framework_sweeps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Path]]:
    root = tmp_path_factory.mktemp("framework-sweeps")
    batch = root / "every-op.txt"
    batch.write_text(EVERY_OP_BATCH)
    outs = {name: root / name.replace(" ", "_").replace(",", "_") for name in FRAMEWORK_SWEEPS}
    argvs = {name: _argv(line.format(batch=batch), outs[name]) for name, line in FRAMEWORK_SWEEPS.items()}
    procs = run_clis(argvs)  # the batch first: it takes as long as the other two one after the other
    return {name: (procs[name], outs[name]) for name in FRAMEWORK_SWEEPS}


def _ran(
    framework_sweeps: dict[str, tuple[Any, Path]], name: str, op: str = ""
) -> tuple[dict[str, Any], list[dict[str, str]], str]:
    return _load(*framework_sweeps[name], op)


def _load(
    proc: subprocess.CompletedProcess[str], out: Path, op: str = ""
) -> tuple[dict[str, Any], list[dict[str, str]], str]:
    """A sweep's JSON (checked against the schema), CSV and stdout, of OP where the sweep ran several; the
    sweep must have succeeded."""
    assert proc.returncode == 0, proc.stderr
    pattern = f"*-{op}-*" if op else "*"
    (json_path,) = out.glob(f"{pattern}.json")
    (csv_path,) = out.glob(f"{pattern}.csv")
    doc = json.loads(json_path.read_text())
    jsonschema.validate(doc, json.loads(schema_path().read_text()))
    assert not op or doc["op"] == op
    with csv_path.open() as f:
        return doc, list(csv.DictReader(f)), proc.stdout


def _every_op(framework_sweeps: dict[str, tuple[Any, Path]], op: str) -> tuple[dict[str, Any], list[Any]]:
    """OP's results from the batch of every op, and its records, each checked: numpy is the float64
    reference of every backward pass (and of every forward but GEMM's), and every other backend present ran
    and verified."""
    doc, rows, _ = _ran(framework_sweeps, "every op fwd,bwd", op)
    assert doc["passes"] == ["fwd", "bwd"] and doc["mode"] == "cases"
    assert len(rows) == len(doc["records"]) and {row["pass"] for row in rows} == {"fwd", "bwd"}
    assert {r["backend"] for r in doc["records"]} == set(EVERY_BACKEND.split(","))
    for r in doc["records"]:
        assert r["label"].endswith(" bwd") == (r["pass"] == "bwd"), r
        if r["backend"] == "numpy" and (op != "gemm" or r["pass"] == "bwd"):
            assert r["status"] == "skipped" and "float64 reference" in r["reason"], r
        elif doc["backends"][r["backend"]]["available"]:
            assert r["status"] == "ok" and r["verify"]["ok"], r
    return doc, doc["records"]


def test_conv_one_factor_sweep(framework_sweeps: dict[str, Any]) -> None:
    doc, rows, stdout = _ran(framework_sweeps, "conv one-factor")
    assert doc["op"] == "conv" and doc["mode"] == "one-factor"
    labels = list(dict.fromkeys(r["label"] for r in doc["records"]))
    # base batch 4 -> the base point, then batch 1 and 2, then filter 1 (filter 3 is the base's)
    assert labels == ["N4 C3 6 K4 f3 s2 p1", "N1 C3 6 K4 f3 s2 p1", "N2 C3 6 K4 f3 s2 p1", "N4 C3 6 K4 f1 s2"]
    for r in doc["records"]:
        s = r["shape"]
        out_h = (s["h"] + 2 * s["pad_h"] - s["dil_h"] * (s["r"] - 1) - 1) // s["stride_h"] + 1
        assert r["flops"] == 2 * s["n"] * s["k"] * out_h * out_h * s["c"] * s["r"] * s["s"]
        if doc["backends"][r["backend"]]["available"]:
            assert r["status"] == "ok" and r["verify"]["ok"], r
    assert len(rows) == len(doc["records"]) == 4 * 2 * 3 and "stride_h" in rows[0]
    assert "Conv2d FLOPs" in stdout


def test_lstm_product_sweep(framework_sweeps: dict[str, Any]) -> None:
    doc, _, _ = _ran(framework_sweeps, "lstm product")
    assert doc["mode"] == "product"
    assert len({r["label"] for r in doc["records"]}) == 4
    for r in doc["records"]:
        assert (
            r["flops"] == 2 * 4 * r["shape"]["hidden"] * (5 + r["shape"]["hidden"]) * 4 * r["shape"]["batch"]
        )
        if r["backend"] == "numpy":
            assert r["status"] == "skipped" and "float64 reference" in r["reason"]
        elif doc["backends"][r["backend"]]["available"]:
            assert r["status"] == "ok" and r["verify"]["ok"], r


def test_gemm_forward_and_backward_in_one_sweep_in_every_backend(framework_sweeps: dict[str, Any]) -> None:
    doc, records = _every_op(framework_sweeps, "gemm")
    assert "GEMM backward FLOPs = 4*M*N*K" in doc["flop_note"]
    by_pass = {p: [r for r in records if r["pass"] == p] for p in ("fwd", "bwd")}
    assert len(by_pass["fwd"]) == len(by_pass["bwd"]) == 6
    assert all(r["label"] == "17x31x13 bwd" and r["flops"] == 4 * 17 * 31 * 13 for r in by_pass["bwd"])
    assert all(r["backend"] == "cpp" or r["details"]["timed"] for r in by_pass["bwd"] if r["status"] == "ok")
    assert all(r["label"] == "17x31x13" and r["flops"] == 2 * 17 * 31 * 13 for r in by_pass["fwd"])
    methods = {r["backend"]: r["time"]["method"] for r in by_pass["fwd"] if r["status"] == "ok"}
    if "tensorflow" in methods:
        assert "sync_devices" in methods["tensorflow"]


def test_conv_forward_and_backward_in_every_backend(framework_sweeps: dict[str, Any]) -> None:
    doc, records = _every_op(framework_sweeps, "conv")
    assert "Conv2d backward FLOPs = 2x the forward's" in doc["flop_note"]
    fwd = {r["backend"]: r for r in records if r["pass"] == "fwd"}
    bwd = [r for r in records if r["pass"] == "bwd"]
    assert len(fwd) == len(bwd) == 6 and all(r["label"] == "N2 C3 7 K5 f3 s2 p1 bwd" for r in bwd)
    assert all(r["flops"] == 2 * 2 * 5 * 4 * 4 * 3 * 3 * 3 for r in fwd.values())
    assert all(r["flops"] == 2 * fwd[r["backend"]]["flops"] for r in bwd)


@pytest.mark.parametrize(
    ("op", "hidden", "relu", "gates"),
    [("lstm", 7, 0, 4), ("gru", 7, 0, 3), ("rnn", 7, 1, 1), ("rnn", 17, 0, 1)],
)
def test_recurrent_forward_and_backward_in_every_backend(
    framework_sweeps: dict[str, Any], op: str, hidden: int, relu: int, gates: int
) -> None:
    doc, records = _every_op(framework_sweeps, op)
    assert "backward FLOPs = 2x the forward's" in doc["flop_note"] and "DeepBench" in doc["flop_note"]
    ours = [r for r in records if r["shape"]["hidden"] == hidden]
    batches = (1, 3) if hidden == 17 else (3,)  # the tanh RNN at two batch sizes
    fwd = {(r["backend"], r["shape"]["batch"]): r for r in ours if r["pass"] == "fwd"}
    bwd = [r for r in ours if r["pass"] == "bwd"]
    assert len(fwd) == len(bwd) == 6 * len(batches) and {b for _, b in fwd} == set(batches)
    for r in fwd.values():
        assert r["flops"] == 2 * gates * hidden * (5 + hidden) * 4 * r["shape"]["batch"]
        if op == "rnn":
            assert r["shape"]["relu"] == relu and r["label"].endswith(" relu") == bool(relu)
    for r in bwd:
        assert r["flops"] == 2 * fwd[r["backend"], r["shape"]["batch"]]["flops"]


def test_an_unknown_pass_is_a_usage_error(tmp_path: Path) -> None:
    for args, message in (
        (["sweep", "gemm", "--pass", "fwd,sideways"], "--pass: unknown pass 'sideways'"),
        (["sweep", "lstm", "--pass", ""], "--pass: unknown pass ''"),
    ):
        proc = run_cli([*args, "--out", str(tmp_path / "out")])
        assert proc.returncode == 2 and proc.stderr.startswith(f"opbench: error: {message}"), proc.stderr
        assert proc.stderr.count("\n") == 1
        assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_case_over_the_memory_budget_is_skipped_not_killed(tmp_path: Path) -> None:
    # 64^3 needs ~0.2 MiB; 4096 x 4096 x 4096 needs ~1.5 GiB: a 64 MiB budget skips only the second.
    doc, _, _ = run_and_load(
        tmp_path,
        (
            "sweep gemm --m 64,4096 --n 64,4096 --k 64,4096 --mode one-factor --dtype fp32 --backend "
            "cpp --max-memory 64M"
        ),
    )
    by_label = {r["label"]: r for r in doc["records"]}
    assert by_label["1024x1024x1024"]["status"] == "skipped"  # the base point itself is ~48 MiB + reference
    assert by_label["64x1024x1024"]["status"] == "ok"
    skipped = [r for r in doc["records"] if r["status"] == "skipped"]
    assert skipped and all(r["reason"].startswith("memory: needs about") for r in skipped)
    assert all(Reason.of(r["status"], r["reason"]) is Reason.MEMORY for r in skipped)


def test_a_case_predicted_too_slow_is_skipped(tmp_path: Path) -> None:
    doc, _, _ = run_and_load(
        tmp_path,
        # one round keeps the sweep order: the small case runs first and predicts the large one
        "sweep gemm --m 8,512 --n 64 --k 64 --dtype fp32 --backend cpp --max-call-s 1e-9 --rounds 1",
    )
    first, second = doc["records"]
    assert first["status"] == "ok"  # nothing on record yet: it runs
    assert second["status"] == "skipped" and second["reason"].startswith("predicted ")
    assert Reason.of(second["status"], second["reason"]) is Reason.TIME
    assert "8x64x64 earlier in this run" in second["reason"] and "--max-call-s" in second["reason"]


def test_verification_over_its_cost_cap_is_skipped_and_said(tmp_path: Path) -> None:
    doc, _, _ = run_and_load(
        tmp_path,
        "sweep gemm --m 64 --n 64 --k 64 --dtype fp32 --backend cpp --verify-max-gflop 1e-6",
    )
    (rec,) = doc["records"]
    assert rec["status"] == "ok" and "float64 verification would cost" in rec["verify"]["skipped"]


def test_suite_scaled_and_filtered_to_one_op(tmp_path: Path) -> None:
    doc, _, stdout = run_and_load(
        tmp_path,
        "sweep lstm --suite deepbench-inference --scale 0.05 --dtype fp32 --backend cpp",
    )
    assert doc["suite"]["name"] == "deepbench-inference" and doc["scale"] == 0.05 and doc["mode"] == "cases"
    assert all(r["status"] == "ok" and r["verify"]["ok"] for r in doc["records"])
    assert {r["shape"]["batch"] for r in doc["records"]} == {1}  # batches 1-4 scaled by 0.05
    assert "suite deepbench-inference (scaled x0.05: batch and input size)" in stdout


def test_a_scaled_suite_keeps_every_factor_level_of_the_table(tmp_path: Path) -> None:
    doc, _, _ = run_and_load(
        tmp_path,
        "sweep conv --suite ascend-paper --scale 0.02 --dtype fp32 --backend cpp",
    )
    assert doc["factor_levels"] == {
        "batch": [128, 256, 512],
        "input_size": [112, 224, 336],
        "in_channels": [32, 64, 128],
        "out_channels": [64, 128, 256],
        "filter_size": [1, 3, 5],
    }
    base = next(
        r
        for r in doc["records"]
        if r["factors"]["batch"] == 256
        and r["factors"]["input_size"] == 224
        and r["factors"]["filter_size"] == 3
        and r["factors"]["in_channels"] == 64
        and r["factors"]["out_channels"] == 128
    )
    assert (base["shape"]["n"], base["shape"]["h"]) == (5, 4)  # 256 and 224 scaled by 0.02
    assert all(r["status"] == "ok" for r in doc["records"])


@pytest.mark.parametrize(
    ("message", "status"),
    [
        ("\"addmm_impl_cpu_\" not implemented for 'Half'", "skipped"),  # torch's wording
        ("For 'Conv2D', the data type float16 is not supported on CPU", "skipped"),  # MindSpore's
        ("index 3 is out of bounds", "failed"),
    ],
)
def test_a_missing_dtype_path_is_unsupported_not_a_failure(message: str, status: str) -> None:
    from opbench.backends.base import Backend
    from opbench.measure import Bench
    from opbench.ops import gemm
    from opbench.sweep.config import BackendState, SweepConfig
    from opbench.sweep.visits import SpeedHistory, measure_case
    from opbench.timing import Timer

    class NoHalf(Backend):
        name = "nohalf"

        def unavailable_reason(self) -> str | None:
            return None

        def version(self) -> str | None:
            return "0"

        def setup(self, threads: int, device: str) -> None:
            pass

        def prepare(self, op: str, shape: Any, inputs: dict, params: dict) -> Any:
            raise RuntimeError(message)

    shape = gemm.GemmShape(4, 4, 4)
    cfg = SweepConfig(op=gemm.OP, shapes=(shape,), dtypes=("fp16",), backends=("nohalf",), threads=1)
    result = measure_case(
        cfg,
        BackendState(NoHalf()),
        shape,
        "fp16",
        gemm.make_inputs(shape, "fp16", 0),
        None,
        None,
        Bench(Timer()),
        SpeedHistory(),
    )
    assert result.status.value == status and message in (result.outcome.text or "")
    if status == "skipped":
        assert result.reason is Reason.UNSUPPORTED
        assert (result.outcome.text or "").startswith("unsupported by nohalf: RuntimeError")
    else:
        assert result.reason is Reason.ERROR
    assert result.to_record()["reason"] == result.outcome.text


def test_results_files_get_ordinary_permissions(tmp_path: Path) -> None:
    import stat

    from opbench.files import atomic_write_text

    umask = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "r.json", "{}")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o644

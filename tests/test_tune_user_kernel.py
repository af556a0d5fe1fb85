"""The operator developer's own kernel in the tuner (`opbench tune OP --kernel FILE.py:FUNC --space FILE`):
real wrong answers, aborts, hangs and exceptions of chosen parameter values are failed trials with their
reasons while the study goes on; the kernel's content is in the fingerprint; the example under examples/
tunes; a space file with a bad rule is one line naming the file, the key and the reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import FAST_TRIALS, import_or_skip, quick_sweep, run_cli

optuna = import_or_skip("optuna")

ROOT = Path(__file__).resolve().parent.parent

KERNEL = """
import os, time
import numpy as np

def my_gemm(a, b, *, mode, scale):
    if mode == "wrong":
        return (a @ b) + 1.0
    if mode == "abort":
        os.abort()
    if mode == "hang":
        time.sleep(3600)
    if mode == "raise":
        raise ValueError("this mode is not implemented")
    out = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for _ in range(scale):  # a slower variant repeats the work
        out = a.astype(np.float32) @ b.astype(np.float32)
    return out.astype(a.dtype)
"""

SPACE = """
op = "gemm"
description = "mode: which variant runs; scale: how many times it repeats the product"

[params.mode]
values = ["ok", "wrong", "abort", "hang", "raise"]

[params.scale]
values = [1, 3]

[[constraints]]
name = "only the ok variant is repeated"
rule = "mode == 'ok' or scale == 1"
"""

SHAPE = ["--m", "24", "--n", "20", "--k", "28", "--threads", "1"]
STUDY = "gemm-my_gemm-24x20x28-fp32-t1"


def _files(tmp_path: Path) -> tuple[Path, Path]:
    kernel, space = tmp_path / "my_kernel.py", tmp_path / "my_space.toml"
    kernel.write_text(KERNEL)
    space.write_text(SPACE)
    return kernel, space


def _study(out: Path, name: str = STUDY) -> Any:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(
        study_name=name, storage=f"sqlite:///{(out / 'tuning' / 'studies.db').resolve()}"
    )


def test_a_users_kernel_is_tuned_through_its_crashes_hangs_and_wrong_answers(tmp_path: Path) -> None:
    kernel, space = _files(tmp_path)
    out = tmp_path / "out"
    args = [
        "tune",
        "gemm",
        *SHAPE,
        "--kernel",
        f"{kernel}:my_gemm",
        "--space",
        str(space),
        "--sampler",
        "grid",
    ]
    args += ["--trials", "20", "--trial-timeout", "3", "--confirm-top", "1", "--confirm-rounds", "1"]
    args += FAST_TRIALS
    env = {"OPBENCH_RECORDS_DIR": str(tmp_path / "records")}
    proc = run_cli([*args, "--out", str(out)], env=env)
    assert proc.returncode == 0, proc.stderr
    trials = _study(out).trials
    by_mode = {t.user_attrs["params"]["mode"]: t for t in trials if "reused_from" not in t.user_attrs}
    assert set(by_mode) == {"ok", "wrong", "abort", "hang", "raise"}
    failure = {mode: t.user_attrs.get("failure") for mode, t in by_mode.items()}
    assert failure["wrong"] == "wrong_answer"
    assert failure["abort"] == "crash: SIGABRT"
    assert failure["hang"].startswith("timeout: ")
    assert failure["raise"] == "error: ValueError: this mode is not implemented"
    ok = [t for t in trials if t.state.name == "COMPLETE"]
    assert {t.user_attrs["params"]["scale"] for t in ok} == {1, 3} and all(
        t.user_attrs["params"]["mode"] == "ok" for t in ok
    )
    best = max(ok, key=lambda t: t.value)
    assert best.user_attrs["params"]["mode"] == "ok"
    fingerprint = _study(out).user_attrs["fingerprint"]
    assert fingerprint["kernel"]["func"] == "my_gemm" and len(fingerprint["kernel"]["sha256"]) == 64
    assert "the baseline (first value of each parameter)" in proc.stdout

    # The kernel changes: resuming is refused (one line, exit 2), then allowed with --force.
    kernel.write_text(KERNEL + "\n# a change\n")
    refused = run_cli([*args, "--out", str(out)], env=env)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "different machine or problem" in refused.stderr and "kernel" in refused.stderr
    forced = run_cli([*args, "--force", "--out", str(out)], env=env)
    assert forced.returncode == 0, forced.stderr


def test_the_example_kernel_tunes_and_its_record_names_it(tmp_path: Path) -> None:
    records = tmp_path / "records"
    proc = run_cli(
        [
            "tune",
            "gemm",
            "--m",
            "64",
            "--n",
            "48",
            "--k",
            "96",
            "--threads",
            "1",
            "--kernel",
            f"{ROOT / 'examples' / 'blocked_gemm.py'}:blocked_gemm",
            "--space",
            str(ROOT / "examples" / "blocked_gemm.toml"),
            "--trials",
            "6",
            "--seed",
            "0",
            "--confirm-top",
            "1",
            "--confirm-rounds",
            "2",
            "--baseline-params",
            "block_m=16,block_k=32,order=rows-first",
            "--out",
            str(tmp_path),
        ],  # fmt: skip
        env={"OPBENCH_RECORDS_DIR": str(records)},
    )
    assert proc.returncode == 0, proc.stderr
    assert "the baseline (--baseline-params)" in proc.stdout
    study = _study(tmp_path, "gemm-blocked_gemm-64x48x96-fp32-t1")
    done = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert done and all(set(t.user_attrs["params"]) == {"block_m", "block_k", "order"} for t in done)
    saved = list(records.glob("*.json"))
    if "tuned record saved" in proc.stdout:
        (rec,) = json.loads(saved[0].read_text())["records"]
        assert rec["user_kernel"]["func"] == "blocked_gemm" and set(rec["params"]) == {
            "block_m",
            "block_k",
            "order",
        }
        assert "tiles" not in rec  # never mistaken for tiles of our kernels
    else:
        assert "no tuned record saved" in proc.stdout and not saved


@pytest.mark.parametrize(
    ("space", "expected"),
    [
        (
            '[params.mode]\nvalues = ["ok"]\n[[constraints]]\nrule = "mode ==="\n',
            "constraints[0].rule: not an expression",
        ),
        ('[params.mode]\nvalues = ["ok", "ok"]\n', "params.mode.values: a value is listed twice"),
        (
            "[params.scale]\nvalues = [1]\nstart = 2\n",
            "params.scale: give values or start/step/stop, not both",
        ),
        (
            '[params.mode]\nvalues = ["ok"]\n[[constraints]]\nrule = "__import__(\'os\')"\n',
            "constraints[0].rule",
        ),
        ('[params.mode]\nvalues = ["ok"]\n[[constraints]]\nrule = "mode - 1 > 0"\n', "constraints[0].rule"),
    ],
)
def test_a_bad_space_file_is_one_line_naming_the_file_and_key(
    tmp_path: Path, space: str, expected: str
) -> None:
    kernel, path = _files(tmp_path)
    path.write_text('op = "gemm"\n' + space)
    proc = run_cli(
        [
            "tune",
            "gemm",
            *SHAPE,
            "--kernel",
            f"{kernel}:my_gemm",
            "--space",
            str(path),
            "--out",
            str(tmp_path),
        ]
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert str(path) in lines[0] and expected in lines[0]


def test_kernel_options_are_checked(tmp_path: Path) -> None:
    kernel, space = _files(tmp_path)
    for args, expected in (
        (["--kernel", "no_colon"], "expected FILE.py:FUNC or module:FUNC"),
        (["--kernel", f"{tmp_path}/missing.py:f"], "no such file"),
        (["--kernel", "no_such_module_xyz:f", "--space", str(space)], "no module named 'no_such_module_xyz'"),
        (["--kernel", f"{kernel}:my_gemm"], "--kernel needs --space"),
        (["--kernel", f"{kernel}:my_gemm", "--space", str(space), "--isa", "ref"], "--isa"),
        (["--baseline-params", "mode=ok"], "--baseline-params applies to --kernel"),
        (
            ["--kernel", f"{kernel}:my_gemm", "--space", str(space), "--baseline-params", "mode=ok"],
            "must set exactly",
        ),
        (
            [
                "--kernel",
                f"{kernel}:my_gemm",
                "--space",
                str(space),
                "--baseline-params",
                "mode=fast,scale=1",
            ],
            "mode='fast' is not a value of the space",
        ),  # fmt: skip
    ):
        proc = run_cli(["tune", "gemm", *SHAPE, *args, "--trials", "1", "--out", str(tmp_path)])
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and expected in lines[0], (args, proc.stderr)


def test_a_users_kernel_runs_in_a_sweep_beside_cpp_and_torch(tmp_path: Path) -> None:
    import_or_skip("torch")
    example = f"{ROOT / 'examples' / 'blocked_gemm.py'}:blocked_gemm"
    args = ["gemm", "--m", "64", "--n", "48", "--k", "96", "--dtype", "fp32,fp16", "--backend", "cpp,torch"]
    args += [
        "--threads",
        "1",
        "--kernel",
        example,
        "--kernel-params",
        "block_m=32,block_k=64,order=rows-first",
    ]
    doc = quick_sweep(args, tmp_path / "sweep", rounds=2)
    assert "kernel:blocked_gemm" in doc["_stdout"]  # in the same table as the others
    assert [r["backend"] for r in doc["records"]] == ["cpp", "torch", "kernel:blocked_gemm"] * 2
    mine = [r for r in doc["records"] if r["backend"] == "kernel:blocked_gemm"]
    for r in mine:
        assert r["status"] == "ok" and r["verify"]["ok"], r
        assert r["verify"]["accumulate_assumed"] == "fp32"  # the default of --kernel-accumulate
        assert r["details"]["params"] == {"block_m": 32, "block_k": 64, "order": "rows-first"}
        # two rounds, or one where a call took too large a share of the short budget, and the record says so
        one_round = any("measured in one round" in note for note in r["notes"])
        assert r["gflops"] > 0 and r["utilization"] is not None
        assert len(r["time"]["per_round"]) == (1 if one_round else 2), r
    assert doc["backends"]["kernel:blocked_gemm"]["version"].startswith("sha256:")


@pytest.mark.parametrize(
    ("params", "status", "reason"),
    [
        ("mode=wrong,scale=1", "wrong_answer", ""),
        ("mode=raise,scale=1", "failed", "ValueError: this mode is not implemented"),
    ],
)
def test_a_users_kernel_in_a_sweep_fails_alone(tmp_path: Path, params: str, status: str, reason: str) -> None:
    kernel, _ = _files(tmp_path)
    args = ["gemm", *SHAPE, "--dtype", "fp32", "--backend", "cpp", "--kernel", f"{kernel}:my_gemm"]
    cpp, mine = quick_sweep([*args, "--kernel-params", params], tmp_path / "sweep")["records"]
    assert cpp["status"] == "ok" and mine["status"] == status and reason in (mine["reason"] or ""), mine


def test_an_unimportable_kernel_is_a_skipped_backend(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_module_for_opbench\n")
    args = ["gemm", *SHAPE, "--dtype", "fp32", "--backend", "cpp", "--kernel", f"{broken}:f"]
    mine = quick_sweep(args, tmp_path / "sweep")["records"][1]
    assert mine["status"] == "skipped" and "cannot import" in mine["reason"]
    assert "ModuleNotFoundError" in mine["reason"]
    bad = run_cli(["sweep", "gemm", "--kernel-params", "a=1", "--out", str(tmp_path)])
    assert bad.returncode == 2 and "--kernel-params applies to --kernel" in bad.stderr

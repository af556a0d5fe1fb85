"""Bad input on the command line: one line on stderr naming the problem, exit code 2, no traceback, and
nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli, tiny_gemm_results

BAD = [
    (["sweep", "attention"], "unknown op 'attention' (available: gemm, conv, rnn, gru, lstm)"),
    (["sweep", "gemm", "--backend", "cpp,tensorrt"], "unknown backend 'tensorrt'"),
    (["sweep", "gemm", "--backend", ""], "--backend is empty"),
    (["sweep", "gemm", "--m", "64:x"], "bad range '64:x'"),
    (["sweep", "gemm", "--m", "64:1024:x1"], "factor must be a finite number > 1"),
    (["sweep", "gemm", "--n", "0"], "sizes must be >= 1"),
    (["sweep", "gemm", "--k", "-5"], "sizes must be >= 1"),
    (["sweep", "gemm", "--dtype", "fp64"], "unknown dtype 'fp64'"),
    (["sweep", "gemm", "--dtype", ""], "--dtype is empty"),
    (["sweep", "gemm", "--format", "xml"], "unknown format 'xml'"),
    (["sweep", "gemm", "--threads", "0"], "must be >= 1, got 0"),
    (["sweep", "gemm", "--threads", "two"], "must be an integer, got 'two'"),
    (["sweep", "gemm", "--max-time-s", "-1"], "must be > 0"),
    (["sweep", "gemm", "--tile-k", "0"], "must be >= 1, got 0"),
    (["sweep", "gemm", "--device", "tpu"], "unknown device 'tpu'"),
    (["sweep", "gemm", "--m", "300000", "--n", "300000", "--k", "300000"], "needs about"),
    (["sweep"], "name an op (gemm, conv, rnn, gru, lstm) or give --spec/--suite"),
    (["ab", "--a", "cpp", "--b", "torch"], "opbench ab: name an op"),
    (["ab", "gemm", "--a", "cpp"], "the following arguments are required: --b"),
    (
        ["sweep", "conv", "--hidden", "8"],
        "--hidden does not apply to conv (its options: --batch --input-size",
    ),
    (["sweep", "gemm", "--stride", "2"], "--stride does not apply to gemm"),
    (["sweep", "conv", "--padding", "valid"], "must be 'same' or an integer >= 0"),
    (
        ["sweep", "conv", "--filter-size", "9", "--input-size", "4", "--padding", "0", "--mode", "product"],
        "would be empty",
    ),
    (["sweep", "lstm", "--scale", "2"], "must be in (0, 1]"),
    (["sweep", "lstm", "--max-memory", "lots"], "must be a size like 8G or 512M"),
    (["sweep", "--suite", "nope"], "unknown suite 'nope' (available: ascend-paper"),
    (["sweep", "--suite", "ascend-paper", "--batch", "4"], "--batch cannot be combined with --spec/--suite"),
    (
        ["sweep", "--suite", "ascend-paper", "--spec", "x.toml"],
        "give one of --spec, --suite, --problem and --batch-file, not --spec and --suite",
    ),
    (["sweep", "--spec", "/nonexistent/spec.toml"], "spec /nonexistent/spec.toml: no such file"),
    (["sweep", "--problem", "ic64ih56oc64kh3oh50"], "oh50 needs ph-2: negative padding crops the input"),
    (["sweep", "--problem", "ic3ih5oc4kh3", "--strict"], "--strict applies to --batch-file"),
    (["sweep", "gemm", "--problem", "mb2ic3ih5oc4kh3"], "a conv problem, but the command runs gemm"),
    (["sweep", "--problem", "1x3x4:2x4x5"], "a broadcast batched matmul"),
    (["sweep", "--problem", "l2t3sic4"], "l2: opbench's recurrent ops run one layer"),
    (["sweep", "--problem", "64x48:48x32", "--m", "4"], "--m cannot be combined with --problem/--batch-file"),
    (["sweep", "--batch-file", "/nonexistent/b.txt"], "batch file /nonexistent/b.txt: no such file"),
    (["tune", "gemm", "--problem", "64x48:40x32"], "the inner dimensions differ (48 and 40)"),
    (["tune", "conv", "--problem", "mb2ic3ih5oc4kh3", "--batch", "4"], "--batch cannot be combined"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["sweep", "gemm", "--bogus-flag"], "unrecognized arguments: --bogus-flag"),
]


@pytest.mark.parametrize(("args", "message"), BAD, ids=[" ".join(a) or "empty" for a, _ in BAD])
def test_bad_input_is_one_line_exit_2_nothing_written(args: list[str], message: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_cli(
        [*args, "--out", str(out)] if args[:1] == ["sweep"] and len(args) > 1 else args, timeout=60
    )
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert message in lines[0]
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert not out.exists()


def test_out_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("keep me")
    proc = run_cli(["sweep", "gemm", "--out", str(f)], timeout=60)
    assert proc.returncode == 2 and "is not a directory" in proc.stderr
    assert f.read_text() == "keep me"


def test_reading_commands_run_without_the_compiled_extension(tmp_path: Path) -> None:
    """opbench report, compare and suites (and --help) read files; they run where opbench._core cannot be
    imported (a source checkout before its build), and a command that measures says what is missing."""
    import subprocess
    import sys

    results = tiny_gemm_results(tmp_path / "results")
    blocked = "import sys; sys.modules['opbench._core'] = None\nfrom opbench.cli import main\n"
    for argv in (
        ["--help"],
        ["suites"],
        ["report", str(results), "--out", str(tmp_path / "rep"), "--format", "md"],
        ["compare", str(results), str(results)],
    ):
        out = subprocess.run(
            [sys.executable, "-c", blocked + f"sys.exit(main({argv!r}))"],
            capture_output=True, text=True, timeout=300, cwd=tmp_path,
        )  # fmt: skip
        assert out.returncode == 0, (argv, out.stderr[-2000:])

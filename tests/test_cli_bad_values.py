"""Every option of every command, given values out of its range: exit 2 with a one-line message naming the
problem, never a traceback or an internal error. The options come from the parser itself, so an option
added later is covered without editing this file. A value that turns out valid for an option runs a tiny
job (each command's base arguments keep it to milliseconds) and must exit 0."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from opbench import cli

BAD_VALUES = (
    "-1", "0", "abc", "", "nan", "inf", "1e999", "99999999999999999999", "9" * 400, "1.5", "1,,2", "-5:3:x0",
    "a\nb", "/proc/nope/x",
)  # fmt: skip


TINY_MODEL = "import torch\n\ndef model():\n    return torch.nn.Linear(4, 3)\n"


def _base(command: str, tmp: Path, results: Path) -> list[str]:
    """Arguments that make each command's job tiny (or nothing at all) when the value under test is valid."""
    if command == "shapes":
        (tmp / "tiny_model.py").write_text(TINY_MODEL)
    return {
        "sweep": ["sweep", "gemm", "--m", "4", "--n", "4", "--k", "4", "--backend", "numpy",
                  "--dtype", "fp32", "--rounds", "1", "--no-verify", "--max-time-s", "0.01",
                  "--min-sample-ms", "1", "--quiet", "--out", str(tmp / "out")],
        "ab": ["ab", "gemm", "--m", "4", "--n", "4", "--k", "4", "--a", "numpy", "--b", "numpy",
               "--dtype", "fp32", "--rounds", "1", "--no-verify", "--max-time-s", "0.01",
               "--min-sample-ms", "1", "--quiet", "--out", str(tmp / "out")],
        "peak": ["peak", "--dtype", "fp32", "--threads", "1"],
        "tune": ["tune", "gemm", "--m", "8", "--n", "8", "--k", "8", "--show", "--out", str(tmp / "out")],
        "studies": ["studies", "--out", str(tmp / "out")],
        "report": ["report", str(results), "--out", str(tmp / "report"), "--format", "csv", "--force"],
        "compare": ["compare", str(results), str(results)],
        "suites": ["suites"],
        "info": ["info"],
        "shapes": ["shapes", "--torch", f"{tmp / 'tiny_model.py'}:model", "--input", "2x4", "--force",
                   "--out", str(tmp / "tiny.batch")],
    }[command]  # fmt: skip


def _options() -> list[tuple[str, str]]:
    """(command, option) for every optional argument that takes a value."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found = []
    for command, p in sub.choices.items():
        for action in p._actions:
            if not action.option_strings or action.nargs == 0 or action.help == argparse.SUPPRESS:
                continue
            found.append((command, action.option_strings[-1]))
    return found


OPTIONS = _options()


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real, tiny sweep result for report and compare to read."""
    out = tmp_path_factory.mktemp("bad-values-results")
    argv = ["sweep", "gemm", "--m", "4", "--n", "4", "--k", "4", "--backend", "numpy", "--dtype", "fp32",
            "--rounds", "1", "--no-verify", "--max-time-s", "0.01", "--quiet", "--out", str(out)]  # fmt: skip
    assert cli.main(argv) == 0
    return next(out.glob("gemm-*.json"))


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        rc = cli.main(argv)
    except SystemExit as e:  # argparse's --help/--version paths only
        rc = int(e.code or 0)
    return rc, capsys.readouterr().err


def test_the_parser_has_options_to_try() -> None:
    commands = {c for c, _ in OPTIONS}
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert commands == {c for c, p in sub.choices.items() if any(a.option_strings for a in p._actions[1:])}
    assert {"sweep", "ab", "peak", "tune", "studies", "report", "compare"} <= commands
    assert len(OPTIONS) > 50


@pytest.mark.parametrize(("command", "option"), OPTIONS, ids=[f"{c} {o}" for c, o in OPTIONS])
def test_every_option_refuses_bad_values_in_one_line(
    command: str,
    option: str,
    tmp_path: Path,
    results: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # a value taken as a path lands here
    failures: list[str] = []
    refused = 0
    for value in BAD_VALUES:
        rc, err = _run([*_base(command, tmp_path, results), option, value], capsys)
        lines = [line for line in err.splitlines() if line.strip()]
        if rc == 2 and len(lines) == 1 and "Traceback" not in err and "internal error" not in err:
            refused += 1
            continue
        if rc == 0 and "Traceback" not in err and "internal error" not in err:
            continue  # a valid value for this option: its tiny job ran
        failures.append(f"{option} {value!r}: exit {rc}, stderr {err.strip()[-400:]!r}")
    assert not failures, "\n".join(failures)
    assert refused > 0, f"{command} {option} accepted every one of {BAD_VALUES}"


def test_report_and_compare_refuse_files_that_are_not_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad: dict[str, Any] = {"kind": "opbench.sweep", "schema_version": 4, "records": "nope"}
    cases = {"empty.json": "", "array.json": "[]", "wrong.json": json.dumps(bad), "bin.json": "\x00\xff"}
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text, errors="surrogateescape")
        for argv in (["compare", str(path), str(path)], ["report", str(path), "--out", str(tmp_path / "r")]):
            rc, err = _run(argv, capsys)
            assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (argv, err)


def _cli_without(module: str, argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`opbench ARGV` in a fresh interpreter where importing `module` fails as if it were not installed."""
    code = (
        f"import sys; sys.modules[{module!r}] = None\n"
        "from opbench.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=cwd, timeout=300
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["tune", "gemm", "--m", "8", "--n", "8", "--k", "8", "--trials", "1"],
        ["studies"],
        ["report", "--study", "s", "--out", "r"],
    ],
)
def test_a_missing_optional_dependency_gets_an_install_hint(argv: list[str], tmp_path: Path) -> None:
    """Optuna not installed (blocked here): one line naming the extra that installs it, exit 2."""
    out = _cli_without(
        "optuna", [*argv, *([] if argv[0] == "report" else ["--out", str(tmp_path)])], tmp_path
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert (
        out.stderr.strip()
        == "opbench: error: optuna is not installed; this command needs it: pip install 'opbench[tune]'"
    )


def test_a_measuring_command_without_our_compiled_kernels_says_so(tmp_path: Path) -> None:
    """The extension not built (blocked here): `opbench sweep gemm` is one line naming it and how to build
    it, exit 2, nothing written; a reading command still runs."""
    argv = ["sweep", "gemm", "--m", "8", "--n", "8", "--k", "8", "--out", str(tmp_path)]
    out = _cli_without("opbench._core", argv, tmp_path)
    assert out.returncode == 2, out.stderr[-2000:]
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "compiled kernels (opbench._core) do not load here (not built)" in out.stderr
    assert not list(tmp_path.glob("*.json"))
    suites = _cli_without("opbench._core", ["suites"], tmp_path)
    assert suites.returncode == 0, suites.stderr[-2000:]


def test_a_missing_module_that_is_not_optional_is_still_a_bug() -> None:
    from opbench.errors import missing_dependency

    assert missing_dependency(ModuleNotFoundError("x", name="no_such_module")) is None
    assert missing_dependency(ImportError("undefined symbol", name="no_such_module")) is None
    from opbench.kernels import unloadable

    assert unloadable(ImportError("undefined symbol", name="no_such_module")) is None
    broken = unloadable(ImportError("undefined symbol: foo", name="opbench._core"))
    assert broken is not None and "(undefined symbol: foo)" in str(broken)
    hint = missing_dependency(ModuleNotFoundError("x", name="psycopg.pq"))
    assert hint is not None and "opbench[tune]" in str(hint)

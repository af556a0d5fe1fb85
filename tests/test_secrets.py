"""Secrets never leave the process: a real PostgreSQL user whose password holds '/', '@', ':' and '%' tunes,
lists, shows and reports a study, and fails to log in with a wrong password given in several spellings.
Nothing opbench prints or writes (stdout, stderr, results, reports, the study's attributes, tuned records)
contains the password, raw or percent-encoded."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from conftest import FAST_TRIALS, import_or_skip, run_cli, run_clis

from opbench import secrets

PASSWORD = "Se/cr@t:pa%ss-77"
WRONG = "Wr/on@g:pw%d-13"


def _forms(password: str) -> list[str]:
    return [password, quote(password, safe=""), quote(password)]


def _leaks(text: str, password: str = PASSWORD) -> list[str]:
    return [form for form in _forms(password) if form in text]


@pytest.mark.parametrize(
    "text",
    [
        "postgresql://tuner:Se%2Fcr%40t%3Apa%25ss-77@db.example:5432/opbench",
        "postgresql://tuner:Se/cr%40t:pa%25ss-77@db.example/opbench",
        "postgresql+psycopg://tuner:Se/cr@t:pa%ss-77@db.example/opbench",  # unescaped: not a valid URL
        "--storage=postgresql://tuner:Se/cr@t:pa%ss-77@db.example/opbench?sslmode=require",
        "postgresql://tuner@db.example/opbench?sslmode=require&password=Se%2Fcr%40t%3Apa%25ss-77",
        "host=db.example user=tuner password=Se/cr@t:pa%ss-77 dbname=opbench",
        "cannot open storage postgresql://tuner:Se%2Fcr%40t%3Apa%25ss-77@db.example/opbench: refused.",
    ],
)
def test_mask_hides_a_password_in_every_spelling(text: str) -> None:
    masked = secrets.mask(text)
    assert not _leaks(masked), masked
    assert "***" in masked and "db.example" in masked


def test_a_registered_password_is_masked_wherever_it_appears() -> None:
    secrets.register("postgresql://u:Zq%2F9%40x@h/db")
    assert secrets.mask("driver said: authentication with 'Zq/9@x' failed") == (
        "driver said: authentication with '***' failed"
    )


def _everything_written(root: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in root.rglob("*") if p.is_file())


def test_nothing_opbench_prints_or_writes_holds_the_password(postgres_server: Any, tmp_path: Path) -> None:
    optuna = import_or_skip("optuna")
    url = postgres_server.create_user("tuner", PASSWORD, "tunerdb")
    assert quote(PASSWORD, safe="") in url
    tune = ["tune", "gemm", "--m", "32", "--n", "48", "--k", "40", "--threads", "1", "--study", "s1"]
    quick = ["--trials", "3", "--confirm-top", "1", "--confirm-rounds", "1", *FAST_TRIALS]
    runs = [
        run_cli([*tune, *quick, "--storage", url]),
        run_cli([*tune, *quick, f"--storage={url}"]),  # resumes the same study
    ]
    reading = {  # read the finished study: independent of each other, so run side by side
        "studies": ["studies", "--storage", url],
        "show": [*tune, "--show", "--storage", url],
        "report": ["report", "--study", "s1", "--storage", url, "--out", str(tmp_path / "report")],
    }
    runs += run_clis(reading).values()
    for proc in runs:
        assert proc.returncode == 0, proc.stderr
        assert not _leaks(proc.stdout + proc.stderr), proc.stdout + proc.stderr
    assert "tuner:***@127.0.0.1" in runs[0].stdout
    written = _everything_written(tmp_path / "report")
    assert "s1" in written and not _leaks(written)
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert "--storage" in report["command"] and any("tuner:***@" in a for a in report["command"])

    study = optuna.load_study(study_name="s1", storage=url)
    attrs = json.dumps(study.user_attrs) + json.dumps([t.user_attrs for t in study.trials])
    assert "--storage" in attrs and not _leaks(attrs)
    records = _everything_written(Path(os.environ["OPBENCH_RECORDS_DIR"]))
    assert not _leaks(records)

    # A wrong password, in each spelling a user might try: one line, exit 2, neither password shown.
    host = f"127.0.0.1:{postgres_server.port}/tunerdb"
    bads = (
        f"postgresql://tuner:{quote(WRONG, safe='')}@{host}",
        f"postgresql://tuner:{WRONG}@{host}",  # '@' and '%' unescaped: not even a valid URL
        f"postgresql://tuner@{host}?password={quote(WRONG, safe='')}",
    )
    refused = run_clis(
        {
            f"{command} {i}": args
            for i, bad in enumerate(bads)
            for command, args in (
                ("tune", [*tune, *quick, "--storage", bad]),
                ("studies", ["studies", "--storage", bad]),
            )
        }
    )
    assert len(refused) == 2 * len(bads)
    for proc in refused.values():
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2, out
        assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in out, out
        assert not _leaks(out, WRONG) and not _leaks(out), out

"""Shared test helpers: run the real `opbench` command in a subprocess, with a per-session peak cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def _private_dirs(tmp_path_factory: pytest.TempPathFactory) -> None:
    # One peak measurement per test session, never the user's cache; tuned records never in the repository.
    os.environ["OPBENCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("opbench-cache"))
    os.environ["OPBENCH_RECORDS_DIR"] = str(tmp_path_factory.mktemp("opbench-records"))


def run_cli(
    args: list[str], *, env: dict[str, str] | None = None, timeout: float = 300, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "opbench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=cwd,
    )


# Fast timer settings for end-to-end runs: the tests check plumbing and schema, not speed.
FAST_TIMER = ["--min-sample-ms", "1", "--max-time-s", "0.05", "--call-budget-s", "0.5"]

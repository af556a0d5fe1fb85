"""Shared test helpers: run the real `opbench` command in a subprocess, with a per-session peak cache."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote

import pytest

# What makes a test `slow`: it starts a process (the real CLI, a tuner, a server) itself or through one of
# its fixtures. Marked here from the source, so a new test is marked without anyone remembering to:
# `pytest -m "not slow"` is the quick loop while editing.
_SPAWNS = ("run_cli(", "run_clis(", "run_as_row(", "subprocess.", "Popen(", "postgres_url", "start_postgres")


def _spawns(func: Any, seen: dict[Any, bool]) -> bool:
    if func not in seen:
        try:
            source = inspect.getsource(func)
        except (OSError, TypeError):
            source = ""
        seen[func] = any(token in source for token in _SPAWNS)
    return seen[func]


HERE = Path(__file__).resolve().parent


def _ours(func: Any) -> bool:
    code = getattr(func, "__code__", None)
    return code is not None and Path(code.co_filename).resolve().parent == HERE


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    seen: dict[Any, bool] = {}
    for item in items:
        funcs = [getattr(item, "function", None)]
        info = getattr(item, "_fixtureinfo", None)
        for defs in (getattr(info, "name2fixturedefs", None) or {}).values():
            # our own fixtures only: pytest's (capfd, pytester, ...) mention processes of their own
            funcs += [d.func for d in defs if _ours(d.func)]
        if any(f is not None and _spawns(f, seen) for f in funcs):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session", autouse=True)
def _private_dirs(tmp_path_factory: pytest.TempPathFactory) -> None:
    # One peak measurement per test session, never the user's cache; tuned records never in the repository.
    os.environ["OPBENCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("opbench-cache"))
    os.environ["OPBENCH_RECORDS_DIR"] = str(tmp_path_factory.mktemp("opbench-records"))
    # Sweeps in the sweep's own process unless a test asks for --processes (test_processes.py): worker
    # processes would start a framework per process in every small sweep of the suite.
    os.environ["OPBENCH_PROCESSES"] = "0"


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


def run_as_row(
    script: str,
    row: str,
    *,
    isa: str | None = None,
    argv: list[str] | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """`python -c SCRIPT [ARGV]` under the micro-architecture table's row `row` ($OPBENCH_MICROARCH, read
    once per process, hence a process of its own) and, where given, kernel set `isa` ($OPBENCH_ISA): a
    row's choices run on any CPU."""
    env = {**os.environ, "OPBENCH_MICROARCH": row, **({"OPBENCH_ISA": isa} if isa else {})}
    return subprocess.run(
        [sys.executable, "-c", script, *(argv or [])],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def run_clis(
    argvs: dict[str, list[str]], timeout: float = 300
) -> dict[str, subprocess.CompletedProcess[str]]:
    """`opbench ARGV` for each entry, as many at a time as this process has CPUs (at most 4), each confined
    to a CPU of its own: a sweep pins itself to the first CPUs it is allowed, so two sweeps left to share
    the set would both pin to the first. Most of such a process's time is importing frameworks (10 s of a
    15 s sweep in every backend), which two cores halve. Returns name -> completed process."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    width = max(1, min(4, len(cpus)))
    free: queue.SimpleQueue[int] = queue.SimpleQueue()
    for cpu in cpus[:width]:
        free.put(cpu)
    confine = (
        "import os, runpy, sys\nos.sched_setaffinity(0, {int(sys.argv.pop(1))})\n"
        "runpy.run_module('opbench', run_name='__main__')\n"
    )

    def one(name: str) -> subprocess.CompletedProcess[str]:
        if width == 1:
            return run_cli(argvs[name], timeout=timeout)
        cpu = free.get()
        try:
            argv = [sys.executable, "-c", confine, str(cpu), *argvs[name]]
            return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        finally:
            free.put(cpu)

    with ThreadPoolExecutor(width) as pool:
        return dict(zip(argvs, pool.map(one, argvs), strict=True))


def quick_sweep(
    args: list[str], out: Path, env: dict[str, str] | None = None, rounds: int = 1
) -> dict[str, Any]:
    """`opbench sweep ARGS` in short rounds into `out` (which must be new); the one results document, with
    what the command printed under "_stdout"."""
    more = ["--rounds", str(rounds), "--max-time-s", "0.05", "--out", str(out)]
    proc = run_cli(["sweep", *args, *more], env=env)
    assert proc.returncode == 0, proc.stderr
    (doc,) = [json.loads(p.read_text()) for p in out.glob("*.json")]
    doc["_stdout"] = proc.stdout
    return dict(doc)


class FakeClock:
    """A clock the test moves by hand (`clock.now += s`), for the timer's and the probes' budgets."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# Fast timer settings for end-to-end runs: the tests check plumbing and schema, not speed.
FAST_TIMER = ["--min-sample-ms", "1", "--max-time-s", "0.05", "--call-budget-s", "0.5", "--rounds", "2"]
# The same for a study's trials (`opbench tune`): where a test checks what a study records, resumes or
# survives, and not which tiling wins; the confirmation keeps its own timer.
FAST_TRIALS = ["--trial-time-s", "0.05"]


def tiny_gemm_results(out: Path, backends: str = "cpp,numpy", threads: int = 1) -> Path:
    """A real results file of a two-case fp32 GEMM sweep (a few seconds), as a user would make one; returns
    its JSON path."""
    args = ["sweep", "gemm", "--m", "8,16", "--n", "8", "--k", "8", "--dtype", "fp32", "--backend", backends]
    proc = run_cli([*args, "--threads", str(threads), "--out", str(out), *FAST_TIMER, "--quiet"])
    assert proc.returncode == 0, proc.stderr
    (path,) = out.glob("gemm-*.json")
    return path


# --- parts CI installs: skipped here when missing, a failure there ----------------------------------------

# CI (.ci/run) installs every framework, optuna, psycopg, PostgreSQL and Chromium and sets this: there a
# missing part is a broken install, which must fail the run instead of reading as green.
REQUIRE_ALL = bool(os.environ.get("OPBENCH_REQUIRE_ALL"))


def kernel_set_isas() -> list[str]:
    """The kernel sets this CPU runs, each once, for tests of fp32 and fp16 kernels: "amx" is AVX-512's
    kernel set with AMX-BF16 bf16 kernels, run as "avx512" here; tests/test_bf16.py and tests/test_amx.py run
    bf16 on every ISA, amx and its emulator too."""
    from opbench import kernels

    return [isa for isa in kernels.available_isas() if isa != "amx"]


def missing(reason: str) -> NoReturn:
    """Skip the test for a part this machine lacks; fail it where OPBENCH_REQUIRE_ALL is set (CI)."""
    if REQUIRE_ALL:
        pytest.fail(f"{reason}, but OPBENCH_REQUIRE_ALL is set (CI installs every part)")
    pytest.skip(reason)


def import_or_skip(name: str) -> Any:
    """pytest.importorskip, except that where OPBENCH_REQUIRE_ALL is set (CI) a module that does not import
    fails the test."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        missing(f"cannot import {name} ({e})")


# --- a real headless Chromium ----------------------------------------------------------------------------


def _browser() -> tuple[str, str] | None:
    for binary, driver in (("chromium", "chromedriver"), ("chromium-browser", "chromedriver")):
        b, d = shutil.which(binary), shutil.which(driver) or "/usr/lib/chromium/chromedriver"
        if b and d and os.path.exists(d):
            return b, d
    return None


def chromium() -> Any:
    """A headless Chromium WebDriver (the caller quits it); skips the test when none is installed, unless
    OPBENCH_REQUIRE_BROWSER is set (CI), where it fails."""
    found = _browser()
    if found is None:
        if os.environ.get("OPBENCH_REQUIRE_BROWSER") or REQUIRE_ALL:
            pytest.fail(
                "chromium/chromedriver not found but OPBENCH_REQUIRE_BROWSER is set (CI installs them)"
            )
        pytest.skip("chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = found[0]
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(executable_path=found[1]))


# --- a build that reads OPBENCH_FAULT_* --------------------------------------------------------------------


@pytest.fixture
def fault_build() -> None:
    """The isolation tests make chosen tilings really crash, hang or answer wrong through OPBENCH_FAULT_*,
    which only a test build reads (-DOPBENCH_FAULT_INJECTION=ON, csrc/include/opbench/fault.hpp). Skips on
    a default build unless OPBENCH_REQUIRE_FAULTS is set (CI builds it), where it fails."""
    from opbench import kernels

    if kernels.fault_injection():
        return
    how = "SKBUILD_CMAKE_DEFINE=OPBENCH_FAULT_INJECTION=ON pip install -e ."
    if os.environ.get("OPBENCH_REQUIRE_FAULTS"):
        pytest.fail(f"this build has no fault injection but OPBENCH_REQUIRE_FAULTS is set; rebuild: {how}")
    pytest.skip(f"the extension was built without fault injection (rebuild for these tests: {how})")


# --- a real PostgreSQL server, started once per test session ------------------------------------------


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    return None


class PostgresServer:
    """A server on 127.0.0.1 with password (scram-sha-256) authentication; users are made on demand."""

    def __init__(self, run: Callable[[list[str]], object], psql: str, sock: Path, port: int) -> None:
        self._run, self._psql, self._sock, self.port = run, psql, sock, port

    def sql(self, statement: str) -> None:
        self._run(
            [self._psql, "-h", str(self._sock), "-p", str(self.port), "-U", "postgres", "-c", statement]
        )

    def create_user(self, user: str, password: str, database: str) -> str:
        """CREATE USER and DATABASE; the URL with the password percent-encoded, as a user would write it."""
        self.sql(f"CREATE USER {user} PASSWORD '{password.replace(chr(39), chr(39) * 2)}'")
        self.sql(f"CREATE DATABASE {database} OWNER {user}")
        return f"postgresql://{user}:{quote(password, safe='')}@127.0.0.1:{self.port}/{database}"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    initdb, pg_ctl, psql = _pg_bin("initdb"), _pg_bin("pg_ctl"), _pg_bin("psql")
    if not (initdb and pg_ctl and psql):
        missing("no PostgreSQL server binaries here (.ci/run installs Debian's postgresql)")
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        runuser = shutil.which("runuser")
        if runuser is None or subprocess.run(["id", "postgres"], capture_output=True).returncode != 0:
            missing("running as root without a 'postgres' user to start the server as")
        as_user = [runuser, "-u", "postgres", "--"]
    base = Path(tempfile.mkdtemp(prefix="opbench-pg-"))
    base.chmod(0o755)
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    if as_user:
        shutil.chown(base, "postgres")
        shutil.chown(sock, "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def run(cmd: list[str]) -> object:
        return subprocess.run([*as_user, *cmd], check=True, capture_output=True, text=True)

    run([initdb, "-D", str(data), "-U", "postgres", "--auth-local=trust", "--auth-host=scram-sha-256"])
    run(
        [
            pg_ctl,
            "-D",
            str(data),
            "-l",
            str(base / "log"),
            "-w",
            "-o",
            f"-p {port} -k {sock} -c listen_addresses=127.0.0.1",
            "start",
        ]
    )
    try:
        yield PostgresServer(run, psql, sock, port)
    finally:
        subprocess.run([*as_user, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)

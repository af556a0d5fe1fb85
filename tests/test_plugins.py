"""Backends from installed packages: a tiny package built and installed by pip (into a directory on
PYTHONPATH, not into the test environment) declares an `opbench.backends` entry point; `opbench info` lists
it and a sweep measures it beside cpp. A broken plug-in is a skipped backend, never a crash."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import quick_sweep, run_cli

PYPROJECT = """
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "opbench-plugin-demo"
version = "0.3"

[project.entry-points."opbench.backends"]
demo = "opbench_plugin_demo:DemoBackend"
broken = "opbench_plugin_demo:NotABackend"

[tool.setuptools]
py-modules = ["opbench_plugin_demo"]
"""

MODULE = '''
"""A backend someone else wrote: numpy's matmul, through opbench's Backend interface."""
import numpy as np
from opbench.backends.base import Backend, Prepared, host_timed
from opbench.errors import BackendUnavailable


class _Gemm(Prepared):
    def __init__(self, a, b):
        self.a, self.b = a, b
        self.details = {"plugin": "demo"}

    def run(self, loops):
        return host_timed(lambda: self.a @ self.b, loops)

    def output(self):
        return self.a @ self.b


class DemoBackend(Backend):
    name = "demo"
    ops = ("gemm",)
    bf16_ops = ()  # numpy's matmul of bfloat16 arrays answers in float32 (the conformance suite saw it)
    accumulate = {"fp32": "fp32", "fp16": "fp16"}

    def unavailable_reason(self):
        return None

    def version(self):
        return "0.3"

    def setup(self, threads, device):
        if device != "cpu":
            raise BackendUnavailable(f"demo runs on the CPU only, not {device}")

    def prepare(self, op, shape, inputs, params):
        return _Gemm(inputs["a"], inputs["b"])


class NotABackend:
    pass
'''


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("plugin")
    package, site = root / "package", root / "site"
    package.mkdir()
    (package / "pyproject.toml").write_text(PYPROJECT)
    (package / "opbench_plugin_demo.py").write_text(MODULE)
    pip = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
    ]
    out = subprocess.run(
        [*pip, "--target", str(site), str(package)], capture_output=True, text=True, timeout=300
    )
    if out.returncode != 0:
        pytest.fail(f"pip could not build the demo plug-in: {out.stderr[-2000:]}")
    assert list(site.glob("opbench_plugin_demo-0.3.dist-info/entry_points.txt"))
    return site


def test_an_installed_plugin_is_listed_and_measured(plugin_path: Path, tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(plugin_path)}
    info = run_cli(["info"], env=env)
    assert info.returncode == 0, info.stderr
    assert (
        "backend demo (plug-in opbench_plugin_demo:DemoBackend from opbench-plugin-demo 0.3): available"
        in info.stdout
    )
    assert "backend broken (plug-in" in info.stdout and "not an opbench Backend subclass" in info.stdout
    assert "micro-architecture (the kernels' choices by core): " in info.stdout

    args = ["gemm", "--m", "24", "--n", "20", "--k", "28", "--dtype", "fp32", "--backend", "cpp,demo,broken"]
    doc = quick_sweep([*args, "--threads", "1"], tmp_path / "sweep", env=env)
    cpp, demo, broken = doc["records"]
    assert (
        cpp["status"] == demo["status"] == "ok"
        and demo["verify"]["ok"]
        and demo["details"] == {"plugin": "demo"}
    )
    assert doc["backends"]["demo"]["version"] == "0.3"
    assert broken["status"] == "skipped" and "not an opbench Backend subclass" in broken["reason"]


def test_without_the_plugin_its_name_is_unknown(tmp_path: Path) -> None:
    proc = run_cli(["sweep", "gemm", "--backend", "demo", "--out", str(tmp_path)])
    assert proc.returncode == 2 and "unknown backend 'demo'" in proc.stderr


def test_the_backend_conformance_suite_runs_over_an_installed_plugin(plugin_path: Path) -> None:
    """tests/test_backend_conformance.py takes its backends from the registry and the installed plug-ins:
    with the demo installed, every one of its checks runs on it (and the broken one is refused where it is
    made, as test_an_installed_plugin_is_listed_and_measured shows)."""
    import os

    tests = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_path), str(tests)])}
    suite = str(tests / "test_backend_conformance.py")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", suite, "-k", "demo", "-rA"],
        capture_output=True, text=True, env=env, timeout=600, cwd=tests.parent,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    passed = [line for line in out.stdout.splitlines() if line.startswith("PASSED") and "[demo" in line]
    names = {line.split("::")[1].split("[")[0] for line in passed}
    assert {
        "test_it_names_itself_and_its_version",
        "test_a_device_it_cannot_use_is_unavailable_not_a_crash",
        "test_each_op_and_dtype_is_run_and_verified_or_refused_with_a_reason",
    } <= names, out.stdout[-3000:]

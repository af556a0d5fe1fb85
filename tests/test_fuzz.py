"""Property-based fuzzing (hypothesis) of everything that reads user input: the size-list parser, spec, suite
and search-space TOML files, results files for report and compare, and the command line itself (argv drawn
from the real option names with hostile values). Every case ends in a result or a clear error (UsageError;
exit status 0 or 2 with one line), never a traceback, a signal or a hang.

The example counts are bounded for CI; OPBENCH_FUZZ_EXAMPLES multiplies them (e.g. 20 for a long run) and
OPBENCH_FUZZ_SEED draws a random seed instead of the fixed one."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from conftest import import_or_skip, tiny_gemm_results

hypothesis = import_or_skip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from opbench.errors import UsageError  # noqa: E402

SCALE = float(os.environ.get("OPBENCH_FUZZ_EXAMPLES", "1"))


def fuzz(examples: int) -> Any:
    return settings(
        max_examples=max(1, int(examples * SCALE)),
        deadline=None,
        derandomize="OPBENCH_FUZZ_SEED" not in os.environ,
        suppress_health_check=list(HealthCheck),
        database=None,
    )


HOSTILE = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "",
            " ",
            "-1",
            "0",
            "1",
            "nan",
            "inf",
            "-inf",
            "1e309",
            "9" * 40,
            "0x10",
            "1_000",
            "1:2:x1",
            "1:2000000000:+1",
            "1:100:xinf",
            "8,,16",
            "../../etc/passwd",
            "/dev/zero",
            "/proc/self/mem",
            "/",
            ".",
            "\x00",
            "a\x00b",
            "\u202e\u0301",
            "$(touch /tmp/opbench-pwned)",
            "'; DROP TABLE x; --",
            "postgresql://u:p@ss@127.0.0.1:1/db",
            "sqlite:////dev/zero",
            "sqlite:///",
            "x" * 5000,
            "<script>alert(1)</script>",
            '=HYPERLINK("x")',
            "%s%n%x",
            "{}",
            "[]",
            "same",
        ]
    ),
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)


# --- size lists ---------------------------------------------------------------------------------------


@fuzz(400)
@given(text=st.one_of(HOSTILE, st.from_regex(r"[0-9x+:,* .e-]{0,40}", fullmatch=True)))
def test_size_lists(text: str) -> None:
    from opbench.ranges import MAX_SIZE, MAX_VALUES, parse_sizes

    try:
        sizes = parse_sizes(text, "--m")
    except UsageError:
        return  # (the command line prints it on one line: test_the_command_line)
    assert 1 <= len(sizes) <= MAX_VALUES and all(isinstance(v, int) and 1 <= v <= MAX_SIZE for v in sizes)


# --- TOML: specs, suites, search spaces -------------------------------------------------------------------


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(repr(v), repr(v))
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"


SCALARS = st.one_of(
    st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=True), st.booleans(), st.text(max_size=12), HOSTILE
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
SPEC_KEYS = ["op", "mode", "dtypes", "backends", "base", "params", "axes", "cases", "description", "name"]
AXES = [
    "m",
    "n",
    "k",
    "batch",
    "input_size",
    "in_channels",
    "out_channels",
    "filter_size",
    "seq_len",
    "hidden",
    "stride",
    "padding",
    "dilation",
    "groups",
]


@st.composite
def spec_texts(draw: Any) -> str:
    if draw(st.integers(0, 9)) == 0:
        return draw(st.text(max_size=200))
    lines = [f"name = {_toml_value(draw(SCALARS))}"] if draw(st.booleans()) else []
    for _ in range(draw(st.integers(0, 3))):
        lines.append("[[sweep]]")
        table = {"op": draw(st.sampled_from(["gemm", "conv", "lstm", "rnn", "gru", "attention", ""]))}
        for key in draw(st.lists(st.sampled_from(SPEC_KEYS), max_size=5, unique=True)):
            if key in ("base", "axes", "params"):
                table[key] = draw(
                    st.dictionaries(
                        st.sampled_from(AXES),
                        st.one_of(
                            SCALARS,
                            st.lists(st.integers(-5, 70), max_size=5),
                            st.sampled_from(["1:64:x2", "1:20000:+1", "8:16:+4"]),
                        ),
                        max_size=4,
                    )
                )
            elif key == "cases":
                table[key] = draw(
                    st.lists(
                        st.dictionaries(
                            st.sampled_from(AXES + ["c", "h", "w", "r", "s"]), st.integers(-3, 40), max_size=8
                        ),
                        max_size=3,
                    )
                )
            elif key == "mode":
                table[key] = draw(st.sampled_from(["one-factor", "product", "cases", "x"]))
            else:
                table[key] = draw(VALUES)
        lines += [f"{k} = {_toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


@fuzz(250)
@given(text=spec_texts())
def test_spec_files(text: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    from opbench.specs import load_spec

    path = tmp_path_factory.mktemp("spec") / "spec.toml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        spec = load_spec(path)
    except UsageError:
        return
    assert all(0 < len(plan.shapes) <= 10_000 for plan in spec.plans)


def test_every_builtin_suite_loads() -> None:
    from opbench.specs import load_suite, suite_names

    for name in suite_names():
        assert load_suite(name).plans


SPACE_KEYS = ["multiple_of", "start", "stop", "step"]
SPACE_VALUES = st.one_of(
    st.integers(-5, 2**41),
    st.sampled_from(
        [
            "mr",
            "nr",
            "m",
            "n",
            "k",
            "l2_bytes",
            "x2",
            "+1",
            "+0",
            "x1",
            "2**40",
            "9**9**9",
            "1/0",
            "m*m*m*m*m",
            "(((1",
            "__import__('os')",
            "mr if 1 else 2",
            "-mr",
            "1e400",
        ]
    ),
    HOSTILE,
)


@st.composite
def space_texts(draw: Any) -> str:
    lines = [f"op = {_toml_value(draw(st.sampled_from(['gemm', 'conv', 1])))}"]
    for name in draw(
        st.lists(st.sampled_from(["tile_m", "tile_n", "tile_k", "tile_q"]), max_size=3, unique=True)
    ):
        lines.append(f"[params.{name}]")
        for key in draw(st.lists(st.sampled_from(SPACE_KEYS), max_size=4, unique=True)):
            lines.append(f"{key} = {_toml_value(draw(SPACE_VALUES))}")
    for _ in range(draw(st.integers(0, 2))):
        lines += ["[[constraints]]", f"rule = {_toml_value(draw(SPACE_VALUES))}"]
    return "\n".join(lines) + "\n"


@fuzz(250)
@given(text=space_texts())
def test_search_space_files(text: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    from opbench.tune.space import load_space

    path = tmp_path_factory.mktemp("space") / "space.toml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    names = {
        "mr": 14,
        "nr": 32,
        "m": 100,
        "n": 200,
        "k": 300,
        "l1_bytes": 48 << 10,
        "l2_bytes": 2 << 20,
        "l3_bytes": 32 << 20,
    }
    try:
        space, _ = load_space("gemm", names, True, str(path))
    except UsageError:
        return
    points = space.enumerate()
    assert len(points) <= 1_000_000
    if points:
        assert space.from_indices({n: 0 for n in space.param_names}) is not None


# --- results files for report and compare --------------------------------------------------------------


@pytest.fixture(scope="module")
def clean_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return dict(json.loads(tiny_gemm_results(tmp_path_factory.mktemp("fuzz-results")).read_text()))


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


@fuzz(60)
@given(data=st.data())
def test_results_files_for_report_and_compare(
    clean_results: dict[str, Any], data: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from opbench.report import compare, inputs, model, plots, render

    doc = copy.deepcopy(clean_results)
    for _ in range(data.draw(st.integers(1, 4))):
        paths = [p for p in _paths(doc) if p]
        where = data.draw(st.sampled_from(paths))
        parent = doc
        for key in where[:-1]:
            parent = parent[key]
        if data.draw(st.booleans()) and isinstance(parent, dict):
            del parent[where[-1]]
        else:
            parent[where[-1]] = data.draw(VALUES)
    path = tmp_path_factory.mktemp("results") / "r.json"
    path.write_text(json.dumps(doc))
    try:
        loaded = inputs.load_results(path)
    except UsageError:
        return
    # What the loader accepts, every writer can render (no exception, strict JSON).
    m = model.build([loaded], [], None, "fuzz", ["opbench", "report"])
    # (one draw in ten plots: matplotlib's 0.2 s a figure per format were half this test's time)
    figures = plots.all_plots(m) if data.draw(st.integers(0, 9)) == 0 else defaultdict(list)
    render.render_markdown(m, figures)
    render.render_csv(m)
    render.render_html(m, figures)
    json.loads(render.render_json(m, figures))
    clean = inputs.load_results(_write(tmp_path_factory, clean_results))
    for old, new in ((clean, loaded), (loaded, clean)):
        result = compare.compare(old, new, 0.1)
        compare.to_markdown(result)
        compare.to_csv(result)


def _write(factory: pytest.TempPathFactory, doc: dict[str, Any]) -> Path:
    path = factory.mktemp("clean") / "c.json"
    path.write_text(json.dumps(doc))
    return path


# --- the command line ------------------------------------------------------------------------------------

CLI_SCRIPT = r"""
import contextlib, io, json, os, signal, sys
from hypothesis import HealthCheck, assume, given, settings, strategies as st
sys.path.insert(0, TESTS)
from test_fuzz import HOSTILE
from opbench.cli import build_parser, main

tmp, results = TMP, RESULTS
COMMANDS = {
    "sweep": ["sweep", "gemm", "--m", "8", "--n", "8", "--k", "8", "--dtype", "fp32", "--backend", "numpy",
              "--threads", "1", "--min-sample-ms", "0.5", "--max-time-s", "0.02", "--out", tmp + "/sweep",
              "--quiet"],
    "ab": ["ab", "gemm", "--m", "8", "--n", "8", "--k", "8", "--a", "numpy", "--b", "numpy", "--dtype",
           "fp32", "--threads", "1", "--rounds", "1", "--min-sample-ms", "0.5", "--max-time-s", "0.02",
           "--out", tmp + "/ab", "--quiet"],
    "peak": ["peak", "--dtype", "fp32", "--threads", "1"],
    "report": ["report", results, "--out", tmp + "/report", "--format", "csv", "--force"],
    "compare": ["compare", results, results],
    "tune": ["tune", "gemm", "--m", "8", "--n", "8", "--k", "8", "--show", "--out", tmp + "/tune"],
    "studies": ["studies", "--out", tmp + "/tune"],
    "suites": ["suites"],
    "info": ["info"],
    "shapes": ["shapes", "--torch", tmp + "/tiny_model.py:model", "--input", "2x4", "--force",
               "--out", tmp + "/tiny.batch"],
}
with open(tmp + "/tiny_model.py", "w") as f:
    f.write("import torch\n\ndef model():\n    return torch.nn.Linear(4, 3)\n")
parser = build_parser()
options = {}
for name, sub in parser._subparsers._group_actions[0].choices.items():
    flags = (o for a in sub._actions for o in a.option_strings)
    options[name] = sorted(o for o in flags if o.startswith("--") and o != "--help")
# every command is fuzzed: one added to the parser must be added here
assert set(COMMANDS) == set(options), sorted(set(options) ^ set(COMMANDS))
log = open(tmp + "/argv.log", "a")
# Options that legitimately make a run longer: fuzzed with values that are refused, or small ones.
DURATIONS = {"--min-sample-ms", "--max-time-s", "--call-budget-s", "--max-call-s", "--timeout", "--trials",
             "--confirm-top", "--confirm-rounds", "--trial-timeout", "--verify-max-gflop",
             "--m", "--n", "--k"}


def small_or_invalid(option, value):
    if option not in DURATIONS:
        return True
    try:
        return float(value.split(",")[0].split(":")[-1] or "x") <= 64 and ":" not in value
    except ValueError:
        return True


def hang(signum, frame):
    raise AssertionError("no answer within 120 s: a hang")


signal.signal(signal.SIGALRM, hang)
count = {"0": 0, "2": 0}


@settings(max_examples=EXAMPLES, deadline=None, derandomize=DERANDOMIZE,
          suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def cli(data):
    command = data.draw(st.sampled_from(sorted(COMMANDS)))
    argv = list(COMMANDS[command])
    for _ in range(data.draw(st.integers(1, 3))):
        option = data.draw(st.sampled_from(options[command] + ["--bogus", "gemm", "conv"]))
        value = data.draw(HOSTILE)
        assume(small_or_invalid(option, value))
        argv += [option] if data.draw(st.booleans()) and value == "" else [option, value]
    log.write(json.dumps(argv) + "\n")
    log.flush()
    out, err = io.StringIO(), io.StringIO()
    signal.alarm(120)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    signal.alarm(0)
    text = err.getvalue()
    assert code in (0, 2), (argv, code, text[-3000:])
    assert "Traceback" not in text, (argv, text[-3000:])
    if code == 2:
        assert text.strip() and text.strip().count("\n") == 0, (argv, text)
    count[str(code)] += 1


# The base command lines work unchanged (else every fuzzed line would be refused for their sake, and the
# fuzz would test nothing past the parser); which fuzzed lines still succeed depends on the draws.
for name in ("sweep", "ab", "report", "compare", "suites", "info"):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(COMMANDS[name]))
    assert code == 0, (name, err.getvalue()[-3000:])
cli()
print("ok", count["0"], count["2"])
"""


def test_the_command_line(tmp_path: Path, clean_results: dict[str, Any]) -> None:
    results = tmp_path / "results.json"
    results.write_text(json.dumps(clean_results))
    script = (
        CLI_SCRIPT.replace("TESTS", repr(str(Path(__file__).parent)))
        .replace("TMP", repr(str(tmp_path)))
        .replace("RESULTS", repr(str(results)))
        .replace("EXAMPLES", str(max(1, int(80 * SCALE))))
        .replace("DERANDOMIZE", str("OPBENCH_FUZZ_SEED" not in os.environ))
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=900, cwd=tmp_path
    )
    log = (tmp_path / "argv.log").read_text().splitlines() if (tmp_path / "argv.log").exists() else []
    assert proc.returncode == 0, f"last argv: {log[-1:]}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    _, ok, refused = proc.stdout.split()
    assert int(refused) > 20, proc.stdout  # refusals exercised; the base lines' success is asserted first

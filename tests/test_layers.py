"""The layers of docs/architecture.md, held by tools rather than by review: import-linter's contracts
(pyproject.toml, [tool.importlinter]) and, for the compiled module grimp cannot see, an AST scan of who
imports _core."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import import_or_skip

PACKAGE = Path(__file__).resolve().parent.parent / "opbench"

# The one module that imports the compiled extension (docs/architecture.md): everything else goes through it.
CORE_IMPORTERS = {"kernels/_native.py"}


def _imports_core(path: Path) -> bool:
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "opbench"
            and any(a.name == "_core" for a in node.names)
        ):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "opbench._core":
            return True
        if isinstance(node, ast.Import) and any(a.name == "opbench._core" for a in node.names):
            return True
        if isinstance(node, ast.Constant) and node.value == "opbench._core":  # importlib.import_module
            return True
    return False


def test_only_the_listed_modules_import_core() -> None:
    found = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if _imports_core(p)}
    new = found - CORE_IMPORTERS
    assert not new, f"import _core through opbench.kernels instead: {sorted(new)}"
    gone = CORE_IMPORTERS - found
    assert not gone, f"no longer import _core: remove {sorted(gone)} from CORE_IMPORTERS and the docs"


def test_no_module_imports_itself_through_others() -> None:
    """No import circle anywhere in the package (the layers contract covers only the modules it lists):
    strongly connected components of grimp's module graph, imports for type checking included."""
    grimp = import_or_skip("grimp")
    graph = grimp.build_graph("opbench", exclude_type_checking_imports=False)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in graph.modules:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    assert not circles, f"import circles: {circles}"


def test_the_import_contracts_hold() -> None:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    out = subprocess.run([exe, "--no-cache"], capture_output=True, text=True, cwd=PACKAGE.parent, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


MAX_LINES = 450
# Files allowed over MAX_LINES: none (tune/study.py was split by job). The list may only shrink.
LONG_FILES: set[str] = set()


def test_no_python_file_is_longer_than_450_lines() -> None:
    long = {
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if len(p.read_text().splitlines()) > MAX_LINES
    }
    assert not long - LONG_FILES, f"split these by concern: {sorted(long - LONG_FILES)}"
    assert not LONG_FILES - long, f"now short: remove {sorted(LONG_FILES - long)} from LONG_FILES"


def test_a_missing_part_fails_where_ci_requires_every_part() -> None:
    """conftest.missing and import_or_skip skip on a machine without the part, and fail under
    OPBENCH_REQUIRE_ALL (set by .ci/run, which installs every part): a broken install is not green."""
    import os

    tests = str(Path(__file__).parent)
    script = (
        f"import sys; sys.path.insert(0, {tests!r}); import conftest, pytest\n"
        "calls = (lambda: conftest.missing('no server'), lambda: conftest.import_or_skip('no_such_mod'))\n"
        "for call in calls:\n"
        "    try:\n"
        "        call()\n"
        "    except pytest.fail.Exception:\n"
        "        print('fail')\n"
        "    except pytest.skip.Exception:\n"
        "        print('skip')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPBENCH_REQUIRE_ALL"}
    for extra, want in (({}, "skip"), ({"OPBENCH_REQUIRE_ALL": "1"}, "fail")):
        proc = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, env={**env, **extra}, timeout=120
        )
        assert proc.stdout.split() == [want, want], proc.stderr
    assert "OPBENCH_REQUIRE_ALL=1" in (Path(__file__).parent.parent / ".ci" / "run").read_text()


def test_typed_core_debt_only_shrinks() -> None:
    """Issue 40's counts (tests/typed_core.py) per file: no file over its allowance, and an allowance
    lowered as soon as a file pays some back (tests/typed_core_allowed.py)."""
    from typed_core import counts
    from typed_core_allowed import ALLOWED

    current = counts()
    assert current.keys() == ALLOWED.keys()
    grown, paid = [], []
    for name, per_file in current.items():
        allowed = ALLOWED[name]
        for rel in sorted(per_file.keys() | allowed.keys()):
            now, was = per_file.get(rel, 0), allowed.get(rel, 0)
            if now > was:
                grown.append(f"{name}: {rel} has {now}, allowed {was}")
            elif now < was:
                paid.append(f"{name}: {rel} has {now}, allowed {was}")
    assert not grown, "typed-core debt grew:\n" + "\n".join(grown)
    regenerate = "python tests/typed_core.py > tests/typed_core_allowed.py"
    assert not paid, f"debt paid back: lower the allowances ({regenerate}):\n" + "\n".join(paid)


def test_the_typed_core_measures_count_what_they_name() -> None:
    import ast

    from typed_core import MEASURES

    source = (
        "from typing import Any\n"
        "import os\n"
        "def f(x: Any, *, tile_m: int) -> dict[str, Any]:\n"
        "    from opbench.ops import get_op\n"
        "    y: Any = ops.get_op('gemm')\n"
        "    get_op('conv')(tile_m=1)\n"
        "    return {}\n"
    )
    got = {name: measure(ast.parse(source), source) for name, measure in MEASURES.items()}
    assert got == {
        "dict_any": 1,
        "any_annotations": 2,
        "get_op_calls": 2,
        "tile_keywords": 2,
        "function_imports": 1,
    }


def test_every_module_imports_first_on_its_own() -> None:
    """A circle through a package's __init__ (ops/__init__ imports every op module) is one grimp cannot see:
    a module that imports `opbench.ops.base` imports all of opbench.ops first. Each module is imported here
    as the first opbench module of a clean import state, so such a circle is an ImportError."""
    modules = sorted(
        ".".join(("opbench", *p.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__")
        for p in PACKAGE.rglob("*.py")
        if p.name != "__main__.py"
    )
    script = (
        "import importlib, sys, traceback\n"
        "failed = []\nfor m in sys.argv[1:]:\n"
        "    for k in [k for k in sys.modules if k == 'opbench' or k.startswith('opbench.')]:\n"
        "        if k != 'opbench._core':\n"
        "            del sys.modules[k]\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "    except Exception:\n"
        "        failed.append(m + ': ' + traceback.format_exc().splitlines()[-1])\n"
        "print('\\n'.join(failed))\n"
    )
    # in two processes side by side (half the modules each): the suite's machine has two cores
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, *modules[half::2]],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for half in (0, 1)
    ]
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, stderr[-3000:]
        assert stdout.strip() == "", stdout


CSRC = Path(__file__).resolve().parent.parent / "csrc"


def csrc_upward_includes(root: Path = CSRC) -> list[str]:
    """Each `#include "..."` in csrc/ that reaches outside its own folder other than down into the shared
    headers (csrc/include/opbench/, included as "opbench/..."): a folder's private header used by another
    folder, or a relative path out of the folder."""
    bad = []
    for path in sorted(root.rglob("*.[ch]pp")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if not line.startswith('#include "'):
                continue
            target = line.split('"')[1]
            shared = target.startswith("opbench/") and (root / "include" / target).exists()
            own = not target.startswith("opbench/") and (path.parent / target).resolve().parent == path.parent
            if shared or own:
                continue
            bad.append(f"{path.relative_to(root)}:{n}: {target}")
    return bad


def test_csrc_includes_point_down_or_within_their_folder(tmp_path: Path) -> None:
    assert csrc_upward_includes() == []
    # what it catches: a relative path out of the folder, another folder's private header, a missing one
    (tmp_path / "include" / "opbench").mkdir(parents=True)
    (tmp_path / "include" / "opbench" / "gemm.hpp").write_text("#pragma once\n")
    (tmp_path / "conv").mkdir()
    (tmp_path / "conv" / "padded.hpp").write_text("#pragma once\n")
    (tmp_path / "gemm").mkdir()
    (tmp_path / "gemm" / "ok.cpp").write_text('#include "opbench/gemm.hpp"\n#include <vector>\n')
    (tmp_path / "gemm" / "up.cpp").write_text('#include "../conv/padded.hpp"\n#include "opbench/nope.hpp"\n')
    assert csrc_upward_includes(tmp_path) == [
        "gemm/up.cpp:1: ../conv/padded.hpp",
        "gemm/up.cpp:2: opbench/nope.hpp",
    ]


def test_every_module_has_a_tier() -> None:
    """The global layers contract has four to six tiers, and every part of opbench is in one of them or among
    the leaves: a new module must be placed."""
    import tomllib

    contracts = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"
    ]
    (tiers,) = [c["layers"] for c in contracts if c["type"] == "layers" and "containers" not in c]
    leaves = next(c["source_modules"] for c in contracts if c["name"].startswith("The leaves"))
    placed = {m.strip() for tier in tiers for m in tier.replace("|", ":").split(":")} | set(leaves)
    assert 4 <= len(tiers) <= 6, tiers
    parts = {f"opbench.{p.stem}" for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__")}
    parts |= {f"opbench.{p.parent.name}" for p in PACKAGE.glob("*/__init__.py")}
    assert parts - placed == set(), "modules in no tier"
    assert placed - parts == set(), "tiers naming no module"

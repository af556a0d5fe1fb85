"""What issue 40 (a typed core) counts in opbench/, per file, and what each file is allowed today: the
allowances may only shrink. tests/test_layers.py fails when a file holds more than its allowance (new debt)
and when it holds less (paying debt: lower the allowance, so that it cannot come back).

`python tests/typed_core.py > tests/typed_core_allowed.py` writes the allowances as the counts stand."""

from __future__ import annotations

import ast
import json
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "opbench"


def _annotations(tree: ast.AST) -> list[ast.expr]:
    out: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]
            out += [p.annotation for p in params if p is not None and p.annotation is not None]
            if node.returns is not None:
                out.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            out.append(node.annotation)
    return out


def dict_any(tree: ast.AST, source: str) -> int:
    """`dict[str, Any]` written anywhere (annotations, aliases, casts)."""
    return source.count("dict[str, Any]")


def any_annotations(tree: ast.AST, source: str) -> int:
    """Parameters, returns and variables annotated with a bare `Any`."""
    return sum(isinstance(a, ast.Name) and a.id == "Any" for a in _annotations(tree))


def get_op_calls(tree: ast.AST, source: str) -> int:
    """Calls of ops.get_op: the op registry looked up by name instead of a Case's Op being used."""
    return sum(
        isinstance(n, ast.Call)
        and (
            (isinstance(n.func, ast.Name) and n.func.id == "get_op")
            or (isinstance(n.func, ast.Attribute) and n.func.attr == "get_op")
        )
        for n in ast.walk(tree)
    )


def tile_keywords(tree: ast.AST, source: str) -> int:
    """`tile_m` as a keyword argument or a parameter: the tile keywords spelled out, not a Tiles."""
    calls = sum(isinstance(n, ast.keyword) and n.arg == "tile_m" for n in ast.walk(tree))
    params = sum(isinstance(n, ast.arg) and n.arg == "tile_m" for n in ast.walk(tree))
    return calls + params


def function_imports(tree: ast.AST, source: str) -> int:
    """Import statements inside functions (module headers should say what a module uses)."""
    found: set[ast.stmt] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found |= {n for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return len(found)


MEASURES: dict[str, Callable[[ast.AST, str], int]] = {
    "dict_any": dict_any,
    "any_annotations": any_annotations,
    "get_op_calls": get_op_calls,
    "tile_keywords": tile_keywords,
    "function_imports": function_imports,
}


def counts() -> dict[str, dict[str, int]]:
    """measure -> {file relative to opbench/: count}, files with a count of 0 left out."""
    out: dict[str, Counter[str]] = {name: Counter() for name in MEASURES}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        tree = ast.parse(source, str(path))
        rel = str(path.relative_to(PACKAGE))
        for name, measure in MEASURES.items():
            n = measure(tree, source)
            if n:
                out[name][rel] = n
    return {name: dict(sorted(c.items())) for name, c in out.items()}


def _print(current: dict[str, dict[str, int]]) -> None:
    print('"""What each file of opbench/ may hold of what tests/typed_core.py counts; may only shrink."""')
    print()
    print("ALLOWED: dict[str, dict[str, int]] = {")
    for name, per_file in current.items():
        print(f"    # {sum(per_file.values())} in all")
        if not per_file:  # paid in full: nothing may come back
            print(f"    {json.dumps(name)}: {{}},")
            continue
        print(f"    {json.dumps(name)}: {{")
        for rel, n in per_file.items():
            print(f"        {json.dumps(rel)}: {n},")
        print("    },")
    print("}")


if __name__ == "__main__":
    _print(counts())
    sys.exit(0)

"""Tuning search spaces, declared in tuning/spaces/<op>.toml (or a user's file for their own kernel):
candidate values per parameter, either generated (start/step/stop: valid by construction, multiples of the
register tile, never past the padded dimension) or listed (`values = [...]`: integers, floats, strings or
booleans), and constraints over the parameters and the problem's names, with enumeration (to count and to
grid-search) and Optuna suggestion by ordinal index. No Python is executed from a space file: rules are
read by a small evaluator of arithmetic, comparisons and `and`/`or`."""

from __future__ import annotations

import ast
import itertools
import math
import operator
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opbench import kernels
from opbench.documents import Params, Scalar
from opbench.errors import UsageError
from opbench.files import MAX_SPEC_BYTES, read_input

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMP = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}


# A candidate value of a search parameter (a space file's `values`, or the integers of start/step/stop).
SpaceValue = int | float | str | bool

MAX_EXPRESSION_CHARS = 1000
_LIMIT = 2**63  # every intermediate value stays in 64-bit range: no runaway big-integer arithmetic


def evaluate(expr: str, names: Mapping[str, Scalar]) -> Any:
    """Arithmetic and comparisons over `names` only (no calls, attributes or anything else). Raises
    ValueError for anything else, for division by zero and for values outside the 64-bit range."""
    if len(expr) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression of {len(expr)} characters (limit {MAX_EXPRESSION_CHARS})")

    def bounded(value: Any) -> Any:
        if isinstance(value, bool):
            return value
        if not -_LIMIT < value < _LIMIT:  # also refuses nan
            raise ValueError(f"a value in '{expr}' leaves the 64-bit range")
        return value

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return bounded(node.value)
        if isinstance(node, ast.Constant) and type(node.value) in (str, bool):
            return node.value  # compared with == / != (arithmetic on them is refused below)
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise ValueError(f"unknown name '{node.id}' (known: {', '.join(sorted(names))})")
            return names[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and not (abs(right) <= 64 and abs(left) <= 2**32):
                raise ValueError(f"power {left} ** {right} in '{expr}' is out of range")
            return bounded(_OPS[type(node.op)](left, right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.Compare) and all(type(o) in _CMP for o in node.ops):
            left = ev(node.left)
            for op, comp in zip(node.ops, node.comparators, strict=True):
                right = ev(comp)
                if not _CMP[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
            return all(ev(v) for v in node.values)
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            return any(ev(v) for v in node.values)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not ev(node.operand)
        raise ValueError(f"unsupported expression element {ast.dump(node)[:40]}")

    try:
        return ev(ast.parse(expr, mode="eval"))
    except SyntaxError as e:
        raise ValueError(f"not an expression: {e.msg}") from None
    except (ZeroDivisionError, OverflowError, TypeError, RecursionError, MemoryError) as e:
        raise ValueError(f"cannot evaluate '{expr[:80]}': {type(e).__name__}") from None


@dataclass(frozen=True)
class Constraint:
    name: str
    rule: str
    always: bool = False  # `always = true`: which points are valid at all, enforced without --cache-fit


@dataclass(frozen=True)
class TileSpace:
    """Concrete candidates for one problem on one kernel set."""

    params: tuple[tuple[str, tuple[SpaceValue, ...]], ...]  # in declaration order
    constraints: tuple[Constraint, ...]  # the enforced ones
    names: dict[str, int]  # mr, nr, m, n, k (or the problem's shape fields), cache sizes

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p for p, _ in self.params)

    def values(self, name: str) -> tuple[SpaceValue, ...]:
        return dict(self.params)[name]

    def valid(self, tiles: Mapping[str, Scalar]) -> bool:
        """Whether every constraint whose names are all assigned holds."""
        scope: dict[str, Scalar] = {**self.names, **tiles}
        for c in self.constraints:
            try:
                if not evaluate(c.rule, scope):
                    return False
            except ValueError:
                continue  # mentions a tile not assigned yet
        return True

    def enumerate(self) -> list[Params]:
        """Every valid point (the grid)."""
        points: list[Params] = []
        for combo in itertools.product(*(v for _, v in self.params)):
            tiles: Params = dict(zip(self.param_names, combo, strict=True))
            if self.valid(tiles):
                points.append(tiles)
        return points

    def from_indices(self, indices: dict[str, int]) -> Params | None:
        """The tiling for ordinal indices, each parameter moved to the nearest index that keeps the
        constraints (smaller first); None if a parameter has no valid value at all."""
        tiles: Params = {}
        for name, values in self.params:
            want = min(max(indices[name], 0), len(values) - 1)
            order = sorted(range(len(values)), key=lambda i: (abs(i - want), i > want))
            for i in order:
                if self.valid({**tiles, name: values[i]}):
                    tiles[name] = values[i]
                    break
            else:
                return None
        return tiles


MAX_CANDIDATES = 4096  # per parameter
MAX_POINTS = 1_000_000  # the grid (product of the parameters' candidates) that enumerate() walks


def _listed(values: object, where: str) -> tuple[SpaceValue, ...]:
    """`values = [...]`: one to MAX_CANDIDATES distinct integers, floats, strings or booleans."""
    if not isinstance(values, list) or not 1 <= len(values) <= MAX_CANDIDATES:
        raise UsageError(f"{where}.values: expected a list of 1 to {MAX_CANDIDATES} values")
    for v in values:
        if type(v) not in (int, float, str, bool) or (isinstance(v, float) and not math.isfinite(v)):
            raise UsageError(f"{where}.values: {v!r} is not an integer, finite float, string or boolean")
    if len({(type(v), v) for v in values}) != len(values):
        raise UsageError(f"{where}.values: a value is listed twice")
    return tuple(values)


def _candidates(
    spec: Mapping[str, object], names: Mapping[str, Scalar], where: str
) -> tuple[SpaceValue, ...]:
    if "values" in spec:
        extra = sorted(set(spec) - {"values"})
        if extra:
            raise UsageError(f"{where}: give values or start/step/stop, not both ({', '.join(extra)})")
        return _listed(spec["values"], where)
    unknown = sorted(set(spec) - {"multiple_of", "start", "step", "stop"})
    if unknown:
        keys = "values, or multiple_of/start/step/stop"
        raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)} ({keys})")

    def num(key: str) -> int:
        value = spec.get(key)
        if isinstance(value, str):
            try:
                value = int(evaluate(value, names))
            except (ValueError, SyntaxError) as e:
                raise UsageError(f"{where}.{key}: {e}") from None
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 2**40:
            raise UsageError(
                f"{where}.{key}: expected an integer >= 1 (at most 2^40) or a name, got {value!r}"
            )
        return value

    multiple = num("multiple_of") if "multiple_of" in spec else 1
    start, stop = num("start"), num("stop")
    step = spec.get("step", "x2")
    if not isinstance(step, str) or not (step.startswith("x") or step.startswith("+")):
        raise UsageError(f"{where}.step: expected 'x2' or '+N', got {step!r}")
    try:
        amount = int(step[1:])
        if amount > 2**40:
            raise ValueError
    except ValueError:
        raise UsageError(f"{where}.step: expected 'x2' or '+N', got {step!r}") from None
    if amount < (2 if step[0] == "x" else 1):
        raise UsageError(f"{where}.step: {step!r} would never advance")
    padded = -(-stop // multiple) * multiple
    visits = (padded - start) // amount + 1 if step[0] == "+" else padded.bit_length()
    if visits > MAX_CANDIDATES:
        raise UsageError(f"{where}: {step!r} from {start} to {padded} is over {MAX_CANDIDATES} candidates")
    values: list[int] = []
    v = start
    while v < padded:
        if v % multiple == 0:
            values.append(v)
        v = v * amount if step[0] == "x" else v + amount
    values.append(padded)
    return tuple(sorted(set(values)))


def spaces_dirs() -> list[Path]:
    """Where space files are looked up: $OPBENCH_SPACES_DIR, the source tree's tuning/spaces, the installed
    copy (CMake installs tuning/spaces into the package as tuning_spaces)."""
    dirs = []
    if os.environ.get("OPBENCH_SPACES_DIR"):
        dirs.append(Path(os.environ["OPBENCH_SPACES_DIR"]))
    dirs.append(Path(__file__).resolve().parents[2] / "tuning" / "spaces")

    dirs.append(Path(kernels.extension_dir()) / "tuning_spaces")
    return dirs


def load_space(
    op: str, names: dict[str, int], cache_fit: bool, space: str | None = None, enforce_all: bool = False
) -> tuple[TileSpace, str]:
    """The concrete space for a problem; `space` is a file path or a name in the spaces directories.
    Constraints are enforced with `cache_fit` (our kernels' optional cache-fit rules) or `enforce_all` (a
    user kernel's space, whose rules say which points are valid at all); one marked `always = true` (which
    of our kernels' points are valid at all: the AMX layouts) is enforced in any case."""
    if space and (os.sep in space or space.endswith(".toml")):
        path = Path(space)
    else:
        wanted = f"{space or op}.toml"
        path = next((d / wanted for d in spaces_dirs() if (d / wanted).is_file()), Path(wanted))
    try:
        data = tomllib.loads(read_input(path, MAX_SPEC_BYTES, "TOML search-space file").decode("utf-8"))
    except UsageError as e:
        raise UsageError(f"search space {e}") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as e:
        raise UsageError(f"search space {path}: cannot read: {e or 'nested too deeply'}") from None
    declared = data.get("op")
    if declared != op and not (isinstance(declared, list) and op in declared):
        raise UsageError(f"search space {path}: op: expected '{op}' (or a list with it), got {declared!r}")
    params_spec = data.get("params")
    if not isinstance(params_spec, dict) or not params_spec:
        raise UsageError(f"search space {path}: params: expected one or more [params.NAME] tables")
    for name, spec in params_spec.items():
        if not isinstance(spec, dict):
            raise UsageError(f"search space {path}: params.{name}: expected a table, got {spec!r}")
    params = tuple(
        (name, _candidates(spec, names, f"search space {path}: params.{name}"))
        for name, spec in params_spec.items()
    )
    grid = 1
    for _, values in params:
        grid *= len(values)
    if grid > MAX_POINTS:
        raise UsageError(f"search space {path}: {grid} points (limit {MAX_POINTS})")
    constraints = []
    constraint_specs = data.get("constraints", [])
    if not isinstance(constraint_specs, list) or len(constraint_specs) > 100:
        raise UsageError(f"search space {path}: constraints: expected a list of at most 100 tables")
    for i, c in enumerate(constraint_specs):
        if not isinstance(c, dict) or not isinstance(c.get("rule"), str):
            raise UsageError(f"search space {path}: constraints[{i}]: expected a table with a 'rule' string")
        try:
            evaluate(c["rule"], {**names, **{p: values[0] for p, values in params}})
        except (ValueError, SyntaxError) as e:
            raise UsageError(f"search space {path}: constraints[{i}].rule: {e}") from None
        always = c.get("always", False)
        if not isinstance(always, bool):
            raise UsageError(f"search space {path}: constraints[{i}].always: expected true or false")
        constraints.append(Constraint(str(c.get("name", c["rule"])), c["rule"], always))
    enforced = tuple(c for c in constraints if cache_fit or enforce_all or c.always)
    return TileSpace(params, enforced, names), str(path)

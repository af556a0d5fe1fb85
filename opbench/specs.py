"""Declarative sweep specs (TOML, read with the standard library) and the built-in named suites.

A spec file holds optional `name`, `description`, `source` and one or more [[sweep]] tables:

    [[sweep]]
    op = "conv"                       # gemm, conv, rnn, gru or lstm
    mode = "one-factor"               # or "product"; default: the op's
    dtypes = ["fp32", "fp16"]         # default: the command line's
    backends = ["cpp", "torch"]       # default: the op's
    base = { batch = 8, input_size = 56 }          # axis values of the base point (op defaults for the rest)
    params = { stride = 1, padding = "same" }      # conv only: stride, padding ([t, b, l, r] too), dilation,
                                                    # groups
    axes = { batch = [1, 2, 4], input_size = "28:112:x2" }   # lists or size strings
    cases = [ { n = 8, c = 64, h = 56, w = 56, k = 64, r = 3, s = 3, pad_h = 1, pad_w = 1 } ]  # exact shapes

Every problem is reported as `spec FILE: KEY: what was expected`, and the command exits with code 2.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opbench.backends import parse_backends
from opbench.batchfiles import read_batch
from opbench.descriptors import Options
from opbench.documents import BatchLines
from opbench.dtypes import parse_dtypes
from opbench.errors import UsageError
from opbench.files import MAX_SPEC_BYTES, read_input
from opbench.ops import OPS
from opbench.ops.base import Op
from opbench.ops.space import MAX_SHAPES, MODES, expand
from opbench.ranges import parse_sizes

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SUITES_DIR = Path(__file__).parent / "suites"
TOP_KEYS = {"name", "description", "source", "license", "sweep"}
SWEEP_KEYS = {"op", "mode", "dtypes", "backends", "base", "params", "axes", "cases", "description"}


@dataclass(frozen=True)
class SweepPlan:
    """One operator's shapes from a spec; dtypes/backends None mean 'from the command line'."""

    op: Op[Any]
    shapes: tuple[Any, ...]
    mode: str  # "one-factor", "product", or "cases" for an explicit list
    dtypes: tuple[str, ...] | None
    backends: tuple[str, ...] | None
    description: str


@dataclass(frozen=True)
class Spec:
    name: str
    description: str
    source: str | None
    path: str
    plans: tuple[SweepPlan, ...]
    lines: BatchLines | None = None  # a batch file's: lines run and skipped (batchfiles.Batch.summary)


class _Where:
    def __init__(self, path: str) -> None:
        self.path = path

    def error(self, key: str, message: str) -> UsageError:
        return UsageError(f"spec {self.path}: {key}: {message}")


def _int_list(value: object, key: str, where: _Where) -> list[int]:
    if isinstance(value, str):
        try:
            return parse_sizes(value, key)
        except UsageError as e:
            raise where.error(key, str(e).split(": ", 1)[-1]) from None
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list) or not value:
        raise where.error(
            key, f"expected a non-empty list of integers >= 1 or a size string like '1:16:x2', got {value!r}"
        )
    for v in value:
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise where.error(key, f"expected integers >= 1, got {v!r}")
    return list(dict.fromkeys(value))


def _str_list(value: object, key: str, where: _Where) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise where.error(key, f"expected a list of names, got {value!r}")
    return value


def _plan(table: object, index: int, where: _Where) -> SweepPlan:
    prefix = f"sweep[{index}]"
    if not isinstance(table, dict):
        raise where.error(prefix, "expected a table")
    unknown = set(table) - SWEEP_KEYS
    if unknown:
        raise where.error(
            f"{prefix}.{sorted(unknown)[0]}", f"unknown key (expected one of {', '.join(sorted(SWEEP_KEYS))})"
        )
    op_name = table.get("op")
    if not isinstance(op_name, str) or op_name not in OPS:
        raise where.error(f"{prefix}.op", f"expected one of {', '.join(OPS)}, got {op_name!r}")
    op = OPS[op_name]
    mode = table.get("mode", op.default_mode)
    if mode not in MODES:
        raise where.error(f"{prefix}.mode", f"expected {' or '.join(MODES)}, got {mode!r}")

    dtypes = None
    if "dtypes" in table:
        try:
            dtypes = tuple(parse_dtypes(",".join(_str_list(table["dtypes"], f"{prefix}.dtypes", where))))
        except UsageError as e:
            raise where.error(f"{prefix}.dtypes", str(e)) from None
    backends = None
    if "backends" in table:
        try:
            backends = tuple(
                parse_backends(",".join(_str_list(table["backends"], f"{prefix}.backends", where)))
            )
        except UsageError as e:
            raise where.error(f"{prefix}.backends", str(e)) from None

    base = dict(op.base)
    for key in ("base", "axes", "params"):
        if key in table and not isinstance(table[key], dict):
            raise where.error(f"{prefix}.{key}", f"expected a table, got {table[key]!r}")
    for axis, value in table.get("base", {}).items():
        if axis not in op.axes:
            raise where.error(
                f"{prefix}.base.{axis}", f"not an axis of {op_name} (axes: {', '.join(op.axes)})"
            )
        values = _int_list(value, f"{prefix}.base.{axis}", where)
        if len(values) != 1:
            raise where.error(f"{prefix}.base.{axis}", f"expected one integer, got {value!r}")
        base[axis] = values[0]
    params = dict(op.params)
    for name, value in table.get("params", {}).items():
        if name not in op.params:
            allowed = ", ".join(op.params) or "none"
            raise where.error(
                f"{prefix}.params.{name}", f"not a parameter of {op_name} (parameters: {allowed})"
            )
        choices = op.param_choices.get(name)
        if choices is not None:
            if value not in choices:
                raise where.error(
                    f"{prefix}.params.{name}", f"expected {' or '.join(map(repr, choices))}, got {value!r}"
                )
            params[name] = value
        elif name == "padding" and (
            value == "same"
            or (isinstance(value, list) and len(value) == 4 and all(type(v) is int and v >= 0 for v in value))
        ):
            params[name] = tuple(value) if isinstance(value, list) else value
        elif not isinstance(value, int) or isinstance(value, bool) or value < (0 if name == "padding" else 1):
            expected = "an integer >= 1"
            if name == "padding":
                expected = 'an integer >= 0, "same" or [top, bottom, left, right]'
            raise where.error(f"{prefix}.params.{name}", f"expected {expected}, got {value!r}")
        else:
            params[name] = value
    axes: dict[str, list[int]] = {}
    for axis, value in table.get("axes", {}).items():
        if axis not in op.axes:
            raise where.error(
                f"{prefix}.axes.{axis}", f"not an axis of {op_name} (axes: {', '.join(op.axes)})"
            )
        axes[axis] = _int_list(value, f"{prefix}.axes.{axis}", where)

    shapes: list[Any] = []
    cases = table.get("cases", [])
    if not isinstance(cases, list):
        raise where.error(f"{prefix}.cases", "expected a list of tables")
    if len(cases) > MAX_SHAPES:
        raise where.error(f"{prefix}.cases", f"{len(cases)} cases (limit {MAX_SHAPES})")
    for j, case in enumerate(cases):
        if not isinstance(case, dict):
            raise where.error(
                f"{prefix}.cases[{j}]", f"expected a table of {op_name} shape fields, got {case!r}"
            )
        try:
            shapes.append(op.shape_from_case(case))
        except ValueError as e:
            raise where.error(f"{prefix}.cases[{j}]", str(e)) from None
    if axes or not cases:
        try:
            shapes.extend(expand(op, axes or op.default_axes, base, params, mode))
        except ValueError as e:
            raise where.error(f"{prefix}.axes", str(e)) from None
    unique = list(dict.fromkeys(shapes))
    if len(unique) > MAX_SHAPES:
        raise where.error(prefix, f"{len(unique)} shapes (limit {MAX_SHAPES})")
    label = mode if axes or not cases else "cases"  # a plain list of shapes is neither mode
    return SweepPlan(op, tuple(unique), label, dtypes, backends, str(table.get("description", "")))


def load_spec(path: Path | str) -> Spec:
    path = Path(path)
    where = _Where(str(path))
    try:
        data = tomllib.loads(read_input(path, MAX_SPEC_BYTES, "TOML spec file").decode("utf-8"))
    except UsageError as e:
        raise UsageError(f"spec {e}") from None
    except UnicodeDecodeError:
        raise UsageError(f"spec {path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"spec {path}: not valid TOML: {e}") from None
    except RecursionError:
        raise UsageError(f"spec {path}: nested too deeply to be a spec") from None
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise where.error(sorted(unknown)[0], f"unknown key (expected {', '.join(sorted(TOP_KEYS))})")
    sweeps = data.get("sweep")
    if not isinstance(sweeps, list) or not sweeps:
        raise where.error("sweep", "expected one or more [[sweep]] tables")
    plans = tuple(_plan(t, i, where) for i, t in enumerate(sweeps))
    for key in ("name", "description", "source"):
        if key in data and not isinstance(data[key], str):
            raise where.error(key, f"expected a string, got {data[key]!r}")
    return Spec(
        data.get("name", path.stem), data.get("description", ""), data.get("source"), str(path), plans
    )


def plans_from_problems(problems: list[Any], description: str = "") -> tuple[SweepPlan, ...]:
    """Descriptors (descriptors.Problem) as sweep plans: one per (op, dtypes), in the order each first
    appears, each listing its shapes once."""
    groups: dict[tuple[Op[Any], tuple[str, ...] | None], list[Any]] = {}
    for p in problems:
        shapes = groups.setdefault((p.op, p.dtypes), [])
        if p.shape not in shapes:
            shapes.append(p.shape)
    for (op, _), shapes in groups.items():
        if len(shapes) > MAX_SHAPES:
            raise UsageError(f"{len(shapes)} {op.name} problems (limit {MAX_SHAPES})")
    return tuple(
        SweepPlan(op, tuple(shapes), "cases", dtypes, None, description or "problem descriptors")
        for (op, dtypes), shapes in groups.items()
    )


def load_batch_spec(
    path: Path | str, command_op: str | None = None, start: Options | None = None, strict: bool = False
) -> Spec:
    """A benchdnn-style batch file (descriptors.py) as a spec; its leading `#` lines are its description, and
    its lines run and skipped are `lines` (`strict`: a line opbench does not run is refused instead)."""
    path = Path(path)
    batch = read_batch(path, command_op, start, strict)
    plans = plans_from_problems(batch.problems)
    return Spec(path.stem, batch.description, None, str(path), plans, batch.summary())


def suite_names() -> list[str]:
    return sorted(p.stem for p in [*SUITES_DIR.glob("*.toml"), *SUITES_DIR.glob("*.batch")])


def load_suite(name: str) -> Spec:
    path = SUITES_DIR / f"{name}.toml"
    batch = SUITES_DIR / f"{name}.batch"
    if batch.is_file():
        return load_batch_spec(batch)
    if not path.is_file():
        raise UsageError(f"unknown suite '{name}' (available: {', '.join(suite_names())})")
    return load_spec(path)

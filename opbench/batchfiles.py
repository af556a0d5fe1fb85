"""benchdnn batch files (`--batch-file FILE` on sweep and ab; descriptors.py reads each descriptor).

A batch file holds one or more descriptors per line, `#` comments, and benchdnn's options, which hold for
the descriptors after them until changed or `--reset`; a list (`--cfg=f32,bf16`, `--mb=1,16`) runs every
value, as benchdnn does. Read: the driver (`--conv`, `--matmul`, `--rnn`), `--cfg`/`--dt` (f32, f16, bf16,
one type for every tensor), `--dir`/`--prop` (forward ones; the backward pass is `--pass bwd`), `--alg`,
`--activation`, `--direction`, `--mb`, `--match` (problems whose text does not match are left out),
`--batch=FILE` (relative to this file). Options that change nothing opbench measures are ignored and
counted (`IGNORED`: modes, implementation filters, memory layouts, which opbench fixes); options that
change the problem into one opbench does not run (post-ops, scales, zero points, a bias, projections,
strides) make the problems under them skipped.

A descriptor line may end in a comment holding `count=N`: the calls of its problems a model makes
(`Problem.count`; `opbench shapes` writes them, `format_batch`), which `opbench tune --portfolio` weighs
shapes by. A sweep measures each problem once whatever its count.

A problem that is well formed but not one opbench runs (a 3-D conv, int8, a backward direction, a
projection LSTM, a broadcast matmul, several layers, negative padding, ...) is a skipped line: its reason
and FILE:LINE are kept (`Batch.skipped`) and the rest of the file runs; `strict` refuses it instead. A
malformed line (bad syntax, contradictory sizes, an unknown entry) is refused with its line number.
"""

from __future__ import annotations

import re
import shlex
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from opbench.descriptors import ALG_OF, DRIVERS, DTYPES, Options, Problem, Skipped, describe, expand
from opbench.documents import BatchLines
from opbench.errors import UsageError
from opbench.files import read_input
from opbench.ops.base import Shape

MAX_INCLUDE_DEPTH = 8
_COUNT = re.compile(r"(?:^|[\s;,])count=(\S*?)(?=$|[\s;,])")
MAX_BATCH_BYTES = 16 << 20  # oneDNN's largest batch files are 3.5 MB

# Options that change nothing opbench measures, ignored (and counted: Batch.ignored): how benchdnn runs and
# checks, which implementation it picks, and the memory layouts (opbench runs NCHW / KCRS / row-major).
IGNORED = {
    "mode": "how benchdnn runs; opbench always verifies and times",
    "mode-modifier": "how benchdnn runs",
    "impl": "which oneDNN implementation runs",
    "skip-impl": "which oneDNN implementation runs",
    "check-ref-impl": "benchdnn's reference check",
    "allow-enum-tags-only": "benchdnn's layout names",
    "cpu-isa-hints": "oneDNN's ISA hints",
    "attr-scratchpad": "where oneDNN keeps its scratch",
    "runtime_dims_masks": "when the sizes are known (opbench knows them when it prepares)",
    "trivial-strides": "benchdnn's strides check",
    "flags": "benchdnn's RNN test flags",
    "skip-nonlinear": "benchdnn's RNN test option",
    "fix-times-per-prb": "benchdnn's timing",
    "max-ms-per-prb": "benchdnn's timing",
    "repeats-per-prb": "benchdnn's timing",
    "cold-cache": "benchdnn's timing (opbench has --cold-cache)",
    "memory-kind": "oneDNN's memory kind",
    "engine": "the device (opbench has --device)",
    "stag": "the source layout (opbench runs NCHW / row-major)",
    "wtag": "the weights layout (opbench runs KCRS / row-major)",
    "dtag": "the destination layout (opbench runs NCHW / row-major)",
    "tag": "the layouts (opbench runs its own)",
    "bia_mask": "the bias's broadcast (no bias is set)",
    "scaling": "int8 RNN scales",
    "scaling-proj": "int8 RNN projection scales",
}
# Options that change the problem, with the values that leave it as opbench runs it.
_NEUTRAL = {
    "attr-post-ops": ("", "''"),
    "attr-scales": ("", "''"),
    "attr-zero-points": ("", "''"),
    "attr-dropout": ("", "''"),
    "attr-rounding-mode": ("", "''"),
    "attr-fpmath": ("", "strict", "strict:false", "''"),
    "bia-dt": ("", "undef"),
    "bia_dt": ("", "undef"),
    "strides": ("", "::", "::::"),
    "with-projection": ("false",),
    "with-peephole": ("false",),
    "encoding": ("",),
}
_CHANGES = {
    "attr-post-ops": "post-ops (fused operations after the product)",
    "attr-scales": "scales",
    "attr-zero-points": "zero points",
    "attr-dropout": "dropout",
    "attr-rounding-mode": "a rounding mode",
    "attr-fpmath": "an fpmath mode (implicit down-conversion)",
    "bia-dt": "a bias",
    "bia_dt": "a bias",
    "strides": "strided (non-dense) tensors",
    "with-projection": "a projection LSTM",
    "with-peephole": "a peephole LSTM",
    "encoding": "a sparse encoding",
}


@dataclass
class Batch:
    """What a batch file holds: the problems to run, the ones skipped, the notes (repeated keys), the
    options ignored (option -> lines they were given on), and its description (its leading `#` lines)."""

    problems: list[Problem] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ignored: Counter[str] = field(default_factory=Counter)
    description: str = ""
    lines: dict[str, bool] = field(default_factory=dict)  # FILE:LINE of each descriptor -> something runs

    def summary(self) -> BatchLines:
        """Counts for the results file and the table: lines measured and skipped, skips by kind."""
        skipped_lines = [w for w, runs in self.lines.items() if not runs]
        return {
            "lines": len(self.lines),
            "lines_run": len(self.lines) - len(skipped_lines),
            "lines_skipped": len(skipped_lines),
            "skipped_by_kind": dict(Counter(s.kind for s in self.skipped).most_common()),
            "skipped": [s.to_dict() for s in self.skipped],
            "notes": list(self.notes),
            "ignored_options": dict(self.ignored.most_common()),
        }


def _cfgs(value: str) -> tuple[str, ...]:
    """Each cfg as opbench's name of benchdnn's type when one type serves every tensor, else as given."""
    out = []
    for cfg in value.split(","):
        parts = [p for p in re.split(r"[:]|(?<=\d)(?=[a-z])", cfg) if p]  # f32, f16:f16:f16, bf16bf16bf16
        kinds = set(parts)
        out.append(next(iter(kinds)) if len(kinds) == 1 and next(iter(kinds)) in DTYPES else cfg)
    return tuple(dict.fromkeys(out))


def _values(value: str) -> tuple[str, ...]:
    return tuple(v for v in value.split(",") if v) or ("",)


def _option(token: str, opts: Options, ignored: Counter[str]) -> Options:
    key, sep, value = token[2:].partition("=")
    if key in DRIVERS and not sep:
        return replace(opts, driver=DRIVERS[key])
    if key == "reset" and not sep:
        return Options()
    if key in IGNORED:
        ignored[f"--{key}"] += 1
        return opts
    if key in _NEUTRAL:
        changes = tuple(c for c in opts.changes if c[0] != f"--{key}")
        if value.strip("'\"") not in _NEUTRAL[key] and value not in _NEUTRAL[key]:
            changes += ((f"--{key}={value}", _CHANGES[key]),)
        return replace(opts, changes=changes)
    if not sep or not value:
        raise ValueError(f"'{token}' is not an option opbench reads (expected --NAME=VALUE)")
    if key in ("cfg", "dt"):
        return replace(opts, cfgs=_cfgs(value))
    if key in ("dir", "prop"):
        return replace(opts, dirs=tuple(v.upper() for v in _values(value)))
    if key == "alg":
        return replace(opts, algs=tuple(v.upper() for v in _values(value)))
    if key == "activation":
        acts = tuple(v.upper() for v in _values(value) if v.upper() != "UNDEF")
        return replace(opts, activations=acts or None)
    if key == "direction":
        return replace(opts, directions=_values(value))
    if key in ("mb", "t", "l"):
        if not all(v.isdigit() for v in value.split(",")):
            raise ValueError(f"--{key}={value}: expected integers")
        sizes = tuple(int(v) for v in value.split(","))
        return (
            replace(opts, mbs=sizes)
            if key == "mb"
            else replace(opts, ts=sizes)
            if key == "t"
            else replace(opts, ls=sizes)
        )
    if key == "match":
        try:
            return replace(opts, match=re.compile(value))
        except re.error as e:
            raise ValueError(f"--match={value}: not a regular expression ({e})") from None
    return replace(opts, unknown=f"--{key}")


def load_batch(
    path: Path | str, command_op: str | None = None, start: Options | None = None
) -> list[Problem]:
    """Every problem of a batch file (and the files it includes), in order; `start`: the options in force
    at its first line (`options()`)."""
    return read_batch(path, command_op, start).problems


def read_batch(
    path: Path | str, command_op: str | None = None, start: Options | None = None, strict: bool = False,
    _depth: int = 0, _into: Batch | None = None,
) -> Batch:  # fmt: skip
    """A batch file read (Batch); `strict`: a problem opbench does not run, or an option it does not read,
    is refused (UsageError with FILE:LINE) instead of skipped."""
    path = Path(path)
    batch = _into if _into is not None else Batch()
    if _depth > MAX_INCLUDE_DEPTH:
        raise UsageError(f"batch file {path}: --batch includes nest deeper than {MAX_INCLUDE_DEPTH}")
    try:
        text = read_input(path, MAX_BATCH_BYTES, "batch file").decode("utf-8")
    except UsageError as e:
        raise UsageError(f"batch file {e}") from None
    except UnicodeDecodeError:
        raise UsageError(f"batch file {path}: not UTF-8 text") from None
    opts = start or Options()
    for number, line in _logical_lines(text):
        where = f"{path}:{number}"
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError as e:
            raise UsageError(f"{where}: {e}") from None
        for token in tokens:
            if token.startswith("--batch="):
                include = (path.parent / token.split("=", 1)[1]).resolve()
                read_batch(include, command_op, opts, strict, _depth + 1, batch)
            elif token.startswith("-"):
                try:
                    opts = _option(token, opts, batch.ignored)
                except ValueError as e:
                    raise UsageError(f"{where}: {e}") from None
                if strict and opts.unknown is not None:
                    raise UsageError(f"{where}: {opts.unknown} is not a benchdnn option opbench reads")
            else:
                _add(batch, expand(token, command_op, where, opts), strict, _count(line, where))
    if _depth == 0:
        head = []
        for line in text.splitlines():
            if not line.startswith("#"):
                break
            head.append(line.lstrip("#").strip())
        batch.description = " ".join(t for t in head if t)
    return batch


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(number, line): a line ending in a backslash continues on the next (benchdnn's files wrap long option
    lists so); the number is the first line's."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if pending is not None:
            number, line = pending[0], pending[1] + " " + line.strip()
            pending = None
        if line.rstrip().endswith("\\") and not line.lstrip().startswith("#"):
            pending = (number, line.rstrip()[:-1])
            continue
        out.append((number, line))
    if pending is not None:
        out.append(pending)
    return out


def _comment(line: str) -> str:
    """The text after a line's `#` that starts a comment (at the line's start or after a space, outside
    quotes), as shlex reads it; "" where there is none."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[i + 1 :]
    return ""


def _count(line: str, where: str) -> int:
    """A descriptor line's `# count=N` (1 where its comment gives none)."""
    found = _COUNT.search(_comment(line))
    if found is None:
        return 1
    if not found.group(1).isdigit() or int(found.group(1)) < 1:
        raise UsageError(f"{where}: count={found.group(1)}: expected a positive integer")
    return int(found.group(1))


def _add(batch: Batch, items: list[Problem | Skipped], strict: bool, count: int = 1) -> None:
    for item in items:
        if isinstance(item, Problem) and count != 1:
            item = replace(item, count=count)
        if isinstance(item, Skipped):
            if strict:
                raise UsageError(f"{item.where}: '{item.text}': {item.reason} (--strict)")
            batch.skipped.append(item)
        else:
            batch.problems.append(item)
            batch.notes.extend(
                f"{item.where}: {n}" for n in item.notes if f"{item.where}: {n}" not in batch.notes
            )
        where = item.where
        batch.lines[where] = batch.lines.get(where, False) or isinstance(item, Problem)


def batch_options(op_name: str, shape: Shape, dtype: str) -> str:
    """The benchdnn options a problem of `op_name` in `dtype` is written under (`format_batch`)."""
    cfg = f"--cfg={next(k for k, v in DTYPES.items() if v == dtype)}"
    if op_name == "gemm":
        return f"--reset {cfg} --matmul"
    if op_name == "conv":
        return f"--reset {cfg} --conv"
    alg = f"--alg={ALG_OF[op_name]}"
    if op_name == "rnn":
        alg += f" --activation={'RELU' if shape.to_dict().get('relu') else 'TANH'}"
    return f"--reset {cfg} --rnn {alg}"


def format_batch(problems: list[Problem], head: list[str]) -> str:
    """A batch file of `problems` (each with one dtype), its options written where they change, each
    descriptor with its name and `# count=N`; `head`: its leading comment lines (its description)."""
    lines = [f"# {h}".rstrip() for h in head]
    in_force = ""
    for p in problems:
        dtype = (p.dtypes or ("fp32",))[0]
        options = batch_options(p.op.name, p.shape, dtype)
        if options != in_force:
            lines.append(options)
            in_force = options
        name = f'n"{p.name}"' if p.name else ""
        lines.append(f"{describe(p.op.name, p.shape)}{name} # count={p.count}")
    return "\n".join(lines) + "\n"

"""`opbench shapes --torch MODULE:FACTORY --input 1x3x224x224`: the GEMM, conv and recurrent shapes a model
runs, as a benchdnn batch file with each shape's count (backends/torch_shapes.py reads them)."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from opbench.backends.torch_shapes import Capture, InputSpec, capture, model_from, random_inputs
from opbench.batchfiles import format_batch
from opbench.descriptors import Problem
from opbench.errors import UsageError
from opbench.files import atomic_write_text
from opbench.ops import OPS
from opbench.userkernel import load_function, parse_kernel


def problems(found: Capture, dtype: str) -> list[Problem]:
    """Each distinct (op, shape) once, in the order first called, named after the module that first ran it
    (an attention's GEMMs and a recurrent layer's layers and directions after a colon), with its count."""
    counts: Counter[tuple[str, object]] = Counter((c.op, c.shape) for c in found.calls)
    out: dict[tuple[str, object], Problem] = {}
    for c in found.calls:
        key = (c.op, c.shape)
        if key in out:
            continue
        suffix = c.source.split(":", 1)[1] if ":" in c.source else ""
        name = f"{c.module}:{suffix}" if suffix else c.module
        out[key] = Problem(OPS[c.op], c.shape, (dtype,), "", "", _safe(name), count=counts[key])
    return list(out.values())


def _safe(name: str) -> str:
    """A name a batch file's tokens keep whole (no quote, space or '#')."""
    return "".join(ch if ch.isalnum() or ch in "._:-" else "_" for ch in name)


def head(args: argparse.Namespace, found: Capture, listed: list[Problem]) -> list[str]:
    kinds = Counter(p.op.name for p in listed)
    calls = Counter(c.op for c in found.calls)
    per_op = ", ".join(f"{op} {kinds[op]} ({_calls(calls[op])})" for op in kinds)
    lines = [
        f"Shapes of {args.torch} on {' '.join(args.input)}, read by opbench shapes from torch's aten calls",
        f"{len(listed)} distinct problems from {len(found.calls)} calls: {per_op or 'none'}",
        "count=N: the calls of that problem in one forward pass; n: the module that first ran it",
    ]
    skipped = Counter(found.skipped)
    lines += [f"not listed: {module}: {why} ({_calls(n)})" for (module, why), n in skipped.items()]
    return lines


def _calls(n: int) -> str:
    return f"{n} call" if n == 1 else f"{n} calls"


def cmd_shapes(args: argparse.Namespace) -> int:
    ref = parse_kernel(args.torch, flag="--torch")
    specs = [InputSpec.parse(text) for text in args.input]
    out = Path(args.out) if args.out else None
    if out is not None and out.exists() and not args.force:
        raise UsageError(f"--out {out} exists (--force replaces it)")
    try:
        factory = load_function(ref.to_dict())
    except Exception as e:  # the user's module: whatever it raises is a bad --torch
        raise UsageError(f"--torch {args.torch}: {type(e).__name__}: {e}") from None
    try:
        model = model_from(factory)
    except UsageError:
        raise
    except Exception as e:
        raise UsageError(f"--torch {args.torch}: the factory raised {type(e).__name__}: {e}") from None
    try:
        found = capture(model, random_inputs(specs))
    except Exception as e:  # the model refused the inputs (wrong sizes, too few)
        raise UsageError(
            f"the model failed on --input {' '.join(args.input)}: {type(e).__name__}: {e}"
        ) from None
    listed = problems(found, args.dtype)
    text = format_batch(listed, head(args, found, listed))
    if out is None:
        sys.stdout.write(text)
    else:
        atomic_write_text(out, text)
        print(f"{len(listed)} problems written to {out}", file=sys.stderr)
    return 0

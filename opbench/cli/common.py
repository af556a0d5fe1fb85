"""Helpers the commands share: output directories and study storage URLs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opbench.cli.options import AXIS_FLAGS, PARAM_FLAGS
from opbench.documents import Fields
from opbench.errors import UsageError
from opbench.files import check_writable_dir
from opbench.ops.base import Op
from opbench.tune.storage import default_url


def check_flags_apply(op: Op[Any], given: Fields) -> None:
    """Every given axis or parameter flag (AXIS_FLAGS / PARAM_FLAGS dests) is one `op` has, else a
    UsageError naming the flag and the op's options."""
    for dest in given:
        if dest not in op.axes and dest not in op.params:
            options = [AXIS_FLAGS[a] for a in op.axes] + [PARAM_FLAGS[p] for p in op.params]
            flag = AXIS_FLAGS.get(dest) or PARAM_FLAGS[dest]
            raise UsageError(f"{flag} does not apply to {op.name} (its options: {' '.join(options)})")


def check_out_dir(out: str) -> Path:
    return check_writable_dir(Path(out), "--out")


def storage_url(storage: str | None, out: str) -> str:
    if storage:
        if "://" not in storage:
            raise UsageError(
                f"--storage must be a URL like sqlite:///FILE or postgresql://..., got '{storage}'"
            )
        return str(storage)
    return default_url(check_out_dir(out))

"""Helpers the commands share: output directories and study storage URLs."""

from __future__ import annotations

from pathlib import Path

from opbench.errors import UsageError


def check_out_dir(out: str) -> Path:
    from opbench.files import check_writable_dir

    return check_writable_dir(Path(out), "--out")


def storage_url(storage: str | None, out: str) -> str:
    from opbench.tune.storage import default_url

    if storage:
        if "://" not in storage:
            raise UsageError(
                f"--storage must be a URL like sqlite:///FILE or postgresql://..., got '{storage}'"
            )
        return str(storage)
    return default_url(check_out_dir(out))

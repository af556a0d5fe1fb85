"""The compiled extension (opbench._core, built from csrc/), loaded on first use: `opbench.kernels` imports
without it, so the modules that call our kernels import the facade at their top, and the reading commands
(report, compare, suites, --help) still run where the extension is not built. The first use raises the
ImportError that loading it gives; `load_error()` says beforehand whether it will."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any


class _Extension:
    """Stands for opbench._core: the first attribute read imports it, later ones read the module."""

    module: ModuleType | None = None

    def __getattr__(self, name: str) -> Any:
        if _Extension.module is None:
            _Extension.module = importlib.import_module("opbench._core")
        return getattr(_Extension.module, name)


if TYPE_CHECKING:
    from opbench import _core as core  # the stubs (opbench/_core.pyi) type every use
else:
    core = _Extension()


def load_error() -> ImportError | None:
    """None where the extension loads (loading it now), else the ImportError that loading it gives."""
    try:
        core.known_isas  # noqa: B018  (reading an attribute loads the module)
    except ImportError as e:
        return e
    return None

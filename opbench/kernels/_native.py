"""The compiled extension (opbench._core, built from csrc/), loaded on first use: `opbench.kernels` imports
without it, so the modules that call our kernels import the facade at their top, and the reading commands
(report, compare, suites, --help) still run where the extension is not built. The first use raises the
ImportError that loading it gives; `load_error()` says beforehand whether it will."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any

from opbench.errors import UsageError

NAME = "opbench._core"


class _Extension:
    """Stands for opbench._core: the first attribute read imports it. Each attribute read is then kept on the
    instance, so that later reads are plain attribute lookups and never reach __getattr__ again (a Python
    call on every read: 0.5 of the 2.3 us a plain 8x8x8 kernels.gemm call took)."""

    module: ModuleType | None = None

    def __getattr__(self, name: str) -> Any:
        if _Extension.module is None:
            _Extension.module = importlib.import_module(NAME)
        value = getattr(_Extension.module, name)
        self.__dict__[name] = value
        return value


if TYPE_CHECKING:
    from opbench import _core as core  # the stubs (opbench/_core.pyi) type every use
else:
    core = _Extension()


def unloadable(error: ImportError) -> UsageError | None:
    """A one-line error where `error` is the extension failing to load (not built, or built for another
    Python or CPU): a measuring command needs it (the peaks, the machine's identity and the cpp backend are
    its); the reading commands run without it. None for any other module."""
    if error.name != NAME:
        return None
    reason = "not built" if isinstance(error, ModuleNotFoundError) else " ".join(str(error).split())
    return UsageError(
        f"opbench's compiled kernels ({NAME}) do not load here ({reason}); this command measures with them: "
        "reinstall opbench from its source (pip install ., a C++17 compiler and CMake); report, compare and "
        "suites run without them"
    )


def load_error() -> ImportError | None:
    """None where the extension loads (loading it now), else the ImportError that loading it gives."""
    try:
        core.known_isas  # noqa: B018  (reading an attribute loads the module)
    except ImportError as e:
        return e
    return None

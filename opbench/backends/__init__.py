"""Registry of backends: an explicit dictionary, each adapter importing its framework lazily."""

from __future__ import annotations

from opbench.backends.base import Backend, Prepared
from opbench.backends.cpp_backend import CppBackend
from opbench.backends.mindspore_backend import MindSporeBackend
from opbench.backends.numpy_backend import NumpyBackend
from opbench.backends.tensorflow_backend import TensorFlowBackend, TensorFlowEagerBackend
from opbench.backends.torch_backend import TorchBackend
from opbench.errors import UsageError

BACKENDS: dict[str, type[Backend]] = {
    "cpp": CppBackend,
    "torch": TorchBackend,
    "mindspore": MindSporeBackend,
    "tensorflow": TensorFlowBackend,
    "tensorflow-eager": TensorFlowEagerBackend,
    "numpy": NumpyBackend,
}

__all__ = ["BACKENDS", "Backend", "Prepared", "parse_backends"]


def parse_backends(text: str) -> list[str]:
    """'cpp,torch' -> ['cpp', 'torch']; unknown names raise UsageError."""
    names = [t.strip().lower() for t in text.split(",") if t.strip()]
    if not names:
        raise UsageError(f"--backend is empty (available: {', '.join(BACKENDS)})")
    for name in names:
        if name not in BACKENDS:
            raise UsageError(f"unknown backend '{name}' (available: {', '.join(BACKENDS)})")
    return list(dict.fromkeys(names))

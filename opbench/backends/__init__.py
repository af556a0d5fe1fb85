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

__all__ = ["BACKENDS", "Backend", "Prepared", "accelerator_name", "parse_backends"]


def accelerator_name(device: str) -> str | None:
    """The name a framework reports for a cuda[:N] device (torch, then TensorFlow); None when neither can
    see it, or for a device that is not a GPU."""
    from opbench.accelerators import device_index

    index = device_index(device)
    if index is None:
        return None
    for name in ("torch", "tensorflow"):
        found = BACKENDS[name]().device_name(index)
        if found:
            return found
    return None


def parse_backends(text: str) -> list[str]:
    """'cpp,torch' -> ['cpp', 'torch']; unknown names raise UsageError."""
    names = [t.strip().lower() for t in text.split(",") if t.strip()]
    if not names:
        raise UsageError(f"--backend is empty (available: {', '.join(BACKENDS)})")
    for name in names:
        if name not in BACKENDS:
            raise UsageError(f"unknown backend '{name}' (available: {', '.join(BACKENDS)})")
    return list(dict.fromkeys(names))

"""Registry of backends: an explicit dictionary, each adapter importing its framework lazily; backends that
installed packages declare as entry points (group `opbench.backends`, a Backend subclass each); and ones a
run registers (`opbench sweep --kernel`: kernel:FUNC)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from opbench.accelerators import device_index
from opbench.backends.base import Backend, Prepared
from opbench.backends.cpp_backend import CppBackend
from opbench.backends.mindspore_backend import MindSporeBackend
from opbench.backends.numpy_backend import NumpyBackend
from opbench.backends.tensorflow_backend import TensorFlowBackend, TensorFlowEagerBackend
from opbench.backends.torch_backend import TorchBackend
from opbench.documents import Params
from opbench.dtypes import Inputs
from opbench.errors import UsageError
from opbench.ops.base import Shape

BACKENDS: dict[str, type[Backend]] = {
    "cpp": CppBackend,
    "torch": TorchBackend,
    "mindspore": MindSporeBackend,
    "tensorflow": TensorFlowBackend,
    "tensorflow-eager": TensorFlowEagerBackend,
    "numpy": NumpyBackend,
}

__all__ = [
    "BACKENDS",
    "Backend",
    "Prepared",
    "accelerator_name",
    "make_backend",
    "parse_backends",
    "register",
]

# Backends added at run time (a user's --kernel): name -> a function that makes one.
_EXTRA: dict[str, Callable[[], Backend]] = {}


def register(name: str, make: Callable[[], Backend]) -> None:
    """Add a backend for this process (`opbench sweep --kernel` registers `kernel:FUNC`)."""
    _EXTRA[name] = make


ENTRY_POINT_GROUP = "opbench.backends"


def plugins() -> dict[str, Any]:
    """Entry points of group `opbench.backends` (name -> entry point), built-in names excluded (never
    shadowed). Nothing is imported until a backend is made."""
    found = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in BACKENDS and ep.name not in found:
            found[ep.name] = ep
    return found


def plugin_origin(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"{ep.value} from {dist.name} {dist.version}" if dist is not None else str(ep.value)


class _Broken(Backend):
    """A plug-in that could not be loaded: every case is skipped with the reason."""

    def __init__(self, name: str, reason: str) -> None:
        self.name, self._reason = name, reason  # type: ignore[misc]

    def unavailable_reason(self) -> str | None:
        return self._reason

    def version(self) -> str | None:
        return None

    def setup(self, threads: int, device: str) -> None:
        raise AssertionError("an unavailable backend is never set up")

    def prepare(self, op: str, shape: Shape, inputs: Inputs, params: Params) -> Prepared:
        raise AssertionError("an unavailable backend is never asked to prepare")


def make_backend(name: str, registered: bool = True) -> Backend:
    """A fresh instance of a built-in, registered or plug-in backend (`registered=False`: never one this
    run registered, which an A/B side named like its backend wraps)."""
    if registered and name in _EXTRA:
        return _EXTRA[name]()
    if name in BACKENDS:
        return BACKENDS[name]()
    ep = plugins()[name]
    try:
        cls = ep.load()
        if not (isinstance(cls, type) and issubclass(cls, Backend)):
            return _Broken(name, f"plug-in {plugin_origin(ep)} is not an opbench Backend subclass")
        backend = cls()
    except Exception as e:  # someone else's package: any error while importing or constructing it
        return _Broken(name, f"plug-in {plugin_origin(ep)} failed to load: {type(e).__name__}: {e}"[:300])
    backend.name = name  # type: ignore[misc]  # the name it was installed under
    return backend


def accelerator_name(device: str, among: Iterable[str] = ("torch", "tensorflow")) -> str | None:
    """The name a framework reports for a cuda[:N] device (torch, then TensorFlow, of those `among`: a sweep
    asks only its own backends, so one of torch alone never imports TensorFlow, 5 s); None when none can
    see it, or for a device that is not a GPU."""
    index = device_index(device)
    if index is None:
        return None
    wanted = {"tensorflow" if n == "tensorflow-eager" else n for n in among}
    for name in [n for n in ("torch", "tensorflow") if n in wanted]:
        found = BACKENDS[name]().device_name(index)
        if found:
            return found
    return None


def parse_backends(text: str) -> list[str]:
    """'cpp,torch' -> ['cpp', 'torch']; unknown names raise UsageError."""
    names = [t.strip().lower() for t in text.split(",") if t.strip()]
    available = [*BACKENDS, *_EXTRA, *plugins()]
    if not names:
        raise UsageError(f"--backend is empty (available: {', '.join(available)})")
    for name in names:
        if name not in available:
            raise UsageError(f"unknown backend '{name}' (available: {', '.join(available)})")
    return list(dict.fromkeys(names))

"""Backend `torch`: torch.mm into a preallocated output on a chosen device, threads via set_num_threads."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from opbench.backends.base import Backend, Prepared
from opbench.errors import BackendUnavailable

_TORCH_DTYPES = {"fp32": "float32", "fp16": "float16"}


class _TorchGemm(Prepared):
    def __init__(
        self, torch: Any, a: np.ndarray, b: np.ndarray, device: str, details: dict[str, Any]
    ) -> None:
        self._torch = torch
        self._a = torch.from_numpy(a).to(device).contiguous()
        self._b = torch.from_numpy(b).to(device).contiguous()
        self._out = torch.empty((a.shape[0], b.shape[1]), dtype=self._a.dtype, device=device)
        self._cuda = device.startswith("cuda")
        self.details = details

    def _sync(self) -> None:
        if self._cuda:
            self._torch.cuda.synchronize()

    def run(self, loops: int) -> float:
        mm, a, b, out = self._torch.mm, self._a, self._b, self._out
        self._sync()
        t0 = time.perf_counter()
        for _ in range(loops):
            mm(a, b, out=out)
        self._sync()
        return time.perf_counter() - t0

    def output(self) -> np.ndarray:
        return self._torch.mm(self._a, self._b).cpu().numpy()


class TorchBackend(Backend):
    name = "torch"

    def __init__(self) -> None:
        self._device = "cpu"
        self._torch: Any = None

    def unavailable_reason(self) -> str | None:
        try:
            import torch  # noqa: F401
        except ImportError as e:
            return f"PyTorch is not installed ({e}); pip install 'torch==2.13.0' (CPU wheel)"
        return None

    def version(self) -> str | None:
        import torch

        return str(torch.__version__)

    def setup(self, threads: int, device: str) -> None:
        import torch

        if device.startswith("cuda") and not torch.cuda.is_available():
            raise BackendUnavailable(f"torch has no usable CUDA device for '{device}'")
        if device != "cpu" and not device.startswith("cuda"):
            raise BackendUnavailable(f"unsupported device '{device}' for torch")
        torch.set_num_threads(threads)
        self._torch = torch
        self._device = device

    def prepare(self, op: str, inputs: dict[str, np.ndarray], params: dict[str, Any]) -> Prepared:
        torch = self._torch
        details = {
            "device": self._device,
            "num_threads": torch.get_num_threads(),
            "mkldnn": torch.backends.mkldnn.is_available(),
        }
        return _TorchGemm(torch, inputs["a"], inputs["b"], self._device, details)

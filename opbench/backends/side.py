"""One side of `opbench ab`: a backend run under the side's own name, with fixed parameters. `cpp` with
tiles (`cpp:tile_m=56,tile_n=512`), or the same backend on both sides (an A/A run, named `cpp` and
`cpp (B)`), are two sides of one kernel library: each case is prepared with the side's parameters, and
both share the library's thread pool (`pool`), so that switching between them costs no settling wait.
"""

from __future__ import annotations

from typing import Any

from opbench.backends.base import Backend, Prepared
from opbench.documents import Fields, Params, Scalar
from opbench.dtypes import Inputs
from opbench.ops.base import Shape


class SideBackend(Backend):
    """`inner` under another name, every case prepared with `fixed` parameters over the sweep's."""

    def __init__(self, name: str, inner: Backend, fixed: Params) -> None:
        self.name = name  # type: ignore[misc]
        self.inner, self.fixed = inner, dict(fixed)  # what the side is asked is the inner backend's answer

    @property
    def pool(self) -> str:
        return self.inner.pool

    def unavailable_reason(self) -> str | None:
        return self.inner.unavailable_reason()

    def version(self) -> str | None:
        return self.inner.version()

    def setup(self, threads: int, device: str) -> None:
        self.inner.setup(threads, device)

    def accumulation(self, op: str, dtype: str, device: str = "cpu") -> str:
        return self.inner.accumulation(op, dtype, device)

    def unsupported_reason(self, op: str, dtype: str) -> str | None:
        return self.inner.unsupported_reason(op, dtype)

    def prepare(self, op: str, shape: Shape, inputs: Inputs, params: Params) -> Prepared:
        return self.inner.prepare(op, shape, inputs, {**params, **self.fixed})

    def parse_param(self, name: str, text: str) -> Scalar:
        return self.inner.parse_param(name, text)

    def case_params(self, options: Fields, op: str, shape: Shape, dtype: str, threads: int) -> Params:
        return self.inner.case_params(options, op, shape, dtype, threads)

    def notes(self, op: str, dtype: str) -> list[str]:
        return self.inner.notes(op, dtype)

    def repro_args(self, params: dict[str, Any], details: dict[str, Any]) -> tuple[list[str], list[str]]:
        return self.inner.repro_args({**params, **self.fixed}, details)

    def device_name(self, index: int) -> str | None:
        return self.inner.device_name(index)

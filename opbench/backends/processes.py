"""A sweep's backend in several fresh worker processes (`--processes N`): each process imports the
framework, brings up its thread pool and allocates the case's buffers anew, at a layout randomized per
process (opbench.layout), so that the state a process carries for its whole life (where its memory landed,
how its pool came up) is one sample of the case's time, not the answer (issue 39; pyperf does the same with
20 processes by default). The sweep visits round r of a case in process r mod N (visits.CaseRun.process),
and measure.combine() takes the statistics over processes.

The workers are backends/remote.py's, run by this interpreter, timing `run(loops)` in the worker (the pipe is
not in the timing). A backend a worker cannot make by name (a user's --kernel, registered in this process
only) stays in this process, and its records say so.
"""

from __future__ import annotations

import sys
from typing import Any

from opbench.backends import BACKENDS, make_backend, plugins
from opbench.backends.base import Backend
from opbench.backends.remote import RemoteBackend
from opbench.backends.side import SideBackend
from opbench.documents import Fields, Params
from opbench.ops.base import Shape


class ProcessBackend(RemoteBackend):
    """Backend `backend` (with `fixed` parameters) under `name`, in `processes` workers of this Python."""

    def __init__(self, name: str, backend: str, fixed: dict[str, Any], processes: int, pool: str) -> None:
        super().__init__(name, sys.executable, backend, fixed, processes, layout=True)
        self._pool = pool

    @property
    def pool(self) -> str:
        return self._pool

    def version(self) -> str | None:
        return self._worker.info.get("version")

    def environment_details(self) -> dict[str, Any]:
        return {}

    def notes(self, op: str, dtype: str) -> list[str]:
        return []

    def case_params(self, options: Fields, op: str, shape: Shape, dtype: str, threads: int) -> Params:
        # what the backend asks for is decided here, as in a sweep without workers (a --tuned lookup)
        return make_backend(self.backend, registered=False).case_params(options, op, shape, dtype, threads)

    def build(self) -> str | None:
        return make_backend(self.backend, registered=False).build()  # this opbench's, as the workers'

    def repro_args(self, params: dict[str, Any], details: dict[str, Any]) -> tuple[list[str], list[str]]:
        # the backend's own command and options (this opbench's, not another environment's)
        return make_backend(self.backend, registered=False).repro_args(
            {**params, **self._worker.fixed}, details
        )


def in_processes(backend: Backend, processes: int) -> tuple[Backend, str | None]:
    """`backend` run in `processes` worker processes, or itself with the reason it stays in this one."""
    if isinstance(backend, RemoteBackend):  # an A/B side of another environment: N workers of it
        return (
            RemoteBackend(backend.name, backend.python, backend.backend, backend._worker.fixed, processes),
            None,
        )
    inner, fixed = backend, {}
    if isinstance(backend, SideBackend):
        inner, fixed = backend.inner, backend.fixed
    # a worker makes the backend by name: only a built-in or plug-in that this name makes as it is here
    known = inner.name in BACKENDS or inner.name in plugins()
    if not known or type(inner) is not _made_type(inner.name):
        return backend, "measured in this process: a worker process cannot import it (a run's own kernel)"
    return ProcessBackend(backend.name, inner.name, fixed, processes, backend.pool), None


def _made_type(name: str) -> type:
    return type(make_backend(name, registered=False))

"""An A/B side run by another installed Python environment (`opbench ab --b python=PATH:BACKEND`): two
builds of a kernel library, each installed in its own environment, measured in one run.

The side is a backend of this process whose cases run in a worker process started with that environment's
interpreter (module_command: `opbench.backends.remote_worker` run with the working directory off the import
path, so that environment must have opbench installed).
One JSON object a line each way; inputs and outputs pass as pickle files in a private temporary directory
(the worker is our own child, running the user's own environment). The worker prepares a case with its
own backend and times `run(loops)` there, so the pipe is not in the timing; its CPU time is adopted as
ours (contention.adopt), not counted as contention. A worker that dies fails the case it was running and
is started again for the next one.
"""

from __future__ import annotations

import json
import os
import pickle
import select
import subprocess
import tempfile
import weakref
from pathlib import Path
from typing import IO, Any

from opbench import contention
from opbench.backends import make_backend
from opbench.backends.base import Backend, Prepared
from opbench.documents import LayoutDict, Params
from opbench.dtypes import Inputs, Output
from opbench.errors import BackendUnavailable
from opbench.files import json_line
from opbench.layout import draw, worker_environment
from opbench.ops.base import Shape
from opbench.overhead import CallOverhead

WORKER = "opbench.backends.remote_worker"
# How long a worker may take to answer its hello (its imports: a framework takes seconds; one that hangs
# would hang the sweep).
START_TIMEOUT_S = 120.0


def module_command(python: str, module: str) -> list[str]:
    """`python` running `module` as __main__ with the working directory off the import path: `python -m`
    would put it first, so an `opbench/` folder there (a source checkout, or a planted one) would be
    imported instead of that environment's installed package. A bootstrap rather than -P, which Pythons
    before 3.11 lack (another environment's interpreter may be one)."""
    bootstrap = (
        "import runpy, sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    )
    return [python, "-c", bootstrap]


class WorkerError(RuntimeError):
    """The worker answered with an error, or died."""


class _Worker:
    """One worker process: started with `python`, set up as `backend` with `fixed` parameters. `layout`:
    the environment's size and the heap's first allocation, randomized for this process (layout.py), so that
    each worker is one sample of where memory lands."""

    def __init__(self, python: str, backend: str, fixed: Params, layout: LayoutDict | None = None) -> None:
        self.python, self.backend, self.fixed, self.layout = python, backend, fixed, layout
        self.proc: subprocess.Popen[str] | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="opbench-remote-")  # removed with the worker object
        self.dir = Path(self._tmp.name)
        self.setup_args: dict[str, Any] | None = None
        self.info: dict[str, Any] = {}
        self._next = 0
        self._stderr: IO[str] | None = None
        self._greeting = False  # a hello sent and not yet answered

    def launch(self) -> None:
        """Start the process (its imports run while other workers start too: greet() waits for it)."""
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "OPBENCH_WORKER_PARENT": str(os.getpid())}
        if self.layout is not None:
            env.update(worker_environment(self.layout))
        # stderr to a file, not a pipe: a framework's warnings would fill a pipe nobody reads and block it
        self._stderr = (self.dir / "stderr.txt").open("w+")
        self.proc = subprocess.Popen(
            module_command(self.python, WORKER),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=env,
        )
        contention.adopt(self.proc.pid)
        self._send(self._hello())
        self._greeting = True

    def greet(self) -> dict[str, Any]:
        """The worker's answer to its hello, sent by launch() (the imports of several workers overlap)."""
        if self._greeting:
            self._greeting = False
            self.info = self._receive(START_TIMEOUT_S)
        else:
            self.info = self.ask(self._hello())
        return self.info

    def _hello(self) -> dict[str, Any]:
        return {"hello": {"backend": self.backend, "fixed": self.fixed, **(self.setup_args or {})}}

    def start(self) -> dict[str, Any]:
        self.launch()
        return self.greet()

    def last_error(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.flush()
        self._stderr.seek(0)
        lines = self._stderr.read().strip().splitlines()
        return lines[-1] if lines else ""

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        if (self.proc is None or self.proc.poll() is not None) and "hello" not in request:
            if {"run", "output", "timed_output", "refill", "drop"} & set(request):  # died with its worker
                raise WorkerError(f"worker exited: {self.proc.returncode if self.proc else None}")
            self.start()  # a fresh worker, set up as the last one was, for the next case
        self._send(request)
        return self._receive(START_TIMEOUT_S if "hello" in request else None)

    def _send(self, request: dict[str, Any]) -> None:
        proc = self.proc
        assert proc is not None and proc.stdin is not None
        try:
            proc.stdin.write(json_line(request))
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # _receive() finds the worker gone

    def _receive(self, timeout_s: float | None = None) -> dict[str, Any]:
        """The worker's next answer; where `timeout_s` is given (a hello), a WorkerError when none comes by
        then (the worker stopped)."""
        proc = self.proc
        assert proc is not None and proc.stdout is not None
        if timeout_s is not None and not select.select([proc.stdout], [], [], timeout_s)[0]:
            self.stop()
            raise WorkerError(f"worker did not answer its hello within {timeout_s:g} s (its imports hang?)")
        try:
            line = proc.stdout.readline()
        except OSError:
            line = ""
        if not line:
            err = self.last_error()
            self.stop()
            raise WorkerError(f"worker exited: {proc.returncode} {err}".strip())
        answer = json.loads(line)
        if not answer.get("ok"):
            raise WorkerError(answer.get("error") or "worker error")
        return dict(answer)

    def path(self, stem: str) -> Path:
        self._next += 1
        return self.dir / f"{stem}-{self._next}.pickle"

    def stop(self) -> None:
        if self.proc is not None:
            contention.release(self.proc.pid)
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


class _RemoteCase(Prepared):
    def __init__(
        self, worker: _Worker, case_id: int, details: dict[str, Any], clock: str, offsets: dict[str, int]
    ) -> None:
        self._worker, self._id, self.details, self.clock = worker, case_id, details, clock
        self.offsets = offsets  # where in its page each input buffer starts (a randomized layout)
        self._drop = weakref.finalize(self, _drop, worker, case_id)

    def run(self, loops: int) -> float:
        answer = self._worker.ask({"run": self._id, "loops": loops})
        self.clock = answer.get("clock") or self.clock  # (a worker of an older opbench does not say)
        return float(answer["seconds"])

    def output(self) -> Output:
        return self._fetch("output")

    def timed_output(self) -> Output:
        try:
            return self._fetch("timed_output")
        except WorkerError:
            if self._worker.proc is None or self._worker.proc.poll() is not None:
                raise
            return self.output()  # a worker of an older opbench: one more call

    def _fetch(self, what: str) -> Output:
        path = self._worker.path(what)
        self._worker.ask({what: self._id, "path": str(path)})
        try:
            with path.open("rb") as f:
                return pickle.load(f)
        finally:
            path.unlink(missing_ok=True)

    def refill(self, inputs: Inputs) -> bool:
        path = self._worker.path("refill")
        with path.open("wb") as f:
            pickle.dump(inputs, f, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            return bool(self._worker.ask({"refill": self._id, "path": str(path)})["value"])
        except WorkerError:
            if self._worker.proc is None or self._worker.proc.poll() is not None:
                raise
            return False  # a worker of an older opbench, which cannot refill
        finally:
            path.unlink(missing_ok=True)


def _drop(worker: _Worker, case_id: int) -> None:
    try:
        if worker.proc is not None and worker.proc.poll() is None:
            worker.ask({"drop": case_id})
    except (WorkerError, OSError, ValueError):
        pass


class RemoteBackend(Backend):
    """`backend` (with `fixed` parameters) as the environment of interpreter `python` runs it, in
    `processes` worker processes (each case prepared in one of them: prepare_in), each with a randomized
    memory layout where `layout` (opbench.layout.draw) is given."""

    def __init__(
        self,
        name: str,
        python: str,
        backend: str,
        fixed: Params,
        processes: int = 1,
        layout: bool = False,
    ) -> None:
        self.name = name  # type: ignore[misc]
        self.python, self.backend = python, backend
        self._workers = [
            _Worker(python, backend, fixed, draw() if layout else None) for _ in range(processes)
        ]
        self._worker = self._workers[0]
        self._unsupported: dict[tuple[str, str], str | None] = {}

    @property
    def processes(self) -> int:
        return len(self._workers)

    def layouts(self) -> list[LayoutDict | None]:
        """Each worker's randomized layout (None where not randomized), by process index."""
        return [w.layout for w in self._workers]

    def launch(self) -> None:
        """Start every worker at once (their imports overlap); unavailable_reason() waits for them."""
        for w in self._workers:
            if w.proc is None:
                w.launch()

    def unavailable_reason(self) -> str | None:
        try:
            self.launch()
            infos = [w.greet() for w in self._workers]
        except (WorkerError, OSError, ValueError) as e:
            for w in self._workers:
                w.stop()
            return f"cannot run opbench's worker with {self.python}: {e}"
        return infos[0].get("unavailable")

    def version(self) -> str | None:
        info = self._worker.info
        where = f"opbench {info.get('opbench')}, Python {info.get('python')}, {self.python}"
        return f"{info.get('version')} ({where})"

    def setup(self, threads: int, device: str) -> None:
        for w in self._workers:
            w.setup_args = {"threads": threads, "device": device}
            try:
                w.ask({"setup": w.setup_args})
            except WorkerError as e:
                raise BackendUnavailable(str(e)) from None

    def stop(self) -> None:
        for w in self._workers:
            w.stop()

    def accumulation(self, op: str, dtype: str, device: str = "cpu") -> str:
        # the worker answers for the device it was set up on
        return str(self._worker.ask({"accumulation": [op, dtype]})["value"])

    def unsupported_reason(self, op: str, dtype: str) -> str | None:
        if (op, dtype) not in self._unsupported:
            self._unsupported[(op, dtype)] = self._worker.ask({"unsupported": [op, dtype]})["value"]
        return self._unsupported[(op, dtype)]

    def call_overhead(self, op: str, params: Params) -> CallOverhead:
        """Timed in the first worker, where the cases run."""
        value = self._worker.ask({"call_overhead": [op, params]})["value"]
        return CallOverhead(seconds=value["seconds"], case=value["case"], call=value["call"])

    def prepare(self, op: str, shape: Shape, inputs: Inputs, params: Params) -> Prepared:
        return self.prepare_in(0, op, shape, inputs, params)

    def prepare_in(self, process: int, op: str, shape: Shape, inputs: Inputs, params: Params) -> Prepared:
        """The case prepared in worker `process` (its own copy of the inputs, placed by its layout)."""
        worker = self._workers[process % len(self._workers)]
        path = worker.path("inputs")
        with path.open("wb") as f:
            pickle.dump(inputs, f, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            answer = worker.ask(
                {"prepare": {"op": op, "shape": shape.to_dict(), "params": params, "inputs": str(path)}}
            )
        finally:
            path.unlink(missing_ok=True)
        details = {**answer["details"], **self.environment_details()}
        return _RemoteCase(worker, answer["id"], details, answer["clock"], answer.get("offsets") or {})

    def environment_details(self) -> dict[str, Any]:
        """What a case's details say about where it ran."""
        return {"environment": self.python}

    def notes(self, op: str, dtype: str) -> list[str]:
        return [f"run by {self.python} in a worker process (its {self.backend} and opbench)"]

    def repro_args(self, params: dict[str, Any], details: dict[str, Any]) -> tuple[list[str], list[str]]:

        # this opbench's options for the backend (its tiles and ISA as the worker reported them ran)
        _, args = make_backend(self.backend, registered=False).repro_args(
            {**params, **self._worker.fixed}, details
        )
        return [self.python, "-m", "opbench"], args

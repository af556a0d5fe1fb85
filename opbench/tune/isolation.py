"""Runs candidates in a worker subprocess with a time limit; a crash, hang or kill becomes a reason string
and the next candidate gets a fresh worker."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from typing import IO, Protocol

from opbench.backends.remote import module_command
from opbench.documents import LayoutDict
from opbench.layout import worker_environment
from opbench.tuning_documents import WorkerAnswer, WorkerInit, WorkerRequest


class Runner(Protocol):
    """What measures candidates: IsolatedRunner, or replay.ReplayRunner answering from a table."""

    def run(self, request: WorkerRequest, timeout_s: float) -> WorkerAnswer: ...

    def close(self) -> None: ...


def describe_exit(returncode: int) -> str:
    """'crash: SIGSEGV', 'crash: SIGKILL (killed from outside; out of memory?)', 'exit status 3'."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        if name == "SIGKILL":
            return "crash: SIGKILL (killed from outside; out of memory?)"
        return f"crash: {name}"
    return f"worker exited with status {returncode}"


def worker_command() -> list[str]:
    """The worker's command line: this interpreter running opbench.tune.worker with the working directory
    off the import path (backends.remote.module_command: an `opbench/` folder there is never imported)."""
    return module_command(sys.executable, "opbench.tune.worker")


class IsolatedRunner:
    """Owns at most one worker process for one problem (`init`, see opbench.tune.worker)."""

    def __init__(
        self, init: WorkerInit, startup_timeout_s: float = 120.0, layout: LayoutDict | None = None
    ) -> None:
        self.init, self.layout = init, layout  # layout: a randomized memory layout (opbench.layout)
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen[str] | None = None
        self._stderr: IO[str] | None = None
        self.spawned = 0

    def _start(self) -> None:
        if self._stderr is not None:
            self._stderr.close()
        # Lives as long as the worker (its stderr, read back for crash reports); closed on respawn/close.
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115
        self.proc = subprocess.Popen(
            worker_command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            bufsize=1,
            env={
                **os.environ,
                "PYTHONUNBUFFERED": "1",
                "OPBENCH_WORKER_PARENT": str(os.getpid()),
                **(worker_environment(self.layout) if self.layout is not None else {}),
            },
        )
        self.spawned += 1
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(self.init) + "\n")
        self.proc.stdin.flush()
        answer, failure = self._read(self.startup_timeout_s)
        if failure is not None or not answer or not answer.get("ready"):
            raise RuntimeError(f"the tuning worker did not start: {failure or answer}; {self._stderr_tail()}")

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        lines = [ln for ln in self._stderr.read().splitlines() if ln.strip()]
        return lines[-1][:200] if lines else ""

    def _read(self, timeout_s: float) -> tuple[WorkerAnswer | None, str | None]:
        """One answer line, or (None, reason) when the worker dies or stays silent past the deadline."""
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                return None, f"timeout: no answer within {timeout_s:g} s"
            ready, _, _ = select.select([self.proc.stdout], [], [], min(left, 0.5))
            if ready:
                line = self.proc.stdout.readline()
                if line:
                    return json.loads(line), None
                code = self.proc.wait()
                self.proc = None
                return None, describe_exit(code)

    def run(self, request: WorkerRequest, timeout_s: float) -> WorkerAnswer:
        """Measure one candidate; returns the worker's answer, or {"status": "failed", "reason": ...}."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            code = self.proc.wait()
            self.proc = None
            return {"status": "failed", "reason": describe_exit(code)}
        answer, failure = self._read(timeout_s)
        if failure is not None:
            return {"status": "failed", "reason": failure}
        assert answer is not None
        return answer

    def kill(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

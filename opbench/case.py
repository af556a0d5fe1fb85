"""The nouns of a measurement: what is measured (`Case`), how it ended (`Status`, `Reason`, `Outcome`) and
what it measured (`Result`), with the one conversion between a Result and the versioned JSON record
(`Result.to_record` / `Result.from_record`; the fields are in opbench/schemas/sweep-results.v13.json).

The sweep builds Cases and Results (sweep/visits.py), the results writer turns Results into records
(results.py), the tuner names its failed trials with Outcomes (tune/objective.py) and the report reads
records back into Results (report/model.py). After Kernel Tuner's failure reasons, a case without a
measurement was either skipped (never run: memory, unsupported, predicted time) or failed (ran and
crashed, hung, raised or answered wrong). A reason keeps its text as written in the record; `Reason.of`
reads the kind back from that text, and an Outcome refuses a text that would read back as another kind,
so what the files say and what the code decided cannot drift apart.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from opbench.blocks import Details, Guards, Peak, Reference, Time, Verify
from opbench.documents import Record, Scalar
from opbench.ops import named
from opbench.ops.base import Op, RecordedShape, Shape


class Status(str, Enum):
    """A record's `status` field."""

    OK = "ok"
    SKIPPED = "skipped"  # not run
    FAILED = "failed"  # ran and did not finish
    WRONG_ANSWER = "wrong_answer"  # ran, and the output broke the error bound: never timed


class Reason(Enum):
    """Why a case has no measurement: `skipped:*` (never run) or `failed:*` (ran, and did not measure)."""

    MEMORY = "skipped:memory"  # over --max-memory
    UNSUPPORTED = "skipped:unsupported"  # backend missing, or no kernel for this op, dtype or device
    TIME = "skipped:time"  # predicted to take longer than --max-call-s
    WRONG_ANSWER = "failed:wrong_answer"  # the output broke the error bound
    CRASH = "failed:crash"  # the process died (a signal, or a worker's exit)
    TIMEOUT = "failed:timeout"  # no answer within the time limit
    ERROR = "failed:error"  # an exception, out of memory included

    @property
    def status(self) -> Status:
        if self is Reason.WRONG_ANSWER:
            return Status.WRONG_ANSWER
        return Status.SKIPPED if self.value.startswith("skipped:") else Status.FAILED

    @classmethod
    def of(cls, status: str | Status, text: str | None) -> Reason | None:
        """The kind of reason a record's (status, reason text) states: None for ok. The one place that
        reads reason texts; each producer's text is held to it by Outcome."""
        status = Status(status)
        text = text or ""
        if status is Status.OK:
            return None
        if status is Status.WRONG_ANSWER or text == "wrong_answer":
            return cls.WRONG_ANSWER
        if status is Status.SKIPPED:
            if text.startswith("memory: needs about"):
                return cls.MEMORY
            if text.startswith("predicted ") and "over --max-call-s" in text:
                return cls.TIME
            return cls.UNSUPPORTED
        if text.startswith(("crash:", "worker exited")):
            return cls.CRASH
        if text.startswith("timeout:"):
            return cls.TIMEOUT
        return cls.ERROR


@dataclass(frozen=True)
class Outcome:
    """How a case or a trial ended: ok, or a Reason with its text (as written in the record)."""

    reason: Reason | None = None
    text: str | None = None

    def __post_init__(self) -> None:
        if self.reason is None:
            if self.text is not None:
                raise ValueError(f"an ok outcome has no reason, got {self.text!r}")
            return
        if not self.text:
            raise ValueError(f"{self.reason.value} needs a reason text")
        read_back = Reason.of(self.reason.status, self.text)
        if read_back is not self.reason:
            raise ValueError(f"reason text {self.text!r} would read back as {read_back}, not {self.reason}")

    @property
    def status(self) -> Status:
        return Status.OK if self.reason is None else self.reason.status

    @property
    def ok(self) -> bool:
        return self.reason is None

    @classmethod
    def of(cls, status: str | Status, text: str | None) -> Outcome:
        """From a record's or a worker answer's status and reason text."""
        reason = Reason.of(status, text)
        if reason is None:
            return cls()
        return cls(reason, text or reason.value.split(":", 1)[1])


OK = Outcome()


@dataclass(frozen=True)
class Case:
    """One measurement to make: an op at a shape, in a dtype, on a backend, with the threads, device and
    backend parameters (our kernels' tiles, ISA, accumulation) it runs with. `factors` are its axis values
    as the sweep spec gave them (before --scale).

    `op` is the Op of the pass measured (ops/base.py): its `pass_name` is the training pass ("fwd", or
    "bwd": the gradients given an upstream gradient) and its `key` ("gemm" or "gemm:bwd") what the backends
    are asked for. A backward case's label ends in " bwd", so tables, reports and comparisons keep the
    passes of one shape apart.

    `shape` is the op's frozen shape dataclass (ops/<op>.py) in a Case to measure. A Case read back from a
    record (Result.from_record) keeps the record's shape fields and label as written (ops.base.RecordedShape),
    so that reading a file of another version never depends on today's shape classes."""

    op: Op[Any]
    shape: Shape
    dtype: str
    backend: str
    threads: int
    device: str
    params: Mapping[str, Scalar] = field(default_factory=dict)
    factors: Mapping[str, Scalar] = field(default_factory=dict)
    label: str = ""

    def __post_init__(self) -> None:
        if not self.label:
            suffix = "" if self.pass_name == "fwd" else f" {self.pass_name}"
            object.__setattr__(self, "label", self.shape.label() + suffix)

    @property
    def pass_name(self) -> str:
        return self.op.pass_name

    @property
    def key(self) -> str:
        return self.op.key

    def shape_fields(self) -> dict[str, Scalar]:
        return dict(self.shape.to_dict())

    @property
    def flops(self) -> int:
        return self.op.flops(self.shape)

    def min_bytes(self) -> int:
        return self.op.min_bytes(self.shape, self.dtype)


# A record's flags that question its measurement: it may not repeat (unstable, noisy, single_sample,
# drifting, throttled, apart, contended, unlike_earlier_runs) or may not be right (mistrusted, suspect).
# "slow" (utilization under 1%) describes the backend, not the measurement. Every number built from a case
# with one of them (a speed-up, a geometric mean, a plot point) carries DOUBT_MARK and names them, in every
# format of report, compare and ab.
NOT_DOUBTS = frozenset({"slow"})
DOUBT_MARK = "†"


def doubts(flags: Iterable[str]) -> list[str]:
    """The flags among `flags` that put a measurement in doubt, sorted."""
    return sorted({f for f in flags if f not in NOT_DOUBTS})


def named_doubts(*sides: tuple[str, Iterable[str]]) -> list[str]:
    """The doubts of the cases a number is built from, each named after its side ("B: noisy")."""
    return [f"{name}: {f}" for name, flags in sides for f in doubts(flags)]


def marked(doubted: Collection[str]) -> str:
    """DOUBT_MARK where there is a doubt (a non-empty list or text of them), else nothing."""
    return DOUBT_MARK if doubted else ""


# The record's fields, in the order they are written (schema v13).
RECORD_FIELDS = (
    *("op", "pass", "shape", "factors", "label", "dtype", "backend", "threads", "device", "status", "reason"),
    *("flops", "min_bytes", "arithmetic_intensity", "time", "gflops", "gflops_best", "peak", "utilization"),
    *("machine_speed", "reference", "verify", "guards", "details", "notes", "flags", "repro"),
)


@dataclass(frozen=True)
class Result:
    """What became of a Case: its outcome and, when it was timed, the measurement. The nested blocks are
    frozen dataclasses (blocks.py: Time, Peak, Reference, Verify, Guards, Details)."""

    case: Case
    outcome: Outcome = OK
    flops: int = 0
    min_bytes: int = 0
    time: Time | None = None
    gflops: float | None = None
    gflops_best: float | None = None
    peak: Peak | None = None
    utilization: float | None = None
    machine_speed: float | None = None
    reference: Reference | None = None
    verify: Verify | None = None
    guards: Guards | None = None  # what the too-good-to-be-true checks saw (guards.py)
    details: Details = field(default_factory=Details)
    notes: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    repro: str | None = None  # the command that measures this case again (repro.py)

    @classmethod
    def of(cls, case: Case, outcome: Outcome = OK, **fields: Any) -> Result:
        """A Result of `case` with its FLOP count and minimum bytes."""
        return cls(case, outcome, flops=case.flops, min_bytes=case.min_bytes(), **fields)

    @property
    def status(self) -> Status:
        return self.outcome.status

    @property
    def reason(self) -> Reason | None:
        return self.outcome.reason

    @property
    def arithmetic_intensity(self) -> float | None:
        """FLOPs per byte of the minimum traffic (inputs read once, output written once); None when a record
        read back lacks either (or holds something else there)."""
        f, b = self.flops, self.min_bytes
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (f, b)) or not b > 0:
            return None
        value = f / b
        return value if math.isfinite(value) else None

    def to_record(self) -> Record:
        """The versioned JSON record (the one place a Result becomes one)."""
        c = self.case
        return {
            "op": c.op.name,
            "pass": c.pass_name,
            "shape": c.shape_fields(),
            "factors": dict(c.factors),
            "label": c.label,
            "dtype": c.dtype,
            "backend": c.backend,
            "threads": c.threads,
            "device": c.device,
            "status": self.status.value,
            "reason": self.outcome.text,
            "flops": self.flops,
            "min_bytes": self.min_bytes,
            "arithmetic_intensity": self.arithmetic_intensity,
            "time": None if self.time is None else self.time.to_block(),
            "gflops": self.gflops,
            "gflops_best": self.gflops_best,
            "peak": None if self.peak is None else self.peak.to_block(),
            "utilization": self.utilization,
            "machine_speed": self.machine_speed,
            "reference": None if self.reference is None else self.reference.to_block(),
            "verify": None if self.verify is None else self.verify.to_block(),
            "guards": None if self.guards is None else self.guards.to_block(),
            "details": self.details.to_block(),
            "notes": list(self.notes),
            "flags": list(self.flags),
            "repro": self.repro,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Result:
        """A record of any readable schema version (fields a version lacks are None or empty); an op this
        version does not run keeps its name (ops.named)."""
        pass_name = str(rec.get("pass") or "fwd")  # schema 5 on; every earlier record is a forward
        case = Case(
            op=named(rec["op"], pass_name),
            shape=RecordedShape(dict(rec.get("shape") or {}), str(rec.get("label") or "")),
            label=str(rec.get("label") or ""),
            dtype=rec["dtype"],
            backend=rec["backend"],
            threads=rec.get("threads") or 0,
            device=rec.get("device") or "cpu",
            params={},
            factors=rec.get("factors") or {},
        )
        return cls(
            case,
            Outcome.of(rec["status"], rec.get("reason")),
            flops=rec.get("flops") or 0,
            min_bytes=rec.get("min_bytes") or 0,
            time=Time.from_block(rec.get("time")),
            gflops=rec.get("gflops"),
            gflops_best=rec.get("gflops_best"),
            peak=Peak.from_block(rec.get("peak")),
            utilization=rec.get("utilization"),
            machine_speed=rec.get("machine_speed"),
            reference=Reference.from_block(rec.get("reference")),
            verify=Verify.from_block(rec.get("verify")),
            guards=Guards.from_block(rec.get("guards")),  # schema 7 on
            details=Details.of(rec.get("details")),
            notes=tuple(rec.get("notes") or ()),
            flags=tuple(rec.get("flags") or ()),
            repro=rec.get("repro"),  # schema 7 on
        )

"""A case in a sweep (`CaseRun`): its Case and what its visits have found so far, and each visit's check of
its timed output (`TimedCheck`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, cast

from opbench.blocks import Guards, TimedCheckBlock, VerifyBlock
from opbench.case import OK, Case, Outcome
from opbench.dtypes import Inputs
from opbench.measure import Visit
from opbench.ops.base import Shape
from opbench.sweep.config import BackendState, processes


@dataclass(frozen=True)
class TimedCheck:
    """One visit's check of the output of its timed calls: in the record's verify.timed (to_dict)."""

    round: int
    skipped: str | None = None  # over --verify-max-gflop: not checked
    ok: bool | None = None
    max_err_ratio: float | None = None
    inputs: str | None = None  # new values, or the first ones where the backend cannot rewrite them
    checked: str | None = None  # what was recomputed (the op's spot part)
    reason: str | None = None  # why it is wrong

    def to_dict(self) -> TimedCheckBlock:
        return cast(TimedCheckBlock, {k: v for k, v in asdict(self).items() if v is not None})


@dataclass
class CaseRun:
    """One Case of a sweep and what its visits have found so far: the outcome and verification of its
    first visit, the details of what ran, notes, and the visits themselves."""

    index: int
    shape_index: int
    case: Case
    outcome: Outcome = OK
    verify: VerifyBlock | None = None
    details: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    visits: list[Visit] = field(default_factory=list)
    finished: bool = False  # no more visits: skipped, failed or wrong before timing, or a later visit failed
    method: str = ""
    slow: bool = False  # its first visit overran the round's time budget: one visit only (round_budget_note)
    # by process (0 in this process): kept between rounds when it fits the sweep's keep budget
    # (KEEP_PREPARED_BYTES); `keep` says whether it does
    prepared: dict[int, Any] = field(default_factory=dict)
    keep: bool = False
    # what the guards saw (zero_fraction: the first visit's)
    guards: Guards = field(default_factory=Guards)
    repro: str | None = None  # the command that measures this case again (repro.py)
    accumulate: str = ""  # what its verification bounds assume (Backend.accumulation, or its details)
    inputs: Inputs | None = None  # the values its prepared case computes on (between checks)
    first_inputs: Inputs | None = None  # the values it was prepared on, which refills move
    # each visit's check of its timed output
    timed: list[TimedCheck] = field(default_factory=list)

    @property
    def shape(self) -> Shape:
        return self.case.shape

    @property
    def dtype(self) -> str:
        return self.case.dtype

    @property
    def backend(self) -> str:
        return self.case.backend

    def process(self, st: BackendState) -> int:
        """The process the next visit runs in: round r in process r mod N (--processes)."""
        return len(self.visits) % max(1, processes(st))

    def end(self, outcome: Outcome) -> None:
        """No measurement for this case: it was skipped, failed or answered wrong."""
        self.outcome = outcome
        self.finished = True

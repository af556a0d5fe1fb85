"""A case in a sweep (`CaseRun`): its Case and what its visits have found so far, and each visit's check of
its timed output (blocks.TimedCheck)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opbench.blocks import Guards, TimedCheck, Verify
from opbench.case import OK, Case, Outcome
from opbench.dtypes import Inputs
from opbench.measure import Visit
from opbench.ops.base import Shape
from opbench.sweep.config import BackendState, processes


@dataclass
class CaseRun:
    """One Case of a sweep and what its visits have found so far: the outcome and verification of its
    first visit, the details of what ran, notes, and the visits themselves."""

    index: int
    shape_index: int
    case: Case
    outcome: Outcome = OK
    verify: Verify | None = None
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

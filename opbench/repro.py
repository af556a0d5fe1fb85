"""The one command that measures a single case again: every record's `repro` (schema 7).

`opbench sweep OP --problem DESC` names the shape exactly (descriptors.describe), the backend says how it
is run again (Backend.repro_args: our kernel's tiles and ISA as they ran, a user kernel's file and
parameters, another environment's Python), and the rest are the settings the case was measured with:
dtype, pass, threads, device, the seed of its inputs (the sweep seeds each shape's inputs with
--seed + the shape's index, so the repro's single shape gets that seed), rounds, verification and cache
temperature. Passwords are masked (secrets.mask_argv), as in every command line opbench writes.
"""

from __future__ import annotations

import shlex
from typing import Any, Protocol

from opbench.backends.base import Backend
from opbench.case import Case
from opbench.descriptors import describe, problem_options
from opbench.ops.base import Shape
from opbench.secrets import mask_argv
from opbench.timing import TimerConfig

DEFAULT_ROUNDS = 3  # the sweep command's default --rounds: left out of a repro


class Settings(Protocol):
    """What a repro repeats of the run a case was measured in (sweep.SweepConfig has it)."""

    @property
    def threads(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def device(self) -> str: ...
    @property
    def rounds(self) -> int: ...
    @property
    def verify(self) -> bool: ...
    @property
    def timer(self) -> TimerConfig: ...


def sweep_command(
    case: Case, cfg: Settings, shape_index: int, backend: Backend, details: dict[str, Any]
) -> str:
    """`case` of sweep `cfg` (sweep.SweepConfig), the shape_index-th shape, run by `backend`."""
    program, backend_args = backend.repro_args(dict(case.params), details)
    return command(program, "sweep", case.op.name, case.shape, case.dtype, case.pass_name, cfg, shape_index,
                   backend_args)  # fmt: skip


def command(
    program: list[str],
    verb: str,
    op: str,
    shape: Shape,
    dtype: str,
    pass_name: str,
    cfg: Settings,
    shape_index: int,
    side_args: list[str],
) -> str:
    """`PROGRAM VERB OP --problem DESC ... SIDE_ARGS ...`: one case of `cfg` (sweep.SweepConfig) with the
    settings it was measured with, as one masked string (the sweep's repro, and the A/B case's)."""
    argv = [*program, verb, op, "--problem", describe(op, shape), *problem_options(op, shape).split()]
    argv += [
        "--dtype",
        dtype,
        *side_args,
        "--threads",
        str(cfg.threads),
        "--seed",
        str(cfg.seed + shape_index),
    ]
    if pass_name != "fwd":
        argv += ["--pass", pass_name]
    if cfg.device != "cpu":
        argv += ["--device", cfg.device]
    if cfg.rounds != DEFAULT_ROUNDS:
        argv += ["--rounds", str(cfg.rounds)]
    if not cfg.verify:
        argv.append("--no-verify")
    if cfg.timer.cold_cache:
        argv.append("--cold-cache")
    return shlex.join(mask_argv(argv))

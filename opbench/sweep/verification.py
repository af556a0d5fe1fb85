"""Verification around a case's timing (sweep/visits.py calls these): the BLAS thread limit of float64
checks, the new input values of each timed visit, and the check of the output of its timed calls.

The timed kernel is the verified kernel. A case's first call is checked against the full float64 reference
before any timing; then, before every timed visit, its inputs get new values (ops/spot.py: `refreshed`, the
same values moved, written in place by Prepared.refill where the backend can rewrite them), and after it the
result of the timed calls (Prepared.timed_output) is checked on those values by the op's spot check, a few
seeded rows recomputed in float64 within the same bound. A kernel that remembers its first answer, or
answers differently once warm, is a wrong answer whatever its first call returned. Each visit's check is in
the record's verify.timed.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import zlib
from typing import Any

from threadpoolctl import ThreadpoolController

from opbench.backends.base import Prepared
from opbench.blocks import TimedCheck, Verify
from opbench.case import Outcome, Reason
from opbench.dtypes import Array, Inputs, Output
from opbench.ops import spot
from opbench.ops.base import Op, Shape
from opbench.ops.spot import refreshed
from opbench.sweep.caserun import CaseRun
from opbench.sweep.config import SweepConfig

# Verification's float64 BLAS work runs on one thread when it costs at most this many FLOPs: a
# multi-threaded OpenBLAS call leaves its pool spinning for about 110 ms, which the timing that follows
# must wait out (measure.Bench settles), and that wait cost more than a short check saves on two threads.
ONE_THREAD_VERIFY_FLOPS = 4e9


def verify_threads(cost_flops: float) -> contextlib.AbstractContextManager[Any]:
    """The BLAS thread limit for a verification of `cost_flops` (ONE_THREAD_VERIFY_FLOPS)."""
    if cost_flops > ONE_THREAD_VERIFY_FLOPS:
        return contextlib.nullcontext()
    return _blas().limit(limits=1, user_api="blas")


@functools.lru_cache(maxsize=1)
def _blas() -> ThreadpoolController:
    """The process's BLAS pools, found once (threadpool_limits scans every loaded library each time: 3 ms with
    the frameworks loaded, at every check of every visit). numpy's OpenBLAS, which verification runs on, is
    loaded before any case."""
    return ThreadpoolController()


class Expected:
    """The float64 reference of one group of cases (a shape, pass and dtype: every backend's case of it) and
    its bounds per accumulation, each computed when first asked and then shared: the bound's magnitudes cost
    as much as the reference, once per group instead of once per backend."""

    def __init__(self, op: Op[Any], shape: Shape, inputs: Inputs, dtype: str) -> None:
        self.op, self.shape, self.inputs, self.dtype = op, shape, inputs, dtype
        self._bounds: dict[str, dict[str, Array]] = {}

    @functools.cached_property
    def reference(self) -> Any:
        return self.op.reference(self.shape, self.inputs)

    def bounds(self, accumulate: str) -> dict[str, Array]:
        if accumulate not in self._bounds:
            self._bounds[accumulate] = self.op.error_bounds(
                self.shape, self.inputs, self.reference, self.dtype, accumulate
            )
        return self._bounds[accumulate]


def check_first(cfg: SweepConfig, case: CaseRun, output: Output, expected: Expected | None) -> bool:
    """Check a case's first call against the full float64 reference (None: verification is off, or over
    its cost cap, which case.verify then says) with the bound of what it is assumed to sum in; False (and the
    case ended as a wrong answer) if wrong."""
    op, shape = case.case.op, case.shape
    if expected is None:
        if cfg.verify:
            cost = op.verify_cost_flops(shape) / 1e9
            case.verify = Verify(
                skipped=f"float64 verification would cost {cost:.0f} GFLOP, over "
                f"--verify-max-gflop {cfg.verify_max_gflop:g}"
            )
        return True
    with verify_threads(op.verify_cost_flops(shape)):
        reference, bounds = expected.reference, expected.bounds(case.accumulate)
        assert case.inputs is not None  # made for the case's group, with its Expected
        result = op.check(shape, output, case.inputs, reference, case.dtype, case.accumulate, bounds)
    case.verify = Verify.checked(result, case.accumulate)
    if not result["ok"]:
        case.end(Outcome(Reason.WRONG_ANSWER, result.get("reason") or "error above the bound"))
    return bool(result["ok"])


def visit_seed(cfg: SweepConfig, case: CaseRun, visit: int) -> int:
    """The seed of a visit's new input values and spot check: the same for every backend of a case (both
    sides of an A/B run time the same values), another for each visit."""
    text = f"{cfg.seed}/{case.shape_index}/{case.case.key}/{case.dtype}/{visit}"
    return zlib.crc32(text.encode())


def refill(cfg: SweepConfig, case: CaseRun, prepared: Prepared) -> bool:
    """Give the next visit new input values (the first ones moved, with that visit's seed: the same for
    every backend of the case), written into the prepared case's own buffers; False (the case keeps
    computing on its first values) where its backend cannot rewrite them."""
    assert case.first_inputs is not None
    new = refreshed(case.first_inputs, visit_seed(cfg, case, len(case.visits) + 1))
    if not prepared.refill(new):
        return False
    case.inputs = new
    return True


# Spot parts (the float64 reference and bound of a seeded part) shared by the backends of a case, and by the
# visits of those that cannot be refilled: the recurrent ops' references cost more than their comparisons.
SHARED_PARTS = 128
_parts: collections.OrderedDict[tuple[Any, ...], Any] = collections.OrderedDict()


def _spot_part(cfg: SweepConfig, case: CaseRun, visit: int, refilled: bool) -> spot.Part:
    """The op's spot part for the values the visit computed on (the first ones, or those of the visit), the
    same for every backend of the case."""
    seed = visit_seed(cfg, case, visit if refilled else 1)  # the first values: the same rows each visit
    key = (cfg.seed, case.shape_index, case.case.key, case.shape, case.dtype, case.accumulate, seed, refilled)
    if key not in _parts:
        assert case.inputs is not None  # a visit's values, checked after it
        _parts[key] = case.case.op.spot_part(case.shape, case.inputs, case.dtype, case.accumulate, seed)
        if len(_parts) > SHARED_PARTS:
            _parts.popitem(last=False)
    return _parts[key]


def check_timed(cfg: SweepConfig, case: CaseRun, prepared: Prepared, refilled: bool) -> None:
    """Check the output of the visit just timed on the values it computed on (the op's spot check), record
    it in case.timed, and end the case as a wrong answer if it is wrong. Skipped (and said) where the spot
    check would cost more than --verify-max-gflop."""
    op = case.case.op
    visit = len(case.visits)
    cost = op.spot_cost_flops(case.shape)
    if cost > cfg.verify_max_gflop * 1e9:
        cap = f"--verify-max-gflop {cfg.verify_max_gflop:g}"
        case.timed.append(
            TimedCheck(visit, skipped=f"a spot check would cost {cost / 1e9:.3g} GFLOP, over {cap}")
        )
        return
    output = prepared.timed_output()
    with verify_threads(cost):
        result = _spot_part(cfg, case, visit, refilled).compare(
            op.named_outputs(case.shape, output), case.dtype
        )
    del output
    check = TimedCheck(
        visit,
        ok=bool(result["ok"]),
        max_err_ratio=result.get("max_err_ratio"),
        inputs="new values" if refilled else "the first values (this backend cannot rewrite its inputs)",
        checked=result.get("checked"),
        reason=None if result["ok"] else result.get("reason") or "error above the bound",
    )
    case.timed.append(check)
    if check.ok:
        return
    case.visits.clear()
    case.prepared = {}
    case.end(
        Outcome(
            Reason.WRONG_ANSWER,
            f"the output of the timed calls of round {visit} is wrong ({check.reason}; {check.checked}); "
            "the first call was right",
        )
    )

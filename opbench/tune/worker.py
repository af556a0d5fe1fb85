"""The tuning worker: a subprocess that measures one candidate tiling at a time, so that a candidate that
crashes, hangs or exhausts memory takes down only this process.

Protocol, one JSON object per line. The parent writes the problem first:
    {"op": "gemm", "shape": {...}, "dtype": "fp32", "threads": 2, "seed": 0, "timer": {...}, "verify": true}
(any op: our kernel for it is ops.<op>.plan)
and the worker answers {"ready": true, "pid": ...} once inputs and the float64 reference exist. Then, per
candidate, the parent writes {"tiles": {...} or null, "isa": "", "timer": {...}?} and the worker answers
    {"status": "ok", "time": {...}, "verify": {...}, "machine_speed": x, "flags": [...], "round": {...},
     "tiles": {...}}                                      the tiles that ran (None ones from the cache model)
                                                          measured through measure.Bench, like a sweep case:
                                                          in-run reference, contention; verify is null when
                                                          verification is off
    {"status": "wrong_answer", "verify": {...}}           the output broke the error bound: not timed; or
                                                          the output of its timed calls did (on new input
                                                          values for a user kernel: verify.timed is true)
    {"status": "failed", "reason": "error: ..."}          a Python exception (bad tiles, an import error)
For a user kernel (init "kernel": userkernel.py) a candidate is {"params": {...}} instead of tiles.
A crash or a hang produces no answer: the parent sees the process die or time out.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, TextIO, cast

from opbench import peak as peaks
from opbench.backends.base import copied
from opbench.backends.user_backend import UserCase
from opbench.contention import Monitor
from opbench.documents import Params, UserKernelDict
from opbench.dtypes import Inputs
from opbench.layout import apply, place_inputs
from opbench.machine import die_with_parent, keep_freed_memory, pin_to_cpus
from opbench.measure import Bench, combine
from opbench.ops import assumed_accumulation, named
from opbench.ops.base import Shape
from opbench.ops.spot import refreshed
from opbench.reference import InRunReference
from opbench.tiles import PATH_KEYS, Tiles
from opbench.timing import Timer, TimerConfig
from opbench.tuning_documents import TrialVerify, WorkerAnswer
from opbench.userkernel import load_function


def _serve(proto: TextIO) -> None:
    init = json.loads(sys.stdin.readline())
    op = named(init["op"])
    shape = op.shape_from_case(init["shape"])
    dtype, threads = init["dtype"], init["threads"]
    cpus = pin_to_cpus(threads)
    keep_freed_memory()
    reference_probe = InRunReference(threads, load_best=peaks.best_probe)
    monitor = Monitor(cpus)
    inputs = op.make_inputs(shape, dtype, init["seed"])
    inputs, _ = place_inputs(inputs, apply())  # the confirmation's processes: a randomized layout each
    reference = op.reference(shape, inputs) if init["verify"] else None
    proto.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    proto.flush()

    user = UserKernel(init["kernel"], init["op"], shape, inputs) if init.get("kernel") else None
    # the accumulation the error bound assumes: ours sums in fp32 (its cells too); a user kernel's what it
    # declared (--kernel-accumulate, default fp32), its half-precision cells in the dtype
    declared = (init.get("kernel") or {}).get("accumulate", "fp32")
    accumulate = assumed_accumulation(init["op"], dtype, declared, True) if user else "fp32"
    for trial, line in enumerate(sys.stdin):
        req = json.loads(line)
        try:
            answer: WorkerAnswer
            timed_inputs = inputs
            if user is not None:
                ran: Params = req.get("params") or {}
                case = user.prepare(ran)
                result, run, timed_output = case.output(), case.run, case.timed_output
                if reference is not None:  # the timed calls compute on new values (sweep/verification.py)
                    moved = refreshed(inputs, init["seed"] * 7919 + trial)
                    timed_inputs = moved if case.refill(moved) else inputs
            else:
                asked = req.get("tiles") or {}
                plan = op.plan(shape, inputs, Tiles.of(asked, threads, req.get("isa") or None))
                result, run = copied(plan.output()), plan.run
                timed_output = functools.partial(lambda p: copied(p.last()), plan)
                info = plan.tiles()
                # the tiles that ran, and the path thresholds and conv_path where the space searches them
                # (gemm_paths, conv_paths); the model's default names the conv way it took
                ran = {"tile_m": info["tile_m"], "tile_n": info["tile_n"], "tile_k": info["tile_k"]}
                ran.update({k: info[k] for k in PATH_KEYS if k in asked and k in info})
                if not asked and info.get("conv_path"):
                    ran["conv_path"] = info["conv_path"]
            verify = None
            if reference is not None:
                verify = op.check(shape, result, inputs, reference, dtype, accumulate)
            if verify is not None and not verify["ok"]:
                answer = {"status": "wrong_answer", "verify": verify}
            else:
                timer = Timer(TimerConfig(**{**init["timer"], **req.get("timer", {})}))
                bench = Bench(timer, reference_probe, monitor)

                visit = bench.measure(run, dtype=dtype)
                bench.finish()  # the probe after, now: the trial's answer carries its machine speed
                c = combine([visit])
                timed = None  # the timed kernel is the verified kernel: its timed output checked too
                if reference is not None:
                    timed = op.spot_check(shape, timed_output(), timed_inputs, dtype, accumulate, trial)
                answer = {
                    "status": "ok",
                    "time": {**c.measurement.to_dict(), "samples_s": list(c.measurement.samples_s)},
                    "verify": verify,
                    "machine_speed": c.machine_speed,
                    "flags": [f for f in c.flags if f in ("throttled", "apart", "contended")],
                    "round": visit.to_dict(),
                    "tiles": ran,
                }
                if timed is not None and not timed["ok"]:
                    answer = {"status": "wrong_answer", "verify": cast(TrialVerify, {**timed, "timed": True})}
        except MemoryError:
            answer = {"status": "failed", "reason": "out of memory"}
        except Exception as e:
            answer = {"status": "failed", "reason": f"error: {type(e).__name__}: {e}".splitlines()[0][:300]}
        proto.write(json.dumps(answer) + "\n")
        proto.flush()
    peaks.record_best_probes(reference_probe.run_best)


class UserKernel:
    """The user's kernel (userkernel.py), imported at its first use so that an import error is one
    failed trial; each candidate is the sweep backend's prepared case (backends/user_backend.py)."""

    def __init__(self, kernel: UserKernelDict, op: str, shape: Shape, inputs: Inputs) -> None:
        self.kernel, self.op, self.shape, self.inputs = kernel, op, shape, inputs
        self.fn: Callable[..., Any] | None = None

    def prepare(self, params: Params) -> UserCase:
        if self.fn is None:
            self.fn = load_function(self.kernel)
        return UserCase(self.fn, self.op, self.shape, self.inputs, params)


def main() -> None:
    die_with_parent()
    # The protocol owns the original stdout; anything a library prints goes to stderr instead.
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    try:
        _serve(proto)
    except Exception:
        traceback.print_exc()
        sys.exit(3)


if __name__ == "__main__":
    main()

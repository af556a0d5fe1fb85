"""A stand-in for the isolated worker that answers from a table of measured tilings, so samplers can be
compared on the same measurements without the hardware (as Kernel Tuner's simulation runner replays its
cache). Used by benchmarks/tuner_efficiency.py and tests."""

from __future__ import annotations

import json

from opbench.tuning_documents import WorkerAnswer, WorkerRequest


class ReplayRunner:
    """table: tiling key (opbench.tune.study._key; a user kernel's: objective.request's) -> GFLOPS, or None
    for a tiling that failed."""

    def __init__(self, table: dict[str, float | None], flops: int) -> None:
        self.table = table
        self.flops = flops
        self.measured: list[str] = []  # keys in the order they were asked for

    def run(self, request: WorkerRequest, timeout_s: float) -> WorkerAnswer:
        if "params" in request:  # a user kernel's point, keyed as objective.request keys it
            key = json.dumps({"params": request["params"]}, sort_keys=True)
        else:  # None: the cache-model default, keyed as {} (objective.request)
            key = json.dumps(
                {"tiles": request.get("tiles") or {}, "isa": request.get("isa") or ""}, sort_keys=True
            )
        self.measured.append(key)
        gflops = self.table.get(key)
        if gflops is None:
            return {"status": "failed", "reason": "failed when the table was measured"}
        seconds = self.flops / gflops / 1e9
        return {
            "status": "ok",
            "time": {"median_s": seconds, "rel_iqr": 0.0, "samples_s": [seconds] * 3},
            "verify": None,
        }

    def close(self) -> None:
        pass

"""The worker of an A/B side run by another Python environment, or of a sweep's process (`--processes`,
backends/processes.py), both through backends/remote.py: started as
`PYTHON -m opbench.backends.remote_worker` with that environment's interpreter, it runs that environment's
opbench backend on the cases the parent sends, one JSON object a line each way:

    {"hello": {"backend": "cpp", "fixed": {...}}}   -> {"ok": true, "version", "opbench", "python",
                                                        "unavailable": null | reason}
    {"setup": {"threads": 2, "device": "cpu"}}      -> {"ok": true}
    {"unsupported": [op, dtype]}, {"accumulation": [op, dtype]}  -> {"ok": true, "value": ...}
    {"prepare": {"op", "shape", "params", "inputs": PICKLE}} -> {"ok": true, "id", "details", "clock",
                                                                 "offsets": each input's offset in its page}
    {"run": id, "loops": n}                         -> {"ok": true, "seconds": s, "clock"}
    {"output": id, "path": PICKLE}                  -> {"ok": true} (the output pickled there)
    {"timed_output": id, "path": PICKLE}            -> {"ok": true} (the last timed call's output there)
    {"refill": id, "path": PICKLE}                  -> {"ok": true, "value": whether it rewrote the inputs}
    {"drop": id}                                    -> {"ok": true}
    {"call_overhead": [op, params]}                 -> {"ok": true, "value": {"seconds", "case", "call"}}
An exception is {"ok": false, "error": "Type: message"}; the worker goes on.
"""

from __future__ import annotations

import json
import os
import pickle
import platform
import sys
from typing import Any, TextIO

from opbench import __version__
from opbench.backends import make_backend
from opbench.backends.base import Backend
from opbench.files import json_line
from opbench.layout import apply, place_inputs
from opbench.machine import die_with_parent, keep_freed_memory
from opbench.ops import named


def _said_hello(backend: Backend | None) -> Backend:
    """The backend the parent's hello named: a request before it is refused (the parent always greets)."""
    if backend is None:
        raise RuntimeError("no hello before this request")
    return backend


def _serve(proto: TextIO) -> None:
    offsets_rng = apply()  # a sweep's worker (--processes): its randomized layout (layout.py)
    backend: Backend | None = None
    device = "cpu"
    fixed: dict[str, Any] = {}
    prepared: dict[int, Any] = {}
    count = 0
    for line in sys.stdin:
        req = json.loads(line)
        try:
            answer: dict[str, Any] = {"ok": True}
            if "hello" in req:
                hello = req["hello"]
                backend, fixed = make_backend(hello["backend"]), dict(hello.get("fixed") or {})
                answer.update(
                    version=backend.version() if backend.unavailable_reason() is None else None,
                    unavailable=backend.unavailable_reason(),
                    opbench=__version__,
                    python=platform.python_version(),
                )
                if "threads" in hello:
                    backend.setup(hello["threads"], hello["device"])
                    device = hello["device"]
            elif "setup" in req:
                _said_hello(backend).setup(req["setup"]["threads"], req["setup"]["device"])
                device = req["setup"]["device"]
            elif "unsupported" in req:
                op_key, dtype = req["unsupported"]
                answer["value"] = _said_hello(backend).unsupported_reason(op_key, dtype)
            elif "accumulation" in req:
                op_key, dtype = req["accumulation"]
                answer["value"] = _said_hello(backend).accumulation(op_key, dtype, device)
            elif "prepare" in req:
                p = req["prepare"]
                op = named(p["op"])
                with open(p["inputs"], "rb") as f:
                    inputs = pickle.load(f)
                inputs, offsets = place_inputs(inputs, offsets_rng)
                shape = op.shape_from_case(p["shape"])
                case = _said_hello(backend).prepare(p["op"], shape, inputs, {**p["params"], **fixed})
                del inputs
                count += 1
                prepared[count] = case
                answer.update(id=count, details=case.details, clock=case.clock, offsets=offsets)
            elif "run" in req:
                case = prepared[req["run"]]
                # the clock as of this run: a CUDA case says whether it replays a captured graph only once
                # its first run of enough calls has tried to capture one
                answer.update(seconds=case.run(req["loops"]), clock=case.clock)
            elif "output" in req or "timed_output" in req:
                case = prepared[req["output"]] if "output" in req else prepared[req["timed_output"]]
                result = case.output() if "output" in req else case.timed_output()
                with open(req["path"], "wb") as f:
                    pickle.dump(result, f, protocol=pickle.HIGHEST_PROTOCOL)
            elif "refill" in req:
                with open(req["path"], "rb") as f:
                    answer["value"] = prepared[req["refill"]].refill(pickle.load(f))
            elif "drop" in req:
                prepared.pop(req["drop"], None)
            elif "call_overhead" in req:
                op_key, params = req["call_overhead"]
                answer["value"] = _said_hello(backend).call_overhead(op_key, {**params, **fixed})
            else:
                answer = {"ok": False, "error": f"unknown request {sorted(req)}"}
        except Exception as e:  # the parent records it as the case's failure
            text = str(e).strip().splitlines()
            answer = {"ok": False, "error": f"{type(e).__name__}: {text[0][:300] if text else ''}"}
        proto.write(json_line(answer, default=str))
        proto.flush()


def main() -> None:
    die_with_parent()
    keep_freed_memory()  # as in the sweep's own process (runs.py)
    # The protocol owns the original stdout; anything a library prints goes to stderr instead.
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    _serve(proto)


if __name__ == "__main__":
    main()

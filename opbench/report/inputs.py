"""Reading the report's inputs: sweep result files (JSON, schema 1 or 2) and tuning studies, each refused
with one line naming the file or study when it cannot be used."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from opbench.errors import UsageError

READABLE_SCHEMAS = (1, 2)


def load_results(path: str | Path) -> dict[str, Any]:
    """A sweep results document, with schema 1 files brought to schema 2's shape (gemm only, no factors)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{p}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(
            f"{p}: not JSON ({e.msg} at line {e.lineno}); give the .json file opbench sweep wrote"
        ) from None
    if not isinstance(doc, dict) or doc.get("kind") != "opbench.sweep":
        raise UsageError(f"{p}: not an opbench sweep result (no 'kind': 'opbench.sweep')")
    version = doc.get("schema_version")
    if version not in READABLE_SCHEMAS:
        raise UsageError(
            f"{p}: results schema version {version!r} is not one this opbench reads "
            f"({', '.join(map(str, READABLE_SCHEMAS))})"
        )
    records = doc.get("records")
    if not isinstance(records, list):
        raise UsageError(f"{p}: 'records' is missing or not a list")
    for i, r in enumerate(records):
        if not isinstance(r, dict) or not {"op", "label", "dtype", "backend", "status"} <= set(r):
            raise UsageError(f"{p}: records[{i}] is not a sweep record")
        r.setdefault("factors", dict(r.get("shape", {})))
    doc.setdefault("mode", "product")
    doc.setdefault("suite", None)
    doc.setdefault("scale", None)
    doc.setdefault("bandwidth", None)
    doc["_path"] = str(p)
    return doc


def load_study(name: str, storage_url: str) -> dict[str, Any]:
    """A tuning study as plain data: fingerprint, trials (number, state, tiles, GFLOPS), confirmation."""
    from opbench.tune.study import load_existing

    study = load_existing(name, storage_url)
    trials = []
    for t in study.trials:
        trials.append(
            {
                "number": t.number,
                "state": t.state.name,
                "tiles": t.user_attrs.get("tiles"),
                "gflops": t.user_attrs.get("gflops"),
                "failure": t.user_attrs.get("failure"),
                "reused_from": t.user_attrs.get("reused_from"),
                "params": dict(t.params),
            }
        )
    importances: dict[str, float] = {}
    try:
        import optuna

        if len(study.directions) == 1 and sum(t["gflops"] is not None for t in trials) >= 3:
            importances = {k: float(v) for k, v in optuna.importance.get_param_importances(study).items()}
    except (RuntimeError, ValueError, ZeroDivisionError):
        importances = {}  # too few distinct trials to say
    return {
        "name": name,
        "fingerprint": study.user_attrs.get("fingerprint", {}),
        "valid_points": study.user_attrs.get("valid_points"),
        "confirmation": study.user_attrs.get("confirmation"),
        "directions": [d.name.lower() for d in study.directions],
        "trials": trials,
        "importances": {k.removesuffix("_i"): v for k, v in importances.items()},
    }

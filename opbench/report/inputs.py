"""Reading the report's inputs: sweep result files (JSON, any schema version up to the one written now) and
tuning studies, each refused with one line naming the file or study when it cannot be used."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from opbench.case import Status
from opbench.documents import ResultsDoc
from opbench.errors import UsageError
from opbench.files import MAX_RESULTS_BYTES, read_input
from opbench.report.ab import VERDICTS, AbResult
from opbench.results import SCHEMA_VERSION
from opbench.tune.study import load_existing
from opbench.tuning_documents import PortfolioDoc, StudyDoc, TrialRow

if TYPE_CHECKING:  # the opbench[tune] extra, imported where a study is opened
    import optuna

# Every version is a superset of the one before (results.py's history), so the report reads them all.
READABLE_SCHEMAS = tuple(range(1, SCHEMA_VERSION + 1))
STATUSES = tuple(s.value for s in Status)


class _Check:
    """Type and range checks of the fields the report and compare read, each failure naming the file and
    the field (`records[3].time.median_s`)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, message: str) -> UsageError:
        return UsageError(f"{self.path}: {where}: {message}")

    def table(self, value: object, where: str) -> dict[str, Any]:  # a JSON object, its values unchecked
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(where, f"expected an object, got {type(value).__name__}")
        return value

    def text(self, value: object, where: str) -> None:
        if value is not None and not isinstance(value, str):
            raise self.fail(where, f"expected a string, got {type(value).__name__}")

    def number(self, value: object, where: str, *, minimum: float = 0.0, strict: bool = True) -> None:
        """None, or a finite number > minimum (>= minimum when not strict)."""
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(where, f"expected a number, got {type(value).__name__}")
        if not math.isfinite(value) or value < minimum or (strict and value == minimum):
            relation = ">" if strict else ">="
            raise self.fail(where, f"{value!r} is not a valid value (a finite number {relation} {minimum:g})")

    def texts(self, value: object, where: str) -> None:
        if value is None:
            return
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(where, "expected a list of strings")

    def scalars(self, value: object, where: str) -> None:
        for k, v in self.table(value, where).items():
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float, str)):
                raise self.fail(f"{where}.{k}", f"expected a number or a string, got {type(v).__name__}")
            if isinstance(v, float) and not math.isfinite(v):
                raise self.fail(f"{where}.{k}", f"{v!r} is not a valid value")


def _check_document(doc: dict[str, Any], check: _Check) -> None:  # JSON as read
    for key in ("op", "flop_note", "mode", "created_utc"):
        check.text(doc.get(key), key)
    check.number(doc.get("scale"), "scale")
    check.text(check.table(doc.get("suite"), "suite").get("name"), "suite.name")
    m = check.table(doc.get("machine"), "machine")
    for key in ("cpu_model", "selected_isa", "opbench_version"):
        check.text(m.get(key), f"machine.{key}")
    check.text(
        check.table(m.get("kernel"), "machine.kernel").get("description"), "machine.kernel.description"
    )
    ident = check.table(m.get("identity"), "machine.identity")
    for key in ("vendor", "microarch", "cpu_model", "hypervisor"):
        check.text(ident.get(key), f"machine.identity.{key}")
    for key in ("family", "model", "stepping", "logical_cpus"):
        check.number(ident.get(key), f"machine.identity.{key}", strict=False)
    check.scalars(ident.get("caches"), "machine.identity.caches")
    check.texts(ident.get("isa_flags"), "machine.identity.isa_flags")
    env = check.table(doc.get("environment"), "environment")
    check.texts(env.get("warnings"), "environment.warnings")
    git = check.table(m.get("git"), "machine.git")
    check.text(git.get("sha"), "machine.git.sha")
    check.scalars(m.get("libraries"), "machine.libraries")
    settings = check.table(doc.get("settings"), "settings")
    check.number(settings.get("threads"), "settings.threads", minimum=1, strict=False)
    for dtype, entry in check.table(doc.get("peaks"), "peaks").items():
        for which in ("used", "datasheet"):
            where = f"peaks.{dtype}.{which}"
            peak = check.table(check.table(entry, f"peaks.{dtype}").get(which), where)
            if not peak:
                continue  # no peak of this kind: the report says so
            check.number(peak.get("gflops"), f"{where}.gflops")
            for key in ("gflops", "source", "name"):
                if peak.get(key) is None:
                    raise check.fail(f"{where}.{key}", "missing")
            check.text(peak.get("source"), f"{where}.source")
            check.text(peak.get("name"), f"{where}.name")
    bandwidth = check.table(doc.get("bandwidth"), "bandwidth")
    if bandwidth:
        check.number(bandwidth.get("gbs"), "bandwidth.gbs")
        check.text(bandwidth.get("source"), "bandwidth.source")
        for key in ("gbs", "source"):
            if bandwidth.get(key) is None:
                raise check.fail(f"bandwidth.{key}", "missing")
    for i, r in enumerate(doc["records"]):
        where = f"records[{i}]"
        for key in ("op", "label", "dtype", "backend", "status"):
            if not isinstance(r.get(key), str):
                raise check.fail(f"{where}.{key}", "expected a string")
        if r["status"] not in STATUSES:
            raise check.fail(f"{where}.status", f"expected one of {', '.join(STATUSES)}")
        check.text(r.get("reason"), f"{where}.reason")
        check.texts(r.get("flags"), f"{where}.flags")
        check.texts(r.get("notes"), f"{where}.notes")
        check.scalars(r.get("shape"), f"{where}.shape")
        check.scalars(r.get("factors"), f"{where}.factors")
        check.number(r.get("arithmetic_intensity"), f"{where}.arithmetic_intensity")
        check.number(r.get("flops"), f"{where}.flops", strict=False)
        check.number(r.get("min_bytes"), f"{where}.min_bytes", strict=False)
        check.number(r.get("machine_speed"), f"{where}.machine_speed")
        ref = check.table(r.get("reference"), f"{where}.reference")
        check.text(ref.get("basis"), f"{where}.reference.basis")
        for key in ("fma_gflops", "triad_gbs"):
            check.number(ref.get(key), f"{where}.reference.{key}")
        t = check.table(r.get("time"), f"{where}.time")
        check.text(t.get("stability"), f"{where}.time.stability")
        for key in ("iqr_s", "rel_iqr", "rel_iqr_within", "rel_spread_rounds"):
            check.number(t.get(key), f"{where}.time.{key}", strict=False)
        if r["status"] != "ok":
            continue
        # A measured case: its time and speed must be real numbers, or it cannot be reported or compared.
        check.number(t.get("median_s"), f"{where}.time.median_s")
        if t.get("median_s") is None:
            raise check.fail(f"{where}.time.median_s", "missing in a case with status ok")
        samples = t.get("samples_s")
        if samples is not None:
            if not isinstance(samples, list) or len(samples) > 1_000_000:
                raise check.fail(f"{where}.time.samples_s", "expected a list of times")
            for j, v in enumerate(samples):
                check.number(v, f"{where}.time.samples_s[{j}]")
        check.number(r.get("gflops"), f"{where}.gflops")
        if r.get("gflops") is None:
            raise check.fail(f"{where}.gflops", "missing in a case with status ok")
        check.number(r.get("utilization"), f"{where}.utilization", strict=False)


def _json_file(p: Path, what: str) -> Any:
    data = read_input(p, MAX_RESULTS_BYTES, what)
    try:
        # NaN and Infinity are read (they are not JSON, but other tools write them) so that the checks below
        # can name the record and field that holds one.
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UsageError(f"{p}: cannot read: not UTF-8 text ({e.reason})") from None
    except json.JSONDecodeError as e:
        raise UsageError(
            f"{p}: not JSON ({e.msg} at line {e.lineno}); give the .json file opbench sweep wrote"
        ) from None
    except RecursionError:
        raise UsageError(f"{p}: not an opbench sweep result (nested too deeply)") from None


def kind_of(path: str | Path) -> str | None:
    """The 'kind' of an opbench JSON file (opbench.sweep, opbench.ab), read with the usual checks."""
    doc = _json_file(Path(path), "results file (.json from opbench sweep or ab)")
    return doc.get("kind") if isinstance(doc, dict) else None


def load_ab(path: str | Path) -> AbResult:
    """An `opbench ab` document (kind opbench.ab, schema 1), refused with one line naming the file and the
    field when the report cannot use it."""
    p = Path(path)
    doc = _json_file(p, "A/B file (.json from opbench ab)")
    if not isinstance(doc, dict) or doc.get("kind") != "opbench.ab" or doc.get("schema_version") != 1:
        raise UsageError(f"{p}: not an opbench ab result of schema 1")
    check = _Check(p)
    for key in ("a", "b"):
        if not isinstance(doc.get(key), str):
            raise check.fail(key, "expected the side's name")
    check.number(doc.get("threshold"), "threshold", strict=False)
    check.number(doc.get("noise"), "noise", strict=False)
    rows = doc.get("rows")
    if not isinstance(rows, list):
        raise check.fail("rows", "missing or not a list")
    for i, r in enumerate(rows):
        where = f"rows[{i}]"
        if not isinstance(r, dict) or not {"op", "label", "dtype", "a", "b", "verdict"} <= set(r):
            raise check.fail(where, "not an A/B row")
        if r["verdict"] not in VERDICTS:
            raise check.fail(f"{where}.verdict", f"expected one of {', '.join(VERDICTS)}")
        check.number(r.get("speedup"), f"{where}.speedup")
        ci = r.get("speedup_ci")
        if ci is not None and (not isinstance(ci, list) or len(ci) != 2):
            raise check.fail(f"{where}.speedup_ci", "expected [low, high]")
        for side in ("a", "b"):
            s = check.table(r[side], f"{where}.{side}")
            check.number(s.get("median_s"), f"{where}.{side}.median_s")
            check.texts(s.get("flags"), f"{where}.{side}.flags")
    summary = check.table(doc.get("summary"), "summary")
    if not isinstance(summary.get("counts"), dict) or not isinstance(summary.get("fast_p"), dict):
        raise check.fail("summary", "expected counts and fast_p")
    doc["_path"] = str(p)
    return cast(AbResult, doc)  # checked above, field by field


def load_results(path: str | Path) -> ResultsDoc:
    """A sweep results document, with schema 1 files brought to schema 2's shape (gemm only, no factors).
    Refused with one line naming the file (and the record and field) when it is not a regular file under
    the size cap, not strict JSON, not an opbench sweep, or holds a value the report cannot use (a NaN,
    infinite, zero or negative time or GFLOPS)."""
    p = Path(path)
    doc = _json_file(p, "results file (.json from opbench sweep)")
    if not isinstance(doc, dict) or doc.get("kind") != "opbench.sweep":
        raise UsageError(f"{p}: not an opbench sweep result (no 'kind': 'opbench.sweep')")
    version = doc.get("schema_version")
    if version not in READABLE_SCHEMAS or isinstance(version, bool):
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
        r.setdefault("factors", dict(r.get("shape") or {}) if isinstance(r.get("shape"), dict) else {})
    _check_document(doc, _Check(p))
    doc.setdefault("mode", "product")
    doc.setdefault("suite", None)
    doc.setdefault("scale", None)
    doc.setdefault("bandwidth", None)
    doc["_path"] = str(p)
    return cast(ResultsDoc, doc)  # checked above, and each record again by Result.from_record


def load_studies(names: list[str], storage_url: str) -> tuple[list[PortfolioDoc], list[StudyDoc]]:
    """The studies named, each read once from the storage: a portfolio's document (tune --portfolio keeps
    it in a study of its own) or a single shape's study, each checked; in the order named."""
    portfolios: list[PortfolioDoc] = []
    studies: list[StudyDoc] = []
    for name in names:
        study = load_existing(name, storage_url)
        portfolio = _portfolio_doc(study, name)
        if portfolio is not None:
            portfolios.append(portfolio)
        else:
            studies.append(_study_doc(study, name))
    return portfolios, studies


def _portfolio_doc(study: optuna.Study, name: str) -> PortfolioDoc | None:
    """A portfolio study's document, checked; None where the study is a single shape's."""
    doc = study.user_attrs.get("portfolio")
    if doc is None:
        return None
    check = _Check(Path(f"study {name}"))
    table = check.table(doc, "portfolio")
    for key in ("speed", "default_speed", "measurements", "grid_cells"):
        check.number(table.get(key), f"portfolio.{key}", strict=False)
    check.number(table.get("k"), "portfolio.k")
    shapes = table.get("shapes")
    if not isinstance(shapes, list) or not isinstance(table.get("members"), list):
        raise check.fail("portfolio", "expected its shapes and members as lists")
    for i, row in enumerate(shapes):
        row = check.table(row, f"portfolio.shapes[{i}]")
        check.text(row.get("label"), f"portfolio.shapes[{i}].label")
        check.number(row.get("count"), f"portfolio.shapes[{i}].count")
        for key in ("speed", "default_speed"):
            check.number(row.get(key), f"portfolio.shapes[{i}].{key}", strict=False)
    for i, member in enumerate(table["members"]):
        if member is not None:  # None: the cache-model default
            check.scalars(member, f"portfolio.members[{i}]")
    return cast(PortfolioDoc, table)


def _study_doc(study: optuna.Study, name: str) -> StudyDoc:
    """A tuning study as plain data: fingerprint, trials (number, state, tiles, GFLOPS), confirmation."""
    check = _Check(Path(f"study {name}"))
    trials: list[TrialRow] = []
    for t in study.trials:
        check.number(t.user_attrs.get("gflops"), f"trial {t.number}: gflops")
        tiles = t.user_attrs.get("tiles")
        check.scalars(tiles, f"trial {t.number}: tiles")
        check.text(t.user_attrs.get("failure"), f"trial {t.number}: failure")
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
    confirmation = study.user_attrs.get("confirmation")
    if confirmation is not None:
        conf = check.table(confirmation, "confirmation")
        rows = conf.get("rows") or []
        if not isinstance(rows, list):
            raise check.fail("confirmation.rows", "expected a list")
        for i, row in enumerate([*rows, conf.get("best"), conf.get("default")]):
            row = check.table(row, f"confirmation.rows[{i}]")
            check.text(row.get("name"), f"confirmation.rows[{i}].name")
            check.scalars(row.get("tiles"), f"confirmation.rows[{i}].tiles")
            check.number(row.get("gflops"), f"confirmation.rows[{i}].gflops")
            ci = row.get("gflops_ci")
            if ci is not None and not (isinstance(ci, list) and len(ci) == 2):
                raise check.fail(f"confirmation.rows[{i}].gflops_ci", "expected [low, high]")
            for v in ci or []:
                check.number(v, f"confirmation.rows[{i}].gflops_ci")
        check.number(conf.get("speedup"), "confirmation.speedup")
    importances: dict[str, float] = {}
    try:
        # optuna is the opbench[tune] extra: imported where a study is opened (errors.missing_dependency)
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

"""oneDNN's own benchdnn batch files, read as they are (issue 44): how many lines opbench runs and skips, by
reason, and a full sweep of some of them.

    git clone --depth 1 https://github.com/oneapi-src/oneDNN   # not copied into opbench: fetched to try
    python benchmarks/benchdnn_inputs.py ONEDNN/tests/benchdnn/inputs
    python benchmarks/benchdnn_inputs.py ONEDNN/tests/benchdnn/inputs \
        --run conv/shapes_regression_dw,matmul/shapes_bert

Every file under conv/, matmul/ and rnn/ is read with batchfiles.read_batch (no file may be refused: a
line opbench does not run is skipped with its reason, a malformed one would refuse the file), and the
counts printed: files, problem lines run and skipped, skipped problems by reason, options ignored. With
--run, each named file is swept end to end by `opbench sweep OP --batch-file FILE` (our kernels and torch,
fp32, short timing) in a subprocess, and the exit code, cases measured and lines skipped are printed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from opbench import batchfiles
from opbench.errors import UsageError

DRIVERS = {"conv": "conv", "matmul": "gemm", "rnn": None}


def survey(root: Path) -> int:
    files = refused = 0
    lines: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    ignored: Counter[str] = Counter()
    nothing = []
    for driver in DRIVERS:
        for path in sorted((root / driver).iterdir()):
            if not path.is_file():
                continue
            files += 1
            try:
                batch = batchfiles.read_batch(path)
            except UsageError as e:
                refused += 1
                print(f"REFUSED {path.relative_to(root)}: {e}")
                continue
            s = batch.summary()
            lines.update(lines=s["lines"], run=s["lines_run"], skipped=s["lines_skipped"])
            lines.update(problems=len(batch.problems))
            kinds.update(s["skipped_by_kind"])
            ignored.update(s["ignored_options"])
            if not batch.problems:
                nothing.append(str(path.relative_to(root)))
    print(
        f"# {files} files under {', '.join(DRIVERS)}; {refused} refused; "
        f"{len(nothing)} with nothing opbench runs"
    )
    print(f"problem lines: {lines['lines']}, run {lines['run']}, skipped {lines['skipped']}")
    print(f"problems to run (every value of every option list): {lines['problems']}")
    print("skipped problems by reason: " + ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
    print("options ignored (times given): " + ", ".join(f"{k} {n}" for k, n in ignored.most_common()))
    return 1 if refused else 0


def run(root: Path, names: list[str]) -> int:
    worst = 0
    for name in names:
        path = root / name
        op = DRIVERS[name.split("/")[0]]  # rnn: the descriptors' --alg names the op
        with tempfile.TemporaryDirectory() as out:
            cmd = [sys.executable, "-m", "opbench", "sweep", *([op] if op else []), "--batch-file", str(path),
                   "--backend", "cpp,torch", "--dtype", "fp32", "--max-time-s", "0.05", "--rounds", "1",
                   "--out", out, "--quiet"]  # fmt: skip
            proc = subprocess.run(cmd, capture_output=True, text=True)
            docs = [json.loads(p.read_text()) for p in Path(out).glob("*.json")]
        worst = max(worst, proc.returncode)
        records = [r for d in docs for r in d["records"]]
        status = Counter(r["status"] for r in records)
        s = (docs[0]["suite"] or {}).get("lines") if docs else None
        skipped = f"{s['lines_skipped']} of {s['lines']} lines skipped {s['skipped_by_kind']}" if s else ""
        print(f"{name}: exit {proc.returncode}; records {dict(status)}; {skipped}")
        if proc.returncode:
            print(proc.stderr[-2000:])
    return worst


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", type=Path, help="oneDNN's tests/benchdnn/inputs")
    p.add_argument("--run", default="", help="files (DRIVER/NAME, comma-separated) to sweep end to end")
    args = p.parse_args()
    code = survey(args.inputs)
    if args.run:
        code = max(code, run(args.inputs, [n for n in args.run.split(",") if n]))
    return code


if __name__ == "__main__":
    raise SystemExit(main())

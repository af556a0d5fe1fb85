"""What verification catches and what it lets through, measured (issue 38). Four sections, each a table:

1. accumulation: what each backend sums fp16 and bf16 products in, read from its error: the largest
   err / bound of its outputs under the fp32-sum bound (<= 1: an fp32 sum rounded once) and under the
   dtype-sum bound. Backend.accumulate (and accumulate_ops) state what this finds.
2. false alarms: correct outputs checked against the bound of what each is assumed to sum in, counted, with
   the largest err / bound seen: ours, torch, TensorFlow and MindSpore in every dtype on the default suites
   and random odd shapes; ours with fp16 accumulation (the exact emulation, isa=ref); numpy emulations of
   sequential, pairwise and blocked sums in fp16, bf16 and fp32 (K 16 to 16,384), and of recurrent layers
   whose cells compute in fp16 or bf16. None may fail.
3. power: the smallest perturbation verification catches, for gemm, conv and the recurrent ops, forward and
   backward, each dtype and reduction length K from 64 to 16,384: one element moved (caught at whichever
   element it lands on, in units of max|answer|), one row scaled (the worst row), the whole answer scaled;
   under the default assumption (fp32 sums) and the declared fp16 and bf16 sums (--kernel-accumulate).
4. misses: the wrong answers of tests/wrong_answers.py (negated, halved, noise, rows moved, half the
   reduction, one element off by 10% of max|answer|) from a user kernel at every K and dtype; and through
   `opbench sweep --kernel` and `opbench ab`, kernels right on their first call only or that remember their
   first answer.

    python benchmarks/verification_power.py                 # every section (about 10 minutes, 2 cores)
    python benchmarks/verification_power.py --sections power,misses --quick
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from opbench import __version__
from opbench.backends import make_backend
from opbench.dtypes import NUMPY_DTYPES
from opbench.machine import cpu_model
from opbench.ops import assumed_accumulation, conv, conv_bwd, gemm, get_op, gru, lstm, recurrent_bwd, rnn
from opbench.ops.numerics import LAMBDA, tiny
from opbench.tiles import Tiles
from opbench.userkernel import as_output, call

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))
import wrong_answers  # noqa: E402  (tests/wrong_answers.py)
from emulations import emulated, recurrent_emulated  # noqa: E402  (tests/emulations.py)

DTYPES = ("fp32", "fp16", "bf16")
KS = (64, 256, 1024, 4096, 16384)
BACKENDS = ("cpp", "torch", "tensorflow", "mindspore")


def table(head: list[str], rows: list[list[Any]]) -> None:
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(str(c) for c in row) + " |")
    print()


def backends() -> dict[str, Any]:
    found = {}
    for name in BACKENDS:
        b = make_backend(name)
        if b.unavailable_reason() is None:
            b.setup(1, "cpu")
            found[name] = b
    return found


def conv_shape(c: int, size: int = 6, k: int = 8, n: int = 1, f: int = 3, groups: int = 1) -> Any:
    point = {"batch": n, "input_size": size, "in_channels": c, "out_channels": k, "filter_size": f}
    return conv.make_shape({**point, "groups": groups})


def recurrent_shape(module: Any, i: int, h: int = 32, t: int = 4, b: int = 3, relu: int = 0) -> Any:
    extra = {"relu": relu} if module is rnn.OP else {}
    return module.shape_from_case({"seq_len": t, "batch": b, "input_size": i, "hidden": h, **extra})


# --- 1. accumulation -------------------------------------------------------------------------------------


def section_accumulation(found: dict[str, Any]) -> None:
    print("## What each backend sums fp16 and bf16 products in\n")
    print("Largest err / bound of each backend's output under the bound of an fp32 sum rounded once to the")
    print("dtype, and under the bound of a sum in the dtype itself (over 1: not what it does).\n")
    cases = [
        ("gemm", gemm.GemmShape(37, 29, 1000)),
        ("gemm", gemm.GemmShape(16, 64, 4096)),
        ("gemm:bwd", gemm.GemmShape(37, 29, 1000)),
        ("conv", conv_shape(64, 14, 32, 2)),
        ("conv", conv_shape(32, 12, 32, groups=32)),
        ("conv:bwd", conv_shape(64, 14, 32, 2)),
        ("conv:bwd", conv_shape(256, 9, 16)),
    ]
    rows = []
    for key, shape in cases:
        op = get_op(key)
        for dtype in ("fp16", "bf16"):
            inputs = op.make_inputs(shape, dtype, 0)
            ref = op.reference(shape, inputs)
            for name, b in found.items():
                if b.unsupported_reason(key, dtype):
                    continue
                try:
                    out = b.prepare(key, shape, inputs, {}).output()
                except Exception as e:  # a framework without this path here
                    rows.append([key, shape.label(), dtype, name, f"error: {str(e)[:60]}", "", ""])
                    continue
                r32 = op.check(shape, out, inputs, ref, dtype, "fp32")["max_err_ratio"]
                rlow = op.check(shape, out, inputs, ref, dtype, dtype)["max_err_ratio"]
                rows.append([key, shape.label(), dtype, name, f"{r32:.3g}", f"{rlow:.3g}",
                             b.accumulation(key, dtype, "cpu")])  # fmt: skip
    table(["op", "shape", "dtype", "backend", "fp32 sums", "dtype sums", "assumed"], rows)


# --- 2. false alarms --------------------------------------------------------------------------------------


class Alarms:
    """Counts correct outputs checked and their largest err / bound, per source."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], list[float]] = {}
        self.worst: dict[tuple[str, str], str] = {}
        self.alarms: list[str] = []

    def add(self, source: str, assumed: str, ratio: float | None, what: str = "") -> None:
        value = np.inf if ratio is None else ratio
        row = self.rows.setdefault((source, assumed), [])
        if not row or value > max(row):
            self.worst[(source, assumed)] = what
        row.append(value)
        if value > 1.0:
            self.alarms.append(f"{source} ({assumed}): {what} err/bound {value:.3g}")

    def print(self) -> int:
        total = sum(len(v) for v in self.rows.values())
        alarms = sum(int(np.sum(np.asarray(v) > 1.0)) for v in self.rows.values())
        body = [
            [s, a, len(v), f"{max(v):.3g}", self.worst[(s, a)], int(np.sum(np.asarray(v) > 1.0))]
            for (s, a), v in sorted(self.rows.items())
        ]
        head = ["correct outputs from", "bound assumes", "outputs", "largest err/bound", "at", "false alarms"]
        table(head, body)
        print(f"**{total} correct outputs, {alarms} false alarms.**\n")
        for line in self.alarms:
            print(f"- false alarm: {line}")
        return alarms


def section_alarms(found: dict[str, Any], quick: bool) -> int:
    print("## False alarms on correct outputs\n")
    alarms = Alarms()
    rng = np.random.default_rng(0)
    batch = 40 if quick else 256
    # numpy emulations of low-precision sums: batches of small GEMMs at every K
    for k in (16, *KS):
        for precision, kind, block in (
            ("fp16", "seq", 0), ("bf16", "seq", 0), ("fp32", "seq", 0), ("fp16", "pair", 0),
            ("bf16", "pair", 0), ("fp16", "block", 32), ("fp16", "block", 256),
        ):  # fmt: skip
            if kind == "pair" and k > 4096:
                continue  # the pairwise tree's memory: S x M x K x N
            m = n = 4
            s = max(4, batch * 64 // k) if k > 1024 else batch
            a = rng.uniform(-1, 1, (s, m, k)).astype(NUMPY_DTYPES[precision])
            b = rng.uniform(-1, 1, (s, k, n)).astype(NUMPY_DTYPES[precision])
            out = emulated(a, b, kind, precision, block).astype(NUMPY_DTYPES[precision])
            assumed = f"{precision}:{block}" if kind == "block" else precision
            for i in range(s):
                shape = gemm.GemmShape(m, n, k)
                inputs = {"a": a[i], "b": b[i]}
                ref = gemm.reference(shape, inputs)
                r = gemm.check(shape, out[i], inputs, ref, precision, assumed)
                source = f"numpy emulation: {kind} sums in {precision}"
                alarms.add(source, assumed, r["max_err_ratio"], f"{shape.label()} #{i}")
    # recurrent layers with fp16 / bf16 cells (numpy emulation)
    for module in (lstm.OP, gru.OP, rnn.OP):
        for cells in ("fp16", "bf16"):
            for seed in range(6 if quick else 25):
                size, hidden = int(rng.choice([8, 64, 256])), int(rng.choice([16, 64, 128]))
                shape = recurrent_shape(module, size, hidden)
                inputs = module.make_inputs(shape, cells, seed)
                out = recurrent_emulated(module, shape, inputs, cells)
                r = module.check(shape, out, inputs, module.reference(shape, inputs), cells, f"{cells}-cells")
                source = f"numpy emulation: {module.name} cells in {cells}"
                alarms.add(source, f"{cells}-cells", r["max_err_ratio"], f"{shape.label()} seed {seed}")
    # ours with fp16 accumulation (the exact emulation of the AVX512-FP16 kernel)
    from opbench import kernels

    for k in KS:
        for tile_k in (64, 1024):
            for seed in range(3 if quick else 10):
                shape = gemm.GemmShape(int(rng.integers(1, 24)), int(rng.integers(1, 24)), k)
                inputs = gemm.make_inputs(shape, "fp16", seed)
                out = kernels.gemm(
                    inputs["a"],
                    inputs["b"],
                    tiles=Tiles(isa="ref", k=tile_k),
                    accumulate="fp16",
                )
                acc = f"fp16:{min(tile_k, k)}"
                r = gemm.check(shape, out, inputs, gemm.reference(shape, inputs), "fp16", acc)
                alarms.add(
                    "cpp, fp16 accumulation (isa=ref)",
                    "fp16:tile_k",
                    r["max_err_ratio"],
                    f"{shape.label()} {acc}",
                )
    # every backend: the default suites and random odd shapes
    cases: list[tuple[str, Any]] = [("gemm", s) for s in gemm.default_cases()]
    cases += [("conv", s) for s in conv.default_cases()] + [("lstm", s) for s in lstm.OP.default_cases()]
    odd = 6 if quick else 40
    for _ in range(odd):
        m, n, k = (int(x) for x in rng.choice([1, 2, 3, 5, 7, 13, 31, 64, 97, 257], size=3))
        cases.append(("gemm", gemm.GemmShape(m, n, int(rng.choice([k, 2039, 4999, 16381])))))
        cases.append(("gemm:bwd", gemm.GemmShape(m, n, k)))
        cases.append(("conv", conv_shape(int(rng.choice([1, 3, 17, 64])), int(rng.choice([3, 7, 9])),
                                         int(rng.choice([1, 5, 16])), int(rng.choice([1, 2])))))  # fmt: skip
        cases.append(("conv:bwd", conv_shape(int(rng.choice([1, 3, 17])), int(rng.choice([3, 7])), 5)))
        for module, relu in ((lstm.OP, 0), (gru.OP, 0), (rnn.OP, 0), (rnn.OP, 1)):
            i, h, t, b = (int(rng.choice(c)) for c in ([1, 7, 64], [1, 9, 32], [1, 3, 16], [1, 2, 5]))
            shape = recurrent_shape(module, i, h, t, b, relu)
            cases += [(module.name, shape), (f"{module.name}:bwd", shape)]
    for key, shape in cases:
        op = get_op(key)
        for dtype in DTYPES:
            inputs = op.make_inputs(shape, dtype, 1)
            ref = None
            for name, b in found.items():
                if b.unsupported_reason(key, dtype) or (name == "mindspore" and op.flops(shape) > 5e8):
                    continue
                try:
                    out = b.prepare(key, shape, inputs, {}).output()
                except Exception:
                    continue  # a path this framework lacks here (sweeps record it as skipped)
                ref = op.reference(shape, inputs) if ref is None else ref
                acc = b.accumulation(key, dtype, "cpu")
                result = op.check(shape, out, inputs, ref, dtype, acc)
                what = f"{key} {shape.label()} {dtype} (worst: {result.get('worst')})"
                alarms.add(f"{name} ({key.partition(':')[2] or 'fwd'})", acc, result["max_err_ratio"], what)
    return alarms.print()


# --- 3. power ---------------------------------------------------------------------------------------------


def smallest_caught(out: np.ndarray, ref: np.ndarray, bound: np.ndarray, rows: int) -> tuple[float, ...]:
    """(one element, one row, whole answer): the smallest perturbation the check catches wherever it lands:
    an element moved by e * max|ref| (caught at the element where it needs most), a row scaled by 1 + e
    (the worst row: rows = the leading axes' count), the whole answer scaled by 1 + e."""
    err = np.abs(out.astype(np.float64) - ref)
    need = bound + err  # a perturbation of the wrong sign must exceed this
    scale = float(np.max(np.abs(ref))) or 1.0
    one = float(np.max(need)) / scale
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(np.abs(ref) > 0, need / np.abs(ref), np.inf)
    per_row = rel.reshape(rows, -1).min(axis=1)
    return one, float(np.max(per_row)), float(np.min(rel))


def pct(x: float) -> str:
    return "never" if not np.isfinite(x) or x > 10 else f"{100 * x:.2g}%"


def power_cases(quick: bool) -> tuple[list[tuple[str, str, Callable[[int], Any]]], tuple[int, ...]]:
    """([(op key, what the reduction length is, its shape for reduction length K)], the Ks)."""
    ks = KS[::2] if quick else KS
    return [
        ("gemm", "K", lambda k: gemm.GemmShape(48, 40, k)),
        ("gemm:bwd", "M (dB's)", lambda k: gemm.GemmShape(k, 24, 24)),
        ("conv", "C x 3 x 3", lambda k: conv_shape(max(1, k // 9), 6, 8)),
        ("conv:bwd", "K x 3 x 3 (dx's)", lambda k: conv_shape(8, 6, max(1, k // 9))),
        ("lstm", "I + H + 2", lambda k: recurrent_shape(lstm.OP, max(1, k - 34), 32)),
        ("gru", "I + H + 2", lambda k: recurrent_shape(gru.OP, max(1, k - 34), 32)),
        ("rnn", "I + H + 2", lambda k: recurrent_shape(rnn.OP, max(1, k - 34), 32)),
        ("lstm:bwd", "I + H + 2", lambda k: recurrent_shape(lstm.OP, max(1, k - 34), 32)),
        ("rnn:bwd", "ReLU, T 16: I + H + 2", lambda k: recurrent_shape(rnn.OP, max(1, k - 34), 32, 16, 3, 1)),
    ], ks


def section_power(found: dict[str, Any], quick: bool) -> None:
    print("## Power: the smallest perturbation caught\n")
    print("One element: moved by this share of max|answer|, wherever it lands; one row: scaled by 1 + this")
    print("(the worst row: gemm's rows, conv's output planes, a recurrent output's batch rows); whole: the")
    print("answer scaled by 1 + this. Correct answers: ours (fp32 sums); under the declared dtype sums, the")
    print("same outputs against the looser bound.\n")
    cases, ks = power_cases(quick)
    rows = []
    for key, what, make in cases:
        op = get_op(key)
        base = key.partition(":")[0]
        for dtype in DTYPES:
            if key.endswith(":bwd") and dtype == "bf16":
                continue  # no bf16 backward passes yet
            for k in ks:
                shape = make(k)
                inputs = op.make_inputs(shape, dtype, 2)
                ref = op.reference(shape, inputs)
                out = found["cpp"].prepare(key, shape, inputs, {}).output()
                assumptions = ["fp32"] + ([dtype] if dtype != "fp32" else [])
                for assumed in assumptions:
                    acc = assumed
                    if base in ("rnn", "gru", "lstm") and ":" not in key and dtype != "fp32":
                        acc = f"{dtype}-cells" if assumed == "fp32" else assumed
                    outs, refs, (bounds, leads) = bound_arrays(key, shape, out, inputs, ref, dtype, acc)
                    caught = [
                        smallest_caught(*arrays) for arrays in zip(outs, refs, bounds, leads, strict=True)
                    ]
                    one, row, whole = (min(c[i] for c in caught) for i in range(3))
                    reduction = f"{what} = {op_k(key, shape)}"
                    rows.append([key, dtype, reduction, acc, pct(one), pct(row), pct(whole)])
    table(["op", "dtype", "reduction", "bound assumes", "one element", "one row", "whole"], rows)


def op_k(key: str, shape: Any) -> int:
    base = key.partition(":")[0]
    if base == "gemm":
        return shape.k if key == "gemm" else shape.m
    if base == "conv":
        return (shape.c if key == "conv" else shape.k) * shape.r * shape.s
    return shape.input_size + shape.hidden + 2


def bound_arrays(
    key: str, shape: Any, out: Any, inputs: dict[str, np.ndarray], ref: Any, dtype: str, acc: str
) -> tuple[list[np.ndarray], list[np.ndarray], tuple[list[np.ndarray], list[int]]]:
    """Each output array, its reference and bound (what the op's check compares), and its row count."""
    if key == "gemm":
        return [np.asarray(out)], [ref], ([gemm.error_bound(inputs, ref, acc, dtype)], [shape.m])
    if key == "conv":
        bound = conv.error_bound(shape, inputs, ref, acc, dtype)
        return [np.asarray(out)], [ref], ([bound], [shape.n * shape.k])
    if key == "gemm:bwd":
        a, b, dc = (inputs[n].astype(np.float64) for n in ("a", "b", "dc"))
        da_bound = gemm.product_bound(dc, b.T, ref["da"], acc, dtype)
        db_bound = gemm.product_bound(a.T, dc, ref["db"], acc, dtype)
        outs = [np.asarray(out[0]), np.asarray(out[1])]
        return outs, [ref["da"], ref["db"]], ([da_bound, db_bound], [shape.m, shape.k])
    if key == "conv:bwd":
        bd = conv_bwd.gradient_bounds(shape, inputs, ref, acc, dtype)
        outs = [np.asarray(out[0]), np.asarray(out[1])]
        return outs, [ref["dx"], ref["dw"]], ([bd["dx"], bd["dw"]], [shape.n * shape.c, shape.k])
    if key.endswith(":bwd"):
        names = recurrent_bwd.GRAD_NAMES[: len(ref["grads"])]
        bd = recurrent_bwd.grad_bounds(shape, ref, dtype, acc, names)
        outs = [np.asarray(o) for o in out]
        return outs, [ref["grads"][n] for n in names], ([bd[n] for n in names], [o.shape[0] for o in outs])
    y = np.asarray(out[0])
    scales = ref.scales(acc)
    return [y], [ref.outputs["y"]], ([LAMBDA * scales["y"] + tiny(dtype)], [shape.seq_len * shape.batch])


# --- 4. misses --------------------------------------------------------------------------------------------

KINDS = ("neg", "half", "noise", "perm", "trunc", "one", "one_any")


def section_misses(quick: bool) -> int:
    print("## Misses: wrong answers that pass\n")
    print(
        "A user kernel's wrong answers of each kind (tests/wrong_answers.py), first call checked, bound for"
    )
    print("fp32 sums (the default); a cell lists the kinds that passed.\n")
    ks = KS[::2] if quick else KS
    rows, missed = [], 0
    for key, _, make in power_cases(quick)[0]:
        if key.endswith(":bwd"):
            continue
        op = get_op(key)
        func = getattr(wrong_answers, key)
        for dtype in DTYPES:
            passed: dict[int, list[str]] = {}
            for k in ks:
                shape = make(k)
                inputs = op.make_inputs(shape, dtype, 3)
                ref = op.reference(shape, inputs)
                acc = assumed_accumulation(key, dtype, "fp32", True)
                kinds = KINDS + (("forget_whh", "halved") if key in ("lstm", "gru", "rnn") else ())
                for kind in kinds:
                    out = call(key, func, shape, inputs, {"kind": kind})
                    if op.check(shape, as_output(key, out), inputs, ref, dtype, acc)["ok"]:
                        passed.setdefault(k, []).append(kind)
                        missed += 1
            rows.append([key, dtype, *(", ".join(passed.get(k, [])) or "none" for k in ks)])
    table(["op", "dtype", *(f"K ~ {k}" for k in ks)], rows)
    missed += timed_misses(quick)
    print(f"**{missed} wrong answers passed.**\n")
    return missed


def timed_misses(quick: bool) -> int:
    """Kernels right on their first call only, or remembering their first answer, through the CLI."""
    rows, missed = [], 0
    spec = str(TESTS / "wrong_answers.py")
    runs = [
        ("gemm", ["--m", "48", "--n", "40", "--k", "1024"], "gemm"),
        (
            "conv",
            ["--batch", "1", "--input-size", "6", "--in-channels", "114", "--out-channels", "8"],
            "conv",
        ),
        ("lstm", ["--batch", "3", "--seq-len", "4", "--input-size", "256", "--hidden", "32"], "lstm"),
    ]
    dtypes = ("fp16",) if quick else DTYPES
    with tempfile.TemporaryDirectory() as out:
        for op, dims, func in runs:
            for dtype in dtypes:
                for kind in ("first_only", "memo"):
                    for how in ("sweep", "ab"):
                        right, wrong = f"{spec}:{func}:kind=right", f"{spec}:{func}:kind={kind}"
                        where = Path(out) / f"{op}-{dtype}-{kind}-{how}"
                        if how == "sweep":
                            cmd = ["sweep", op, *dims, "--backend", f"kernel:{func}", "--kernel",
                                   f"{spec}:{func}", "--kernel-params", f"kind={kind}"]  # fmt: skip
                        else:
                            cmd = ["ab", op, *dims, "--a", right, "--b", wrong]
                        cmd += [
                            "--dtype",
                            dtype,
                            "--rounds",
                            "2",
                            "--quiet",
                            "--out",
                            str(where),
                            "--max-time-s",
                            "0.3",
                        ]
                        proc = subprocess.run([sys.executable, "-m", "opbench", *cmd], capture_output=True,
                                              text=True, timeout=600)  # fmt: skip
                        found = sorted(where.glob(f"{op}-*.json"))
                        doc = json.loads(found[-1].read_text()) if found else {"records": []}
                        mine = [r for r in doc["records"] if r["backend"] in (wrong, f"kernel:{func}")]
                        status = mine[-1]["status"] if mine else f"no record (exit {proc.returncode})"
                        missed += status != "wrong_answer"
                        rows.append([op, dtype, kind, f"opbench {how}", status])
    table(["op", "dtype", "kernel", "through", "status"], rows)
    return missed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sections", default="accumulation,alarms,power,misses")
    p.add_argument("--quick", action="store_true", help="fewer outputs and K values (a smoke run)")
    args = p.parse_args()
    sections = set(args.sections.split(","))
    print(f"# Verification power, opbench {__version__}, {cpu_model()}\n")
    found = backends()
    print(f"backends: {', '.join(f'{n} {b.version()}' for n, b in found.items())}\n")
    bad = 0
    if "accumulation" in sections:
        section_accumulation(found)
    if "alarms" in sections:
        bad += section_alarms(found, args.quick)
    if "power" in sections:
        section_power(found, args.quick)
    if "misses" in sections:
        bad += section_misses(args.quick)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

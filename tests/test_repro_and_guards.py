"""Every record's repro command (repro.py) measures that case again and no other; the guards against
results too good to be true (sweep/visits.py): mistrusted outputs (too many exact zeros) and suspect results
(above the unit's peak, counting only the FLOPs a padding-skipping conv must do, or over 10x the best peer).
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest

from opbench import guards
from opbench.blocks import Time
from opbench.case import Case, Outcome, Result
from opbench.measure import Visit
from opbench.measurement import Measurement
from opbench.ops import conv, conv_bwd, gemm, get_op, op_key
from opbench.sweep import caseresult
from opbench.sweep.caserun import CaseRun
from tests.conftest import FAST_TIMER, run_cli


def _sweep(args: list[str], out: Path) -> dict:
    proc = run_cli(["sweep", *args, "--out", str(out), *FAST_TIMER, "--quiet"])
    assert proc.returncode == 0, proc.stderr
    (path,) = out.glob("*.json")
    return dict(json.loads(path.read_text()))


def test_the_repro_of_a_record_measures_that_case_and_no_other(tmp_path: Path) -> None:
    doc = _sweep(
        ["gemm", "--m", "5,17,31", "--n", "9", "--k", "13", "--dtype", "fp32", "--backend", "cpp,numpy",
         "--threads", "1", "--seed", "7"],
        tmp_path / "all",
    )  # fmt: skip
    (rec,) = [r for r in doc["records"] if r["backend"] == "cpp" and r["shape"]["m"] == 17]
    argv = shlex.split(rec["repro"])
    assert argv[:5] == ["opbench", "sweep", "gemm", "--problem", "17x13:13x9"]
    assert "--seed" in argv and argv[argv.index("--seed") + 1] == "8"  # the inputs of shape 1 of seed 7
    for flag in ("--tile-m", "--tile-n", "--tile-k", "--isa", "--threads", "--dtype"):
        assert flag in argv
    again = _sweep(argv[2:], tmp_path / "again")
    (one,) = again["records"]
    for key in ("op", "label", "dtype", "backend", "threads", "shape"):
        assert one[key] == rec[key]
    # the same inputs, tiles and kernel: the same output, so the same error against float64
    assert one["verify"]["max_rel_err"] == rec["verify"]["max_rel_err"]
    assert one["details"]["tiles"] == rec["details"]["tiles"]
    assert one["repro"] == rec["repro"]  # a repro reproduces itself


def test_repro_of_conv_rnn_and_user_kernels(tmp_path: Path) -> None:
    kernel = tmp_path / "mine.py"
    kernel.write_text("import numpy as np\ndef mm(a, b, scale=1):\n    return (a @ b) * scale\n")
    doc = _sweep(
        ["gemm", "--m", "3", "--n", "4", "--k", "5", "--dtype", "fp32", "--backend", "numpy",
         "--kernel", f"{kernel}:mm", "--kernel-params", "scale=1"],
        tmp_path / "k",
    )  # fmt: skip
    (rec,) = [r for r in doc["records"] if r["backend"] == "kernel:mm"]
    argv = shlex.split(rec["repro"])
    assert argv[argv.index("--kernel") + 1] == f"{kernel}:mm"
    assert argv[argv.index("--kernel-params") + 1] == "scale=1"
    (one,) = _sweep(argv[2:], tmp_path / "k2")["records"]
    assert (one["backend"], one["status"]) == ("kernel:mm", "ok")

    doc = _sweep(
        ["rnn", "--hidden", "8", "--seq-len", "3", "--batch", "2", "--input-size", "5",
         "--nonlinearity", "relu", "--dtype", "fp32", "--backend", "cpp"],
        tmp_path / "rnn",
    )  # fmt: skip
    argv = shlex.split(doc["records"][0]["repro"])
    assert argv[argv.index("--nonlinearity") + 1] == "relu"
    (one,) = _sweep(argv[2:], tmp_path / "rnn2")["records"]
    assert one["shape"] == doc["records"][0]["shape"]


def test_a_kernel_returning_zeros_is_mistrusted(tmp_path: Path) -> None:
    kernel = tmp_path / "lazy.py"
    kernel.write_text(
        "import numpy as np\ndef mm(a, b):\n    return np.zeros((a.shape[0], b.shape[1]), a.dtype)\n"
    )
    base = ["gemm", "--m", "16", "--n", "16", "--k", "16", "--dtype", "fp32", "--backend", "numpy",
            "--kernel", f"{kernel}:mm"]  # fmt: skip
    # verified, the zeros are a wrong answer; unverified (over the cost cap, or --no-verify) they are timed,
    # and flagged
    doc = _sweep(base, tmp_path / "v")
    (lazy,) = [r for r in doc["records"] if r["backend"] == "kernel:mm"]
    assert lazy["status"] == "wrong_answer"
    for extra, name in ((["--verify-max-gflop", "1e-9"], "cap"), (["--no-verify"], "off")):
        doc = _sweep([*base, *extra], tmp_path / name)
        by = {r["backend"]: r for r in doc["records"]}
        assert by["kernel:mm"]["status"] == "ok"
        assert "mistrusted" in by["kernel:mm"]["flags"], by["kernel:mm"]
        assert by["kernel:mm"]["guards"]["zero_fraction"] == 1.0
        assert any(
            n.startswith("mistrusted: 100% of the output is exactly zero") for n in by["kernel:mm"]["notes"]
        )
        assert "mistrusted" not in by["numpy"]["flags"]


def test_relu_zeros_are_expected_not_mistrusted(tmp_path: Path) -> None:
    doc = _sweep(
        ["rnn", "--hidden", "32", "--seq-len", "4", "--batch", "8", "--nonlinearity", "relu",
         "--dtype", "fp32", "--backend", "cpp"],
        tmp_path / "relu",
    )  # fmt: skip
    (rec,) = doc["records"]
    assert 0.2 < rec["guards"]["zero_fraction"] < 0.8 and rec["guards"]["expected_zero_fraction"] == 0.5
    assert "mistrusted" not in rec["flags"]


@pytest.mark.parametrize(
    "shape",
    [
        conv.ConvShape(1, 4, 1, 48, 4, 1, 1, stride_w=4),  # a stride longer than the filter: dx has gaps
        conv.ConvShape(1, 3, 10, 7, 2, 5, 5, pad_h=7, pad_w=7),  # padding past the filter: outputs of padding
        conv.ConvShape(2, 3, 11, 9, 4, 3, 2, stride_h=3, stride_w=2, pad_h=0, pad_w=1, pad_h_end=2),
        conv.ConvShape(1, 2, 6, 6, 2, 3, 3, pad_h=4, pad_w=0, pad_h_end=0, dil_h=2),
        conv.ConvShape(2, 3, 9, 9, 4, 3, 3, pad_h=1, pad_w=1),  # none
    ],
)
def test_a_convs_structural_zeros_are_expected(shape: conv.ConvShape) -> None:
    """The exact zeros of a conv's float64 output and gradients with random inputs are the share that
    expected_zero_fraction allows for, so the mistrusted guard flags only what a kernel left out."""
    inputs = conv.make_inputs(shape, "fp32", 3)
    assert guards.zero_fraction(conv.reference(shape, inputs)) == pytest.approx(
        conv.expected_zero_fraction(shape)
    )
    back = conv_bwd.make_inputs(shape, "fp32", 3)
    ref = conv_bwd.reference(shape, back)
    assert guards.zero_fraction(ref) == pytest.approx(conv_bwd.expected_zero_fraction(shape))
    # the guard asks the op of the case's pass; gradients with a further 31% of zeros are mistrusted
    for pass_name, output in (("fwd", conv.reference(shape, inputs)), ("bwd", ref)):
        seen = guards.zeros_guard(
            Case(get_op(op_key("conv", pass_name)), shape, "fp32", "cpp", 1, "cpu"), output
        )
        assert not seen.reasons, seen
    lazy = {"dx": ref["dx"], "dw": np.zeros_like(ref["dw"])}
    dx_share = ref["dx"].size / (ref["dx"].size + ref["dw"].size)
    if (1 - dx_share) - conv_bwd.expected_zero_fraction(shape) * (1 - dx_share) > guards.MISTRUST_ZEROS:
        seen = guards.zeros_guard(Case(conv_bwd.OP, shape, "fp32", "cpp", 1, "cpu"), lazy)
        assert seen.reasons is not None and seen.reasons[0].startswith("mistrusted"), seen


def test_zero_fraction_reads_nested_outputs() -> None:
    y = np.zeros((2, 3), np.float32)
    assert guards.zero_fraction((y, (np.ones(2), np.ones(2)))) == 6 / 10
    assert guards.zero_fraction({"dx": np.ones(4), "dw": np.zeros(4)}) == 0.5
    assert guards.zero_fraction(None) is None


def _fake_case(shape: object, op: str, seconds: float) -> CaseRun:
    """A case timed with a fake clock: every sample took `seconds` per call."""
    case = CaseRun(0, 0, Case(get_op(op), shape, "fp32", "cpp", 1, "cpu"))
    case.visits.append(Visit(Measurement((seconds,) * 5, 1)))
    return case


PEAK = {"gflops": 100.0, "source": "measured", "name": "fp32 FMA peak (fake)"}


def test_above_the_units_peak_is_suspect() -> None:
    shape = gemm.GemmShape(100, 100, 100)  # 2 MFLOP
    fine = caseresult.case_result(_fake_case(shape, "gemm", 2e6 / 90e9), PEAK)  # 90 GFLOPS
    assert "suspect" not in fine.flags and abs(fine.utilization - 0.9) < 1e-9
    fast = caseresult.case_result(_fake_case(shape, "gemm", 2e6 / 120e9), PEAK)  # 120 GFLOPS
    assert "suspect" in fast.flags
    assert any("120% of the fp32 FMA peak (fake)" in n for n in fast.notes)


def test_a_padding_skipping_conv_is_judged_on_the_flops_it_must_do() -> None:
    # a 3x3 filter on a 2x2 image with padding 1: 4 of the 9 taps of each output are inside the image
    shape = conv.ConvShape(1, 64, 2, 2, 64, 3, 3, pad_h=1, pad_w=1)
    assert conv.useful_flops(shape) / conv.flops(shape) == 4 / 9
    counted_150 = conv.flops(shape) / 150e9  # 150 GFLOPS counted, 67 GFLOPS of necessary work
    result = caseresult.case_result(_fake_case(shape, "conv", counted_150), PEAK)
    assert result.utilization > 1.0 and "suspect" not in result.flags
    assert result.guards is not None and abs((result.guards.useful_gflops or 0) - 150 * 4 / 9) < 1e-6
    counted_250 = conv.flops(shape) / 250e9  # 111 GFLOPS of necessary work: over the peak
    assert "suspect" in caseresult.case_result(_fake_case(shape, "conv", counted_250), PEAK).flags


def _timed(backend: str, seconds: float) -> Result:
    case = Case(gemm.OP, gemm.GemmShape(8, 8, 8), "fp32", backend, 1, "cpu")
    return Result.of(case, Outcome(), time=Time(median_s=seconds))


def test_ten_times_the_best_peer_is_suspect() -> None:
    results = guards.peer_guard([_timed("cpp", 0.9e-3), _timed("torch", 1e-3), _timed("mine", 0.05e-3)])
    by = {r.case.backend: r for r in results}
    mine = by["mine"].guards
    assert "suspect" in by["mine"].flags and mine is not None and mine.peer == "cpp"
    assert mine.peer_speedup == 18.0
    assert "suspect" not in by["cpp"].flags and "suspect" not in by["torch"].flags
    assert [r.case.backend for r in guards.peer_guard([_timed("alone", 1e-9)])] == ["alone"]
    # a peer that leaves the hardware idle (flagged slow) is no measure of what is plausible
    idle = Result.of(Case(gemm.OP, gemm.GemmShape(8, 8, 8), "fp32", "idle", 1, "cpu"), Outcome(),
                     time=Time(median_s=1.0), flags=("slow",))  # fmt: skip
    fine = {r.case.backend: r for r in guards.peer_guard([_timed("fast", 1e-3), idle])}
    assert "suspect" not in fine["fast"].flags


def test_the_sweep_cli_prints_repro_lines_with_verbose(tmp_path: Path) -> None:
    proc = run_cli(
        ["sweep", "--problem", "5x7:7x3", "--dtype", "fp32", "--backend", "numpy", "--verbose",
         "--out", str(tmp_path), *FAST_TIMER]
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if "--problem 5x7:7x3" in x]
    # the repro names the command a user types, not the interpreter that ran this one
    label, _, command = line.partition(": ")
    assert label.split() == ["5x3x7", "fp32", "numpy"], line
    assert command.startswith("opbench sweep gemm --problem 5x7:7x3 --dtype fp32 --backend numpy"), line
    assert sys.executable not in line and " -m opbench" not in line, line

"""Verification that cannot be fooled (issue 38): every kind of wrong answer fails the check at short and long
reductions in every dtype, for gemm, conv and the recurrent ops, forward and backward; correct low-precision
answers (numpy emulations of sequential, pairwise and blocked sums, recurrent cells in fp16 and bf16) pass;
the check of a timed call's output (spot_check) catches a stale answer in every op; a kernel that remembers
its first answer, or is right on its first call only, is a wrong answer through a sweep.

Each wrong-answer case here passed the bound opbench had before (gamma_K capped at 1 times sum|products|, and
the output's rounding on sum|products| instead of |C|), in fp16 and bf16."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import wrong_answers
from conftest import FAST_TIMER, import_or_skip, run_cli
from emulations import emulated, recurrent_emulated

from opbench.ops import assumed_accumulation, conv, gemm, get_op, gru, lstm, rnn
from opbench.ops.numerics import dot_bound, gamma
from opbench.ops.spot import refreshed
from opbench.userkernel import as_output, call

DTYPES = ("fp32", "fp16", "bf16")
KINDS = ("neg", "half", "noise", "perm", "trunc", "one", "one_any")


def conv_shape(c: int) -> conv.ConvShape:
    return conv.make_shape(
        {"batch": 1, "input_size": 6, "in_channels": c, "out_channels": 8, "filter_size": 3}
    )


def recurrent(module: Any, i: int) -> Any:
    extra = {"relu": 0} if module is rnn.OP else {}
    return module.shape_from_case({"seq_len": 4, "batch": 3, "input_size": i, "hidden": 32, **extra})


# op, short K, long K: K = 64 and 16,384 (gemm: K; conv: C x 3 x 3; recurrent: I + H + 2)
SHAPES = {
    "gemm": (gemm.GemmShape(48, 40, 64), gemm.GemmShape(48, 40, 16384)),
    "conv": (conv_shape(7), conv_shape(1820)),
    "lstm": (recurrent(lstm.OP, 30), recurrent(lstm.OP, 16350)),
    "gru": (recurrent(gru.OP, 30), recurrent(gru.OP, 16350)),
    "rnn": (recurrent(rnn.OP, 30), recurrent(rnn.OP, 16350)),
}


@pytest.fixture(scope="module")
def references() -> dict[tuple[str, int, str], tuple[Any, dict[str, np.ndarray], Any]]:
    """(op, short or long, dtype) -> (shape, inputs, float64 reference), made once."""
    out = {}
    for op, shapes in SHAPES.items():
        module = get_op(op)
        for which, shape in enumerate(shapes):
            for dtype in DTYPES:
                inputs = module.make_inputs(shape, dtype, 7)
                out[(op, which, dtype)] = (shape, inputs, module.reference(shape, inputs))
    return out


def _answer(op: str, shape: Any, inputs: dict[str, np.ndarray], kind: str) -> Any:
    return as_output(op, call(op, getattr(wrong_answers, op), shape, inputs, {"kind": kind}))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("which", [0, 1], ids=["K64", "K16384"])
@pytest.mark.parametrize("op", sorted(SHAPES))
def test_every_wrong_answer_fails_and_the_right_one_passes(
    op: str, which: int, dtype: str, references: dict[Any, Any]
) -> None:
    shape, inputs, ref = references[(op, which, dtype)]
    module = get_op(op)
    acc = assumed_accumulation(op, dtype, "fp32", True)  # a user kernel's default
    right = module.check(shape, _answer(op, shape, inputs, "right"), inputs, ref, dtype, acc)
    assert right["ok"], right
    kinds = KINDS + (("forget_whh", "halved") if op in ("lstm", "gru", "rnn") else ())
    passed = [
        k for k in kinds if module.check(shape, _answer(op, shape, inputs, k), inputs, ref, dtype, acc)["ok"]
    ]
    assert not passed, f"{op} {shape.label()} {dtype}: {passed} passed verification"


# The recurrent backward passes at T = 16 (where the ReLU RNN's bound used to be its worst case, which let
# negated gradients pass even in fp32), each gradient made wrong alone; the bound of a fused kernel (fp32
# sums, ours). Every wrong answer fails in fp32; negated and halved ones in fp16 (a correct fp16 answer may
# be several percent off where a ReLU unit near 0 switches).
BACKWARD_WRONGS: dict[str, Any] = {
    "neg": lambda g: -g,
    "half": lambda g: 0.5 * g,
    "x1.1": lambda g: 1.1 * g,
    "one": lambda g: g + 0.1 * np.abs(g).max() * (np.arange(g.size).reshape(g.shape) == np.abs(g).argmax()),
}


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("op", ["rnn", "rnn relu", "gru", "lstm"])
def test_every_wrong_gradient_of_a_recurrent_backward_fails(op: str, dtype: str) -> None:
    from opbench.dtypes import NUMPY_DTYPES
    from opbench.ops import recurrent_bwd

    name, _, relu = op.partition(" ")
    module = get_op(f"{name}:bwd")
    extra = {"relu": int(bool(relu))} if name == "rnn" else {}
    shape = module.shape_from_case({"seq_len": 16, "batch": 4, "input_size": 64, "hidden": 64, **extra})
    inputs = module.make_inputs(shape, dtype, 3)
    ref = module.reference(shape, inputs)
    names = recurrent_bwd.GRAD_NAMES[: len(ref["grads"])]
    right = [ref["grads"][n].astype(NUMPY_DTYPES[dtype]) for n in names]
    assert module.check(shape, tuple(right), inputs, ref, dtype, "fp32")["ok"]
    kinds = ("neg", "half", "x1.1", "one") if dtype == "fp32" else ("neg", "half")
    passed = []
    for i, n in enumerate(names):
        for kind in kinds:
            bad = BACKWARD_WRONGS[kind](ref["grads"][n]).astype(right[i].dtype)
            wrong = [*right[:i], bad, *right[i + 1 :]]
            if module.check(shape, tuple(wrong), inputs, ref, dtype, "fp32")["ok"]:
                passed.append(f"{n} {kind}")
    assert not passed, f"{op}:bwd {shape.label()} {dtype}: {passed} passed verification"


def _old_gemm_bound(inputs: dict[str, np.ndarray], accumulate: str, dtype: str) -> np.ndarray:
    """The bound opbench had before issue 38, for the record: gamma_K capped at 1, the output's rounding on
    sum|products|."""
    from opbench.dtypes import UNIT_ROUNDOFF

    magnitude = np.abs(inputs["a"].astype(np.float64)) @ np.abs(inputs["b"].astype(np.float64))
    g = gamma(inputs["a"].shape[1], UNIT_ROUNDOFF[accumulate])
    return (g + UNIT_ROUNDOFF[dtype] * (1 + g)) * magnitude


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_the_old_bound_passed_these_wrong_answers_and_the_new_one_does_not(dtype: str) -> None:
    shape = gemm.GemmShape(48, 40, 8192)
    inputs = gemm.make_inputs(shape, dtype, 3)
    ref = gemm.reference(shape, inputs)
    new = gemm.error_bound(inputs, ref, "fp32", dtype)  # fp32 sums: a user kernel's default now
    old = _old_gemm_bound(inputs, dtype, dtype)  # its dtype's sums: a user kernel's default then
    for kind in ("neg", "half", "noise", "trunc"):
        err = np.abs(_answer("gemm", shape, inputs, kind).astype(np.float64) - ref)
        assert np.all(err <= old), kind  # the old bound: any answer of the right magnitude
        assert np.any(err > new), kind


# --- false alarms: correct low-precision answers ----------------------------------------------------------


EMULATED = [
    (precision, kind, block, k)
    for precision, kind, block in (
        ("fp16", "seq", 0),
        ("bf16", "seq", 0),
        ("fp32", "seq", 0),
        ("fp16", "pair", 0),
        ("bf16", "pair", 0),
        ("fp16", "block", 64),
    )
    for k in (1, 7, 64, 1000, 8192)
    if kind != "pair" or k <= 1000  # the pairwise emulation's memory grows with K; 1000 shows its error
]


@pytest.mark.parametrize(("precision", "kind", "block", "k"), EMULATED)
def test_emulated_low_precision_sums_pass_the_bound_they_declare(
    precision: str, kind: str, block: int, k: int
) -> None:
    rng = np.random.default_rng(k)
    batch, m, n = (12, 5, 3) if k > 1000 else (40, 5, 3)
    a = rng.uniform(-1, 1, (batch, m, k)).astype(wrong_answers_dtype(precision))
    b = rng.uniform(-1, 1, (batch, k, n)).astype(wrong_answers_dtype(precision))
    out = emulated(a, b, kind, precision, block).astype(wrong_answers_dtype(precision))
    acc = f"{precision}:{block}" if kind == "block" else precision
    worst = 0.0
    for i in range(batch):
        shape, inputs = gemm.GemmShape(m, n, k), {"a": a[i], "b": b[i]}
        result = gemm.check(shape, out[i], inputs, gemm.reference(shape, inputs), precision, acc)
        assert result["ok"], (i, result)
        worst = max(worst, result["max_err_ratio"])
    assert worst > 0 or k == 1  # the emulation does round


def wrong_answers_dtype(name: str) -> Any:
    from opbench.dtypes import NUMPY_DTYPES

    return NUMPY_DTYPES[name]


def test_a_sequential_fp16_sum_fails_the_fp32_bound_it_does_not_declare() -> None:
    """The declared accumulation matters: the same correct fp16-summed answer is wrong for fp32 sums."""
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (1, 5, 4096)).astype(np.float16)
    b = rng.uniform(-1, 1, (1, 4096, 3)).astype(np.float16)
    out = emulated(a, b, "seq", "fp16").astype(np.float16)[0]
    shape, inputs = gemm.GemmShape(5, 3, 4096), {"a": a[0], "b": b[0]}
    ref = gemm.reference(shape, inputs)
    assert gemm.check(shape, out, inputs, ref, "fp16", "fp16")["ok"]
    assert not gemm.check(shape, out, inputs, ref, "fp16", "fp32")["ok"]


@pytest.mark.parametrize("cells", ["fp16", "bf16"])
@pytest.mark.parametrize("module", [lstm.OP, gru.OP, rnn.OP], ids=lambda m: m.name)
def test_recurrent_layers_with_half_precision_cells_pass_their_bound(module: Any, cells: str) -> None:
    for seed, (i, h) in enumerate(((8, 16), (64, 64), (256, 128))):
        shape = module.shape_from_case(
            {
                "seq_len": 6,
                "batch": 3,
                "input_size": i,
                "hidden": h,
                **({"relu": 0} if module is rnn.OP else {}),
            }
        )
        inputs = module.make_inputs(shape, cells, seed)
        out = recurrent_emulated(module, shape, inputs, cells)
        ref = module.reference(shape, inputs)
        result = module.check(shape, out, inputs, ref, cells, f"{cells}-cells")
        assert result["ok"], (shape.label(), result)
        assert result["max_err_ratio"] > 0.005  # the emulation rounds, and the bound is not loose by far


def test_the_bound_is_tight_where_the_worst_case_is_and_statistical_beyond() -> None:
    value, magnitude, squares = np.array([0.3]), np.array([1.0]), np.array([0.5])
    # K = 2 in fp32: the worst case (gamma_2 u) is the smaller; at K = 16,384 in fp16 the statistical one
    short = dot_bound(value, magnitude, squares, 2, "fp32", "fp32")[0]
    assert short < 4 * 2.0**-24
    k = 16384
    long_value, long_mag, long_sq = np.array([42.0]), np.array([k / 4]), np.array([k / 9])
    stat = dot_bound(long_value, long_mag, long_sq, k, "fp16", "fp16")[0]
    assert stat < 0.5 * gamma(k, 2.0**-11) * long_mag[0]


# --- the check of a timed call's output -------------------------------------------------------------------

SPOT_CASES = {
    "gemm": gemm.GemmShape(37, 23, 129),
    "gemm:bwd": gemm.GemmShape(19, 11, 40),
    "conv": conv.make_shape(
        {"batch": 3, "input_size": 7, "in_channels": 6, "out_channels": 10, "filter_size": 3, "groups": 2}
    ),
    "conv:bwd": conv.make_shape(
        {"batch": 3, "input_size": 7, "in_channels": 4, "out_channels": 5, "filter_size": 3}
    ),
    "lstm": recurrent(lstm.OP, 9),
    "gru": recurrent(gru.OP, 9),
    "rnn": recurrent(rnn.OP, 9),
    "lstm:bwd": recurrent(lstm.OP, 9),
    "gru:bwd": recurrent(gru.OP, 9),
}


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("key", sorted(SPOT_CASES))
def test_a_stale_answer_fails_the_spot_check_in_every_op(key: str, dtype: str) -> None:
    from opbench.backends import make_backend

    module, shape = get_op(key), SPOT_CASES[key]
    cpp = make_backend("cpp")
    cpp.setup(1, "cpu")
    first = module.make_inputs(shape, dtype, 1)
    moved = refreshed(first, 99)
    stale = cpp.prepare(key, shape, first, {}).output()
    fresh = cpp.prepare(key, shape, moved, {}).output()
    acc = assumed_accumulation(key, dtype, "fp32", False)
    for seed in range(3):
        good = module.spot_check(shape, fresh, moved, dtype, acc, seed)
        assert good["ok"] and good["checked"], good
        bad = module.spot_check(shape, stale, moved, dtype, acc, seed)
        assert not bad["ok"], (seed, bad)
    if key == "gemm":  # an output of another shape is wrong whatever its values
        assert not module.spot_check(shape, np.zeros((2, 2), np.float32), moved, dtype, acc, 0)["ok"]


def test_refreshed_inputs_keep_their_values_and_change_every_output() -> None:
    inputs = {"a": np.arange(6, dtype=np.float32).reshape(2, 3) + 1, "b": np.array([[2.5]], np.float32)}
    new = refreshed(inputs, 5)
    assert sorted(np.abs(new["a"]).ravel()) == sorted(inputs["a"].ravel())  # the same values, moved
    assert np.all(new["a"] < 0)  # the first input negated: a 1-element problem changes too
    assert np.array_equal(new["b"], inputs["b"])
    assert not np.array_equal(refreshed(inputs, 6)["a"], new["a"]) or inputs["a"].size < 3


# --- through a sweep: the timed kernel is the verified kernel ---------------------------------------------

SWEEPS = [
    ("gemm", ["--m", "24", "--n", "16", "--k", "300"], "fp16"),
    ("conv", ["--batch", "2", "--input-size", "5", "--in-channels", "9", "--out-channels", "4"], "bf16"),
    ("lstm", ["--batch", "3", "--seq-len", "3", "--input-size", "20", "--hidden", "12"], "fp32"),
]


@pytest.mark.parametrize(("op", "dims", "dtype"), SWEEPS, ids=[s[0] for s in SWEEPS])
def test_kernels_that_remember_or_change_once_warm_are_wrong_answers(
    op: str, dims: list[str], dtype: str, tmp_path: Path
) -> None:
    spec = f"{Path(wrong_answers.__file__)}:{op}"
    for kind, rounds in (("first_only", "1"), ("memo", "1"), ("memo", "2"), ("right", "2")):
        out = tmp_path / f"{kind}-{rounds}"
        proc = run_cli(
            ["sweep", op, *dims, "--dtype", dtype, "--backend", f"kernel:{op}", "--kernel", spec,
             "--kernel-params", f"kind={kind}", "--rounds", rounds, "--threads", "1", "--out", str(out),
             *FAST_TIMER]
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        (path,) = out.glob(f"{op}-*.json")
        (rec,) = json.loads(path.read_text())["records"]
        if kind == "right":
            assert rec["status"] == "ok", rec
            timed = rec["verify"]["timed"]
            assert len(timed) >= 2 and all(t["ok"] and t["inputs"] == "new values" for t in timed), timed
        else:
            assert rec["status"] == "wrong_answer", (kind, rounds, rec.get("reason"))
            assert "timed calls of round 1" in rec["reason"] and rec["verify"]["ok"], rec["reason"]


def test_kernel_accumulate_declares_what_the_bound_assumes(tmp_path: Path) -> None:
    spec = f"{Path(wrong_answers.__file__)}:gemm"
    base = ["sweep", "gemm", "--m", "8", "--n", "8", "--k", "64", "--dtype", "fp16,bf16", "--backend",
            "kernel:gemm", "--kernel", spec, "--rounds", "1", "--threads", "1", *FAST_TIMER]  # fmt: skip
    for declared, want in (
        (None, {"fp16": "fp32", "bf16": "fp32"}),
        ("fp16", {"fp16": "fp16", "bf16": "fp16"}),
    ):
        out = tmp_path / str(declared)
        extra = ["--kernel-accumulate", declared] if declared else []
        proc = run_cli([*base, *extra, "--out", str(out)])
        assert proc.returncode == 0, proc.stderr
        (path,) = out.glob("gemm-*.json")
        recs = json.loads(path.read_text())["records"]
        assert {r["dtype"]: r["verify"]["accumulate_assumed"] for r in recs} == want
        if declared:
            assert all(f"--kernel-accumulate {declared}" in r["repro"] for r in recs)
    bad = run_cli([*base, "--kernel-accumulate", "fp8", "--out", str(tmp_path / "bad")])
    assert bad.returncode == 2 and "--kernel-accumulate" in bad.stderr and "Traceback" not in bad.stderr
    alone = run_cli(["sweep", "gemm", "--m", "4", "--n", "4", "--k", "4", "--kernel-accumulate", "fp16"])
    assert alone.returncode == 2 and "applies to --kernel" in alone.stderr


def test_the_tuner_fails_trials_whose_timed_calls_answer_wrong(tmp_path: Path) -> None:
    """In `opbench tune --kernel`, a candidate right on its first call only, or remembering its first answer,
    is a wrong_answer trial: the worker checks the output of the timed calls, on new input values."""
    optuna = import_or_skip("optuna")
    space = tmp_path / "space.toml"
    space.write_text('op = "gemm"\n\n[params.kind]\nvalues = ["right", "memo", "first_only"]\n')
    out = tmp_path / "out"
    proc = run_cli(
        ["tune", "gemm", "--m", "24", "--n", "20", "--k", "300", "--dtype", "fp16", "--threads", "1",
         "--kernel", f"{Path(wrong_answers.__file__)}:gemm", "--space", str(space), "--sampler", "grid",
         "--trials", "3", "--confirm-top", "1", "--confirm-rounds", "1", "--out", str(out)],
        env={"OPBENCH_RECORDS_DIR": str(tmp_path / "records")},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{(out / 'tuning' / 'studies.db').resolve()}"
    (summary,) = optuna.get_all_study_summaries(storage)
    trials = optuna.load_study(study_name=summary.study_name, storage=storage).trials
    failure = {t.user_attrs["params"]["kind"]: t.user_attrs.get("failure") for t in trials}
    assert failure == {"right": None, "memo": "wrong_answer", "first_only": "wrong_answer"}, failure


def test_every_op_and_pass_has_the_whole_verification_interface() -> None:
    from opbench.ops import BACKWARD, OPS

    names = ("reference", "check", "error_bounds", "spot_check", "spot_cost_flops", "verify_cost_flops")
    for module in (*OPS.values(), *BACKWARD.values()):
        for name in names:
            assert callable(getattr(module, name, None)), f"{module.key} lacks {name}"


def test_units_name_an_activation_allowance_and_refuse_unknown_ones() -> None:
    from opbench.ops.recurrent import ACTIVATION_ULPS, unit_of

    assert unit_of("fp32").act == ACTIVATION_ULPS * 2.0**-24
    assert unit_of("fp16-cells+act=0.00011") == unit_of("fp16-cells").__class__("fp32", "fp16", 0.00011)
    for bad in ("fp8", "fp32+act=x"):
        with pytest.raises(ValueError, match="unknown recurrent unit"):
            unit_of(bad)
    assert assumed_accumulation("lstm", "fp16", "fp32", True, 1.1e-4) == "fp16-cells+act=0.00011"
    assert assumed_accumulation("lstm:bwd", "fp16", "fp32", True) == "fp16"  # half tensor ops backward
    assert assumed_accumulation("gemm", "fp16", "fp32", True, 1.1e-4) == "fp32"

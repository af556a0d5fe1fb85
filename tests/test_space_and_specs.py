"""Sweep spaces (one-factor and product), --scale, and the TOML spec files: built-in suites load, and
malformed specs are rejected with the file, the key and what was expected."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_cli

from opbench.errors import UsageError
from opbench.ops import conv, gemm, lstm
from opbench.ops.space import expand, scale_shapes
from opbench.specs import load_spec, load_suite, suite_names


def test_one_factor_varies_each_axis_around_the_base() -> None:
    base = {"batch": 4, "input_size": 28, "in_channels": 32, "out_channels": 32, "filter_size": 3}
    shapes = expand(
        conv.OP, {"batch": [1, 4, 8], "filter_size": [1, 3]}, base, dict(conv.PARAMS), "one-factor"
    )
    labels = [s.label() for s in shapes]
    assert labels == ["N4 C32 28 K32 f3 p1", "N1 C32 28 K32 f3 p1", "N8 C32 28 K32 f3 p1", "N4 C32 28 K32 f1"]


def test_one_factor_single_values_fix_the_base() -> None:
    base = {"batch": 4, "input_size": 28, "in_channels": 32, "out_channels": 32, "filter_size": 3}
    shapes = expand(conv.OP, {"input_size": [6], "batch": [1, 2]}, base, dict(conv.PARAMS), "one-factor")
    assert [s.label() for s in shapes] == ["N4 C32 6 K32 f3 p1", "N1 C32 6 K32 f3 p1", "N2 C32 6 K32 f3 p1"]


def test_product_is_the_cross_product() -> None:
    shapes = expand(gemm.OP, {"m": [1, 2], "n": [3, 4, 5]}, dict(gemm.BASE), {}, "product")
    assert [(s.m, s.n, s.k) for s in shapes] == [(m, n, 1024) for m in (1, 2) for n in (3, 4, 5)]


def test_an_invalid_point_names_itself() -> None:
    base = {"batch": 1, "input_size": 4, "in_channels": 1, "out_channels": 1, "filter_size": 3}
    with pytest.raises(ValueError, match="filter_size=9.*would be empty"):
        expand(conv.OP, {"filter_size": [9]}, base, {"padding": 0}, "one-factor")


def test_default_cases_of_conv_and_lstm_vary_every_axis() -> None:
    assert len(conv.default_cases()) == 13 and len(lstm.OP.default_cases()) == 9


def test_scale_shrinks_batch_and_input_size_only() -> None:
    s = conv.shape_from_case(dict(n=256, c=64, h=224, w=224, k=128, r=3, s=3, pad_h=1, pad_w=1))
    (t,), (origin,) = scale_shapes(conv.OP, [s], 0.125)
    assert origin == s
    assert (t.n, t.h, t.w, t.c, t.k, t.r) == (32, 28, 28, 64, 128, 3)
    tiny = conv.shape_from_case(dict(n=1, c=1, h=8, w=8, k=1, r=7, s=7))
    assert conv.scale(tiny, 0.01).out_h >= 1  # never shrunk below the filter
    assert lstm.OP.scale(lstm.LstmShape(25, 64, 512, 512), 0.5) == lstm.LstmShape(25, 32, 256, 512)


@pytest.mark.parametrize("name", ["ascend-paper", "deepbench-train", "deepbench-inference"])
def test_builtin_suites_load(name: str) -> None:
    assert name in suite_names()
    spec = load_suite(name)
    assert {p.op.name for p in spec.plans} == {"gemm", "conv", "rnn", "gru", "lstm"}
    assert all(p.shapes for p in spec.plans)
    if name.startswith("deepbench"):
        assert "DeepBench" in spec.source and "Apache-2.0" in spec.source


def test_scaling_keeps_where_each_shape_came_from() -> None:
    shapes = [lstm.LstmShape(25, b, 256, 256) for b in (1, 2, 64)]
    scaled, origins = scale_shapes(lstm.OP, shapes, 0.1)
    assert [s.batch for s in scaled] == [1, 6] and [o.batch for o in origins] == [1, 64]


def test_ascend_suite_has_the_studys_factors() -> None:
    plan = next(p for p in load_suite("ascend-paper").plans if p.op.name == "conv")
    values = {f: sorted({getattr(s, f) for s in plan.shapes}) for f in ("n", "h", "c", "k", "r")}
    assert values == {
        "n": [128, 256, 512],
        "h": [112, 224, 336],
        "c": [32, 64, 128],
        "k": [64, 128, 256],
        "r": [1, 3, 5],
    }


def test_deepbench_conv_tuple_order_is_translated() -> None:
    # DeepBench (W, H, C, N, K, S, R, pad_w, pad_h, stride_w, stride_h):
    # (700, 161, 1, 8, 32, 20, 5, 0, 0, 2, 2)
    plan = next(p for p in load_suite("deepbench-train").plans if p.op.name == "conv")
    first = plan.shapes[0]
    assert (first.w, first.h, first.c, first.n, first.k, first.s, first.r) == (700, 161, 1, 8, 32, 20, 5)
    assert (first.stride_w, first.stride_h, first.out_h, first.out_w) == (2, 2, 79, 341)


GOOD = """
name = "mine"
[[sweep]]
op = "conv"
base = { batch = 2 }
axes = { input_size = "8:32:x2", filter_size = [1, 3] }
"""

BAD = [
    (
        "[[sweep]]\nop = 'conv'\naxes = { batch = [0] }\n",
        "sweep[0].axes.batch: expected integers >= 1, got 0",
    ),
    ("[[sweep]]\nop = 'conv'\naxes = { hidden = [8] }\n", "sweep[0].axes.hidden: not an axis of conv"),
    ("[[sweep]]\nop = 'rnn2'\n", "sweep[0].op: expected one of gemm, conv, rnn, gru, lstm, got 'rnn2'"),
    ("[[sweep]]\nop = 'gemm'\nmode = 'diagonal'\n", "sweep[0].mode: expected one-factor or product"),
    ("[[sweep]]\nop = 'gemm'\ndtypes = ['fp64']\n", "sweep[0].dtypes: unknown dtype 'fp64'"),
    ("[[sweep]]\nop = 'gemm'\nbackends = ['tpu']\n", "sweep[0].backends: unknown backend 'tpu'"),
    (
        "[[sweep]]\nop = 'gemm'\ncases = [ { m = 1, n = 2 } ]\n",
        "sweep[0].cases[0]: 'k' must be an integer >= 1",
    ),
    (
        "[[sweep]]\nop = 'conv'\nparams = { padding = 'valid' }\n",
        "sweep[0].params.padding: expected an integer",
    ),
    (
        "[[sweep]]\nop = 'conv'\nparams = { padding = [1, 2] }\n",
        'sweep[0].params.padding: expected an integer >= 0, "same" or [top, bottom, left, right]',
    ),
    (
        "[[sweep]]\nop = 'gemm'\ncases = [ { m = 1, n = 2, k = 3, batch = 0 } ]\n",
        "'batch' must be an integer >= 1",
    ),
    ("[[sweep]]\nop = 'gemm'\ncolor = 'red'\n", "sweep[0].color: unknown key"),
    ("[[sweep]]\nop = 'lstm'\naxes = { batch = '4:x' }\n", "sweep[0].axes.batch: bad range '4:x'"),
    ("title = 'x'\n", "title: unknown key"),
    ("name = 'x'\n", "sweep: expected one or more [[sweep]] tables"),
    ("[[sweep]\nop = 'gemm'\n", "not valid TOML"),
]


def test_padding_per_side_and_batched_gemms_in_a_spec(tmp_path: Path) -> None:
    f = tmp_path / "sides.toml"
    f.write_text(
        "[[sweep]]\nop = 'conv'\nparams = { padding = [2, 0, 1, 3] }\naxes = { filter_size = [3] }\n"
        "cases = [ { n = 1, c = 2, h = 5, w = 5, k = 2, r = 3, s = 3, pad_h = 1, pad_h_end = 0 } ]\n"
        "[[sweep]]\nop = 'gemm'\ncases = [ { m = 128, n = 128, k = 64, batch = 12 } ]\n"
        "axes = { m = [16], n = [8], k = [4], batch_count = [1, 3] }\n"
    )
    conv_plan, gemm_plan = load_spec(f).plans
    exact, swept = conv_plan.shapes
    assert (exact.pad_h, exact.pad_h_end, exact.pad_w, exact.pad_w_end) == (1, 0, 0, 0)
    assert swept.padding == (2, 0, 1, 3) and swept.out_h == swept.h - 2 + 2 and swept.out_w == swept.w + 2
    assert [s.batch for s in gemm_plan.shapes] == [12, 1, 3]


def test_a_good_spec_expands(tmp_path: Path) -> None:
    f = tmp_path / "mine.toml"
    f.write_text(GOOD)
    (plan,) = load_spec(f).plans
    assert plan.op.name == "conv" and plan.mode == "one-factor"
    assert sorted({s.h for s in plan.shapes}) == [8, 16, 28, 32] and {s.n for s in plan.shapes} == {2}


@pytest.mark.parametrize(("text", "message"), BAD, ids=[m.split(":")[0] for _, m in BAD])
def test_malformed_specs_name_the_file_and_key(text: str, message: str, tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(UsageError) as e:
        load_spec(f)
    assert str(e.value).startswith(f"spec {f}: ") and message in str(e.value)


def test_malformed_spec_on_the_command_line_exits_2(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(BAD[0][0])
    out = tmp_path / "out"
    proc = run_cli(["sweep", "--spec", str(f), "--out", str(out)], timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "sweep[0].axes.batch" in proc.stderr
    assert not out.exists()


def test_suites_command_lists_them() -> None:
    proc = run_cli(["suites"], timeout=60)
    assert proc.returncode == 0
    for name in suite_names():
        assert name in proc.stdout

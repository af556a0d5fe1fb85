"""benchdnn-style problem descriptors (opbench/descriptors.py): valid, defaulted and malformed ones, batch
files with options, includes and line numbers, and the canonical form every repro command uses."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opbench import descriptors
from opbench.errors import UsageError
from opbench.ops import conv, gemm, gru, lstm, rnn
from opbench.specs import load_batch_spec, load_suite


def test_conv_descriptor_with_every_entry() -> None:
    p = descriptors.parse('g2mb4_ic8ih9iw11_oc6oh5ow6_kh3kw2_sh2sw2_ph1pw1_dh0dw1_n"my:conv"')
    assert p.op == "conv" and p.name == "my:conv" and p.dtypes is None
    assert p.shape == conv.ConvShape(4, 8, 9, 11, 6, 3, 2, 2, 2, 1, 1, 1, 2, 2)


def test_conv_defaults_are_benchdnns() -> None:
    # mb 2, g 1, strides 1, dilation 0 (dense), padding 0; width values take the height's
    assert descriptors.parse("ic3ih7oc4kh3").shape == conv.ConvShape(2, 3, 7, 7, 4, 3, 3)
    # padding deduced from the output size, as benchdnn does
    assert descriptors.parse("ic64ih56oc64oh56kh3").shape.pad_h == 1
    assert descriptors.parse("ic64ih56oc64oh56kh3").shape.pad_w == 1
    # dilation: benchdnn counts the skipped taps, opbench the step between taps
    assert descriptors.parse("ic1ih9oc1kh3dh1ph2").shape.dil_h == 2
    # a non-square input keeps its own width; its output size is not taken from the height's
    s = descriptors.parse("ic3ih8iw5oc4kh3ph1").shape
    assert (s.h, s.w, s.out_h, s.out_w) == (8, 5, 8, 5)


def test_matmul_and_recurrent_descriptors() -> None:
    assert descriptors.parse("1024x768:768x3072").shape == gemm.GemmShape(1024, 3072, 768)
    assert descriptors.parse('3x5:5x7_n"fc"').shape == gemm.GemmShape(3, 7, 5)
    p = descriptors.parse("l1t50mb64sic512slc256dhc512dic512")
    assert p.op == "rnn" and p.shape == rnn.RnnShape(50, 64, 256, 512, relu=1)  # VANILLA_RNN's RELU default
    assert descriptors.parse("sic16").shape == rnn.RnnShape(1, 2, 16, 16, relu=1)  # t 1, mb 2, slc = sic
    assert descriptors.parse("t3mb2sic16", "lstm").shape == lstm.LstmShape(3, 2, 16, 16)  # the command's op
    tanh = descriptors.parse("t3sic16", "rnn", opts=descriptors.options("tanh"))
    assert tanh.shape.relu == 0


@pytest.mark.parametrize(
    ("text", "op", "message"),
    [
        ("ic64ih56oc64kh3oh50", None, "oh50 does not follow from ih56 kh3 sh1 ph0 dh0"),
        ("ic3id4ih5oc4kh3", None, "'id' makes it a 3-D convolution"),
        ("mb2ic3oc4kh3", None, "'ih' is required"),
        ("ic3ih5kh3", None, "'oc' is required"),
        ("ic3ih5oc4", None, "'kh' is required"),
        ("ic3ih5oc4kh3zz4", None, "unknown convolution entry 'zz'"),
        ("ic3ih5oc4kh3ic4", None, "'ic' given twice"),
        ("ic3ih2oc4kh5", None, "kh5 (dilation 0) does not fit ih2 with ph0"),
        ("g2ic3ih5oc4kh3", None, "groups"),
        ("2x3x4:2x4x5", None, "a batched matmul"),
        ("10x20:30x40", None, "the inner dimensions differ (20 and 30)"),
        ("10xa:ax40", None, "expected MxK:KxN with integer sizes"),
        ("l2t3sic4", None, "l2: opbench's recurrent ops run one layer"),
        ("t3sic4dhc8", None, "sic4 differs from dhc8"),
        ("t3sic4dic2", None, "a projection is not an opbench op"),
        ("t3mb2sic4", "gemm", "a rnn problem (--alg=VANILLA_RNN), but the command runs gemm"),
        ("64x32:32x16", "conv", "a gemm problem, but the command runs conv"),
    ],
)
def test_malformed_descriptors_name_the_problem(text: str, op: str | None, message: str) -> None:
    with pytest.raises(UsageError) as e:
        descriptors.parse(text, op)
    assert message in str(e.value) and text in str(e.value)


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 9), cpg=st.integers(1, 5), g=st.integers(1, 3), kpg=st.integers(1, 5),
    h=st.integers(1, 40), w=st.integers(1, 40), r=st.integers(1, 5), s=st.integers(1, 5),
    sh=st.integers(1, 3), sw=st.integers(1, 3), ph=st.integers(0, 3), pw=st.integers(0, 3),
    dh=st.integers(1, 3), dw=st.integers(1, 3),
)  # fmt: skip
def test_every_conv_shape_survives_its_descriptor(
    n: int, cpg: int, g: int, kpg: int, h: int, w: int, r: int, s: int,
    sh: int, sw: int, ph: int, pw: int, dh: int, dw: int,
) -> None:  # fmt: skip
    try:
        shape = conv.shape_from_case(
            {"n": n, "c": cpg * g, "h": h, "w": w, "k": kpg * g, "r": r, "s": s, "stride_h": sh,
             "stride_w": sw, "pad_h": ph, "pad_w": pw, "dil_h": dh, "dil_w": dw, "groups": g}
        )  # fmt: skip
    except ValueError:
        return  # not a shape (the filter does not fit)
    text = descriptors.describe("conv", shape)
    assert descriptors.parse(text, "conv").shape == shape, text


def test_every_op_survives_its_descriptor() -> None:
    shapes = {
        "gemm": gemm.GemmShape(1, 7, 13),
        "rnn": rnn.RnnShape(3, 1, 5, 7, relu=0),
        "gru": gru.GruShape(2, 3, 5, 7),
        "lstm": lstm.LstmShape(1, 2, 3, 11),
    }
    for op, shape in shapes.items():
        text = descriptors.describe(op, shape)
        start = descriptors.options(
            descriptors.problem_options(op, shape).split()[-1] if op == "rnn" else None
        )
        assert descriptors.parse(text, op, opts=start).shape == shape, (op, text)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_batch_file_options_comments_and_includes(tmp_path: Path) -> None:
    _write(tmp_path / "more.batch", "--matmul 4x5:5x6\n")
    path = _write(
        tmp_path / "shapes.batch",
        "# my layers\n"
        "--conv --cfg=bf16bf16bf16 --dir=FWD_I\n"
        "ic3ih7oc4kh3 ic3ih9oc4kh3  # two on one line\n"
        '--mb=16 ic8ih5oc8kh1_n"pointwise"\n'
        "--reset --rnn --alg=LBR_GRU t3sic8\n"
        "--alg=VANILLA_LSTM --prop=FWD_D t2mb4sic8\n"
        "--batch=more.batch\n",
    )
    problems = descriptors.load_batch(path)
    assert [p.op for p in problems] == ["conv", "conv", "conv", "gru", "lstm", "gemm"]
    assert problems[0].dtypes == ("bf16",) and problems[3].dtypes is None  # --reset
    assert problems[2].shape.n == 16 and problems[2].name == "pointwise"
    assert problems[3].shape == gru.GruShape(3, 2, 8, 8)
    assert problems[5].where.endswith("more.batch:1")
    spec = load_batch_spec(path)
    assert spec.description == "my layers"
    assert [(pl.op, len(pl.shapes), pl.dtypes) for pl in spec.plans] == [
        ("conv", 3, ("bf16",)), ("gru", 1, None), ("lstm", 1, None), ("gemm", 1, None),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ic3ih7oc4kh3\n--dir=BWD_D ic3ih7oc4kh3\n", ":2: --dir=BWD_D: only forward problems here"),
        (
            "--rnn --alg=VANILLA_GRU t3sic8\n",
            ":1: 't3sic8': --alg=VANILLA_GRU: it applies the reset gate before",
        ),
        ("--cfg=u8s8f32 ic3ih7oc4kh3\n", ":1: 'u8s8f32': opbench runs f32, f16 and bf16"),
        ("\n\n--match=.*kh3 ic3ih7oc4kh3\n", ":3: --match is not a benchdnn option opbench maps"),
        ("--direction=concat t3sic8\n", ":1: --direction=concat: opbench's recurrent ops run left2right"),
        ("--matmul ic3ih7oc4kh3\n", ":1: 'ic3ih7oc4kh3': a conv descriptor under --matmul"),
        ("# nothing\n", "no problem descriptors in it"),
        ("ic3ih7oc4kh3 'unclosed\n", ":1: No closing quotation"),
        ("--batch=self.batch\n", "nest deeper than"),
    ],
)
def test_malformed_batch_files_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path / "self.batch", text)
    with pytest.raises(UsageError) as e:
        descriptors.load_batch(path)
    assert message in str(e.value)


def test_resnet50_suite_is_a_descriptor_file() -> None:
    spec = load_suite("resnet50")
    assert [(pl.op, len(pl.shapes)) for pl in spec.plans] == [("conv", 20), ("gemm", 1)]
    stem = spec.plans[0].shapes[0]
    assert (stem.c, stem.h, stem.k, stem.r, stem.stride_h, stem.pad_h, stem.out_h) == (
        3,
        224,
        64,
        7,
        2,
        3,
        112,
    )


def test_tune_takes_its_shape_from_a_descriptor(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    proc = run_cli(
        ["tune", "gemm", "--problem", "24x16:16x8", "--trials", "2", "--confirm-top", "1",
         "--confirm-rounds", "1", "--threads", "1", "--out", str(tmp_path)]
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    shown = run_cli(
        ["tune", "gemm", "--problem", "24x16:16x8", "--threads", "1", "--show", "--out", str(tmp_path)]
    )
    assert shown.returncode == 0, shown.stderr
    assert "gemm-24x8x16-fp32-t1" in shown.stdout  # M=24, N=8, K=16

"""benchdnn-style problem descriptors (opbench/descriptors.py): valid, defaulted and malformed ones, batch
files with options, includes and line numbers, and the canonical form every repro command uses."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opbench import batchfiles, descriptors
from opbench.errors import UsageError
from opbench.ops import conv, gemm, gru, lstm, rnn
from opbench.specs import load_batch_spec, load_suite


def test_conv_descriptor_with_every_entry() -> None:
    p = descriptors.parse('g2mb4_ic8ih9iw11_oc6oh5ow6_kh3kw2_sh2sw2_ph1pw1_dh0dw1_n"my:conv"')
    assert p.op.name == "conv" and p.name == "my:conv" and p.dtypes is None
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


def test_implied_padding_on_each_side() -> None:
    # benchdnn's padding_r: the output size fixes the bottom and right padding, ph/pw the top and left
    s = descriptors.parse("mb1ic16oc16_ih5oh8kh3ph3_iw7ow6kw3pw1").shape
    assert (s.pad_h, s.pad_h_end, s.pad_w, s.pad_w_end) == (3, 2, 1, 0)
    assert (s.out_h, s.out_w) == (8, 6) and not s.symmetric
    # without ph, the top is half of the padding the output needs (rounded down), the bottom the rest
    s = descriptors.parse("ic64ih201oh202kh1oc64").shape
    assert (s.pad_h, s.pad_h_end, s.out_h) == (0, 1, 202)
    s = descriptors.parse("ic8ih10oh13kh3oc8").shape
    assert (s.pad_h, s.pad_h_end, s.out_h) == (2, 3, 13)
    # an end the stride never reaches reads back as the least padding that gives the output
    s = descriptors.parse("ic1ih8oh3kh3sh2ph0oc1").shape
    assert (s.pad_h, s.pad_h_end, s.out_h) == (0, 0, 3)
    # the canonical descriptor carries the output size where the sides differ, and reads back
    for text in ("mb1ic16oc16_ih5oh8kh3ph3_iw7ow6kw3pw1", "g4ic8oc8_ih9oh5kh3sh2ph0_iw9ow5kw2sw2pw1"):
        shape = descriptors.parse(text).shape
        assert descriptors.parse(descriptors.describe("conv", shape)).shape == shape


def test_one_d_and_flat_depth_convolutions_are_two_d() -> None:
    s = descriptors.parse("mb2ic228oc126_iw48ow12kw1sw4dw0pw0").shape
    assert (s.h, s.r, s.stride_h, s.pad_h, s.out_h) == (1, 1, 1, 0, 1)
    assert (s.w, s.s, s.stride_w, s.out_w) == (48, 1, 4, 12)
    # benchdnn's 3-D form with a depth of 1 is the 2-D problem
    flat = descriptors.parse(
        "mb1_ic16oc16_kd1kh1kw3_id1ih1iw13_od1oh1ow4_sd1sh1sw2_pd0ph0pw2_dd0dh0dw3"
    ).shape
    assert flat == descriptors.parse("mb1_ic16oc16_kh1kw3_ih1iw13_oh1ow4_sh1sw2_ph0pw2_dh0dw3").shape
    assert (flat.w, flat.s, flat.dil_w, flat.pad_w, flat.pad_w_end, flat.out_w) == (13, 3, 4, 2, 0, 4)


def test_a_key_given_twice_takes_the_later_value_with_a_note() -> None:
    p = descriptors.parse("mb1ic16oc16_ih10kh3_kh5ph7sh1")
    assert p.shape.r == 5 and p.shape.s == 5
    assert p.notes == ("'kh' given twice: the later kh5 is used (not kh3), as benchdnn does",)
    assert descriptors.parse("ic3ih5oc4kh3kh3").notes == ()  # the same value again says nothing


def test_batched_matmul_descriptors() -> None:
    p = descriptors.parse('12x128x64:12x64x128_n"QK"')
    assert p.shape == gemm.GemmShape(128, 128, 64, 12) and p.name == "QK"
    assert p.shape.operands == ((12, 128, 64), (12, 64, 128), (12, 128, 128))
    # several batch dimensions multiply; an output part is checked
    assert descriptors.parse("2x3x4x5:2x3x5x6:2x3x4x6").shape == gemm.GemmShape(4, 6, 5, 6)
    assert descriptors.describe("gemm", gemm.GemmShape(4, 6, 5, 6)) == "6x4x5:6x5x6"
    assert descriptors.parse("6x4x5:6x5x6").shape.to_dict() == {"m": 4, "n": 6, "k": 5, "batch": 6}
    assert gemm.GemmShape(4, 6, 5).to_dict() == {"m": 4, "n": 6, "k": 5}  # plain records as they were


def test_matmul_and_recurrent_descriptors() -> None:
    assert descriptors.parse("1024x768:768x3072").shape == gemm.GemmShape(1024, 3072, 768)
    assert descriptors.parse('3x5:5x7_n"fc"').shape == gemm.GemmShape(3, 7, 5)
    p = descriptors.parse("l1t50mb64sic512slc256dhc512dic512")  # VANILLA_RNN's RELU default
    assert p.op.name == "rnn" and p.shape == rnn.RnnShape(50, 64, 256, 512, relu=1)
    assert descriptors.parse("sic16").shape == rnn.RnnShape(1, 2, 16, 16, relu=1)  # t 1, mb 2, slc = sic
    assert descriptors.parse("t3mb2sic16", "lstm").shape == lstm.LstmShape(3, 2, 16, 16)  # the command's op
    tanh = descriptors.parse("t3sic16", "rnn", opts=descriptors.options("tanh"))
    assert tanh.shape.relu == 0


@pytest.mark.parametrize(
    ("text", "op", "message"),
    [
        ("ic64ih56oc64kh3oh50", None, "oh50 needs ph-2: negative padding crops the input"),
        ("ic3id4ih5oc4kh3", None, "id4 makes it a 3-D convolution"),
        ("mb2ic3oc4kh3", None, "'ih' is required"),
        ("mb2ic3oc4iw5kh3", None, "'ih' is required (a 1-D convolution gives iw, kw, ... only)"),
        ("ic3ih5kh3", None, "'oc' is required"),
        ("ic3ih5oc4", None, "'kh' is required"),
        ("ic3ih5oc4kh3zz4", None, "unknown convolution entry 'zz'"),
        ("ic3ih2oc4kh5", None, "kh5 (dilation 0) does not fit ih2 with ph0"),
        ("ic3ih5oc4oh0kh3", None, "'oh' must be >= 1"),
        ("g2ic3ih5oc4kh3", None, "groups"),
        ("1x3x4:2x4x5", None, "a broadcast batched matmul"),
        ("3x4:2x4x5", None, "a broadcast matmul (operands of different ranks)"),
        ("2x3x4:3x4x5", None, "the batch dimensions differ (2 and 3)"),
        ("2x3x4:2x4x5:2x3x6", None, "the output '2x3x6' is not 2x3x5"),
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
    dh=st.integers(1, 3), dw=st.integers(1, 3), pb=st.integers(0, 3), pr=st.integers(0, 3),
)  # fmt: skip
def test_every_conv_shape_survives_its_descriptor(
    n: int, cpg: int, g: int, kpg: int, h: int, w: int, r: int, s: int,
    sh: int, sw: int, ph: int, pw: int, dh: int, dw: int, pb: int, pr: int,
) -> None:  # fmt: skip
    try:
        shape = conv.shape_from_case(
            {"n": n, "c": cpg * g, "h": h, "w": w, "k": kpg * g, "r": r, "s": s, "stride_h": sh,
             "stride_w": sw, "pad_h": ph, "pad_w": pw, "dil_h": dh, "dil_w": dw, "groups": g,
             "pad_h_end": pb, "pad_w_end": pr}
        )  # fmt: skip
    except ValueError:
        return  # not a shape (the filter does not fit)
    text = descriptors.describe("conv", shape)
    back = descriptors.parse(text, "conv").shape
    if shape.symmetric:
        assert back == shape, text
    else:  # the same computation: the same output, the end padded as little as gives it
        assert (back.out_h, back.out_w, back.pad_h, back.pad_w) == (shape.out_h, shape.out_w, ph, pw), text
        assert back.pad_h_end <= pb and back.pad_w_end <= pr, text
        assert replace(back, pad_h_end=pb, pad_w_end=pr) == shape, text


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


def test_batch_file_option_lists_run_every_value(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "lists.batch",
        "--conv --cfg=f32,bf16,u8s8u8 --dir=FWD_B,BWD_D --mb=1,4 ic3ih7oc4kh3\n"
        "--reset --rnn --alg=VANILLA_RNN,LBR_GRU,VANILLA_GRU --activation=RELU,TANH,LOGISTIC \\\n"
        "   --direction=left2right,concat --t=2,3 sic8\n",
    )
    batch = batchfiles.read_batch(path)
    conv_problems = [p for p in batch.problems if p.op.name == "conv"]
    assert [p.shape.n for p in conv_problems] == [1, 4] and conv_problems[0].dtypes == ("fp32", "bf16")
    kinds = sorted(s.kind for s in batch.skipped)
    assert kinds == ["activation", "alg", "backward", "direction", "dtype"], batch.skipped
    rnn_ops = sorted((p.op.name, p.shape.seq_len, getattr(p.shape, "relu", None)) for p in batch.problems[2:])
    assert rnn_ops == [("gru", 2, None), ("gru", 3, None), ("rnn", 2, 0), ("rnn", 2, 1), ("rnn", 3, 0),
                       ("rnn", 3, 1)]  # fmt: skip
    assert all(p.where.endswith(":2") for p in batch.problems[2:])  # a continued line keeps its number
    assert batch.summary()["lines"] == 2 and batch.summary()["lines_skipped"] == 0


def test_a_line_that_cannot_run_does_not_sink_the_file(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "mixed.batch",
        "# runnable and not\n"
        "ic3ih7oc4kh3\n"
        "ic3id4ih5oc4kh3\n"
        "--cfg=u8s8u8 ic3ih7oc4kh3\n"
        "--reset --attr-post-ops=relu ic3ih9oc4kh3\n"
        "--reset --stag=nhwc --attr-post-ops= ic3ih9oc4kh3 --zzz=1 ic3ih11oc4kh3\n"
        "--reset --matmul 1x3x4:5x4x6 2x3x4:2x4x6\n"
        "--rnn --with-projection=true l1t2sic8 --reset --rnn l2t2sic8\n",
    )
    batch = batchfiles.read_batch(path)
    assert [p.where.rsplit(":", 1)[1] for p in batch.problems] == ["2", "6", "7"]
    got = [(s.where.rsplit(":", 1)[1], s.family, s.kind) for s in batch.skipped]
    assert got == [
        ("3", "conv", "3-D"), ("4", "conv", "dtype"), ("5", "conv", "attributes"), ("6", "conv", "option"),
        ("7", "gemm", "broadcast"), ("8", "recurrent", "attributes"), ("8", "recurrent", "layers"),
    ]  # fmt: skip
    summary = batch.summary()
    assert (summary["lines"], summary["lines_run"], summary["lines_skipped"]) == (7, 3, 4)
    assert summary["ignored_options"] == {"--stag": 1}
    assert "--zzz is in force" in batch.skipped[3].reason
    spec = load_batch_spec(path)
    assert spec.lines == summary and [pl.op.name for pl in spec.plans] == ["conv", "gemm"]
    with pytest.raises(UsageError) as e:
        load_batch_spec(path, strict=True)
    assert ":3: 'ic3id4ih5oc4kh3': id4 makes it a 3-D convolution" in str(e.value) and "--strict" in str(
        e.value
    )


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
    problems = batchfiles.load_batch(path)
    assert [p.op.name for p in problems] == ["conv", "conv", "conv", "gru", "lstm", "gemm"]
    assert problems[0].dtypes == ("bf16",) and problems[3].dtypes is None  # --reset
    assert problems[2].shape.n == 16 and problems[2].name == "pointwise"
    assert problems[3].shape == gru.GruShape(3, 2, 8, 8)
    assert problems[5].where.endswith("more.batch:1")
    spec = load_batch_spec(path)
    assert spec.description == "my layers"
    assert [(pl.op.name, len(pl.shapes), pl.dtypes) for pl in spec.plans] == [
        ("conv", 3, ("bf16",)), ("gru", 1, None), ("lstm", 1, None), ("gemm", 1, None),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ic3ih7oc4kh3\n--dir=BWD_D ic3ih7oc4kh3\n", ":2: 'ic3ih7oc4kh3': --dir=BWD_D: a backward problem"),
        (
            "--rnn --alg=VANILLA_GRU t3sic8\n",
            ":1: 't3sic8': --alg=VANILLA_GRU: it applies the reset gate before",
        ),
        ("--cfg=u8s8f32 ic3ih7oc4kh3\n", ":1: 'ic3ih7oc4kh3': --cfg=u8s8f32: opbench runs f32, f16 and bf16"),
        ("\n\n--match=.*kh5 ic3ih7oc4kh3\n", ":3: 'ic3ih7oc4kh3': not matched by --match=.*kh5"),
        ("--direction=concat t3sic8\n", ":1: 't3sic8': --direction=concat: opbench's recurrent ops run"),
        ("\n--foo=1\n", ":2: --foo is not a benchdnn option opbench reads"),
    ],
)
def test_strict_refuses_what_is_skipped_naming_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path / "self.batch", text)
    batchfiles.read_batch(path)  # skipped, not refused
    with pytest.raises(UsageError) as e:
        batchfiles.read_batch(path, strict=True)
    assert message in str(e.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("--matmul ic3ih7oc4kh3\n", ":1: 'ic3ih7oc4kh3': a conv descriptor under --matmul"),
        ("ic3ih7oc4kh3 'unclosed\n", ":1: No closing quotation"),
        ("--mb=x ic3ih7oc4kh3\n", ":1: --mb=x: expected integers"),
        ("--match=( ic3ih7oc4kh3\n", ":1: --match=(: not a regular expression"),
        ("--batch=self.batch\n", "nest deeper than"),
    ],
)
def test_malformed_batch_files_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path / "self.batch", text)
    with pytest.raises(UsageError) as e:
        batchfiles.load_batch(path)
    assert message in str(e.value)


def test_resnet50_suite_is_a_descriptor_file() -> None:
    spec = load_suite("resnet50")
    assert [(pl.op.name, len(pl.shapes)) for pl in spec.plans] == [("conv", 20), ("gemm", 1)]
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


def test_a_sweep_runs_what_it_can_and_keeps_what_it_skipped(tmp_path: Path) -> None:
    from tests.conftest import quick_sweep, run_cli

    path = _write(
        tmp_path / "team.batch",
        "# a team's file\n"
        "mb1ic4oc4_ih7oh8kh3ph1_iw5ow5kw3pw1\n"  # padded one more row at the bottom (implied)
        "mb1ic4oc4_iw9ow5kw3sw2pw1\n"  # 1-D
        "mb1ic4id3ih7oc4kh3\n"  # 3-D: skipped
        "--cfg=u8s8u8 mb1ic4ih7oc4kh3\n",  # int8: skipped
    )
    doc = quick_sweep(
        ["conv", "--batch-file", str(path), "--backend", "cpp", "--dtype", "fp32"], tmp_path / "o"
    )
    shown = " ".join(doc["_stdout"].split())  # the table may wrap
    assert "batch file: 4 problem lines, 2 run, 2 skipped; problems skipped: 1 3-D, 1 dtype" in shown
    assert "skipped conv problems" in shown and "mb1ic4id3ih7oc4kh3" in shown
    lines = doc["suite"]["lines"]
    assert [(s["where"], s["kind"]) for s in lines["skipped"]] == [
        (f"{path}:4", "3-D"),
        (f"{path}:5", "dtype"),
    ]
    assert [r["status"] for r in doc["records"]] == ["ok", "ok"]
    shapes = sorted((r["shape"]["h"], r["shape"].get("pad_h_end")) for r in doc["records"])
    assert shapes == [(1, None), (7, 2)]  # the bottom padding written where it differs from the top
    # every record's repro reads back to its shape
    assert all("--problem" in r["repro"] for r in doc["records"])
    strict = run_cli(["sweep", "conv", "--batch-file", str(path), "--strict", "--out", str(tmp_path / "s")])
    assert strict.returncode == 2 and len(strict.stderr.strip().splitlines()) == 1, strict.stderr
    assert f"{path}:4: 'mb1ic4id3ih7oc4kh3': id3 makes it a 3-D convolution" in strict.stderr
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").iterdir())
    none = _write(tmp_path / "none.batch", "mb1ic4id3ih7oc4kh3\n")
    nothing = run_cli(["sweep", "conv", "--batch-file", str(none), "--out", str(tmp_path / "n")])
    assert nothing.returncode == 0 and "nothing to run" in nothing.stdout and "3-D" in nothing.stdout

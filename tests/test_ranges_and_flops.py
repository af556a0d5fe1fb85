"""Size-list parsing, dtype parsing and the GEMM FLOP count (checked against torch's flop counter)."""

from __future__ import annotations

import pytest
from conftest import import_or_skip

from opbench.dtypes import parse_dtypes
from opbench.errors import UsageError
from opbench.ops import gemm
from opbench.ranges import parse_sizes


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("64", [64]),
        ("64,128", [64, 128]),
        ("64:1024:x2", [64, 128, 256, 512, 1024]),
        ("64:1000:x2", [64, 128, 256, 512]),
        ("64:256:+64", [64, 128, 192, 256]),
        ("64:256:64", [64, 128, 192, 256]),
        ("1,64:128:x2,128", [1, 64, 128]),
        ("100:400:x1.5", [100, 150, 225, 338]),
    ],
)
def test_parse_sizes(text: str, want: list[int]) -> None:
    assert parse_sizes(text, "--m") == want


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty size list"),
        ("64:x", "bad range"),
        ("64:128:x1", "factor must be a finite number > 1"),
        ("64:128:xq", "bad factor"),
        ("0", "sizes must be >= 1"),
        ("-5", "sizes must be >= 1"),
        ("12a", "'12a' is not an integer"),
        ("128:64:x2", "ends before it starts"),
        ("64,,128", "empty item"),
        ("1:100000:1", "more than 10000 sizes"),
    ],
)
def test_parse_sizes_errors_name_the_problem(text: str, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        parse_sizes(text, "--m")


def test_parse_dtypes() -> None:
    assert parse_dtypes("fp32,fp16") == ["fp32", "fp16"]
    assert parse_dtypes("float16, fp16") == ["fp16"]
    with pytest.raises(UsageError, match="unknown dtype 'fp64'"):
        parse_dtypes("fp64")


def test_gemm_flops_and_traffic() -> None:
    s = gemm.GemmShape(3, 5, 7)
    assert gemm.flops(s) == 2 * 3 * 5 * 7
    assert gemm.min_bytes(s, "fp32") == 4 * (3 * 7 + 7 * 5 + 3 * 5)
    assert gemm.min_bytes(s, "fp16") == 2 * (3 * 7 + 7 * 5 + 3 * 5)


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 5, 7), (64, 17, 509), (16, 4096, 1024)])
def test_gemm_flops_agree_with_torch_flop_counter(shape: tuple[int, int, int]) -> None:
    torch = import_or_skip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    m, n, k = shape
    a, b = torch.zeros(m, k), torch.zeros(k, n)
    with FlopCounterMode(display=False) as counter:
        torch.mm(a, b)
    assert counter.get_total_flops() == gemm.flops(gemm.GemmShape(m, n, k))


def test_inputs_are_seeded_and_never_zero() -> None:
    s = gemm.GemmShape(33, 17, 65)
    x = gemm.make_inputs(s, "fp16", seed=5)
    y = gemm.make_inputs(s, "fp16", seed=5)
    z = gemm.make_inputs(s, "fp16", seed=6)
    assert (x["a"] == y["a"]).all() and not (x["a"] == z["a"]).all()
    assert (x["a"] != 0).mean() > 0.99 and x["a"].dtype.name == "float16"


CONV_FLOP_CASES = [
    dict(n=2, c=3, h=7, w=9, k=5, r=3, s=3, pad_h=1, pad_w=1),
    dict(n=1, c=4, h=10, w=11, k=6, r=3, s=2, stride_h=2, stride_w=3, pad_h=1, dil_h=2, groups=2),
    dict(n=4, c=8, h=31, w=29, k=16, r=5, s=5, stride_h=2, stride_w=2, pad_h=2, pad_w=2, dil_h=2, dil_w=2),
    dict(n=1, c=12, h=9, w=9, k=12, r=3, s=3, pad_h=1, pad_w=1, groups=12),
]


@pytest.mark.parametrize("fields", CONV_FLOP_CASES)
def test_conv_flops_agree_with_torch_flop_counter(fields: dict) -> None:
    torch = import_or_skip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from opbench.ops import conv

    s = conv.shape_from_case(fields)
    x = torch.zeros(s.n, s.c, s.h, s.w)
    w = torch.zeros(s.k, s.c // s.groups, s.r, s.s)
    with FlopCounterMode(display=False) as counter:
        y = torch.nn.functional.conv2d(
            x, w, None, (s.stride_h, s.stride_w), (s.pad_h, s.pad_w), (s.dil_h, s.dil_w), s.groups
        )
    assert tuple(y.shape) == (s.n, s.k, s.out_h, s.out_w)
    assert counter.get_total_flops() == conv.flops(s)


def test_lstm_flops_count_both_gemms_per_step_and_row() -> None:
    from opbench.ops import lstm

    s = lstm.LstmShape(seq_len=25, batch=64, input_size=512, hidden=256)
    # Input GEMM (T*B x I) @ (I x 4H) plus recurrent GEMM (B x H) @ (H x 4H) per step; gates excluded.
    assert lstm.OP.flops(s) == 2 * (25 * 64) * 512 * 1024 + 25 * 2 * 64 * 256 * 1024
    assert lstm.OP.flops(s) == 2 * 4 * 256 * (512 + 256) * 25 * 64

"""Size-list parsing, dtype parsing and the GEMM FLOP count (checked against torch's flop counter)."""

from __future__ import annotations

import pytest

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
        ("64:128:x1", "factor must be > 1"),
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
    torch = pytest.importorskip("torch")
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

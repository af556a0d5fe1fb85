"""Tuning search spaces: candidates valid by construction, counting, constraint snapping, and the safe
expression evaluator that reads the space files."""

from __future__ import annotations

from pathlib import Path

import pytest

from opbench.errors import UsageError
from opbench.tune.space import evaluate, load_space

NAMES = {
    "mr": 14,
    "nr": 32,
    "elem_bytes": 4,
    "m": 1024,
    "n": 1000,
    "k": 65,
    "l1_bytes": 49152,
    "l2_bytes": 1 << 20,
    "l3_bytes": 32 << 20,
}


def test_candidates_are_multiples_up_to_the_padded_dimension() -> None:
    space, _ = load_space("gemm", NAMES, cache_fit=False)
    assert space.values("tile_m") == (14, 28, 56, 112, 224, 448, 896, 1036)  # 1036 = 1024 rounded up to 14
    assert space.values("tile_n") == (32, 64, 128, 256, 512, 1024)  # 1024 = 1000 rounded up to 32
    assert space.values("tile_k") == (16, 32, 64, 72)  # 72 = 65 rounded up to 8; nothing past it
    assert len(space.enumerate()) == 8 * 6 * 4


def test_tiny_problems_have_one_candidate_per_parameter() -> None:
    space, _ = load_space("gemm", {**NAMES, "m": 1, "n": 1, "k": 1}, cache_fit=False)
    assert [v for _, v in space.params] == [(14,), (32,), (8,)]


def test_cache_fit_constraints_shrink_the_space_and_snap_to_valid_points() -> None:
    names = {**NAMES, "k": 1024, "l2_bytes": 256 * 1024}
    free, _ = load_space("gemm", names, cache_fit=False)
    fit, _ = load_space("gemm", names, cache_fit=True)
    points = fit.enumerate()
    assert 0 < len(points) < len(free.enumerate())
    assert all(p["tile_m"] * p["tile_k"] * 4 <= 256 * 1024 for p in points)
    # the largest tile_m with the largest tile_k breaks the L2 rule: tile_k moves to the nearest valid one
    snapped = fit.from_indices({"tile_m": 7, "tile_n": 0, "tile_k": 6})
    assert snapped == {"tile_m": 1036, "tile_n": 32, "tile_k": 32}
    assert snapped in points


def test_bf16_pairs_fit_twice_the_depth_under_the_cache_rules() -> None:
    """bf16 panels take 2 bytes per element (ops' tile_names: elem_bytes), so the L2 rule admits tile_k
    twice as deep as for fp32 panels."""
    names = {**NAMES, "k": 1024, "l2_bytes": 256 * 1024}
    fp32, _ = load_space("gemm", names, cache_fit=True)
    bf16, _ = load_space("gemm", {**names, "elem_bytes": 2}, cache_fit=True)
    deepest = {max(p["tile_k"] for p in s.enumerate() if p["tile_m"] == 1036) for s in (fp32, bf16)}
    assert sorted(deepest) == [32, 64]  # 1036 x tile_k x 4 (or 2) <= 256 KiB


def test_evaluate_allows_arithmetic_only() -> None:
    assert evaluate("tile_m * tile_k * 4 <= l2", {"tile_m": 2, "tile_k": 3, "l2": 24}) is True
    assert evaluate("1 < x <= 3", {"x": 3}) is True
    for bad in ("__import__('os')", "x.real", "[x]", "x if x else 1"):
        with pytest.raises(ValueError):
            evaluate(bad, {"x": 1})
    with pytest.raises(ValueError, match="unknown name 'y'"):
        evaluate("y + 1", {"x": 1})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('op = "conv"\n[params.tile_m]\nmultiple_of = 1\nstart = 1\nstop = "m"\n', "op: expected 'gemm'"),
        ('op = "gemm"\n', "params: expected one or more"),
        (
            'op = "gemm"\n[params.tile_m]\nmultiple_of = 1\nstart = 1\nstop = "q"\n',
            "params.tile_m.stop: unknown name 'q'",
        ),
        (
            'op = "gemm"\n[params.tile_m]\nmultiple_of = 1\nstart = 1\nstop = "m"\nstep = "x1"\n',
            "would never advance",
        ),
        (
            'op = "gemm"\n[params.tile_m]\nmultiple_of = 0\nstart = 1\nstop = "m"\n',
            "multiple_of: expected an integer >= 1",
        ),
        (
            'op = "gemm"\n[params.tile_m]\nmultiple_of = 1\nstart = 1\nstop = "m"\n'
            '[[constraints]]\nrule = "open(1)"\n',
            "constraints[0].rule",
        ),
    ],
)
def test_malformed_space_files_are_rejected(text: str, message: str, tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(UsageError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        load_space("gemm", NAMES, cache_fit=True, space=str(f))

"""The AMX tile space (issue 43, part 4): every micro-kernel layout of csrc/gemm/amx_body.hpp (amx_rows x
amx_cols accumulator tiles, amx_ksteps K steps a load) on the exact emulator, on odd and round shapes,
against the default layout bit for bit and against float64; on the CPU's tiles bit for bit the same where
AMX runs (skipped elsewhere with the reason, failing under OPBENCH_REQUIRE_AMX=1: tests/test_amx.py); the
bad values refused in one line; and `opbench tune --space gemm_amx` searching exactly the kernel's layouts
and recording the one each trial ran."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from conftest import FAST_TRIALS, import_or_skip, run_cli

from opbench import _core, kernels
from opbench.ops import conv as conv_op
from opbench.ops import gemm as gemm_op
from opbench.ops import gru as gru_op
from opbench.ops import lstm as lstm_op
from opbench.tiles import Tiles
from opbench.tune.space import load_space

BF16 = ml_dtypes.bfloat16
LAYOUTS = [tuple(s) for s in _core.amx_shapes]
WHY_NOT = _core.cpu_info()["amx_unavailable"]

# (m, n, k, tile_k): 1; rows and columns short of one tile; A in place (N within two column panels) and
# packed; whole tiles; two K steps a load in place (M = 16) and packed; K past the kernel's block of 1024
# (the second block accumulates); K blocks of 96 (three whole steps) ending in a partial step; primes.
SHAPES = [
    (1, 1, 1, None),
    (17, 5, 33, None),
    (33, 130, 97, None),
    (64, 64, 64, None),
    (16, 20, 200, None),
    (97, 45, 1031, None),
    (70, 131, 300, 96),
]


def _layout_tiles(layout: tuple[int, int, int], isa: str, threads: int = 1, k: int | None = None) -> Tiles:
    rows, cols, ksteps = layout
    return Tiles(isa=isa, threads=threads, k=k, amx_rows=rows, amx_cols=cols, amx_ksteps=ksteps)


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint16)


def test_the_layouts_are_one_to_four_accumulators_in_eight_tiles() -> None:
    assert LAYOUTS[0] == (2, 2, 1)  # the default
    for rows, cols, ksteps in LAYOUTS:
        operands = min(rows, 2) + min(cols, 2)
        assert 1 <= rows * cols <= 4 and rows * cols + ksteps * operands <= 8


def _dims_id(d: tuple[int, int, int, int | None]) -> str:
    return "x".join(map(str, d[:3])) + (f"-k{d[3]}" if d[3] else "")


@pytest.mark.parametrize("dims", SHAPES, ids=_dims_id)
def test_every_layout_gives_the_default_layouts_bits_within_the_float64_bound(
    dims: tuple[int, int, int, int | None],
) -> None:
    """Which tile serves which accumulator never changes the sums: each element's products are added in K
    order one step at a time, so every layout must give the same bits as the default; and all are checked
    against float64. The plan names the layout that ran, with its register tile."""
    m, n, k, tile_k = dims
    shape = gemm_op.GemmShape(m, n, k)
    inp = gemm_op.make_inputs(shape, "bf16", m + n + k)
    reference = gemm_op.reference(shape, inp)
    default = kernels.gemm(inp["a"], inp["b"], tiles=Tiles(isa="amx-emu", threads=1, k=tile_k))
    assert gemm_op.check(shape, default, inp, reference, "bf16", "fp32")["ok"]
    for layout in LAYOUTS:
        plan = kernels.prepare_gemm(inp["a"], inp["b"], tiles=_layout_tiles(layout, "amx-emu", k=tile_k))
        out = plan.output()
        assert np.array_equal(_bits(out), _bits(default)), layout
        assert gemm_op.check(shape, out, inp, reference, "bf16", "fp32")["ok"], layout
        info = plan.tiles()
        rows, cols, ksteps = layout
        assert (info["amx_rows"], info["amx_cols"], info["amx_ksteps"]) == layout
        assert (info["mr"], info["nr"]) == (16 * rows, 16 * cols)
        assert info["kernel"].startswith(f"AMX-BF16 {16 * rows}x{16 * cols} ({rows}x{cols} tiles")
        assert ("K steps a load" in info["kernel"]) == (ksteps > 1)


# conv2d's bf16 ways on the GEMM (patch rows; a 1x1 plane as the GEMM's B) and the recurrent layers' gate
# products: primes, padding, stride, groups, a batch short of a row tile and one past it.
CONVS = [
    dict(n=2, c=29, h=9, w=11, k=20, r=3, s=3, pad_h=1, pad_w=1),
    dict(n=2, c=6, h=5, w=5, k=48, r=3, s=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1, groups=2),
    dict(n=1, c=5, h=47, w=45, k=19, r=1, s=1),
]
RECURRENT = [
    dict(seq_len=3, batch=5, input_size=7, hidden=13),
    dict(seq_len=2, batch=21, input_size=40, hidden=33),
]


@pytest.mark.parametrize("op", [conv_op.OP, lstm_op.OP, gru_op.OP], ids=lambda o: o.name)
def test_conv_and_recurrent_layers_take_every_layout_with_the_default_layouts_bits(op: Any) -> None:
    """The implicit-GEMM conv and the recurrent layers run their bf16 products on the layout asked for:
    the same bits as the default layout, within the float64 bound, and the plan says which layout ran."""
    for case in CONVS if op is conv_op.OP else RECURRENT:
        shape = op.shape_from_case(case)
        inputs = op.make_inputs(shape, "bf16", 5)
        reference = op.reference(shape, inputs)
        default = _outputs(op.plan(shape, inputs, Tiles(isa="amx-emu", threads=2)).output())
        for layout in LAYOUTS:
            plan = op.plan(shape, inputs, _layout_tiles(layout, "amx-emu", threads=2))
            out = plan.output()
            same = zip(_outputs(out), default, strict=True)
            assert all(np.array_equal(_bits(x), _bits(y)) for x, y in same), (case, layout)
            assert op.check(shape, out, inputs, reference, "bf16", "fp32")["ok"], (case, layout)
            info = plan.tiles()
            assert (info["amx_rows"], info["amx_cols"], info["amx_ksteps"]) == layout, (case, info)


def _outputs(out: Any) -> list[np.ndarray]:
    """A conv's y, or a recurrent layer's y, h_n (and c_n)."""
    if isinstance(out, tuple):
        y, states = out
        return [y, *(states if isinstance(states, tuple) else (states,))]
    return [out]


def test_the_layout_checks_can_fail() -> None:
    """One element off by one bf16 ulp fails the bit comparison and, at a product this size, the float64
    bound too."""
    shape = gemm_op.GemmShape(33, 130, 97)
    inp = gemm_op.make_inputs(shape, "bf16", 7)
    out = kernels.gemm(inp["a"], inp["b"], tiles=_layout_tiles((4, 1, 1), "amx-emu"))
    wrong = out.copy()
    _bits(wrong)[5, 77] += 64  # the exponent's lowest bit: twice or half the value
    assert not np.array_equal(_bits(wrong), _bits(out))
    assert not gemm_op.check(shape, wrong, inp, gemm_op.reference(shape, inp), "bf16", "fp32")["ok"]


def test_layouts_on_threads_and_batches() -> None:
    """Three threads dealing out row blocks, and a batch of products, on the widest and tallest layouts."""
    shape = gemm_op.GemmShape(101, 70, 80)
    inp = gemm_op.make_inputs(shape, "bf16", 3)
    base = kernels.gemm(inp["a"], inp["b"], tiles=Tiles(isa="amx-emu", threads=1))
    stack = {name: np.stack([x, x[::-1].copy()]) for name, x in inp.items()}
    for layout in [(1, 4, 1), (4, 1, 1), (1, 2, 2)]:
        out = kernels.gemm(inp["a"], inp["b"], tiles=_layout_tiles(layout, "amx-emu", threads=3))
        assert np.array_equal(_bits(out), _bits(base)), layout
        batched = kernels.gemm(stack["a"], stack["b"], tiles=_layout_tiles(layout, "amx-emu", threads=2))
        assert np.array_equal(_bits(batched[0]), _bits(base)), layout


@pytest.mark.skipif(bool(WHY_NOT), reason=f"AMX-BF16 cannot run here: {WHY_NOT}")
@pytest.mark.parametrize("dims", SHAPES, ids=_dims_id)
def test_the_cpus_tiles_run_every_layout_as_the_emulator(dims: tuple[int, int, int, int | None]) -> None:
    m, n, k, tile_k = dims
    shape = gemm_op.GemmShape(m, n, k)
    inp = gemm_op.make_inputs(shape, "bf16", 11)
    for layout in LAYOUTS:
        for threads in (1, 3):
            on = {isa: _layout_tiles(layout, isa, threads, tile_k) for isa in ("amx", "amx-emu")}
            real = kernels.gemm(inp["a"], inp["b"], tiles=on["amx"])
            emulated = kernels.gemm(inp["a"], inp["b"], tiles=on["amx-emu"])
            assert np.array_equal(_bits(real), _bits(emulated)), (layout, threads)


def test_bad_layouts_are_refused_naming_the_problem() -> None:
    a = np.ones((8, 8), BF16)
    cases = [
        (Tiles(isa="amx-emu", amx_rows=4, amx_cols=4), r"4x4 with amx_ksteps 1 is not a layout .*1x4, 4x1"),
        (Tiles(isa="amx-emu", amx_ksteps=2), r"2x2 with amx_ksteps 2 is not a layout"),
        (Tiles(isa="amx-emu", amx_rows=0), r"amx_rows must be >= 1"),
        (Tiles(isa="amx-emu", amx_cols=5), r"amx_cols = 2x5 with amx_ksteps 1 is not a layout"),
        (Tiles(isa="amx-emu", amx_cols=2**40), r"amx_cols must be <= 2147483647"),
        (Tiles(isa="ref", amx_rows=1), r"need isa 'amx' or 'amx-emu', not 'ref'"),
    ]
    for tiles, message in cases:
        with pytest.raises(ValueError, match=message):
            kernels.gemm(a, a, tiles=tiles)
    with pytest.raises(ValueError, match="AMX tile layout of bf16 inputs"):
        kernels.gemm(np.ones((8, 8), np.float32), np.ones((8, 8), np.float32), tiles=Tiles(amx_rows=1))
    x, w = np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)
    with pytest.raises(ValueError, match="AMX tile layout of bf16 inputs"):
        kernels.conv2d(x, w, tiles=Tiles(isa="amx-emu", amx_cols=1))
    with pytest.raises(ValueError, match="gemm_backward takes no amx_rows"):
        kernels.gemm_backward(a, a, a, tiles=Tiles(isa="amx-emu", amx_rows=1))


@pytest.mark.parametrize("op, name", [("gemm", "gemm_amx"), ("conv", "conv_amx"), ("lstm", "recurrent_amx")])
def test_the_tile_spaces_hold_exactly_the_kernels_layouts(op: str, name: str) -> None:
    """The AMX spaces' always-enforced rules admit the kernel's layouts and no other, without --cache-fit;
    gemm_amx's cache-fit rule stays optional."""
    names = {"m": 256, "n": 256, "k": 256, "mr": 32, "nr": 32, "l1_bytes": 48 << 10, "l2_bytes": 2 << 20}
    names.update({"l3_bytes": 32 << 20, "elem_bytes": 2, "batch": 16})
    space, _ = load_space(op, names, cache_fit=False, space=name)
    admitted = {
        (r, c, s)
        for r, c, s in itertools.product(*(space.values(p) for p in ("amx_rows", "amx_cols", "amx_ksteps")))
        if space.valid({"amx_rows": r, "amx_cols": c, "amx_ksteps": s})
    }
    assert admitted == set(LAYOUTS)
    assert space.constraints and all(c.always for c in space.constraints)
    if op == "gemm":
        fitted, _ = load_space("gemm", names, cache_fit=True, space="gemm_amx")
        assert not fitted.valid({"tile_m": 256, "tile_k": 8192})


def test_a_study_of_the_amx_space_runs_and_records_every_layout(tmp_path: Path) -> None:
    """`opbench tune gemm --dtype bf16 --isa amx-emu --space gemm_amx` over the layouts alone: the grid of
    4 x 4 x 2 indices, each point outside the layouts moved to the nearest layout (a reused measurement, not
    a new one), so every layout measured once, none refused, each trial's record naming the layout that
    ran."""
    args = ["tune", "gemm", "--m", "40", "--n", "72", "--k", "70", "--dtype", "bf16", "--isa", "amx-emu"]
    args += ["--space", "gemm_amx", "--params", "amx_rows,amx_cols,amx_ksteps", "--sampler", "grid"]
    args += ["--threads", "1", "--trials", "32", "--seed", "0", "--confirm-top", "1", *FAST_TRIALS]
    args += ["--confirm-rounds", "1", "--confirm-processes", "1", "--out", str(tmp_path)]
    optuna = import_or_skip("optuna")
    proc = run_cli(args)
    assert proc.returncode == 0, proc.stderr
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = f"sqlite:///{(tmp_path / 'tuning' / 'studies.db').resolve()}"
    (summary,) = optuna.get_all_study_summaries(storage)
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    measured = [t for t in done if "reused_from" not in t.user_attrs]
    ran = [tuple(t.user_attrs["tiles"][k] for k in ("amx_rows", "amx_cols", "amx_ksteps")) for t in measured]
    assert len(done) == 32 and sorted(ran) == sorted(LAYOUTS)


def test_a_tuned_layout_is_recorded_and_applied_by_sweep_tuned(tmp_path: Path) -> None:
    """A record naming a layout is valid, and `sweep --tuned` runs that layout and says so."""
    import json

    from opbench import tuned as records

    shape = gemm_op.GemmShape(33, 40, 70)
    layout = {"amx_rows": 1, "amx_cols": 4, "amx_ksteps": 1}
    record = {"op": "gemm", "dtype": "bf16", "shape": shape.to_dict(), "threads": 1, "isa": "amx-emu"}
    tiles = {"tile_m": 32, "tile_n": 64, "tile_k": 64, **layout}
    records.save({**record, "tiles": tiles, "study": "by hand"})
    args = ["sweep", "gemm", "--m", "33", "--n", "40", "--k", "70", "--dtype", "bf16", "--backend", "cpp"]
    args += ["--isa", "amx-emu", "--threads", "1", "--tuned", "--out", str(tmp_path), "--max-time-s", "0.05"]
    proc = run_cli(args)
    assert proc.returncode == 0, proc.stderr
    (doc,) = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    (case,) = doc["records"]
    assert case["status"] == "ok" and case["details"]["kernel"].startswith("AMX-BF16 16x64 (1x4 tiles")
    assert {k: case["details"]["tiles_effective"][k] for k in layout} == layout

"""conv2d's ways forced one at a time (Tiles.conv_path): each against the float64 reference on the odd
shapes of test_kernel_conv, both dtypes, every kernel set, several threads; refused with a message naming
why where it cannot run; carried through records, the sweep's cpp params and the tuner's worker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
from conftest import kernel_set_isas, run_as_row, run_cli
from test_kernel_conv import CASES, PIXEL_CASES, shape_of

from opbench import kernels, tuned
from opbench.dtypes import NUMPY_DTYPES
from opbench.kernels import _core
from opbench.ops import conv
from opbench.tiles import CONV_PATHS, Tiles

ISAS = kernel_set_isas()
BF16 = NUMPY_DTYPES["bf16"]
WAYS = CONV_PATHS[1:]  # every forced way ("model" is the planner's choice)
# What each way's plan reports as its path (csrc/conv/conv2d.cpp, ConvPlan::describe)
DESCRIBED = {
    "columns_in_place": "implicit GEMM, B rows read in place",
    "columns_gathered": "implicit GEMM, B micro-panels gathered",
    "rows_in_place": "implicit GEMM, output pixels as rows (A read in place",
    "rows_gathered": "implicit GEMM, output pixels as rows (A gathered",
    "pointwise_gemm": "1x1: W * x on the batched GEMM",
    "im2col_gemm": "im2col of all images side by side",
}


# The cases of CASES + PIXEL_CASES[::3] each way runs (the rest are strided, or not 1x1 without padding)
RUNS = {
    "columns_in_place": 19,
    "columns_gathered": 30,
    "rows_in_place": 30,
    "rows_gathered": 30,
    "pointwise_gemm": 5,
    "im2col_gemm": 30,
}


def refused(shape: conv.ConvShape, way: str) -> str | None:
    """Why `way` cannot run `shape` (the message's start), or None where it can."""
    stride1 = (shape.stride_h, shape.stride_w) == (1, 1)
    if way == "columns_in_place" and not stride1:
        return "conv_path=columns_in_place needs stride 1"
    unpadded = shape.padding == (0, 0, 0, 0) if isinstance(shape.padding, tuple) else shape.padding == 0
    if way == "pointwise_gemm" and not (shape.r == shape.s == 1 and stride1 and unpadded):
        return "conv_path=pointwise_gemm needs a 1x1 filter at stride 1 without padding"
    return None


def test_the_names_are_the_compiled_ones() -> None:
    assert tuple(_core.conv_path_names) == CONV_PATHS


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("way", WAYS)
def test_every_way_matches_float64_reference_where_it_runs(isa: str, dtype: str, way: str) -> None:
    ran = 0
    for i, case in enumerate(CASES + PIXEL_CASES[::3]):
        shape = shape_of(case)
        inp = conv.make_inputs(shape, dtype, seed=5)
        threads = 1 + i % 3
        why = refused(shape, way)
        if why is not None:
            with pytest.raises(ValueError, match=why):
                conv.plan(shape, inp, Tiles(threads=threads, isa=isa, conv_path=way))
            continue
        p = conv.plan(shape, inp, Tiles(threads=threads, isa=isa, conv_path=way))
        t = p.tiles()
        assert t["conv_path"] == way and t["path"].startswith(DESCRIBED[way]), (case, t["path"])
        y = p.output()
        ref = conv.reference(shape, inp)
        result = conv.check(shape, y, inp, ref, dtype, "fp32")
        assert result["ok"], (case, threads, result)
        ran += 1
    assert ran == RUNS[way]  # every case but those refused above


def bf16_widened(isa: str) -> bool:
    """Whether bf16 convs run the fp32 ways on kernel set `isa` (no bf16 unit, bf16 packers: conv2d.cpp's
    conv_bf16_widened); elsewhere bf16 has its own ways and refuses every forced one."""
    info = kernels.default_tiles(isa)["bf16"]
    return bool(info["fp32_units"]) and info["fp32_units_min_rows"] == 1


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("way", WAYS)
def test_bf16_runs_the_fp32_ways_widened_where_no_bf16_unit_exists(isa: str, way: str) -> None:
    """On a kernel set without a bf16 unit (AVX2's always) bf16 convs run the columns, pointwise and im2col
    ways with bf16 widened, each against float64 within the bf16 GEMM's bound on the same odd shapes; the
    pixels-as-rows ways are refused there, and every forced way where bf16 has its own."""
    widened = bf16_widened(isa)
    ran = 0
    for i, case in enumerate(CASES + PIXEL_CASES[::3]):
        shape = shape_of(case)
        inp = conv.make_inputs(shape, "bf16", seed=5)
        tiles = Tiles(threads=1 + i % 3, isa=isa, conv_path=way)
        if not widened:
            why: str | None = "applies to fp32 and fp16 convs .bf16 has its own ways on this kernel set"
        elif way.startswith("rows"):
            why = "applies to fp32 and fp16 convs .bf16 widened takes the columns, pointwise and im2col ways"
        else:
            why = refused(shape, way)
        if why is not None:
            with pytest.raises(ValueError, match=why):
                conv.plan(shape, inp, tiles)
            continue
        p = conv.plan(shape, inp, tiles)
        t = p.tiles()
        assert t["conv_path"] == way and t["path"].startswith(DESCRIBED[way]), (case, t["path"])
        assert "bf16 widened" in t["path"] and "bf16 widened" in t["kernel"], t
        result = conv.check(shape, p.output(), inp, conv.reference(shape, inp), "bf16", "fp32")
        assert result["ok"], (case, result)
        ran += 1
    assert ran == (RUNS[way] if widened and not way.startswith("rows") else 0)


AVX2 = pytest.mark.skipif("avx2" not in kernels.available_isas(), reason="this CPU lacks AVX2 and FMA")


@AVX2
def test_bf16_widened_takes_the_fp32_ways_by_the_model() -> None:
    """Without a bf16 unit the model takes the fp32 ways for bf16 on output planes of 28x28 and more, but
    for the pixels-as-rows convs (the stem), the 1x1s the bf16 GEMM reads in place and depthwise, which keep
    their bf16 ways, as do smaller planes. (On Zen 3 the stem is taken as columns: microarch.cpp [Z4].)"""
    zen3 = _core.kernel_info()["microarch"] == "Zen 3"
    cases = {
        (2, 64, 28, 28, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1): "columns_in_place",
        (2, 64, 56, 56, 64, 3, 3, 2, 2, 1, 1, 1, 1, 1): "columns_gathered",
        (2, 64, 28, 28, 64, 3, 3, 2, 2, 1, 1, 1, 1, 1): "",
        (4, 64, 7, 7, 128, 3, 3, 1, 1, 1, 1, 1, 1, 1): "",
        (2, 3, 64, 64, 16, 7, 7, 2, 2, 3, 3, 1, 1, 1): "columns_gathered" if zen3 else "",
        (2, 64, 14, 14, 32, 1, 1, 1, 1, 0, 0, 1, 1, 1): "",
        (2, 16, 14, 14, 16, 3, 3, 1, 1, 1, 1, 1, 1, 16): "",
    }
    for case, way in cases.items():
        shape = shape_of(case)
        inp = conv.make_inputs(shape, "bf16", seed=5)
        t = conv.plan(shape, inp, Tiles(threads=2, isa="avx2")).tiles()
        assert t["conv_path"] == way, (case, t)
        assert ("bf16 widened into" in t["path"] or "bf16 widened to fp32" in t["path"]) == (way != ""), t


@AVX2
@pytest.mark.parametrize("way", ["columns_in_place", "columns_gathered", "im2col_gemm"])
def test_a_wrong_answer_of_a_bf16_widened_way_fails_the_check(way: str) -> None:
    """The bf16 check that passes the widened ways fails one output off by a hundredth of the largest."""
    shape = shape_of((2, 64, 7, 7, 96, 3, 3, 1, 1, 1, 1, 1, 1, 1))
    inp = conv.make_inputs(shape, "bf16", seed=5)
    y = conv.plan(shape, inp, Tiles(threads=2, isa="avx2", conv_path=way)).output()
    ref = conv.reference(shape, inp)
    assert conv.check(shape, y, inp, ref, "bf16", "fp32")["ok"]
    wrong = y.astype(np.float32)
    wrong[1, 95, 6, 6] += 1e-2 * np.abs(ref).max()
    assert not conv.check(shape, wrong.astype(BF16), inp, ref, "bf16", "fp32")["ok"]


@pytest.mark.parametrize("way", [*WAYS[:4], "im2col_gemm"])
def test_a_wrong_answer_of_a_forced_way_fails_the_check(way: str) -> None:
    """One output off by a thousandth of the largest, at a way's own output: the check that passes the
    ways above fails it (the ways' outputs are checked by that same check)."""
    shape = shape_of((2, 64, 7, 7, 96, 3, 3, 1, 1, 1, 1, 1, 1, 1))
    inp = conv.make_inputs(shape, "fp32", seed=5)
    y = conv.plan(shape, inp, Tiles(threads=2, conv_path=way)).output()
    ref = conv.reference(shape, inp)
    assert conv.check(shape, y, inp, ref, "fp32", "fp32")["ok"]
    wrong = y.copy()
    wrong[1, 95, 6, 6] += 1e-3 * np.abs(ref).max()  # the last output: a partial tile on every way
    assert not conv.check(shape, wrong, inp, ref, "fp32", "fp32")["ok"]


def test_the_model_is_what_runs_without_a_way() -> None:
    """conv_path None and "model" plan alike; the way the model takes is named in tiles()["conv_path"],
    and forcing that way runs the same plan."""
    for case in CASES[:8] + PIXEL_CASES[:6]:
        shape = shape_of(case)
        inp = conv.make_inputs(shape, "fp32", seed=5)
        default = conv.plan(shape, inp, Tiles(threads=2)).tiles()
        assert conv.plan(shape, inp, Tiles(threads=2, conv_path="model")).tiles() == default
        if default["conv_path"]:  # depthwise ways are no choice's
            assert conv.plan(shape, inp, Tiles(threads=2, conv_path=default["conv_path"])).tiles() == default


X = np.ones((1, 4, 6, 6), np.float32)
W = np.ones((2, 4, 3, 3), np.float32)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda: kernels.conv2d(X, W, tiles=Tiles(conv_path="im2col")),
            "unknown conv_path 'im2col' \\(known: model",
        ),
        (lambda: kernels.conv2d(X, W, tiles=Tiles(conv_path=3)), "unknown conv_path 3"),  # type: ignore[arg-type]
        (lambda: kernels.conv2d(X, W, tiles={"conv_path": "rowz"}), "unknown conv_path 'rowz'"),
        (
            lambda: kernels.conv2d(X, W, stride=2, tiles=Tiles(conv_path="columns_in_place")),
            r"columns_in_place needs stride 1 .*got stride \(2, 2\)",
        ),
        (lambda: kernels.conv2d(X, W, tiles=Tiles(conv_path="pointwise_gemm")), "pointwise_gemm needs a 1x1"),
        (
            lambda: kernels.conv2d(
                X[:, :, :1].copy(),
                W[:, :, :1, :1].copy(),
                padding=(0, 1),
                tiles=Tiles(conv_path="pointwise_gemm"),
            ),
            "without padding",
        ),
        (
            lambda: kernels.conv2d(X.astype(BF16), W.astype(BF16), tiles=Tiles(conv_path="rows_in_place")),
            "conv_path=rows_in_place applies to fp32 and fp16 convs",
        ),
        (
            lambda: kernels.gemm(X[0, 0], X[0, 0], tiles=Tiles(conv_path="rows_in_place")),
            "gemm takes no conv_path",
        ),
        (
            lambda: kernels.conv2d_backward(
                X, W, np.ones((1, 2, 4, 4), np.float32), tiles=Tiles(conv_path="rows_in_place")
            ),
            "conv2d_backward takes no conv_path",
        ),
        (lambda: kernels.conv2d(X, W, tiles=Tiles(small_m=4)), "conv2d takes no small_m"),
    ],
)
def test_a_way_that_cannot_run_is_a_value_error_saying_why(call: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()  # type: ignore[operator]


def test_records_carry_a_way_and_refuse_an_unknown_one() -> None:
    good = {
        "op": "conv",
        "dtype": "fp32",
        "shape": {"n": 1},
        "threads": 1,
        "tiles": {"conv_path": "rows_in_place"},
    }
    assert tuned._well_formed(good)
    assert not tuned._well_formed({**good, "tiles": {"conv_path": "im2col"}})
    assert not tuned._well_formed({**good, "tiles": {"conv_path": 1}})
    assert Tiles.of({"tile_k": 64, "conv_path": "rows_gathered"}).record() == {
        "tile_k": 64,
        "conv_path": "rows_gathered",
    }


def test_a_sweep_forces_a_way_with_conv_path(tmp_path: Path) -> None:
    """`sweep conv --conv-path WAY` runs that way on our kernels and the result (and its repro) says so; an
    unknown way, or --conv-path on a GEMM sweep, is exit 2."""
    out = tmp_path / "r"
    argv = [
        "sweep",
        "conv",
        "--batch",
        "2",
        "--input-size",
        "9",
        "--in-channels",
        "8",
        "--out-channels",
        "12",
        "--filter-size",
        "3",
    ]
    argv += ["--padding", "1", "--rounds", "1", "--processes", "0", "--threads", "1", "--out", str(out)]
    ran = run_cli([*argv, "--backend", "cpp", "--conv-path", "rows_gathered", "--verbose"])
    assert ran.returncode == 0, ran.stderr
    doc = json.loads(next(out.glob("*.json")).read_text())
    assert {r["dtype"] for r in doc["records"]} == {"fp32", "fp16"}
    for record in doc["records"]:
        assert record["status"] == "ok" and record["verify"]["ok"], record["verify"]
        assert record["details"]["tiles_effective"]["conv_path"] == "rows_gathered"
        assert record["details"]["path"].startswith(DESCRIBED["rows_gathered"])
    assert "--conv-path rows_gathered" in ran.stdout  # the repro command
    bad = run_cli([*argv, "--conv-path", "im2col"])
    assert bad.returncode == 2 and "invalid choice: 'im2col'" in bad.stderr
    gemm = run_cli(["sweep", "gemm", "--m", "8", "--n", "8", "--k", "8", "--conv-path", "rows_in_place"])
    assert gemm.returncode == 2 and "--conv-path applies to conv sweeps" in gemm.stderr
    assert "Traceback" not in bad.stderr + gemm.stderr


def test_a_study_of_the_ways_records_the_winning_way(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`opbench tune conv --space conv_paths --params conv_path --sampler grid` measures every way (a strided
    conv's columns_in_place a failed trial that says why, in one line); the model's blocking is made 2 ms
    slower (fault injection, test builds), so a forced way wins beyond the intervals and its record carries
    conv_path, which `tuned_conv2d_tiles` gives back."""
    if not _core.fault_injection:
        pytest.skip("needs a build with OPBENCH_FAULT_INJECTION=ON (CI's)")
    shape = shape_of((2, 16, 9, 9, 24, 3, 3, 2, 2, 1, 1, 1, 1, 1))
    inp = conv.make_inputs(shape, "fp32", seed=5)
    model = conv.plan(shape, inp, Tiles(threads=1)).tiles()
    problem = (
        "--batch 2 --input-size 9 --in-channels 16 --out-channels 24 --filter-size 3 --stride 2 --padding 1"
    )
    records = tmp_path / "records"
    proc = run_cli(
        [
            "tune",
            "conv",
            *problem.split(),
            "--threads",
            "1",
            "--space",
            "conv_paths",
            "--params",
            "conv_path",
            "--sampler",
            "grid",
            "--trials",
            "4",
            "--confirm-top",
            "3",
            "--confirm-rounds",
            "3",
            "--out",
            str(tmp_path),
        ],
        env={
            "OPBENCH_FAULT_SLOW": f"{model['tile_m']}x{model['tile_n']}x{model['tile_k']}",
            "OPBENCH_RECORDS_DIR": str(records),
        },
    )
    assert proc.returncode == 0, proc.stderr
    assert "conv_path=columns_in_place needs stride 1" in proc.stdout and "Traceback" not in proc.stderr
    (saved,) = json.loads(next(records.glob("*.json")).read_text())["records"]
    # the confirmation's default row names the way the model took
    storage = f"sqlite:///{(tmp_path / 'tuning' / 'studies.db').resolve()}"
    (study,) = optuna.get_all_study_names(storage)
    confirmation = optuna.load_study(study_name=study, storage=storage).user_attrs["confirmation"]
    assert confirmation["default"]["tiles"]["conv_path"] == model["conv_path"]
    assert saved["tiles"]["conv_path"] in WAYS[1:4], saved
    monkeypatch.setenv("OPBENCH_RECORDS_DIR", str(records))
    tiles, note = tuned.tuned_conv2d_tiles(inp["x"], inp["w"], stride=2, padding=1, threads=1)
    assert tiles.conv_path == saved["tiles"]["conv_path"] and "exact" in note


CHOICES = Path(__file__).resolve().parents[1] / "tuning" / "choices" / "conv_paths.json"


def test_the_model_takes_a_way_the_tuner_measured_best() -> None:
    """tuning/choices/conv_paths.json (benchmarks/conv_paths.py: every way confirmed by `opbench tune`, per
    CPU, kernel set and threads): for every row of a kernel set this CPU runs, the planner's model takes a
    way near the best (within 5% of its median, or one the intervals cannot tell from it). The way depends
    on the kernel set's register tile, the geometry and the micro-architecture table's row (its
    strided_gather_cost), so each machine's rows are planned under its own row ($OPBENCH_MICROARCH, in a
    process of their own) on any CPU with that kernel set."""
    table = json.loads(CHOICES.read_text())
    for machine in table["machines"]:
        assert all(r["command"].startswith("python benchmarks/conv_paths.py") for r in machine["rows"])
    ways = model_ways(table)
    misplaced, checked = astray(table, ways)
    assert not misplaced, misplaced
    if not checked:
        pytest.skip(f"no measured rows for this CPU's kernel sets ({', '.join(ISAS)})")
    # the check can fail: a row whose near ways leave out the model's is reported
    first = next(m for m in table["machines"] if m["kernel_set"] in ISAS)["rows"][0]
    first["near_best"] = [w for w in WAYS if w != first["model"]]
    assert astray(table, ways)[0] == [(first["name"], first["threads"], first["model"])]


# Plans each given row (problem, threads, kernel set) and prints the ways the model takes, as JSON.
_PLAN_ROWS = """
import json, sys
import numpy as np
from opbench import kernels
from opbench.kernels import _core
from opbench.tiles import Tiles
ways = []
for problem, threads, isa in json.loads(sys.argv[1]):
    n, hw, c, k, f, stride, pad = (int(v) for v in problem.split()[1::2])
    x, w = np.zeros((n, c, hw, hw), np.float32), np.zeros((k, c, f, f), np.float32)
    plan = kernels.prepare_conv2d(x, w, stride=stride, padding=pad, tiles=Tiles(threads=threads, isa=isa))
    ways.append(plan.tiles()["conv_path"])
print(json.dumps({"microarch": _core.kernel_info()["microarch"], "ways": ways}))
"""


def model_ways(table: dict[str, Any]) -> dict[tuple[int, int], str]:
    """The way the model takes for row j of machine i, for the machines of kernel sets this CPU runs, each
    planned under the micro-architecture row of the CPU it was measured on."""
    ways: dict[tuple[int, int], str] = {}
    for i, machine in enumerate(table["machines"]):
        if machine["kernel_set"] not in ISAS:
            continue
        rows = [(r["problem"], r["threads"], machine["kernel_set"]) for r in machine["rows"]]
        done = run_as_row(_PLAN_ROWS, machine["identity"]["microarch"], argv=[json.dumps(rows)], timeout=120)
        assert done.returncode == 0, done.stderr
        planned = json.loads(done.stdout)
        assert planned["microarch"] == machine["identity"]["microarch"], planned
        ways.update({(i, j): way for j, way in enumerate(planned["ways"])})
    return ways


def astray(table: dict[str, Any], ways: dict[tuple[int, int], str]) -> tuple[list[tuple[str, int, str]], int]:
    """The rows (name, threads, the model's way) of kernel sets this CPU runs whose near ways leave out the
    way the model takes (model_ways), and how many rows were checked."""
    misplaced, checked = [], 0
    for i, machine in enumerate(table["machines"]):
        if machine["kernel_set"] not in ISAS:
            continue
        for j, r in enumerate(machine["rows"]):
            if ways[(i, j)] not in r["near_best"]:
                misplaced.append((r["name"], r["threads"], ways[(i, j)]))
            checked += 1
    return misplaced, checked


@pytest.mark.skipif("avx2" not in ISAS, reason="the quiet kernel is the AVX2 tile's")
@pytest.mark.parametrize("row", ["Zen 3", "Zen 4"])
def test_columns_in_place_with_and_without_the_rows_prefetch_match_float64(row: str) -> None:
    """conv2d's columns read in place run ukernel_rows or, on the rows of the micro-architecture table whose
    rows_of_b_prefetch is off (Zen 3: microarch.cpp [Z5]), the AVX2 kernel's ukernel_rows_quiet: both, on
    any AVX2 CPU ($OPBENCH_MICROARCH in a process of its own), on the odd stride-1 cases, 1-3 threads and a
    K block of 5 (several calls per tile, the last one short), against float64."""
    script = """
import sys
from opbench import kernels
from opbench.ops import conv
from opbench.tiles import Tiles
sys.path.insert(0, TESTS)
from test_kernel_conv import CASES, PIXEL_CASES, shape_of
assert kernels.default_tiles("avx2")["microarch"] == ROW
runs = 0
for case in CASES + PIXEL_CASES:
    shape = shape_of(case)
    if (shape.stride_h, shape.stride_w) != (1, 1) or shape.groups == shape.c:
        continue
    inp = conv.make_inputs(shape, "fp32", seed=7)
    for threads, tiles in ((1, {}), (3, {}), (2, {"tile_k": 5})):
        plan = conv.plan(shape, inp, Tiles.of({**tiles, "conv_path": "columns_in_place"}, threads, "avx2"))
        result = conv.check(shape, plan.output(), inp, conv.reference(shape, inp), "fp32", "fp32")
        assert result["ok"], (case, threads, tiles, result)
        runs += 1
assert runs >= 40, runs
print(runs)
""".replace("ROW", repr(row)).replace("TESTS", repr(str(Path(__file__).resolve().parent)))
    done = run_as_row(script, row, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.skipif("avx2" not in ISAS, reason="the choice is measured for the AVX2 6x16 tile")
def test_the_avx2_tile_takes_the_im2col_gemm_only_where_the_columns_waste_a_fifth() -> None:
    """conv2d_im2col.cpp's rule: fp32 stride-1 convs whose columns path wastes a fifth more of its tiles'
    columns than one GEMM over the batch (7x7 3x3 at batch 4 and 8: 64 columns per image for 49 pixels), not
    14x14 (1.14), not one or two images of 7x7 (the GEMM's last tile is as short), not strided, not fp16, not
    under 64 output channels per group."""

    def way(n: int, hw: int, c: int, stride: int = 1, dtype: type = np.float32) -> str:
        x, w = np.zeros((n, c, hw, hw), dtype), np.zeros((c, c, 3, 3), dtype)
        tiles = Tiles(threads=2, isa="avx2")
        return str(kernels.prepare_conv2d(x, w, stride=stride, padding=1, tiles=tiles).tiles()["conv_path"])

    assert way(4, 7, 512) == way(8, 7, 512) == "im2col_gemm"
    # the columns, in place or gathered (test_stride_1_columns_gather_where_the_padded_width_wastes_more)
    columns = ("columns_in_place", "columns_gathered")
    assert way(1, 7, 512) in columns and way(2, 7, 512) in columns and way(4, 14, 256) in columns
    assert way(4, 7, 512, dtype=np.float16) in columns
    assert way(4, 7, 32) in columns  # few channels: the copies outweigh the GEMM's gain
    assert way(8, 14, 512, stride=2) != "im2col_gemm"


_STRIDE_1_WAYS = """
import json, sys
import numpy as np
from opbench import kernels
from opbench.tiles import Tiles
ways = {}
for name, (c, hw, k, f, pad) in json.loads(sys.argv[1]).items():
    x, w = np.zeros((8, c, hw, hw), np.float32), np.zeros((k, c, f, f), np.float32)
    for threads in (1, 2):
        plan = kernels.prepare_conv2d(x, w, padding=pad, tiles=Tiles(threads=threads, isa="avx2"))
        ways[f"{name} {threads}"] = plan.tiles()["conv_path"]
print(json.dumps(ways))
"""


@pytest.mark.skipif("avx2" not in ISAS, reason="the choice is measured for the AVX2 6x16 tile")
@pytest.mark.parametrize("row", ["Zen 3", "Zen 4"])
def test_stride_1_columns_gather_where_the_padded_width_wastes_more(row: str) -> None:
    """padded.hpp's columns_gather_at_stride1: 3x3 padding-1 convs whose in-place columns drop 2 of every Wp
    columns gather B instead where the tiles that saves are more than 1.5 times the gather's share (the row's
    strided_gather_cost over up to 96 rows): on Zen 3 (cost 4) at 28x28 with 128 channels (7.5% of the tiles
    against 4.2%) and 14x14 (7.1%), not at 28x28 with 64 channels (against 6.3%) nor 56x56 (3.4%); on Zen 4
    (cost 20) none of them. A 1x1 without padding drops nothing."""
    shapes = {
        "56x56": (64, 56, 64, 3, 1),
        "28x28": (128, 28, 128, 3, 1),
        "28x28 64 ch": (64, 28, 64, 3, 1),
        "14x14": (256, 14, 256, 3, 1),
        "1x1 14x14": (1024, 14, 256, 1, 0),
    }
    done = run_as_row(_STRIDE_1_WAYS, row, argv=[json.dumps(shapes)], timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    ways = json.loads(done.stdout)
    gathered = {"28x28", "14x14"} if row == "Zen 3" else set()
    want = {f"{name} {t}": "columns_gathered" if name in gathered else "columns_in_place" for name in shapes
            for t in (1, 2)}  # fmt: skip
    assert ways == want

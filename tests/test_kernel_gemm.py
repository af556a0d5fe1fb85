"""opbench.kernels.gemm against a float64 numpy reference: odd and round shapes, both dtypes, every kernel
set this CPU runs, several thread counts and tilings, with an error bound that grows with K and depends on
the dtype (ops.gemm.error_bound)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import kernel_set_isas

from opbench import kernels
from opbench.ops import gemm as gemm_op
from opbench.tiles import Tiles

ISAS = kernel_set_isas()
DTYPES = {"fp32": np.float32, "fp16": np.float16}

# 1, primes (257, 509), and sizes that are multiples of nothing in sight.
ODD_SHAPES = [
    (1, 1, 1),
    (1, 1, 257),
    (1, 509, 1),
    (509, 1, 1),
    (2, 3, 5),
    (13, 17, 19),
    (257, 257, 257),
    (509, 131, 257),
    (15, 33, 1000),
    (37, 509, 3),
]
ROUND_SHAPES = [(64, 64, 64), (128, 256, 512), (256, 32, 128)]
# Shapes that take the driver's other paths: N <= 4 (dot products over unpacked rows of A; rows in passes
# of 8 or 4, K in vectors plus a tail) and the narrow register tile (when it pads N less than the main one).
PATH_SHAPES = [(97, 2, 33), (300, 4, 517), (1000, 3, 64), (61, 16, 45), (129, 48, 70), (40, 5, 300)]
# M = 1 (a GEMV streaming B unpacked): K in groups of 8 rows plus a short group, N in column blocks of 2048
# split between threads in steps of 16; on 2-5 threads B's rows split between them where K >= 64 x threads
# and K x threads >= N (small.cpp, splits_k: 1x67x4099 and 1x523x331).
ROW_SHAPES = [
    (1, 2, 3),
    (1, 5000, 31),
    (1, 67, 4099),
    (1, 4096, 9),
    (1, 17, 8),
    (1, 2049, 16),
    (1, 523, 331),
]


def inputs_for(m: int, n: int, k: int, dtype: str, seed: int = 1) -> dict[str, np.ndarray]:
    return gemm_op.make_inputs(gemm_op.GemmShape(m, n, k), dtype, seed)


def assert_close(c: np.ndarray, inp: dict[str, np.ndarray], dtype: str) -> None:
    shape = gemm_op.GemmShape(inp["a"].shape[0], inp["b"].shape[1], inp["a"].shape[1])
    ref = gemm_op.reference(shape, inp)
    result = gemm_op.check(shape, c, inp, ref, dtype, accumulate="fp32")
    assert result["ok"], (
        f"error {result['max_err_ratio']:.3g}x the bound (max rel err {result['max_rel_err']:.3g})"
    )


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape", ODD_SHAPES + ROUND_SHAPES + PATH_SHAPES, ids=lambda s: "x".join(map(str, s))
)
def test_matches_float64_reference(isa: str, dtype: str, shape: tuple[int, int, int]) -> None:
    inp = inputs_for(*shape, dtype)
    c = kernels.gemm(inp["a"], inp["b"], tiles=Tiles(isa=isa))
    assert c.shape == (shape[0], shape[1]) and c.dtype == DTYPES[dtype]
    assert_close(c, inp, dtype)


# (batch, m, n, k): one product, a prime count of odd ones, fewer products than threads, attention-like ones;
# the threads share 3x129 and 1x101 in blocks of rows, a thread's share of 3x129 crossing products
BATCHED = [
    (1, 7, 5, 3), (5, 17, 31, 13), (2, 1, 67, 9), (3, 129, 16, 70), (13, 64, 64, 32), (4, 9, 1, 257),
    (1, 101, 33, 47),
]  # fmt: skip


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", [*DTYPES, "bf16"])
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dims", BATCHED, ids=lambda d: "x".join(map(str, d)))
def test_batched_gemm_matches_float64_reference(
    isa: str, dtype: str, threads: int, dims: tuple[int, ...]
) -> None:
    b, m, n, k = dims
    shape = gemm_op.GemmShape(m, n, k, b)
    inp = gemm_op.make_inputs(shape, dtype, 4)
    if b == 1:  # a stack of one product is a batched GEMM too (a plain GEMM's shape has 2-D operands)
        inp = {name: x[None] for name, x in inp.items()}
    plan = kernels.prepare_gemm(inp["a"], inp["b"], tiles=Tiles(threads=threads, isa=isa))
    c = plan.output()
    assert c.shape == (b, m, n) and c.dtype == inp["a"].dtype and plan.tiles()["path"].startswith("batched")
    if threads == 2 and m in (129, 101):
        assert plan.tiles()["path"].startswith("batched, blocks of") and plan.tiles()["batch_rows"] < m
    result = gemm_op.check(shape, c, inp, gemm_op.reference(shape, inp), dtype, "fp32")
    assert result["ok"], result
    # every product is its own: one product computed from another's operands fails
    if b > 1:
        wrong = c.copy()
        wrong[b - 1] = c[0]
        assert not gemm_op.check(shape, wrong, inp, gemm_op.reference(shape, inp), dtype, "fp32")["ok"]


def test_batched_gemm_refuses_mismatched_operands() -> None:
    a, b = np.ones((3, 4, 5), np.float32), np.ones((2, 5, 6), np.float32)
    with pytest.raises(ValueError, match="both 3-D with the same batch"):
        kernels.gemm(a, b)
    with pytest.raises(ValueError, match=r"a.shape\[2\] must equal b.shape\[1\]"):
        kernels.gemm(a, np.ones((3, 4, 6), np.float32))
    with pytest.raises(ValueError, match="out must not overlap"):
        kernels.gemm(a, np.ones((3, 5, 5), np.float32), out=a)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("threads", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("shape", ROW_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_one_row_of_a_streams_b(isa: str, dtype: str, threads: int, shape: tuple[int, int, int]) -> None:
    inp = inputs_for(*shape, dtype)
    assert_close(kernels.gemm(inp["a"], inp["b"], tiles=Tiles(isa=isa, threads=threads)), inp, dtype)
    # Accumulating into C (the recurrent layers' per-step product) and B^T (their weights) take it too.
    m, n, k = shape
    a, bt = inp["a"], np.ascontiguousarray(inp["b"].T)
    x = np.zeros((1, 1, k), a.dtype)
    x[0] = a
    h = np.zeros((1, n), a.dtype)
    zero = np.zeros(n, a.dtype)
    w_ih = np.zeros((n, k), a.dtype)
    (y, _) = kernels.rnn(
        x, w_ih, np.zeros((n, n), a.dtype), zero, zero, h, tiles=Tiles(isa=isa, threads=threads)
    )
    assert np.array_equal(y, np.zeros_like(y))
    (y, _) = kernels.rnn(
        x, bt, np.zeros((n, n), a.dtype), zero, zero, h, nonlinearity="relu", tiles=Tiles(isa=isa)
    )
    ref = np.maximum(a.astype(np.float64) @ inp["b"].astype(np.float64), 0)
    tol = (
        4 * k * (6e-8 if dtype == "fp32" else 1e-3) * (np.abs(a.astype(np.float64)) @ np.abs(inp["b"])) + 1e-3
    )
    assert (np.abs(y[0].astype(np.float64) - ref) <= tol).all()


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("threads", [1, 2, 3, 7])
@pytest.mark.parametrize(
    "tiles",
    [(None, None, None), (5, 7, 3), (1, 1, 1), (29, 45, 17), (10**9, 10**9, 10**9)],
    ids=["model", "5-7-3", "1-1-1", "29-45-17", "huge"],
)
@pytest.mark.parametrize("mnk", [(61, 67, 71), (61, 16, 71), (500, 3, 71)], ids=["main", "narrow", "thin"])
def test_tiles_and_threads_do_not_change_the_answer(
    isa: str, dtype: str, threads: int, tiles: tuple, mnk: tuple[int, int, int]
) -> None:
    inp = inputs_for(*mnk, dtype, seed=threads)
    tm, tn, tk = tiles
    c = kernels.gemm(inp["a"], inp["b"], tiles=Tiles(m=tm, n=tn, k=tk, threads=threads, isa=isa))
    assert_close(c, inp, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_kernel_sets_agree_closely(dtype: str) -> None:
    inp = inputs_for(100, 90, 300, dtype)
    outs = [kernels.gemm(inp["a"], inp["b"], tiles=Tiles(isa=isa)).astype(np.float64) for isa in ISAS]
    for other in outs[1:]:
        # Different summation orders, same fp32 accumulation: within two bounds of each other.
        bound = gemm_op.error_bound(
            inp, gemm_op.reference(gemm_op.GemmShape(100, 90, 300), inp), "fp32", dtype
        )
        assert np.all(np.abs(outs[0] - other) <= 2 * bound)


def test_row_strided_views_and_out_argument() -> None:
    big_a = np.random.default_rng(3).uniform(-1, 1, (50, 80)).astype(np.float32)
    big_b = np.random.default_rng(4).uniform(-1, 1, (70, 90)).astype(np.float32)
    a, b = big_a[5:45, 3:63], big_b[10:70, 7:47]  # leading dimensions 80 and 90, not contiguous
    out_big = np.zeros((60, 64), np.float32)
    out = out_big[10:50, 4:44]
    res = kernels.gemm(a, b, out=out)
    assert res.base is out_big or np.shares_memory(res, out_big)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.allclose(out, ref, rtol=1e-5, atol=1e-5)
    assert np.all(out_big[:10] == 0) and np.all(out_big[:, :4] == 0)  # nothing written outside the view


def test_the_tolerance_can_fail() -> None:
    """The bound is tight enough to catch a kernel that drops one term of the K sum."""
    shape = gemm_op.GemmShape(40, 30, 509)
    inp = inputs_for(40, 30, 509, "fp32")
    a, b = inp["a"], inp["b"]
    c = kernels.gemm(a, b)
    wrong = (c - np.outer(a[:, 17], b[17, :])).astype(np.float32)
    ref = gemm_op.reference(shape, inp)
    assert gemm_op.check(shape, c, inp, ref, "fp32", "fp32")["ok"]
    assert not gemm_op.check(shape, wrong, inp, ref, "fp32", "fp32")["ok"]


def test_fp16_overflow_becomes_inf_like_numpy() -> None:
    a = np.full((2, 64), 60.0, np.float16)
    b = np.full((64, 3), 60.0, np.float16)  # 64 * 3600 = 230400 > 65504
    c = kernels.gemm(a, b)
    assert np.all(np.isinf(c)) and np.all(c > 0)


def test_repeated_calls_with_varying_threads_never_hang() -> None:
    """Regression: a freshly spawned pool worker once slept through its first job."""
    rng = np.random.default_rng(0)
    for i in range(300):
        m, n, k = 1 + i % 37, 1 + (i * 7) % 53, 1 + (i * 3) % 41
        a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        c = kernels.gemm(a, b, tiles=Tiles(threads=1 + i % 5, m=1 + i % 9, n=1 + i % 11, k=1 + i % 13))
        assert np.allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-5)


# Three Python threads (each GEMM releases the GIL) start parallel jobs of 2-6 threads back to back, so the
# pool's workers keep meeting jobs published while they read another one (its sequence lock) and jobs that
# need fewer of them than the last. A process of its own: a hang is a timeout, not a stuck suite.
POOL_STRESS = """
import sys, threading
import numpy as np
from opbench import kernels
from opbench.tiles import Tiles

wrong = []
def caller(seed):
    rng = np.random.default_rng(seed)
    for i in range(int(sys.argv[1])):
        m, n, k = 8 + i % 29, 16 + (i * 7) % 61, 4 + (i * 3) % 23
        a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        c = kernels.gemm(a, b, tiles=Tiles(threads=2 + (i + seed) % 5, m=8, n=16, parallel_flops=0))
        if not np.allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-5):
            wrong.append((seed, i))
callers = [threading.Thread(target=caller, args=(seed,)) for seed in range(3)]
for t in callers:
    t.start()
for t in callers:
    t.join()
print("wrong", wrong)
"""


def test_the_pool_under_back_to_back_jobs_of_every_width() -> None:
    done = subprocess.run(
        [sys.executable, "-c", POOL_STRESS, "600"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "wrong []"


def test_a_default_build_ignores_the_fault_switch() -> None:
    if kernels.fault_injection():
        pytest.skip("a test build: the switch is live here (tests/test_tune.py uses it)")
    tiles = kernels.default_tiles(None, 8)
    env = {**os.environ, "OPBENCH_FAULT_CRASH": "{tile_m}x{tile_n}x{tile_k}".format(**tiles)}
    code = "import numpy as np; from opbench import kernels; a = np.ones((8, 8), np.float32); "
    code += "assert (kernels.gemm(a, a, tiles=kernels.Tiles(threads=1)) == 8).all(); print('ok')"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_one_isa_table_drives_dispatch_peaks_and_the_cli() -> None:
    from opbench.cli.parser import build_parser
    from opbench.errors import UsageError

    known, here = kernels.known_isas(), kernels.available_isas()
    # best first, ref last among the CPU's, then the emulations (amx-emu), which never count as the CPU's
    assert known[-2:] == ("ref", "amx-emu") and here == [isa for isa in known if isa in here]
    assert "amx-emu" not in here
    for isa in here:
        assert kernels.default_tiles(isa)["isa"] == isa
        _, loop = kernels.fma_peak("fp32", 1, 0.002, 1, isa)
        # amx's fp32 is AVX-512's (its tiles multiply bf16 only)
        assert loop.startswith({"amx": "avx512", "ref": "portable"}.get(isa, isa))
    for isa in known:
        assert build_parser().parse_args(["sweep", "gemm", "--isa", isa]).isa == isa
    with pytest.raises(UsageError, match="invalid choice.*" + ".*".join(known)):
        build_parser().parse_args(["sweep", "gemm", "--isa", "avx1024"])


def test_cpu_features_report_dispatch() -> None:
    f = kernels.cpu_features()
    # the best kernel set this CPU runs, or the one $OPBENCH_ISA forces (how CI runs the suite per ISA)
    assert f["selected_isa"] == (os.environ.get("OPBENCH_ISA") or kernels.available_isas()[0])
    assert f["isas"][-1] == "ref"
    assert set(f["features"]) >= {"avx2", "fma", "f16c", "avx512f", "avx512fp16"}
    t = f["kernel"]
    assert t["mr"] >= 1 and t["nr"] >= 1 and t["tile_k"] >= 8
    assert t["tile_m"] % t["mr"] == 0 and t["tile_n"] % t["nr"] == 0
    for level in ("l1d", "l2", "l3"):
        assert f["caches"][level]["size_bytes"] > 0


@pytest.mark.parametrize("isa", ISAS)
def test_opbench_isa_forces_the_kernel_set_for_every_op(isa: str) -> None:
    """OPBENCH_ISA picks the kernel set for every call that does not name one (how CI tests the AVX2 and
    portable paths on an AVX-512 machine): gemm on all three driver paths, conv and LSTM, both dtypes, and
    every other op and backward pass through its plan."""
    script = """
import numpy as np
from opbench import kernels
from opbench.ops import conv, gemm, get_op, lstm
assert kernels.cpu_features()["selected_isa"] == ISA, kernels.cpu_features()["selected_isa"]
for dtype in ("fp32", "fp16"):
    for m, n, k in ((61, 67, 71), (61, 16, 71), (300, 3, 71)):
        s = gemm.GemmShape(m, n, k)
        i = gemm.make_inputs(s, dtype, 3)
        assert gemm.check(s, kernels.gemm(i["a"], i["b"]), i, gemm.reference(s, i), dtype, "fp32")["ok"]
    s = conv.shape_from_case({"n": 2, "c": 3, "h": 9, "w": 9, "k": 5, "r": 3, "s": 3, "pad_h": 1, "pad_w": 1})
    i = conv.make_inputs(s, dtype, 3)
    y = kernels.conv2d(i["x"], i["w"], stride=s.stride_h, padding=s.pad_h)
    assert conv.check(s, y, i, conv.reference(s, i), dtype, "fp32")["ok"]
    s = conv.shape_from_case({"n": 2, "c": 3, "h": 9, "w": 9, "k": 5, "r": 3, "s": 3, "pad_h": 2, "pad_w": 0,
                              "pad_h_end": 0, "pad_w_end": 1})
    i = conv.make_inputs(s, dtype, 3)
    assert conv.check(s, kernels.conv2d(i["x"], i["w"], padding=s.padding), i, conv.reference(s, i), dtype,
                      "fp32")["ok"]
    s = gemm.GemmShape(19, 23, 17, 5)
    i = gemm.make_inputs(s, dtype, 3)
    c = kernels.gemm(i["a"], i["b"], tiles=kernels.Tiles(threads=2))
    assert gemm.check(s, c, i, gemm.reference(s, i), dtype, "fp32")["ok"]
    s = lstm.LstmShape(4, 3, 7, 9)
    i = lstm.OP.make_inputs(s, dtype, 3)
    out = kernels.lstm(i["x"], i["w_ih"], i["w_hh"], i["b_ih"], i["b_hh"], i["h0"], i["c0"])
    assert lstm.OP.check(s, out, i, lstm.reference(s, i), dtype, "fp32")["ok"]
    small = {
        "gemm": {"m": 19, "n": 23, "k": 17},
        "conv": {"n": 2, "c": 4, "h": 9, "w": 8, "k": 6, "r": 3, "s": 3, "stride_h": 2, "groups": 2},
        "rnn": {"seq_len": 3, "batch": 2, "input_size": 5, "hidden": 7, "relu": 1},
        "gru": {"seq_len": 3, "batch": 2, "input_size": 5, "hidden": 7},
        "lstm": {"seq_len": 3, "batch": 2, "input_size": 5, "hidden": 7},
    }
    for key in ("rnn", "gru", "gemm:bwd", "conv:bwd", "rnn:bwd", "gru:bwd", "lstm:bwd"):
        op = get_op(key)
        s = op.shape_from_case(small[key.partition(":")[0]])
        i = op.make_inputs(s, dtype, 3)
        out = op.plan(s, i, kernels.Tiles(threads=2)).output()
        assert op.check(s, out, i, op.reference(s, i), dtype, "fp32")["ok"], key
print("ok")
""".replace("ISA", repr(isa))
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env={**os.environ, "OPBENCH_ISA": isa}
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


@pytest.mark.parametrize("isa", ISAS)
def test_default_tile_k_follows_the_micro_panel_home(isa: str) -> None:
    # The blocked path's B micro-panel takes two ways of L2 on the AVX-512 14x32 tile and a sixteenth of L2
    # on the others (whose few-rows path keeps Low et al.'s L1 depth); a GEMM with few columns reports the
    # narrow tile it runs, with its own model.
    from opbench import _core

    caches = _core.cpu_info()["caches"]
    l2 = caches["l2"]
    info = _core.kernel_info(isa)
    mr, nr = info["mr"], info["nr"]
    if isa in ("avx512", "amx"):  # (amx's fp32 kernel set is AVX-512's)
        expected = 2 * l2["sets"] * l2["line_bytes"] // (nr * 4)
    else:
        expected = l2["size_bytes"] // 16 // (nr * 4)
    assert info["tile_k"] == max(8, expected // 8 * 8)
    # The packed A block keeps to half of the L2 ways left beside the B micro-panel, the rest to the C tiles
    # streaming through. The few-rows path's default reach (small_m) is the A block that fills them; an
    # L1-fed tile, which must find B's micro-panel in L1, reads B in place for at most 128 (168 where it packs
    # B four micro-panels at a time instead: small.cpp's b_group_rows).
    assert info["tile_m"] % mr == 0 and info["tile_m"] * info["tile_k"] * 4 <= l2["size_bytes"] // 2
    assert info["small_m"] % mr == 0
    l1_reach = 168 if info["b_group_rows"] else 128
    assert info["small_m"] >= info["tile_m"] if isa in ("avx512", "amx") else info["small_m"] <= l1_reach
    narrow = _core.kernel_info(isa, 8)
    assert narrow["nr"] <= nr and (narrow["nr"] < nr) == (isa != "ref")
    wide = _core.kernel_info(isa, 4096)
    assert {k: wide[k] for k in ("nr", "tile_k")} == {"nr": nr, "tile_k": info["tile_k"]}


def _pool_workers() -> list[int]:
    out = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                if f.read().strip() == "opbench-pool":
                    out.append(int(task))
        except OSError:
            continue
    return out


def _current_cpu() -> int:
    with open("/proc/thread-self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs CPU affinity (Linux)")
def test_the_pools_worker_runs_on_another_cpu_than_the_caller() -> None:
    """Left to the scheduler, our worker and the calling thread sometimes shared one CPU of two for a whole
    process (a 40 us convolution took up to 1.1 ms): the pool pins its workers to the other CPUs, around
    the CPU the caller is on at each call."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    a = np.ones((64, 64), np.float32)
    apart = 0
    for _ in range(5):
        kernels.gemm(a, a, tiles=Tiles(threads=2))
        here = _current_cpu()
        workers = _pool_workers()
        assert workers, "no opbench-pool thread found"
        pinned = os.sched_getaffinity(workers[0])
        assert len(pinned) == 1 and pinned <= set(cpus)  # one CPU of ours, not the scheduler's choice
        apart += here not in pinned  # (the caller may have moved since the call)
    assert apart >= 1

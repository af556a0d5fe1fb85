"""The few-rows path's B packed four micro-panels at a time (csrc/gemm/small.cpp, b_group_rows): on the
micro-architecture rows that take it (Zen 4's, forced with OPBENCH_MICROARCH on any CPU) and the AVX2 tile,
every offset of B into a cache line, groups cut short by N, by tile_n and by a thread's share of the columns,
a partial last micro-panel, several K blocks and 1-3 threads, each product exact (small integers), and the
paths the rows and B's alignment and size choose."""

from __future__ import annotations

import pytest
from conftest import run_as_row

from opbench import kernels

SCRIPT = """
import numpy as np
from opbench import kernels

info = kernels.default_tiles("avx2")
assert info["microarch"] == "Zen 4", info["microarch"]
rows = info["b_group_rows"]
assert rows == 4 * info["mr"] == 24, info
rng = np.random.default_rng(7)

def at_offset(x, floats):
    buf = np.empty(x.size + 32, x.dtype)
    start = (-buf.ctypes.data % 64) // x.itemsize + floats
    out = buf[start : start + x.size].reshape(x.shape)
    out[:] = x
    return out

def product(m, n, k, offset, threads, tiles=None):
    a = rng.integers(-2, 3, (m, k)).astype(np.float32)
    b = at_offset(rng.integers(-2, 3, (k, n)).astype(np.float32), offset)
    plan = kernels.prepare_gemm(a, b, tiles=kernels.Tiles(isa="avx2", threads=threads, **(tiles or {})))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(plan.output().astype(np.float64), exact)
    return plan.tiles()["path"]

GROUPED = "unpacked B (M <= small_m: B packed 4 micro-panels at a time)"
IN_PLACE = "unpacked B (M <= small_m: B read in place)"
# (m, n, k, offset of B in floats, threads, tiles): a group and 3 columns; whole groups and one column; three
# panels (a short group); a line-aligned B; a tile_n narrower than a group; K blocks of 64 and a last one of
# 45; two and three threads' shares of the columns; 126 rows (small_m); 1000 columns.
CASES = [
    (24, 67, 7, 4, 1, {}),
    (25, 257, 1, 5, 2, {}),
    (31, 48, 301, 0, 1, {"k": 64}),
    (47, 131, 173, 4, 3, {"n": 40}),
    (60, 97, 45, 15, 2, {}),
    (97, 300, 128, 1, 3, {"k": 64}),
    (126, 1000, 37, 4, 2, {}),
]
for m, n, k, offset, threads, tiles in CASES:
    assert product(m, n, k, offset, threads, tiles) == GROUPED, (m, n, k)
# fewer rows read B in place (or stream it); the path reaches 168 rows (small_m) here, not the 126 of the
# tile that reads B in place, and a given small_m holds
assert product(23, 67, 7, 4, 1) != GROUPED
assert info["small_m"] == 168, info
assert product(168, 67, 7, 4, 2) == GROUPED
assert product(169, 67, 7, 4, 2).startswith("blocked")
assert product(150, 67, 7, 4, 1, {"small_m": 140}).startswith("blocked")
assert product(140, 67, 7, 4, 1, {"small_m": 140}) == GROUPED
# rows 16 KiB apart (4096 columns) alias in L1: in place up to aliased_small_m rows, packed in groups past it
assert product(33, 4096, 5, 4, 2) == GROUPED
# a line-aligned B past half of L3 stays in place for up to 32 rows, and packs in groups past them
l3 = kernels.l3_bytes()
if l3 <= 64 << 20:
    k = l3 // 2 // (4 * 1024) + 1
    assert product(32, 1024, k, 0, 2) == IN_PLACE
    assert product(33, 1024, k, 0, 2) == GROUPED
    assert product(32, 1024, k, 4, 2) == GROUPED
print("ok")
"""


@pytest.mark.skipif("avx2" not in kernels.available_isas(), reason="this CPU lacks AVX2 and FMA")
def test_b_packed_in_groups_is_exact_on_odd_shapes() -> None:
    proc = run_as_row(SCRIPT, "Zen 4", timeout=99)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


# Zen 3's few rows against a B from memory with long rows (microarch.cpp [Z6]): K blocks of 32 rows for two
# and three tiles of rows, a last K block of 5 or 6 rows, a partial last micro-panel, a thread's share of the
# columns past 8 KiB and just under it (two threads at 4103 and 4064 columns), against the exact product.
ZEN3_SCRIPT = """
import numpy as np
from opbench import kernels

info = kernels.default_tiles("avx2")
assert info["microarch"] == "Zen 3", info["microarch"]
rng = np.random.default_rng(11)
l3 = kernels.l3_bytes()
for m, n, threads in ((7, 2053, 1), (13, 4103, 2), (18, 4064, 2), (12, 2049, 1)):
    k = (l3 // 2 // (4 * n) + 37) // 32 * 32 + 5 + m % 2
    a = rng.integers(-2, 3, (m, k)).astype(np.float32)
    b = rng.integers(-2, 3, (k, n)).astype(np.float32)
    plan = kernels.prepare_gemm(a, b, tiles=kernels.Tiles(isa="avx2", threads=threads))
    assert plan.tiles()["path"] == "unpacked B (M <= small_m: B read in place)", plan.tiles()
    exact = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(plan.output().astype(np.float64), exact)
print("ok")
"""


@pytest.mark.skipif("avx2" not in kernels.available_isas(), reason="this CPU lacks AVX2 and FMA")
@pytest.mark.skipif(kernels.l3_bytes() > 128 << 20, reason="B past half of this L3 would take over 256 MiB")
def test_few_tiles_read_b_from_memory_in_shallow_k_blocks_exactly() -> None:
    proc = run_as_row(ZEN3_SCRIPT, "Zen 3", timeout=99)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]

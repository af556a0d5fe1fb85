"""opbench.Tiles: one value for how our kernels run, from a record's tile dict to the compiled struct."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import import_or_skip

from opbench import Tiles


@pytest.mark.parametrize(
    "record",
    [
        {},
        {"tile_m": 56},
        {"tile_m": 56, "tile_n": 512, "tile_k": 256},
        {"tile_k": 4, "small_m": 0, "stream_m": 2},
    ],
)
def test_a_record_round_trips(record: dict[str, int]) -> None:
    tiles = Tiles.of(record, threads=3, isa="avx2")
    assert tiles.record() == record and (tiles.threads, tiles.isa) == (3, "avx2")
    assert (tiles.m, tiles.n, tiles.k) == (record.get("tile_m"), record.get("tile_n"), record.get("tile_k"))
    assert tiles.thresholds() == {k: v for k, v in record.items() if not k.startswith("tile_")}
    assert tiles.running(1, None) == Tiles.of(record, 1)


def test_an_unknown_key_is_named() -> None:
    with pytest.raises(ValueError, match="unknown key.*tile_q"):
        Tiles.of({"tile_m": 8, "tile_q": 1})


def test_every_field_reaches_the_kernel() -> None:
    kernels = import_or_skip("opbench.kernels")
    a, b = np.ones((40, 50), np.float32), np.ones((50, 60), np.float32)
    isa = kernels.available_isas()[-1]  # "ref": never the default where a vector set runs
    given = Tiles(m=7, n=9, k=11, threads=2, isa=isa, small_m=0, parallel_flops=0, stream_m=0)
    info = kernels.prepare_gemm(a, b, tiles=given).tiles()
    assert (info["tile_m"], info["tile_n"], info["tile_k"], info["isa"]) == (7, 9, 11, isa)
    assert (info["small_m"], info["parallel_flops"], info["stream_m"]) == (0, 0, 0)
    assert kernels.prepare_gemm(a, b, tiles=given.record()).tiles()["tile_k"] == 11  # a record's dict
    core = kernels._core.Tiles(7, 9, 11, 2, isa)
    assert (core.m, core.n, core.k, core.threads, core.isa) == (7, 9, 11, 2, isa)
    assert kernels._core.Tiles().m == 0  # 0: from the cache model
    with pytest.raises(ValueError, match="conv2d takes no small_m, parallel_flops, stream_m"):
        kernels.prepare_conv2d(
            np.ones((1, 1, 3, 3), np.float32), np.ones((1, 1, 1, 1), np.float32), tiles=given
        )

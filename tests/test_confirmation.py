"""The tuner's confirmation names a candidate that runs as the cache-model default does (its tiles past the
problem's dimensions clamped as the kernels clamp them), and saves no record for it: on a K = 256 product the
default's tile_k 512 and a searched tile_k 256 are the same single K block, so whatever one gains over the
other is noise. A fake worker answers here with the tiles each request ran and a set time, so the default's
twin can be made to look faster beyond the intervals, as a noisy machine makes it."""

from __future__ import annotations

from typing import Any

import pytest

from opbench.ops import get_op
from opbench.ops.gemm import GemmShape
from opbench.ops.lstm import LstmShape
from opbench.tune.config import TuneConfig
from opbench.tune.confirmation import AS_DEFAULT, confirm_points, record_verdict

pytest.importorskip("optuna")

DEFAULT = {"tile_m": 96, "tile_n": 1024, "tile_k": 512}  # the model's tiles, as a plan reports them


class FakeWorker:
    """Answers each request with the tiles it ran (the default's for None, else the request's over the
    default's) and the time `seconds` gives those tiles; 1% apart from round to round."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds, self.calls = seconds, 0

    def run(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        ran = {**DEFAULT, **(request.get("tiles") or {})}
        key = "{tile_m}x{tile_n}x{tile_k}".format(**ran)
        self.calls += 1
        t = self.seconds[key] * (1 + 0.01 * (self.calls % 2))
        samples = [t, t * 1.001, t * 0.999]
        return {"status": "ok", "time": {"median_s": t, "samples_s": samples}, "tiles": ran}

    def close(self) -> None:
        pass


def _config(op: str, shape: Any) -> TuneConfig:
    return TuneConfig(
        shape=shape, dtype="fp32", threads=1, study_name="s", storage_url="", op=get_op(op),
        confirm_rounds=4, confirm_processes=1,
    )  # fmt: skip


def test_the_defaults_twin_is_flagged_and_saves_no_record() -> None:
    cfg = _config("gemm", GemmShape(m=256, n=1024, k=256))
    # the twin (tile_k 256 on K = 256) measured 1.7x faster than the default, as a window of a stolen vCPU
    # made it once on this VM; a real other tiling (tile_n 512) a little slower
    worker = FakeWorker({"96x1024x512": 2.0e-3, "96x1024x256": 1.2e-3, "96x512x256": 2.1e-3})
    twin, other = {"tile_n": 1024, "tile_k": 256}, {"tile_n": 512, "tile_k": 256}
    conf = confirm_points(cfg, worker, [("default", None), ("#1", twin), ("#2", other)], "the default")
    rows = {r["name"]: r for r in conf["rows"]}
    assert AS_DEFAULT in rows["#1"]["flags"] and AS_DEFAULT not in rows["#2"]["flags"]
    assert conf["best"] is not None and conf["best"]["name"] == "#1"
    assert conf["best"]["gflops_ci"][0] > conf["default"]["gflops_ci"][1]  # "faster" beyond the intervals
    verdict = record_verdict(conf)
    assert verdict is not None and "runs as the default does" in verdict
    # without the twin, the other tiling made faster is saved as ever
    worker = FakeWorker({"96x1024x512": 2.0e-3, "96x512x256": 1.2e-3})
    conf = confirm_points(cfg, worker, [("default", None), ("#1", other)], "the default")
    assert AS_DEFAULT not in conf["rows"][1]["flags"] and record_verdict(conf) is None


@pytest.mark.parametrize(
    ("shape", "tiles", "twin"),
    [
        (GemmShape(m=256, n=1024, k=256), {"tile_k": 256}, True),  # one K block either way
        (GemmShape(m=256, n=1024, k=256), {"tile_k": 128}, False),  # two K blocks
        (GemmShape(m=64, n=1024, k=256), {"tile_m": 66, "tile_k": 256}, True),  # one row block either way
        (GemmShape(m=256, n=1024, k=256), {"tile_m": 66, "tile_k": 256}, False),  # four row blocks
        (GemmShape(m=256, n=1024, k=600), {"tile_k": 256}, False),  # K past both: 512 and 256 differ
    ],
)
def test_only_tiles_the_kernel_clamps_to_the_default_are_its_twin(
    shape: GemmShape, tiles: dict[str, int], twin: bool
) -> None:
    cfg = _config("gemm", shape)
    seconds = {"96x1024x512": 2e-3, "96x1024x256": 2e-3, "96x1024x128": 2e-3, "66x1024x256": 2e-3}
    conf = confirm_points(cfg, FakeWorker(seconds), [("default", None), ("#1", tiles)], "the default")
    assert (AS_DEFAULT in conf["rows"][1]["flags"]) == twin


def test_the_recurrent_layers_clamp_to_both_products() -> None:
    # T*B = 6 rows, G*H = 96 columns, max(I, H) = 24 deep: tile_m 96 and 12 are both one row block, tile_k
    # 512 and 24 one K block; tile_n 512 and 1024 both all 96 columns
    cfg = _config("lstm", LstmShape(seq_len=3, batch=2, input_size=24, hidden=24))
    seconds = {"96x1024x512": 2e-3, "12x512x24": 1e-3, "12x512x16": 1e-3}
    twin, other = {"tile_m": 12, "tile_n": 512, "tile_k": 24}, {"tile_m": 12, "tile_n": 512, "tile_k": 16}
    conf = confirm_points(cfg, FakeWorker(seconds), [("default", None), ("#1", twin), ("#2", other)], "d")
    flags = {r["name"]: r["flags"] for r in conf["rows"]}
    assert AS_DEFAULT in flags["#1"] and AS_DEFAULT not in flags["#2"]
    assert conf["best"] is not None and conf["best"]["name"] == "#1" and record_verdict(conf) is not None

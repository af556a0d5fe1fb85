"""Peak FLOPS: the measured FMA-throughput peak is cached per machine, names what it is, and sits beside
a datasheet estimate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from opbench import _core, peak


def test_measured_peak_is_cached_and_refreshable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPBENCH_CACHE_DIR", str(tmp_path))
    p1 = peak.measured("fp32", 1)
    assert p1.source == "measured" and p1.gflops > 0 and p1.threads == 1
    cache = json.loads((tmp_path / "peaks.json").read_text())
    (entry,) = cache.values()
    assert entry["fp32/1"]["value"]["gflops"] == p1.gflops
    assert peak.measured("fp32", 1) == p1  # served from the cache, identical
    p3 = peak.measured("fp32", 1, refresh=True)
    assert p3.gflops > 0
    stamp = json.loads((tmp_path / "peaks.json").read_text())
    assert next(iter(stamp.values()))["fp32/1"]["value"]["gflops"] == p3.gflops


def test_a_damaged_cache_is_remeasured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPBENCH_CACHE_DIR", str(tmp_path))
    (tmp_path / "peaks.json").write_text("{not json")
    assert peak.measured("fp32", 1).gflops > 0
    json.loads((tmp_path / "peaks.json").read_text())  # rewritten whole


def test_fp16_peak_names_the_units_it_runs_on() -> None:
    p = peak.measure("fp16", 1, min_time_s=0.02, repeats=1)
    if _core.cpu_info()["native_fp16_fma"]:
        assert "AVX512-FP16" in p.name
    else:
        assert "no native fp16 FMA" in p.name
        with pytest.raises(ValueError, match="no native fp16 FMA"):
            _core.fma_peak("fp16", "", 1, 0.01, 1)


def test_a_two_thread_peak_is_measured_and_says_so() -> None:
    """How the peak scales with threads is a speed figure (`opbench peak --threads 1,2` prints it); here
    only that the measurement runs on two threads and reports them."""
    two = peak.measure("fp32", 2, min_time_s=0.01, repeats=1)
    assert two.gflops > 0 and two.threads == 2 and two.source == "measured"


def test_datasheet_estimate_states_its_basis() -> None:
    d = peak.datasheet("fp32", 1)
    if d is None:
        pytest.skip("no clock frequency exposed on this machine")
    assert d.source == "datasheet" and d.gflops > 0
    assert "GHz" in d.detail and "FLOP/cycle" in d.detail


def test_every_supported_isa_has_a_peak_loop() -> None:
    for isa in _core.cpu_info()["isas"]:
        gflops, kernel = _core.fma_peak("fp32", isa, 1, 0.01, 1)
        assert gflops > 0
        assert kernel.startswith(isa) or (isa == "ref" and kernel.startswith("portable"))


def test_memory_bandwidth_is_measured_and_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPBENCH_CACHE_DIR", str(tmp_path))
    b = peak.bandwidth(1)
    assert b.source == "measured" and 1 < b.gbs < 10_000 and "triad" in b.detail
    assert peak.bandwidth(1) == b  # cached
    with pytest.raises(ValueError, match="elements must be >= 1"):
        _core.stream_triad(1, 0, 1)


def test_peak_and_bandwidth_records_are_their_typed_dicts() -> None:
    """Peak.to_dict and Bandwidth.to_dict give their dataclass's fields: exactly the TypedDicts' keys."""
    from dataclasses import fields

    from opbench.documents import BandwidthDict, PeakDict
    from opbench.peak import Bandwidth, Peak

    assert [f.name for f in fields(Peak)] == list(PeakDict.__annotations__)
    assert [f.name for f in fields(Bandwidth)] == list(BandwidthDict.__annotations__)
    assert list(Peak("fp32", 2, 1.0, "measured", "n", "d").to_dict()) == list(PeakDict.__annotations__)

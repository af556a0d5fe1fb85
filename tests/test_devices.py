"""Devices: the accelerator datasheet table, device names per framework, and `--device` on a machine
without any accelerator (CI has none): a one-line error, exit code 2, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli

from opbench import peak
from opbench.accelerators import ACCELERATORS, lookup
from opbench.backends import accelerator_name
from opbench.backends.mindspore_backend import ms_device
from opbench.errors import BackendUnavailable


@pytest.mark.parametrize(
    ("reported", "expected"),
    [
        ("Tesla V100-SXM2-16GB", "NVIDIA V100 SXM2"),
        ("Tesla V100-PCIE-32GB", "NVIDIA V100 PCIe"),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100"),
        ("NVIDIA A100-PCIE-40GB", "NVIDIA A100"),
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"),
        ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
        ("NVIDIA H200", "NVIDIA H200 SXM"),
        ("Ascend910", "Huawei Ascend 910"),
        ("Ascend 910", "Huawei Ascend 910"),
    ],
)
def test_reported_names_find_their_datasheet(reported: str, expected: str) -> None:
    acc = lookup(reported)
    assert acc is not None and acc.name == expected


@pytest.mark.parametrize("reported", ["Ascend910B", "NVIDIA GeForce RTX 4090", "AMD Instinct MI300X", ""])
def test_unlisted_devices_have_no_datasheet(reported: str) -> None:
    # A different chip (910B) or an unlisted one gets no peak rather than a wrong one.
    assert lookup(reported) is None


def test_the_table_holds_the_dense_figures_with_sources() -> None:
    by_name = {a.name: a for a in ACCELERATORS}
    assert by_name["NVIDIA V100 SXM2"].tflops["fp16"] == 125.0
    assert by_name["NVIDIA A100"].tflops["fp16"] == by_name["NVIDIA A100"].tflops["bf16"] == 312.0
    assert by_name["NVIDIA H100 SXM"].tflops["fp16"] == pytest.approx(989.4)
    assert by_name["NVIDIA H200 SXM"].tflops["bf16"] == pytest.approx(989.4)
    assert by_name["Huawei Ascend 910"].tflops == {"fp16": 256.0}
    for acc in ACCELERATORS:
        assert "datasheet" in acc.source or "brief" in acc.source
        # Dense only: tensor-core fp16 is at most 16x the fp32 CUDA-core peak on every listed part.
        if "fp32" in acc.tflops:
            assert acc.tflops["fp16"] <= 16 * acc.tflops["fp32"]


def test_utilization_peak_on_an_accelerator_names_its_source() -> None:
    p = peak.accelerator_datasheet("NVIDIA H100 80GB HBM3", "fp16", 1)
    assert p is not None and p.gflops == pytest.approx(989_400) and p.source == "datasheet"
    assert "H100 SXM fp16 dense" in p.name and "NVIDIA H100 datasheet" in p.detail
    assert peak.accelerator_datasheet("Huawei Ascend 910", "fp32", 1) is None  # not on the datasheet
    assert peak.accelerator_datasheet("NVIDIA GeForce RTX 4090", "fp16", 1) is None


def test_mindspore_device_targets() -> None:
    assert ms_device("cpu") == ("CPU", 0)
    assert ms_device("cuda") == ("GPU", 0) and ms_device("cuda:3") == ("GPU", 3)
    assert ms_device("ascend:1") == ("Ascend", 1)
    for bad in ("tpu", "cuda:x", "cpu:1"):
        with pytest.raises(BackendUnavailable, match="unsupported device"):
            ms_device(bad)


def test_datasheets_command_prints_the_table() -> None:
    proc = run_cli(["peak", "--datasheets"])
    assert proc.returncode == 0, proc.stderr
    assert (
        "H100 SXM" in proc.stdout
        and "989.4" in proc.stdout
        and "Sparse (2:4) figures are never used" in proc.stdout
    )


@pytest.mark.parametrize("device", ["cuda", "cuda:1", "ascend"])
def test_an_absent_accelerator_is_exit_2_and_nothing_is_written(device: str, tmp_path: Path) -> None:
    if accelerator_name("cuda") is not None:
        pytest.skip("this machine has a CUDA device")
    out = tmp_path / "out"
    # every backend for cuda; the others with two (importing TensorFlow and MindSpore takes 7 s a run), and
    # then the frameworks not asked for are never imported, not even to name the device
    some = [] if device == "cuda" else ["--backend", "cpp,torch"]
    argv = ["sweep", "gemm", "--m", "8", "--n", "8", "--k", "8", "--device", device, "--out", str(out), *some]
    code = (
        "import sys\nfrom opbench.cli import main\nrc = main(sys.argv[1:])\n"
        "print(sorted(m for m in ('tensorflow', 'mindspore') if m in sys.modules))\nsys.exit(rc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300, check=False
    )
    imported = ["mindspore", "tensorflow"] if device == "cuda" else []
    assert proc.returncode == 2 and proc.stdout.strip() == str(imported), proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"opbench: error: no backend can run on '{device}' here")
    assert "cpp: cpp kernels run on the CPU only" in lines[0] and "torch:" in lines[0]
    assert "Traceback" not in proc.stderr and not out.exists()


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "ascend:", "CPU"])
def test_an_unknown_device_name_is_exit_2(device: str, tmp_path: Path) -> None:
    proc = run_cli(["sweep", "gemm", "--m", "8", "--device", device, "--out", str(tmp_path / "o")])
    assert proc.returncode == 2 and f"unknown device '{device}'" in proc.stderr


def test_nvidia_smi_lines_are_parsed() -> None:
    from opbench import gpu

    line = "NVIDIA H100 80GB HBM3, 550.54.15, 1980, 2619, 1980, 34, 71.52"
    assert gpu.parse_smi_line(line) == {
        "name": "NVIDIA H100 80GB HBM3",
        "driver_version": "550.54.15",
        "clocks.sm": 1980.0,
        "clocks.mem": 2619.0,
        "clocks.max.sm": 1980.0,
        "temperature.gpu": 34.0,
        "power.draw": 71.52,
    }
    assert gpu.parse_smi_line("Tesla V100-SXM2-16GB, 535.1, 1530, 877, 1530, 40, [N/A]")["power.draw"] is None
    with pytest.raises(ValueError, match="expected 7 fields"):
        gpu.parse_smi_line("NVIDIA H100, 550.54")


def test_a_sweep_of_frameworks_that_cannot_name_the_gpu_asks_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # nvidia-smi stands in for the driver's tool (there is no GPU here): it answers for index 1 only.
    from opbench import gpu
    from opbench.sweep.driver import resolve_peaks

    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\n[ "$4" = "1" ] || exit 6\n'
        'echo "NVIDIA H100 80GB HBM3, 550.54.15, 1980, 2619, 1980, 34, 71.52"\n'
    )
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert gpu.smi_name("cuda:1") == "NVIDIA H100 80GB HBM3"
    assert gpu.smi_name("cuda:0") is None and gpu.smi_name("ascend") is None
    table = resolve_peaks(("fp32",), 1, "cuda:1", ("mindspore",))
    assert table["fp32"]["device_name"] == "NVIDIA H100 80GB HBM3"
    assert table["fp32"]["used"] and table["fp32"]["used"]["gflops"] > 0


def test_gpu_provenance_only_for_cuda_devices() -> None:
    from opbench import gpu

    assert gpu.device_index("cuda") == 0 and gpu.device_index("cuda:2") == 2
    assert gpu.device_index("cpu") is None and gpu.device_index("cuda:x") is None
    assert gpu.provenance("cpu") is None and gpu.clocks("ascend") is None
    info = gpu.provenance("cuda")
    assert info is not None and info["device"] == "cuda"


def test_gpu_peak_without_a_gpu_is_exit_2() -> None:
    if accelerator_name("cuda") is not None:
        pytest.skip("this machine has a CUDA device")
    proc = run_cli(["peak", "--device", "cuda"])
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "opbench: error: cannot measure peaks on 'cuda': no CUDA device 'cuda' here (torch sees 0)"
    )

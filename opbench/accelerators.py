"""Datasheet peaks of accelerators, per dtype, dense math only (the 2:4-sparsity figures that vendors also
print are twice these and never used), each with the document it comes from.

The sweep uses them as the peak of utilization on a GPU or NPU (a CPU's peak is measured and computed in
peak.py). Which figure applies to which dtype: fp16 and bf16 on the tensor / cube units; fp32 on the
CUDA cores (PyTorch does not use TF32 for fp32 matmul unless asked, so TF32 is listed apart, never as fp32).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Accelerator:
    name: str
    pattern: str  # matched (case-insensitive, search) against the device name the framework reports
    tflops: dict[str, float]  # dense peaks by dtype: fp32, tf32, fp16, bf16
    source: str

    def matches(self, device_name: str) -> bool:
        return re.search(self.pattern, device_name, re.IGNORECASE) is not None


# Order matters: the first match wins, so more specific names (PCIe, NVL, 910B) come before general ones.
ACCELERATORS: tuple[Accelerator, ...] = (
    Accelerator(
        "NVIDIA V100 PCIe",
        r"V100.*PCIE",
        {"fp32": 14.0, "fp16": 112.0},
        "NVIDIA Tesla V100 datasheet (PCIe): 14 TFLOPS FP32, 112 TFLOPS tensor",
    ),
    Accelerator(
        "NVIDIA V100 SXM2",
        r"V100",
        {"fp32": 15.7, "fp16": 125.0},
        "NVIDIA Tesla V100 datasheet (SXM2): 15.7 TFLOPS FP32, 125 TFLOPS tensor",
    ),
    Accelerator(
        "NVIDIA A100",
        r"A100",
        {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0},
        "NVIDIA A100 datasheet (SXM and PCIe): FP32 19.5, TF32 156, BF16/FP16 tensor 312 TFLOPS dense",
    ),
    Accelerator(
        "NVIDIA H100 PCIe",
        r"H100.*PCIE",
        {"fp32": 51.2, "tf32": 378.0, "fp16": 756.0, "bf16": 756.0},
        "NVIDIA H100 datasheet (PCIe): FP32 51, TF32 378, BF16/FP16 tensor 756 TFLOPS dense (1513 sparse)",
    ),
    Accelerator(
        "NVIDIA H100 SXM",
        r"H100",
        {"fp32": 66.9, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4},
        "NVIDIA H100 datasheet (SXM5): FP32 67, TF32 495, BF16/FP16 tensor 989 TFLOPS dense (1979 sparse)",
    ),
    Accelerator(
        "NVIDIA H200 SXM",
        r"H200",
        {"fp32": 66.9, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4},
        "NVIDIA H200 datasheet (SXM): FP32 67, TF32 495, BF16/FP16 tensor 989 TFLOPS dense (1979 sparse)",
    ),
    Accelerator(
        "Huawei Ascend 910",
        r"Ascend\s*910(?![A-Z0-9])",
        {"fp16": 256.0},
        "Huawei Ascend 910 (HC 2019 / product brief): 256 TFLOPS FP16, 512 TOPS INT8",
    ),
)


def lookup(device_name: str) -> Accelerator | None:
    """The table's entry for a reported device name, or None when it is not in the table."""
    return next((a for a in ACCELERATORS if a.matches(device_name)), None)


def device_index(device: str) -> int | None:
    """cuda -> 0, cuda:N -> N; None for any other device."""
    kind, _, index = device.partition(":")
    return int(index or 0) if kind == "cuda" and (not index or index.isdigit()) else None

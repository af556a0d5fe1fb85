"""NVIDIA GPU provenance and achieved peaks: what a results file records about a cuda device (name, driver,
CUDA version, clocks at the start and end of the run) and what `opbench peak --device cuda` measures (a
large GEMM in torch per dtype, timed with CUDA events, and a device-to-device copy for bandwidth).

On a machine without CUDA every entry point reports that instead of failing.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Callable

from opbench.accelerators import device_index
from opbench.backends.base import event_timed
from opbench.contention import Monitor
from opbench.documents import AcceleratorInfo, GpuPeaks, SmiReading
from opbench.machine import allowed_cpus
from opbench.measure import Bench
from opbench.timing import Timer, TimerConfig

SMI_FIELDS = (
    "name",
    "driver_version",
    "clocks.sm",
    "clocks.mem",
    "clocks.max.sm",
    "temperature.gpu",
    "power.draw",
)


def parse_smi_line(line: str) -> SmiReading:
    """One `nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,nounits` line -> a dict; numbers
    become floats, '[N/A]' and '[Not Supported]' become None."""
    values = [v.strip() for v in line.split(",")]
    if len(values) != len(SMI_FIELDS):
        raise ValueError(f"expected {len(SMI_FIELDS)} fields from nvidia-smi, got {len(values)}: {line!r}")
    out: SmiReading = {}
    for key, value in zip(SMI_FIELDS, values, strict=True):
        if value.startswith("["):
            out[key] = None
            continue
        try:
            out[key] = value if key in ("name", "driver_version") else float(value)
        except ValueError:
            out[key] = value
    return out


def smi_query(index: int) -> SmiReading | None:
    """nvidia-smi's view of GPU `index` (None when nvidia-smi is absent or fails)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        proc = subprocess.run(
            [exe, f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits", "-i", str(index)],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if proc.returncode != 0 or not proc.stdout.strip():
            return None
        return parse_smi_line(proc.stdout.strip().splitlines()[0])
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None


def smi_name(device: str) -> str | None:
    """nvidia-smi's name for a cuda[:N] device (None for another device, or without nvidia-smi)."""
    index = device_index(device)
    name = (smi_query(index) or {}).get("name") if index is not None else None
    return name if isinstance(name, str) else None


def provenance(device: str) -> AcceleratorInfo | None:
    """Name, compute capability, memory, CUDA version (torch's build) and nvidia-smi's driver and clocks
    for a cuda device; None for other devices."""
    index = device_index(device)
    if index is None:
        return None
    info: AcceleratorInfo = {"device": device, "smi": smi_query(index)}
    try:
        # torch, asked only about a cuda device (a CPU run never imports it)
        import torch

        if torch.cuda.is_available() and index < torch.cuda.device_count():
            props = torch.cuda.get_device_properties(index)
            info.update(
                {
                    "name": props.name,
                    "capability": f"{props.major}.{props.minor}",
                    "memory_bytes": int(props.total_memory),
                    "multiprocessors": int(props.multi_processor_count),
                    "cuda_runtime": torch.version.cuda,
                }
            )
    except ImportError:
        pass
    return info


def clocks(device: str) -> SmiReading | None:
    """nvidia-smi's clocks, temperature and power for a cuda device now (for the end of a run)."""
    index = device_index(device)
    return smi_query(index) if index is not None else None


def measure_peaks(device: str, size: int = 8192, repeats: int = 10) -> GpuPeaks:
    """Achieved GEMM GFLOPS per dtype (torch.matmul of size^3, best of `repeats` timed by CUDA events after
    warm-up) and device copy bandwidth (1 GiB, read + write counted). Raises RuntimeError without CUDA."""
    # torch, asked only about a cuda device (a CPU run never imports it)
    import torch

    index = device_index(device)
    if index is None or not torch.cuda.is_available() or index >= torch.cuda.device_count():
        raise RuntimeError(f"no CUDA device '{device}' here (torch sees {torch.cuda.device_count()})")
    dev = torch.device("cuda", index)

    # The one measurement path (measure.Bench), timed by CUDA events; no CPU probe applies on a GPU.
    bench = Bench(
        Timer(TimerConfig(warmup_s=0.05, min_samples=repeats, max_samples=repeats, min_sample_s=0.005)),
        None,
        Monitor(allowed_cpus()),
    )

    def best_seconds(fn: Callable[[], object]) -> float:
        return bench.measure(lambda loops: event_timed(torch.cuda.Event, fn, loops)).measurement.min_s

    gemm: dict[str, float] = {}
    for name, dtype in (("fp32", torch.float32), ("fp16", torch.float16), ("bf16", torch.bfloat16)):
        a = torch.randn(size, size, device=dev, dtype=dtype)
        b = torch.randn(size, size, device=dev, dtype=dtype)
        out = torch.empty(size, size, device=dev, dtype=dtype)
        seconds = best_seconds(functools.partial(torch.matmul, a, b, out=out))
        gemm[name] = 2 * size**3 / seconds / 1e9
        del a, b, out
    src = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    copy_s = best_seconds(lambda: dst.copy_(src))
    return {
        "gemm_gflops": gemm,
        "gemm_size": size,
        "copy_gb_s": 2 * src.numel() / copy_s / 1e9,
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "timing": f"CUDA events, best of {repeats} samples of at least 5 ms after 50 ms of warm-up calls",
    }

"""Peak FLOPS per dtype and thread count: measured by the C++ FMA-throughput loop (cached per machine)
and a datasheet estimate (cores x clock x FLOP/cycle of the detected ISA). Every result names its peak."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from filelock import FileLock, Timeout

from opbench import __version__, kernels, microarch
from opbench.accelerators import lookup
from opbench.documents import BandwidthDict, PeakDict
from opbench.files import atomic_write_text, json_text
from opbench.machine import cpu_model, identity, utc_now
from opbench.reference import InRunReference


@dataclass(frozen=True)
class Peak:
    dtype: str
    threads: int
    gflops: float
    source: str  # "measured" or "datasheet"
    name: str  # which peak, in words
    detail: str

    def to_dict(self) -> PeakDict:
        return cast(PeakDict, asdict(self))  # the dataclass's fields are PeakDict's keys


# What the per-machine cache holds under a key: a peak's or a bandwidth's record.
_Entry = TypeVar("_Entry", PeakDict, BandwidthDict)


def cache_dir() -> Path:
    if os.environ.get("OPBENCH_CACHE_DIR"):
        return Path(os.environ["OPBENCH_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "opbench"


def machine_fingerprint() -> str:
    """What a cached peak is only valid for: the machine's identity (vendor, family, model, stepping, caches,
    CPUs, ISA flags, hypervisor) and the opbench version."""
    key = json.dumps([identity(), __version__], sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _unit(dtype: str) -> str:
    return kernels.compute_unit(dtype)


# The peak each execution unit's loop measures, by the unit's name (kernels.compute_unit).
UNIT_PEAKS = {
    "fp32": "fp32 FMA peak",
    "fp16": "fp16 FMA peak (AVX512-FP16)",
    "bf16": "bf16 dot-product peak (AVX512-BF16)",
}
# bf16's unit where the CPU has AMX (kernels.fma_peak runs its tdpbf16ps loop, the "amx" ISA's).
AMX_PEAK = "bf16 tile dot-product peak (AMX-BF16)"
# Why a 2-byte dtype is held to the fp32 peak where its own unit is missing.
NO_UNIT = {
    "fp16": "no native fp16 FMA on this CPU: fp16 GEMMs compute on the fp32 units",
    "bf16": "no AVX512-BF16 on this CPU: bf16 GEMMs compute on the fp32 units",
}
# ... or where the CPU has bf16's unit and our kernels leave it (default_tiles()["bf16"]["fp32_units"]).
BF16_SLOWER_UNIT = (
    "this core's fp32 FMAs outrun its AVX512-BF16 dot products: bf16 GEMMs compute on the fp32 units"
)


def why_fp32_units(dtype: str) -> str:
    """Why a 2-byte dtype computes on (and is held to) the fp32 units here."""
    return BF16_SLOWER_UNIT if dtype == "bf16" and kernels.cpu_info()["bf16_dot"] else NO_UNIT[dtype]


def measure(dtype: str, threads: int, min_time_s: float = 0.1, repeats: int = 5) -> Peak:
    """Run the loop of the unit that computes dtype now: native fp16 FMAs for fp16, and AMX-BF16 tiles or
    else AVX512-BF16 dot products for bf16, where the CPU has them; elsewhere a 2-byte dtype runs on the
    fp32 units, so the fp32 FMA peak is its peak too, and the name says so."""
    unit = _unit(dtype)
    gflops, kernel = kernels.fma_peak(unit, threads, min_time_s, repeats)
    unit_peak = AMX_PEAK if "tdpbf16ps" in kernel else UNIT_PEAKS[unit]
    name = unit_peak if unit == dtype or dtype == "fp32" else f"{unit_peak} ({why_fp32_units(dtype)})"
    return Peak(
        dtype, threads, float(gflops), "measured", name, f"{kernel}, best of {repeats}, {threads} thread(s)"
    )


def _read_cache(path: Path) -> dict[str, Any]:  # JSON read back: checked where used
    try:
        cache = json.loads(path.read_text())
        return cache if isinstance(cache, dict) else {}
    except (OSError, ValueError, RecursionError):
        return {}


def _cached(key: str, refresh: bool, make: Callable[[], _Entry]) -> _Entry:
    """A measurement from this machine's cache (keyed by machine fingerprint and `key`), else make() it now
    and store it. An unreadable or damaged cache is measured again; an unwritable one is only not saved.
    Measuring holds a lock beside the cache: processes started together measure one at a time (several
    peak or bandwidth loops at once would each see a fraction of the machine, and several triad buffers at
    once can exhaust memory), and the later ones find the first one's value."""
    path = cache_dir() / "peaks.json"
    fp = machine_fingerprint()

    def lookup() -> _Entry | None:  # an entry of another format: the caller's TypeError measures again
        entry = _read_cache(path).get(fp, {}).get(key)
        ok = isinstance(entry, dict) and isinstance(entry.get("value"), dict)
        return cast(_Entry, dict(entry["value"])) if ok else None

    if not refresh and (found := lookup()) is not None:
        return found

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        held = FileLock(str(path) + ".lock", timeout=600)
        held.acquire()
        lock: FileLock | None = held
    except (OSError, Timeout):
        lock = None  # no lock to be had: measure anyway
    try:
        if not refresh and (found := lookup()) is not None:
            return found  # another process measured it while this one waited
        value = make()
        cache = _read_cache(path)
        cache.setdefault(fp, {})[key] = {"value": value, "measured_utc": utc_now()}
        try:
            atomic_write_text(path, json_text(cache))
        except OSError:
            pass  # an unwritable cache only costs a re-measurement next time
        return value
    finally:
        if lock is not None:
            lock.release()


def _probe_value(entry: object) -> float | None:
    """The value of a cached best-probe entry ({"value": {"value": x}, "measured_utc": ...}), if usable."""
    value = entry.get("value", {}).get("value") if isinstance(entry, dict) else None
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def best_probe(key: str) -> float | None:
    """The best in-run reference probe (reference.py) this machine has shown for `key`, from the cache."""
    cache = _read_cache(cache_dir() / "peaks.json")
    return _probe_value(cache.get(machine_fingerprint(), {}).get(f"best-probe/{key}"))


def record_best_probes(values: dict[str, float]) -> None:
    """Raise the cached best probe of each key to `values` where better (higher; lower for a latency such
    as the hand-off), under the cache lock."""
    path = cache_dir() / "peaks.json"
    fp = machine_fingerprint()

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock", timeout=60):
            cache = _read_cache(path)
            entries = cache.setdefault(fp, {})
            changed = False
            for key, value in values.items():
                old_value = _probe_value(entries.get(f"best-probe/{key}"))
                if InRunReference.better(key, value, old_value):
                    entries[f"best-probe/{key}"] = {"value": {"value": value}, "measured_utc": utc_now()}
                    changed = True
            if changed:
                atomic_write_text(path, json_text(cache))
    except (OSError, Timeout):
        pass  # an unwritable cache only means this run's best is not remembered


def measured(dtype: str, threads: int, refresh: bool = False) -> Peak:
    """The measured peak, from this machine's cache when present (unless refresh)."""
    # (a 2-byte dtype's entry names the unit it ran on when that is another's: a build that moves bf16 to the
    # fp32 units does not read the dot-product peak an earlier build cached)
    unit = _unit(dtype)
    key = f"{dtype}/{threads}" if unit == dtype else f"{dtype}/{threads}/{unit}"
    value = _cached(key, refresh, lambda: measure(dtype, threads).to_dict())
    try:
        return Peak(**value)
    except TypeError:  # an entry from another format: measure again
        return Peak(**_cached(key, True, lambda: measure(dtype, threads).to_dict()))


@dataclass(frozen=True)
class Bandwidth:
    threads: int
    gbs: float
    source: str  # "measured"
    detail: str

    def to_dict(self) -> BandwidthDict:
        return cast(BandwidthDict, asdict(self))  # the dataclass's fields are BandwidthDict's keys


def measure_bandwidth(threads: int, repeats: int = 5) -> Bandwidth:
    """STREAM-like triad on arrays four times the last-level cache (at least 16 Mi doubles each)."""
    l3 = kernels.l3_bytes()
    elements = max(1 << 24, 4 * l3 // 8)
    gbs = kernels.stream_triad(threads, elements, repeats)
    mib = 3 * elements * 8 / 2**20
    return Bandwidth(
        threads,
        float(gbs),
        "measured",
        f"triad a = b + s*c on 3 x {elements} doubles ({mib:.0f} MiB), best of {repeats}, "
        f"{threads} thread(s), 24 bytes per element",
    )


def bandwidth(threads: int, refresh: bool = False) -> Bandwidth:
    """The measured memory bandwidth, from this machine's cache when present (unless refresh)."""
    value = _cached(f"triad/{threads}", refresh, lambda: measure_bandwidth(threads).to_dict())
    try:
        return Bandwidth(**value)
    except TypeError:
        return Bandwidth(**_cached(f"triad/{threads}", True, lambda: measure_bandwidth(threads).to_dict()))


def clock_ghz() -> tuple[float, str] | None:
    """Nominal core clock and where it came from."""
    try:
        khz = int(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text())
        return khz / 1e6, "cpufreq cpuinfo_max_freq"
    except (OSError, ValueError):
        pass
    m = re.search(r"@\s*([\d.]+)\s*GHz", cpu_model())
    if m:
        return float(m.group(1)), "CPU model string"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return float(line.split(":", 1)[1]) / 1e3, "/proc/cpuinfo cpu MHz: nominal, turbo not counted"
    except (OSError, ValueError):
        pass
    return None


def datasheet(dtype: str, threads: int) -> Peak | None:
    """cores x clock x FLOP/cycle of this micro-architecture (microarch.py, which names its source); None
    when the clock cannot be found or the table has no row for this CPU (no guess from the ISA alone)."""
    clock = clock_ghz()
    info = kernels.cpu_info()
    arch = microarch.lookup(info["vendor"], info["family"], info["model"])
    if clock is None or arch is None:
        return None
    per = microarch.flop_per_cycle(arch, dtype, cpu_model(), _unit(dtype), amx=not info["amx_unavailable"])
    if per is None:
        return None
    per_cycle, how = per
    ghz, clock_source = clock
    cores = min(threads, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else threads)
    return Peak(
        dtype,
        threads,
        cores * ghz * per_cycle,
        "datasheet",
        f"{arch.name} {dtype} datasheet estimate",
        f"{cores} core(s) x {ghz:.3f} GHz ({clock_source}) x {how}",
    )


def accelerator_datasheet(device_name: str, dtype: str, threads: int) -> Peak | None:
    """The dense datasheet peak of a named accelerator for dtype (accelerators.py), or None if not listed."""
    acc = lookup(device_name)
    if acc is None or dtype not in acc.tflops:
        return None
    return Peak(
        dtype,
        threads,
        acc.tflops[dtype] * 1e3,
        "datasheet",
        f"{acc.name} {dtype} dense datasheet peak",
        f"device '{device_name}'; {acc.source}",
    )

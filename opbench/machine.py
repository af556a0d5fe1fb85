"""Where a result came from: CPU, ISA, cores, library versions, opbench version and git sha; and the
process-wide settings that make backends comparable (CPU affinity, available memory, a C heap that keeps
what is freed)."""

from __future__ import annotations

import ctypes
import datetime as _dt
import functools
import hashlib
import json
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from opbench import __version__, kernels, microarch
from opbench.contention import adopted_threads_cpu_ns
from opbench.documents import Fingerprint, GitSha, Identity, KernelRanOn, MachineBlock

LIBRARIES = (
    "numpy",
    "torch",
    "mindspore",
    "tensorflow",
    "tensorflow-cpu",
    "keras",
    "threadpoolctl",
    "rich",
    "pybind11",
)


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def utc_stamp() -> str:
    """utc_now() as it goes into a file name: 20261123T074225."""
    return utc_now().replace(":", "").replace("-", "").replace("+0000", "")


def cpu_model() -> str:
    """The marketing name of the CPU (/proc/cpuinfo, else cpuid's brand string, else platform)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass

    return kernels.cpu_info()["brand"] or platform.processor() or "unknown"


def library_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


@functools.lru_cache(maxsize=1)
def git_sha() -> GitSha | None:
    """Commit of the source tree opbench runs from (editable installs), with a dirty flag; None elsewhere."""
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return {"sha": sha, "dirty": bool(dirty)}


def available_memory_bytes() -> int:
    """MemAvailable from /proc/meminfo (what can be allocated without swapping), else physical memory."""
    try:
        text = Path("/proc/meminfo").read_text()
        m = re.search(r"^MemAvailable:\s+(\d+) kB", text, re.MULTILINE)
        if m:
            return int(m.group(1)) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_HEAP_DEFAULTS = "the C library's defaults ({}): an output allocated per call may be paged in"
_heap: str | None = None  # keep_freed_memory's outcome


def keep_freed_memory() -> str:
    """Keep what this process frees in its C heap, for reuse, instead of giving it back to the kernel: no
    allocation of its own mapping (glibc maps each large one, 128 KiB and up, until a free raises its
    threshold, at most to 32 MiB) and no trimming of the heap's top. A backend that allocates its output on
    every call (torch's F.conv2d, numpy's matmul) then pays malloc, not the zeroing of fresh pages on the
    first touch, which our prepared calls never pay: with glibc's defaults torch's 7x7 stem (25.7 MB out)
    ran at 74-122 GFLOPS from one round to the next of one process, and at 125-131 with the heap kept (2-vCPU
    Zen 4 guest, two threads). Idempotent; returns what is in force, in words (heap_state)."""
    global _heap
    if _heap is None:
        _heap = _keep_freed_memory()
    return _heap


def heap_state() -> str:
    """What this process's C heap does with freed memory, in words, for the results header."""
    return _heap or _HEAP_DEFAULTS.format("not set in this process")


def _keep_freed_memory() -> str:
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return _HEAP_DEFAULTS.format("no glibc mallopt here")
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if mallopt(_M_MMAP_MAX, 0) != 1 or mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) != 1:
        return _HEAP_DEFAULTS.format("mallopt refused")
    return "kept (glibc mallopt: no mmap per allocation, no trim): freed memory is reused, not paged in again"


def allowed_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:
        return list(range(os.cpu_count() or 1))


def pin_to_cpus(threads: int) -> list[int]:
    """Restrict this process (every existing thread, and so every thread created later) to the first
    `threads` allowed CPUs, so that a library that ignores its thread setting cannot use more cores
    than the others. Returns the CPU set in force."""
    cpus = allowed_cpus()
    if threads >= len(cpus) or not hasattr(os, "sched_setaffinity"):
        return cpus
    chosen = set(cpus[:threads])
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, chosen)
        except OSError:
            pass  # the thread ended meanwhile
    return sorted(chosen)


def spread_threads(prefixes: tuple[str, ...]) -> dict[str, int]:
    """Pin each thread of this process whose name starts with one of `prefixes` to its own CPU of the
    process's CPU set (round robin, in name order), and return {thread name: cpu}.

    For a framework pool that does not place its own threads: MindSpore's CPU runtime runs an actor
    thread and a kernel thread while the calling thread waits. Left to the scheduler on 2 CPUs, the two
    sometimes share a CPU, and the same op then runs 1.5x slower for the rest of the process (seen:
    256^3 fp32 matmul 99 or 157 us, depending on the process). One per CPU makes it reproducible."""
    cpus = allowed_cpus()
    if len(cpus) < 2 or not hasattr(os, "sched_setaffinity"):
        return {}
    found: list[tuple[str, int]] = []
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return {}
    for task in tids:
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        if name.startswith(prefixes):
            found.append((name, int(task)))
    placed: dict[str, int] = {}
    for i, (name, thread_id) in enumerate(sorted(found)):
        cpu = cpus[i % len(cpus)]
        try:
            os.sched_setaffinity(thread_id, {cpu})
            placed[name] = cpu
        except OSError:
            pass  # the thread ended meanwhile
    return placed


def _other_threads_cpu_ns(me: int) -> int | None:
    """CPU time (ns, from schedstat) of every thread of this process except `me`, and of the worker processes
    it adopted (contention.adopt: sweep processes, A/B sides); None where unavailable."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    total, seen = 0, False
    for tid in tids:
        if int(tid) == me:
            continue
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
            seen = True
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile
    return total + adopted_threads_cpu_ns() if seen or len(tids) == 1 else None


def wait_until_quiet(max_wait_s: float = 1.0, window_s: float = 0.005, busy_fraction: float = 0.05) -> float:
    """Wait until the other threads of this process and its adopted workers (a BLAS or framework pool still
    spinning after its last call: OpenBLAS spins about 80 ms, MindSpore's actor thread about 35 ms) use
    less than busy_fraction of a core over a window, so that they cannot steal cores from the next
    measurement. Returns the seconds waited; max_wait_s or more means they never went quiet."""
    me = threading.get_native_id()
    start = time.perf_counter()
    prev = _other_threads_cpu_ns(me)
    if prev is None:
        return 0.0
    while True:
        time.sleep(window_s)
        now = time.perf_counter()
        cur = _other_threads_cpu_ns(me)
        if cur is None or cur - prev < busy_fraction * window_s * 1e9:
            return now - start
        if now - start >= max_wait_s:
            return now - start
        prev = cur


@functools.lru_cache(maxsize=1)
def identity() -> Identity:
    """What tells one machine from another for peaks, tuned records, studies and compare: vendor, CPUID
    family/model/stepping, the micro-architecture they name, cache sizes, CPU count, ISA flags and the
    hypervisor. Two VMs both called "AMD EPYC" differ here when one is a Zen 4 and the other a Zen 5."""
    info = kernels.cpu_info()
    arch = microarch.lookup(info["vendor"], info["family"], info["model"])
    return {
        "vendor": info["vendor"],
        "family": info["family"],
        "model": info["model"],
        "stepping": info["stepping"],
        "microarch": arch.name if arch else None,
        "cpu_model": cpu_model(),
        "caches": {level: c["size_bytes"] for level, c in info["caches"].items()},
        "logical_cpus": info["logical_cpus"],
        "isa_flags": sorted(k for k, v in info["features"].items() if v),
        "hypervisor": info["hypervisor"] or None,
    }


def identity_key() -> str:
    """A short stable hash of identity(): the name of this machine in caches and records."""
    return hashlib.sha256(json.dumps(identity(), sort_keys=True).encode()).hexdigest()[:16]


def identity_label(ident: Mapping[str, object] | None) -> str:
    """'AuthenticAMD family 0x19 model 0x11 (Zen 4)' for messages."""
    if not ident:
        return "an unidentified machine"
    family, model = ident.get("family"), ident.get("model")
    if not isinstance(family, int) or not isinstance(model, int):
        return "an unidentified machine"
    arch = f" ({ident['microarch']})" if ident.get("microarch") else ""
    return f"{ident.get('vendor')} family {family:#x} model {model:#x}{arch}"


def kernel_ran_on() -> KernelRanOn:
    """The CPU's name and logical CPUs, and the kernel set of ours that runs here (what a tuned tiling and a
    tuning study belong to, beside the machine's identity)."""
    feats = kernels.cpu_features()
    return {
        "cpu_model": cpu_model(),
        "logical_cpus": feats["logical_cpus"],
        "isa": feats["selected_isa"],
        "kernel": feats["kernel"]["description"],
    }


def fingerprint(threads: int) -> Fingerprint:
    """What a tuning result depends on: the machine's identity, the kernel that ran and its version, the
    threads."""
    return {
        "machine": identity(),
        **kernel_ran_on(),
        "opbench_version": __version__,
        "threads": threads,
    }


def provenance(threads: int, cpus: list[int]) -> MachineBlock:
    """The machine block of a results file."""
    feats = kernels.cpu_features()
    return {
        "identity": identity(),
        "identity_key": identity_key(),
        "cpu_model": cpu_model(),
        "vendor": feats["vendor"],
        "features": feats["features"],
        "isas": feats["isas"],
        "selected_isa": feats["selected_isa"],
        "kernel": feats["kernel"],
        "caches": feats["caches"],
        "cache_source": feats["cache_source"],
        "logical_cpus": feats["logical_cpus"],
        "threads": threads,
        "affinity": cpus,
        "heap": heap_state(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "memory_available_bytes": available_memory_bytes(),
        "opbench_version": __version__,
        "git": git_sha(),
        "libraries": library_versions(),
    }


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this worker process (the tuner's, an A/B side's) when its parent dies (a parent
    killed with -9 must not leave a hung candidate running forever); exit at once if the parent is already
    gone (OPBENCH_WORKER_PARENT names it)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    expected = os.environ.get("OPBENCH_WORKER_PARENT")
    if expected and os.getppid() != int(expected):
        sys.exit(4)

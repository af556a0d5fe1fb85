"""The JSON documents opbench writes and reads back, typed: the results file, peak and bandwidth entries,
machine blocks: each file's layout (schema v13: results.py) as a TypedDict, so mypy checks every key. A
record's nested blocks are in blocks.py, what the runtime reports in kernel_documents.py; untyped values are
Scalars."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

from opbench.kernel_documents import CacheLevel, KernelInfo
from opbench.record_blocks import (
    EnvironmentBlock,
    GuardsBlock,
    PeakBlock,
    ReferenceBlock,
    TimeBlock,
    VerifyBlock,
)

# A shape field's, axis level's, backend parameter's or tile's value (a conv's padding may be its four sides).
Scalar = str | int | float | bool | None | tuple[int, ...]
Fields = Mapping[str, Scalar]
# What a backend prepares a case with (Backend.case_params; our kernels' tiles, ISA and accumulation).
Params = dict[str, Scalar]


def int_fields(fields: Mapping[str, Scalar]) -> dict[str, int]:
    """The integer fields of `fields` (a shape's sizes, our tiles: what a record keeps as ints), no bools."""
    return {k: v for k, v in fields.items() if isinstance(v, int) and not isinstance(v, bool)}


class Identity(TypedDict):
    """What tells one machine from another (machine.identity)."""

    vendor: str
    family: int
    model: int
    stepping: int
    microarch: str | None
    cpu_model: str
    caches: dict[str, int]
    logical_cpus: int
    isa_flags: list[str]
    hypervisor: str | None


class KernelRanOn(TypedDict):
    """The CPU's name and logical CPUs, and the kernel set of ours that runs here (machine.kernel_ran_on)."""

    cpu_model: str
    logical_cpus: int
    isa: str
    kernel: str


class Fingerprint(KernelRanOn):
    """What a tuning result depends on (machine.fingerprint)."""

    machine: Identity
    opbench_version: str
    threads: int


class GitSha(TypedDict):
    sha: str
    dirty: bool


class MachineBlock(TypedDict, total=False):
    """A results file's machine block (machine.provenance, and the accelerator's where a GPU ran)."""

    identity: Identity
    identity_key: str
    cpu_model: str
    vendor: str
    features: dict[str, bool]
    isas: list[str]
    selected_isa: str
    kernel: KernelInfo
    caches: dict[str, CacheLevel]
    cache_source: str
    logical_cpus: int
    threads: int
    affinity: list[int]
    heap: str  # machine.keep_freed_memory(): whether the C heap keeps freed memory for reuse
    os: str
    python: str
    memory_available_bytes: int
    opbench_version: str
    git: GitSha | None
    libraries: dict[str, str | None]
    accelerator: AcceleratorInfo


# nvidia-smi's reading of a GPU (gpu.parse_smi_line), by its query field ("clocks.sm", ...): numbers as
# floats, text as text, a field it cannot report None.
SmiReading = dict[str, float | str | None]


class AcceleratorInfo(TypedDict, total=False):
    """A cuda device in a results file's machine block (gpu.provenance), nvidia-smi's clocks at both ends."""

    device: str
    smi: SmiReading | None
    smi_end: SmiReading | None
    name: str
    capability: str
    memory_bytes: int
    multiprocessors: int
    cuda_runtime: str | None


class GpuPeaks(TypedDict):
    """What `opbench peak --device cuda` measures (gpu.measure_peaks)."""

    gemm_gflops: dict[str, float]
    gemm_size: int
    copy_gb_s: float
    tf32_matmul: bool
    timing: str


class PeakDict(TypedDict):
    """A peak (peak.Peak): its GFLOPS, where it came from ("measured" or "datasheet"), and which peak."""

    dtype: str
    threads: int
    gflops: float
    source: str
    name: str
    detail: str


class BandwidthDict(TypedDict):
    """The measured memory bandwidth (peak.Bandwidth)."""

    threads: int
    gbs: float
    source: str
    detail: str


class PeakEntry(TypedDict, total=False):
    """A dtype's peaks in a results header: `used` (utilization's), measured, datasheet; device_name's GPU."""

    used: PeakDict | None
    measured: PeakDict | None
    datasheet: PeakDict | None
    device_name: str | None


PeakTable = dict[str, PeakEntry]


class BackendSummary(TypedDict, total=False):
    """A backend in a results header: available or why not, its version, the worker processes its cases
    ran in (each one's layout) or why not, and one user's call of the op on a tiny case (overhead.py)."""

    available: bool
    reason: str | None
    version: str | None
    processes: list[LayoutDict | None]
    in_process: str
    call_overhead_s: float | None
    call_overhead_case: str | None
    call_overhead_call: str


class SkippedDict(TypedDict):
    """A batch file's problem that opbench does not run, and why (descriptors.Skipped)."""

    where: str
    text: str
    family: str
    kind: str
    reason: str


class BatchLines(TypedDict):
    """A batch file's lines: counts run and skipped, skips by kind, notes, options ignored (Batch.summary)."""

    lines: int
    lines_run: int
    lines_skipped: int
    skipped_by_kind: dict[str, int]
    skipped: list[SkippedDict]
    notes: list[str]
    ignored_options: dict[str, int]


class SuiteInfo(TypedDict, total=False):
    """The named suite, spec or batch file a sweep's shapes came from, as its header keeps it."""

    name: str
    description: str
    source: str | None
    path: str
    lines: BatchLines | None


class SweepMeta(TypedDict):
    """What the command line adds to every results header of one `opbench sweep`: the command, the suite,
    the scale, and each config's mode and description (by config index)."""

    command: str
    suite: SuiteInfo | None
    scale: float | None
    modes: list[str | None]
    plans: list[str]


# A results record (case.Result.to_record, schema v13); `pass` is a keyword, hence the functional form.
# Records read back from an older file may lack fields (results.py's schema history).
Record = TypedDict(
    "Record",
    {
        "op": str,
        "pass": str,
        "shape": dict[str, Scalar],
        "factors": dict[str, Scalar],
        "label": str,
        "dtype": str,
        "backend": str,
        "threads": int,
        "device": str,
        "status": str,
        "reason": str | None,
        "flops": int,
        "min_bytes": int,
        "arithmetic_intensity": float | None,
        "time": TimeBlock | None,
        "gflops": float | None,
        "gflops_best": float | None,
        "peak": PeakBlock | None,
        "utilization": float | None,
        "machine_speed": float | None,
        "reference": ReferenceBlock | None,
        "verify": VerifyBlock | None,
        "guards": GuardsBlock | None,
        "details": dict[str, object],
        "notes": list[str],
        "flags": list[str],
        "repro": str | None,
    },
    total=False,
)


class ResultsDoc(TypedDict, total=False):
    """A results file (results.ResultsWriter): the header runs.sweep_header builds, the records in sweep
    order, and what the run adds at its end (environment, completion)."""

    schema_version: int
    kind: str
    op: str
    passes: list[str]
    shape_fields: list[str]
    command: str
    flop_note: str
    suite: SuiteInfo | None
    scale: float | None
    mode: str | None
    description: str
    factor_levels: dict[str, list[Scalar]]
    settings: dict[str, object]
    machine: MachineBlock
    peaks: PeakTable
    bandwidth: BandwidthDict | None
    backends: dict[str, BackendSummary]
    created_utc: str
    finished_utc: str | None
    complete: bool
    environment: EnvironmentBlock
    records: list[Record]
    _path: str  # the file it was read from (report/inputs.load_results)


class LayoutDict(TypedDict):
    """One worker process's randomized memory layout (layout.draw): the environment's extra bytes, the heap
    pad and the seed of its buffer offsets."""

    env_pad: int
    heap_pad: int
    offset_seed: int


class UserKernelDict(TypedDict):
    """A user's --kernel as a study and a worker keep it (userkernel.KernelRef.to_dict)."""

    spec: str
    func: str
    path: str | None
    module: str | None
    sha256: str
    accumulate: str


# --- comparing two results files (report/compare.py) ----------------------------------------------------


class CompareRow(TypedDict, total=False):
    """One case of a comparison: its identity, the verdict and why, and for a compared case both runs'
    medians, spreads, utilizations and flags, the time ratio and the machines' speed ratio."""

    op: str
    shape: str
    dtype: str
    backend: str
    verdict: str
    note: str
    old_median_s: float
    new_median_s: float
    time_ratio: float
    gflops_change: float
    old_rel_iqr: float
    new_rel_iqr: float
    old_utilization: float | None
    new_utilization: float | None
    reference_ratio: float | None
    normalised_time_ratio: float | None
    old_flags: str
    new_flags: str
    doubts: str


class CompareResult(TypedDict):
    """Two results files compared case by case (compare()): the rows, the verdict counts, the warnings."""

    machine_speed_ratio: float | None
    old: str | None
    new: str | None
    threshold: float
    rows: list[CompareRow]
    warnings: list[str]
    counts: dict[str, int]
    flagged: int

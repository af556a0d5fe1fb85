"""What the compiled runtime reports of the CPU and of our kernels, typed: cache levels, CPU features, a
kernel set's micro-kernel and default tiles (`_core.kernel_info()`), what a prepared plan runs
(`Plan.tiles()`). The bindings (csrc/bindings/module.cpp) build these dicts; opbench/_core.pyi types
them."""

from __future__ import annotations

from typing import TypedDict


class CacheLevel(TypedDict):
    """One cache level as the runtime detected it (csrc/bindings/module.cpp, cache_dict)."""

    size_bytes: int
    ways: int
    sets: int
    line_bytes: int
    shared_by_cpus: int


class CpuInfo(TypedDict):
    """What the runtime detected (`_core.cpu_info()`): the CPU, ISA flags, caches, kernel sets best first."""

    vendor: str
    brand: str
    logical_cpus: int
    family: int
    model: int
    stepping: int
    hypervisor: str
    features: dict[str, bool]
    caches: dict[str, CacheLevel]
    cache_source: str
    isas: list[str]
    native_fp16_fma: bool
    bf16_dot: bool
    amx_unavailable: str  # "" where the AMX-BF16 kernels run (ISA "amx"), else why not


class F16AccInfo(TypedDict, total=False):
    """accumulate='fp16': the kernels it runs, or why it cannot run here."""

    available: bool
    isa: str
    description: str
    mr: int
    nr: int
    reason: str


class Bf16Info(TypedDict):
    """bf16's kernels, why not AVX512-BF16's, and the fp32 tile its products of min_rows or more widen to."""

    isa: str
    description: str
    mr: int
    nr: int
    dot_product_unit: bool
    reason: str
    fp32_units: bool
    fp32_units_min_rows: int
    fp32_tile: str


class RegisterAndTiles(TypedDict):
    """Every kernel description from C++: kernel set, register tile, tiles (tile_m/n/k: a file format)."""

    isa: str
    mr: int
    nr: int
    tile_m: int
    tile_n: int
    tile_k: int


class KernelInfo(RegisterAndTiles):
    """A kernel set's micro-kernel shape and cache-model default tiles (`_core.kernel_info()`)."""

    description: str
    implicit_tile_m: int  # conv2d's implicit GEMMs' defaults (an L1-fed tile keeps L1's depth there)
    implicit_tile_k: int
    small_m: int
    aliased_small_m: int
    aliased_row_bytes: int
    b_group_rows: int  # the few-rows path packs fp32 B in groups of micro-panels from these rows (0: never)
    parallel_flops: int
    stream_m: int
    thin_max_n: int
    stream_m_max: int
    microarch: str  # the row of the kernels' micro-architecture table (csrc/runtime/microarch.cpp)
    microarch_measured: str  # the row whose measurements its choices are
    l3_counted_bytes: int  # the L3 the blocking counts on: CPUID's, or less where the row says (a VM guest)
    packed_ahead_steps: int  # the AVX-512 micro-kernel's prefetch distance in the packed panels (0: none)
    f32_a_in_place_max_k: int  # fp32 A read in place up to this K block (0: always packed; microarch.cpp)
    fp16_accumulate: F16AccInfo
    bf16: Bf16Info


class PlanTiles(RegisterAndTiles, total=False):
    """What a prepared kernel runs (`Plan.tiles()`, csrc/bindings tile_dict: always the kernel set, kernel,
    register tile and tiles as used); GEMM's path thresholds, path and AMX layout (tiles.AMX_KEYS); a conv's
    GEMM, path and way (conv_path: its CONV_PATHS name, "" for depthwise and bf16's own ways)."""

    kernel: str
    small_m: int
    parallel_flops: int
    stream_m: int
    path: str
    conv_path: str
    amx_rows: int
    amx_cols: int
    amx_ksteps: int
    batch_rows: int
    gemm_m: int
    gemm_n: int
    gemm_k: int
    step_threads: int  # a recurrent layer's threads for each step's product and cells (rnn_step_threads)


class CpuFeatures(CpuInfo):
    """cpu_info() with the kernel set dispatch chose and its defaults (kernels.cpu_features)."""

    selected_isa: str
    kernel: KernelInfo

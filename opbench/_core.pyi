"""Type stubs for the compiled module opbench._core (see csrc/bindings/module.cpp)."""

from typing import Any

from opbench.dtypes import Array
from opbench.kernel_documents import CpuInfo, KernelInfo, PlanTiles

class Plan:
    """One prepared call of a kernel (csrc/bindings/module.cpp, struct Plan)."""

    def run(self, loops: int) -> float: ...
    def output(self) -> Any: ...
    def last(self) -> Any: ...
    def tiles(self) -> PlanTiles: ...
    def saved(self) -> dict[str, Array]: ...

class Tiles:
    """How a kernel runs (csrc/bindings/common.hpp, struct Tiles): tile sizes (0: from the cache model),
    threads, kernel set ("": the default), and the AMX tile layout of bf16 products (None: the default)."""

    m: int
    n: int
    k: int
    threads: int
    isa: str
    def __init__(
        self,
        m: int | None = None,
        n: int | None = None,
        k: int | None = None,
        threads: int = 1,
        isa: str = "",
        amx_rows: int | None = None,
        amx_cols: int | None = None,
        amx_ksteps: int | None = None,
    ) -> None: ...

fault_injection: bool
stream_m_max: int
# the AMX tile space's layouts (rows, cols, ksteps), the default first
amx_shapes: tuple[tuple[int, int, int], ...]
conv_path_names: list[str]

def gemm_now(a: Array, b: Array, out: Array | None = None) -> Array: ...
def prepare_gemm(
    a: Array,
    b: Array,
    out: Array | None = None,
    tiles: Tiles = ...,
    accumulate: str = "fp32",
    small_m: int | None = None,
    parallel_flops: int | None = None,
    stream_m: int | None = None,
) -> Plan: ...
def prepare_conv2d(
    x: Array,
    w: Array,
    out: Array | None = None,
    stride: tuple[int, int] = (1, 1),
    padding: tuple[int, int, int, int] = (0, 0, 0, 0),  # top, bottom, left, right
    dilation: tuple[int, int] = (1, 1),
    groups: int = 1,
    tiles: Tiles = ...,
    conv_path: str = "model",
) -> Plan: ...
def prepare_rnn(
    cell: str,
    x: Array,
    w_ih: Array,
    w_hh: Array,
    b_ih: Array,
    b_hh: Array,
    h0: Array,
    c0: Array | None = None,
    y: Array | None = None,
    h_n: Array | None = None,
    c_n: Array | None = None,
    tiles: Tiles = ...,
) -> Plan: ...
def prepare_gemm_backward(
    a: Array,
    b: Array,
    dc: Array,
    da: Array | None = None,
    db: Array | None = None,
    tiles: Tiles = ...,
) -> Plan: ...
def prepare_conv2d_backward(
    x: Array,
    w: Array,
    dy: Array,
    stride: tuple[int, int] = (1, 1),
    padding: tuple[int, int, int, int] = (0, 0, 0, 0),  # top, bottom, left, right
    dilation: tuple[int, int] = (1, 1),
    groups: int = 1,
    dx: Array | None = None,
    dw: Array | None = None,
    tiles: Tiles = ...,
) -> Plan: ...
def prepare_rnn_backward(
    cell: str,
    x: Array,
    w_ih: Array,
    w_hh: Array,
    b_ih: Array,
    b_hh: Array,
    h0: Array,
    c0: Array | None,
    dy: Array,
    dh_n: Array,
    dc_n: Array | None,
    tiles: Tiles = ...,
) -> Plan: ...
def known_isas() -> list[str]: ...
def kernel_info(isa: str = "", n: int = 0) -> KernelInfo: ...
def cpu_info() -> CpuInfo: ...
def amx_tile_dot(c: Array, a: Array, b: Array, emulated: bool) -> Array: ...
def fma_peak(
    dtype: str, isa: str = "", threads: int = 1, min_time_s: float = 0.1, repeats: int = 3
) -> tuple[float, str]: ...
def stream_triad(threads: int = 1, elements: int = 16777216, repeats: int = 5) -> float: ...
def handoff_ns(round_trips: int = 2000, repeats: int = 3) -> float: ...
def flush_cache(bytes: int) -> None: ...
def f32_to_f16_bits(x: Array) -> Array: ...
def f16_bits_to_f32(x: Array) -> Array: ...

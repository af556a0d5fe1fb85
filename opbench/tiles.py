"""How one of our C++ kernels runs a problem: its cache-blocking tiles, threads and kernel set, GEMM's path
thresholds, the AMX tile layout of bf16 products and conv2d's forced way. One value from the command line
(--tile-m, cpp:tile_m=...) and the tuner's records to the kernel facade and its one pybind11 struct
(`_core.Tiles`); records keep the keys as they always were (tile_m, tile_n, tile_k, small_m,
parallel_flops, stream_m, conv_path; amx_rows, amx_cols, amx_ksteps). No compiled code here: the reading
commands and the tuner's records use it without the extension."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Literal

# The keys a record (a tuned one, a results file's cpp block) gives the tile sizes under, and Tiles' fields.
TILE_KEYS = {"tile_m": "m", "tile_n": "n", "tile_k": "k"}
# GEMM's path thresholds (csrc/gemm/README.md, "Paths by shape"): 0 is a value, where a tile is >= 1.
Threshold = Literal["small_m", "parallel_flops", "stream_m"]
THRESHOLDS: tuple[Threshold, ...] = ("small_m", "parallel_flops", "stream_m")
# conv2d's ways (csrc/include/opbench/conv.hpp, ConvPathChoice): conv_path forces one of them instead of the
# planner's model ("model"); the compiled list is _core.conv_path_names, which a test holds equal to this.
CONV_PATHS = (
    "model",
    "columns_in_place",
    "columns_gathered",
    "rows_in_place",
    "rows_gathered",
    "pointwise_gemm",
    "im2col_gemm",
)
# The AMX tile layout of bf16 products (csrc/gemm/amx_body.hpp, tuning/spaces/gemm_amx.toml): rows x cols
# accumulator tiles of 16 x 16 (one to four), amx_ksteps K steps of operand tiles loaded before their
# products; integers >= 1, on isa amx or amx-emu only (_core.amx_shapes lists the layouts).
AmxKey = Literal["amx_rows", "amx_cols", "amx_ksteps"]
AMX_KEYS: tuple[AmxKey, ...] = ("amx_rows", "amx_cols", "amx_ksteps")
# The keys a record's tiles hold besides the tile sizes: the thresholds (integers >= 0), conv_path and the
# AMX layout.
PathKey = Literal["small_m", "parallel_flops", "stream_m", "conv_path", "amx_rows", "amx_cols", "amx_ksteps"]
PATH_KEYS: tuple[PathKey, ...] = (*THRESHOLDS, "conv_path", *AMX_KEYS)


def record_tiles(fields: Mapping[str, object]) -> dict[str, int | str]:
    """What a tuned record keeps of the tiles a trial ran: the integer ones (tiles, thresholds; no bools)
    and conv_path."""
    return {
        k: v
        for k, v in fields.items()
        if (isinstance(v, int) and not isinstance(v, bool)) or (k == "conv_path" and isinstance(v, str))
    }


@dataclass(frozen=True)
class Tiles:
    """m, n, k: the cache-blocking sizes (None: derived from this CPU's caches; what each blocks is the
    kernel's docstring's to say); threads (None: the cores this process may run on); isa, a kernel set
    ("avx512", "avx2", "ref"; None: the best this CPU runs, or $OPBENCH_ISA); small_m, parallel_flops,
    stream_m: GEMM's path thresholds (None: the defaults; other kernels refuse them); conv_path: conv2d's
    way, one of CONV_PATHS (None or "model": the planner's model; other kernels refuse it); amx_rows,
    amx_cols, amx_ksteps: the AMX tile layout of bf16 products (None: the default layout's value; isa amx
    or amx-emu; gemm, conv2d and the recurrent layers' forward). The kernel facade checks every value
    and says which one is wrong."""

    m: int | None = None
    n: int | None = None
    k: int | None = None
    threads: int | None = None
    isa: str | None = None
    small_m: int | None = None
    parallel_flops: int | None = None
    stream_m: int | None = None
    conv_path: str | None = None
    amx_rows: int | None = None
    amx_cols: int | None = None
    amx_ksteps: int | None = None

    @classmethod
    def of(
        cls, record: Mapping[str, object] | None, threads: int | None = None, isa: str | None = None
    ) -> Tiles:
        """The Tiles a record's tile dict names (tile_m, tile_n, tile_k, the thresholds and conv_path;
        unknown keys are a ValueError naming them), run on `threads` with `isa`."""
        given = dict(record or {})
        unknown = set(given) - set(TILE_KEYS) - set(PATH_KEYS)
        if unknown:
            raise ValueError(f"tiles has unknown key(s) {', '.join(sorted(unknown))}")
        named = {TILE_KEYS.get(key, key): value for key, value in given.items()}
        return cls(threads=threads, isa=isa, **named)  # type: ignore[arg-type]  # checked by the facade

    def record(self) -> dict[str, int | str]:
        """The tile sizes, thresholds and conv_path that are set, under a record's keys (threads and isa are
        a record's own fields)."""
        keys: dict[str, str] = {
            **{field: key for key, field in TILE_KEYS.items()},
            **{t: t for t in PATH_KEYS},
        }
        return {
            keys[f.name]: v
            for f in fields(self)
            if f.name in keys and (v := getattr(self, f.name)) is not None
        }

    def thresholds(self) -> dict[str, int]:
        """The path thresholds that are set."""
        return {t: v for t in THRESHOLDS if (v := getattr(self, t)) is not None}

    def amx(self) -> dict[str, int]:
        """The AMX layout's fields that are set."""
        return {t: v for t in AMX_KEYS if (v := getattr(self, t)) is not None}

    def running(self, threads: int | None, isa: str | None) -> Tiles:
        """These tiles on `threads` with `isa`."""
        return replace(self, threads=threads, isa=isa)

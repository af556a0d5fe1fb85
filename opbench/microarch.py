"""Micro-architectures by CPUID (vendor, family, model) and their FMA throughput per core per cycle, for the
datasheet peak. A CPU with no row gets no datasheet figure: a guess from the ISA alone is what made a Zen 4
(512-bit FMAs on 256-bit pipes: 32 fp32 FLOP/cycle) look like a Zen 5 (64).

Sources, named in every row:
  AMD: Software Optimization Guides for family 17h (pub. 55723), 19h (Zen 3: 56665; Zen 4: 57647) and
       1Ah (Zen 5: 58455): two 256-bit FMA pipes (Zen 2-4; Zen 4 splits a 512-bit FMA over them), two
       128-bit (Zen 1), four 512-bit-capable pipes of which two FMA (Zen 5 desktop/server).
  Intel: 64 and IA-32 Architectures Optimization Reference Manual: two 512-bit FMA units on Sapphire,
       Emerald and Granite Rapids and on Ice Lake-SP; Skylake-SP and Cascade Lake have one or two by SKU
       (Platinum and Gold 6xxx: two; Silver, Bronze and most Gold 5xxx: one), which CPUID does not tell.
  bf16 (AVX512-BF16): vdpbf16ps runs on the FMA pipes at the FMA's rate with two products per fp32 lane,
       twice the fp32 FLOP/cycle: Zen 4 64, Zen 5 128 (AMD's guides; on a Zen 5 guest our vdpbf16ps loop
       measured 539 GFLOPS per core beside 268 for the fp32 FMA loop, docs/benchmarks.md). Intel's rows have
       no AVX512-BF16 figure: the measured peak (`opbench peak`) is the one to use there (an Emerald Rapids
       guest's vdpbf16ps loop ran at half its fp32 FMA loop's rate, 86 against 176 GFLOPS a core, so our
       bf16 GEMMs run on the fp32 units there: csrc/gemm/README.md, "bf16 on the fp32 units").
  bf16 (AMX-BF16, the Intel ORM's AMX chapter): one TDPBF16PS, 16 x 16 x 32 multiply-adds, every 16 cycles:
       1024 FLOP/cycle per core on Sapphire, Emerald and Granite Rapids, the bf16 unit wherever the AMX
       kernels may run (an Emerald Rapids guest's tdpbf16ps loop measured 2,450 GFLOPS on one core:
       2.39 GHz at that rate, docs/benchmarks.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

AMD_SOG = "AMD Software Optimization Guide for family {}"
INTEL_ORM = "Intel 64 and IA-32 Architectures Optimization Reference Manual"


@dataclass(frozen=True)
class MicroArch:
    name: str
    fp32_flop_per_cycle: int | None  # per core; None: it depends on the SKU and the SKU is not known
    fp16_flop_per_cycle: int | None  # native fp16 FMA (AVX512-FP16); None: fp16 runs on the fp32 units
    source: str
    sku_note: str | None = None
    # bf16 dot products (AVX512-BF16 vdpbf16ps: two products per fp32 lane); None: not in the table (the
    # measured peak still lists it where the CPU has the unit)
    bf16_flop_per_cycle: int | None = None
    # bf16 on the AMX tiles (tdpbf16ps); None: no AMX
    amx_bf16_flop_per_cycle: int | None = None


# Intel's AMX generations: two 512-bit FMA units, AVX512-FP16, and AMX-BF16 tiles.
_SPR, _EMR, _GNR = (
    MicroArch(name, 64, 128, INTEL_ORM, amx_bf16_flop_per_cycle=1024)
    for name in ("Sapphire Rapids", "Emerald Rapids", "Granite Rapids")
)
# The micro-architectures that several CPUID model ranges share.
_ZEN3 = MicroArch("Zen 3", 32, None, AMD_SOG.format("19h (56665)"))
_ZEN4 = MicroArch("Zen 4", 32, None, AMD_SOG.format("19h (57647)"), bf16_flop_per_cycle=64)
_ZEN5 = MicroArch("Zen 5", 64, None, AMD_SOG.format("1Ah (58455)"), bf16_flop_per_cycle=128)

# (vendor, family, first model, last model) -> micro-architecture. Families and models as CPUID reports them
# with the extended fields folded in.
_TABLE: tuple[tuple[str, int, int, int, MicroArch], ...] = (
    ("AuthenticAMD", 0x17, 0x00, 0x2F, MicroArch("Zen / Zen+", 16, None, AMD_SOG.format("17h (55723)"))),
    ("AuthenticAMD", 0x17, 0x30, 0xFF, MicroArch("Zen 2", 32, None, AMD_SOG.format("17h (55723)"))),
    ("AuthenticAMD", 0x19, 0x00, 0x0F, _ZEN3),
    ("AuthenticAMD", 0x19, 0x10, 0x1F, _ZEN4),
    ("AuthenticAMD", 0x19, 0x20, 0x5F, _ZEN3),
    ("AuthenticAMD", 0x19, 0x60, 0x7F, _ZEN4),
    ("AuthenticAMD", 0x19, 0xA0, 0xAF, _ZEN4),
    ("AuthenticAMD", 0x1A, 0x00, 0x1F, _ZEN5),
    ("AuthenticAMD", 0x1A, 0x40, 0x4F, _ZEN5),
    ("GenuineIntel", 6, 0x55, 0x55, MicroArch("Skylake-SP / Cascade Lake", None, None, INTEL_ORM, "by SKU")),
    ("GenuineIntel", 6, 0x6A, 0x6A, MicroArch("Ice Lake-SP", 64, None, INTEL_ORM)),
    ("GenuineIntel", 6, 0x6C, 0x6C, MicroArch("Ice Lake-SP", 64, None, INTEL_ORM)),
    ("GenuineIntel", 6, 0x8F, 0x8F, _SPR),
    ("GenuineIntel", 6, 0xCF, 0xCF, _EMR),
    ("GenuineIntel", 6, 0xAD, 0xAD, _GNR),
    ("GenuineIntel", 6, 0x3F, 0x3F, MicroArch("Haswell-EP", 32, None, INTEL_ORM)),
    ("GenuineIntel", 6, 0x4F, 0x4F, MicroArch("Broadwell-EP", 32, None, INTEL_ORM)),
)


def lookup(vendor: str, family: int, model: int) -> MicroArch | None:
    for v, fam, lo, hi, arch in _TABLE:
        if v == vendor and fam == family and lo <= model <= hi:
            return arch
    return None


def skylake_sp_fma_units(brand: str) -> int | None:
    """Skylake-SP and Cascade Lake: FMA units per core from the SKU in the brand string, when it names one
    (Platinum and Gold 6xxx have two; Silver, Bronze and Gold 5xxx one, except the Gold 5122 and 5222)."""
    m = re.search(r"(Platinum|Gold|Silver|Bronze)\s+(\d{4})", brand)
    if m is None:
        return None
    tier, number = m.group(1), m.group(2)
    if tier == "Platinum" or (tier == "Gold" and number.startswith("6")) or number in ("5122", "5222"):
        return 2
    return 1


def flop_per_cycle(
    arch: MicroArch, dtype: str, brand: str, unit: str, amx: bool = False
) -> tuple[int, str] | None:
    """FLOP per cycle per core for dtype computed on `unit` (kernels.compute_unit: "fp16" native fp16 FMAs,
    "bf16" AVX512-BF16 dot products, or AMX's tiles where `amx` says they run, else "fp32", where the 2-byte
    formats run widened), with what it rests on; None when the table cannot say."""
    if dtype == "bf16" and unit == "bf16" and amx and arch.amx_bf16_flop_per_cycle is not None:
        per_amx = arch.amx_bf16_flop_per_cycle
        return per_amx, f"{arch.name}: {per_amx} bf16 FLOP/cycle, tdpbf16ps on the AMX tiles ({arch.source})"
    if dtype == "fp16" and unit == "fp16":
        if arch.fp16_flop_per_cycle is None:
            return None
        return (
            arch.fp16_flop_per_cycle,
            f"{arch.name}: {arch.fp16_flop_per_cycle} fp16 FLOP/cycle ({arch.source})",
        )
    if dtype == "bf16" and unit == "bf16":
        if arch.bf16_flop_per_cycle is None:
            return None
        return (
            arch.bf16_flop_per_cycle,
            f"{arch.name}: {arch.bf16_flop_per_cycle} bf16 FLOP/cycle, vdpbf16ps on the FMA pipes "
            f"({arch.source})",
        )
    per = arch.fp32_flop_per_cycle
    how = f"{arch.name}: {{}} fp32 FLOP/cycle ({arch.source})"
    if per is None and arch.sku_note:
        units = skylake_sp_fma_units(brand)
        if units is None:
            return None
        per = 32 * units
        how = f"{arch.name}, {units} FMA unit(s) by SKU: {{}} fp32 FLOP/cycle ({arch.source})"
    if per is None:
        return None
    return per, how.format(per)

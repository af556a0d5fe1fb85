// The micro-architecture table of the kernels' measured choices (opbench/microarch.hpp). Measurements, all
// in docs/benchmarks.md under issue 41:
//  [E1] Emerald Rapids (2-vCPU Xeon, family 6 model 0xCF), 2026-11-27: the thin path's prefetchnta streamed
//       4096x16x1024 2.3x and 7680x2x2560 4.6-5.0x slower than prefetcht0 (A from L3).
//  [E2] the same guest: the unpacked-B path read a misaligned B at 72-80% of an aligned one's speed; packing
//       it per micro-panel took 0.75-0.85 of the time at 128^3 and 128x1000x2048.
//  [E3] the same guest: a B with rows 4 KiB-multiples apart read in place took 1.26-2.72x the blocked
//       path's time at 64-448 rows, 0.62-1.01x at 16-32.
//  [E4] the same guest, one core: timed one call at a time, streaming 16 rows took 0.79-0.91 of the time in
//       place at x4096x1024, x4096x4096, x8457x1760, x1024x1024 and x3072x768; timed 20 calls at a time, or
//       with benchmarks/ab_builds.py's 10 ms samples, in place was as fast or 4-9% faster (16x4096x1024,
//       16x1024x4096, 12x4096x4096). Not a choice to make on that evidence: streaming stops at 8 rows here too.
//  [E5] the same guest (its CPUID reports a 260 MiB L3), one core: 4096^3 and 2048x4096x4096 with B's block
//       (kc 2048 x nc) at 32 MiB ran at 0.78-0.84 of the time it took at 8-16 MiB (nc 1024-2048, or kc 1024),
//       level with torch's oneDNN; 24 MiB 0.90; two cores 0.97-1.01. So the blocking counts on 64 MiB of L3
//       there (B's block at most a quarter: 16 MiB).
//  [E6] the same guest, builds interleaved in one process, 7 rounds: the AVX-512 micro-kernel asking for
//       the packed panels' lines 16 steps ahead took 0.92-0.95 of the time at 2048^3, 4096^3, 1024x3072x768
//       and 256x4096x1024 on one core, 0.94-0.98 on two (8 steps 0.94-0.98, 24-32 as 16); 512^3,
//       128x1000x2048, the convs, their backward and the LSTM 0.97-1.04. Not measured on a Zen core.
//  [E7] the same guest, one and two cores, interleaved in one process: fp32 A read in place against packed,
//       on the unpacked-B path where a misaligned B is packed per panel anyway: 96^3-192^3 1.07-1.19x on one
//       core and 1.10-1.29x on two (192^3 1.00), 256x256x1024 1.12-1.14x, 384x384x64 1.02-1.07x; with an
//       aligned B, read in place before, packed once per thread now: 96^3-256^3, 448x512x512 and
//       256x256x1024 1.05-1.15x on one core, 1.04-1.23x on two (64x1000x1000 1.00-1.04x); the
//       blocked loops (row tiles outside, K block up to 1024): 1024x128x1024 1.15-1.16x, 256x256x1024 1.11x,
//       1024x256x768 1.08x, 512x512x1024 1.04-1.07x, 1024^3 1.00x, 2048x2048x1024 0.99x; K blocks of 2048
//       lost (128x1000x2048 0.74-0.82x), so the limit is 1024. Not measured on a Zen core.
//  [E8] the same guest, one core, independent accumulators: vdpbf16ps zmm 86 GFLOPS, vfmadd231ps zmm 176 (one
//       dot product every two cycles; opbench peak: 171 against 352 on two cores). bf16 widened to fp32 as it
//       is packed and run on the fp32 micro-kernel: see blocked.cpp's bf16_on_fp32_units for the products.
//       Not measured on a Zen core (Zen 5's bf16 dot products ran level with torch, issue 20).
//  [Z1] Zen 5 (2-vCPU EPYC, family 0x1A), issue 17: prefetchnta chosen for the thin path (not measured
//       against prefetcht0); 256-448 x 4096 x 4096 ran 7-16% faster with B in place, so no separate limit
//       for 4 KiB-aliased rows; at 16x4096x4096 in place ran at 135 GFLOPS and streamed at 113 on one core,
//       so streaming stops at 8 rows; split loads were met by aligning the columns, not by packing.
//  [Z2] Zen 4 (2-vCPU EPYC, family 0x19 model 0x11, its CPUID showing AVX2 but no AVX-512: the 6x16 AVX2
//       tile), 2026-11-28, builds interleaved in one process (benchmarks/ab_builds.py --b-offset 16), 11
//       rounds: with B 16 bytes past a line, packing it per micro-panel took 0.75-0.83 of the time of the
//       aligned columns at 48^3, 80^3, 96^3, 112^3 and 96x96x512 on one core, 0.73-0.86 on two (100^3 0.94
//       / 0.98; 64^3, 128^3-384^3, 64x256x256, 96x512x96 0.99-1.03); with B on a line, 0.99-1.05. The thin
//       path's prefetchnta against prefetcht0 (the Emerald Rapids row's choices, loaded beside this row's):
//       4096x16x1024 0.98, 7680x2x2560 0.91, 1024x16x1024 1.02 (one core, 7 rounds), so nta stays. The
//       AVX-512 kernel's choices (packed_ahead_steps, f32_a_in_place_max_k) are Zen 5's: not measured there.
//  [Z3] Zen 3 (2-vCPU EPYC, family 0x19 model 0x01, AVX2: the 6x16 tile; L2 512 KiB), 2026-11-29, one build
//       with each row (benchmarks/ab_builds.py --old installed --new-env OPBENCH_MICROARCH="Zen 4"), 5
//       rounds: with B 16 bytes past a line, Zen 4's split-load choice (B packed per micro-panel, or four
//       at a time on few rows) took 0.75 / 0.64 of the time at 96^3 (one core / two), 0.76 on two at 128^3,
//       0.77-0.81 at 32x1024x1024 and 32x4096x4096, 0.84 on two at 128x1000x2048, 0.87-0.91 at
//       64x4096x1024; 64^3-256^3 otherwise 0.89-1.04 (192^3 1.04 / 1.11, quartiles from 0.97); with B on a
//       line 0.76-0.85 at 32x1024x1024, 0.95-0.97 at 64x4096x1024, 160x1024x1024 1.03-1.04, the rest level.
//  [Z4] strided_gather_cost: 20 was fitted on two Zen 4 cores (the AVX2 tile, 3x3 stride-2 convs at batch 8
//       from 56x56 128 ch and 28x28 256 ch, rows at 0.72-0.83 of the columns' speed; conv2d_pixels.cpp) and
//       is every other row's. The Zen 3 guest above, 2026-11-29, after the stride-2 gather went vector on
//       AVX2 and gathered fp32 tiles went straight to Y: the 7x7 stride-2 stem at batch 8 ran as columns at
//       1.05-1.21x the speed of rows in place on one core and 1.12-1.24x on two (forced ways interleaved in
//       one process), where the model (the rows' straddling calls against a cost of 20 per gathered element)
//       kept the rows; at 4 the stem takes the columns and the other rows of Zen 3 in
//       tuning/choices/conv_paths.json keep their ways. Zen 4 was not measured after those two changes.
//       The same share decides whether stride-1 convs gather (csrc/conv/padded.hpp, columns_gather_at_stride1):
//       on Zen 3 the 3x3s at 28x28 with 128 channels and at 14x14 gather, 0.89-0.92 of the in-place time.
//  [Z5] rows_of_b_prefetch: the AVX2 kernel's fetch of the next micro-panel's part of B's rows read in place
//       came from the AVX-512 kernel (13.5 -> 11.5 ms for the 3x3 64->64 56x56 batch-8 conv on one Zen 5
//       core, csrc/gemm/README.md) and is every other row's. The Zen 3 guest above, 2026-11-29, builds with
//       and without it interleaved in one process (benchmarks/ab_builds.py and forced columns_in_place, 7-9
//       rounds, five passes in all), without / with time, 3x3 padding-1 convs at batch 8: 56x56 64 ch
//       0.94-0.99 on one core, 0.93-1.00 on two; 28x28 128 ch 0.94-1.02, 0.98-1.01; 14x14 256 ch 0.93-1.04,
//       0.93-1.00 (medians over the passes 0.97 and 0.98): a small gain, four passes of five. Not measured
//       on Zen 4's AVX2 tile.
//  [Z6] few_tiles_stream_row_bytes: the Zen 3 guest above, 2026-11-29, one core, builds interleaved in one
//       process (benchmarks/ab_builds.py --b-offset 16 and 0, 7 rounds): few rows of A (two or three tiles)
//       against a B from memory read in place in K blocks of 32 rows instead of the cache model's 168, new /
//       old time: 8x4096x4096 0.81, 12x4096x4096 0.88-0.92, 16x4096x4096 0.95-0.98, 8x8192x8192 0.70-0.73,
//       12x8192x2048 0.85, 10x5000x5000 0.86-0.97, 16x4096x1024 0.92-1.01; two cores (a thread's half of
//       each row) 0.80-0.85, 0.89-0.92, 0.94-0.99, 0.76-0.78, 0.84-0.86, 0.83-0.90, 0.97-1.01. Rows of 4 KiB
//       lost (16x1024x4096 1.07-1.13 at 64 rows), 8 KiB were level (16x2048x2048 1.00-1.06 on one core),
//       so a thread's share of a row must be 8 KiB. Every other row keeps few_tiles_kc (not measured there).
//  [Z7] split_loads_pack_max_l2: Zen 4 with AVX-512 shown (the 14x32 tile; 2-vCPU EPYC family 0x19 model
//       0x11, L2 1 MiB), 2026-11-30, one build with each row (benchmarks/ab_builds.py --old installed
//       --old-env OPBENCH_MICROARCH="Zen 5" --b-offset 16), 9 rounds, Zen 4's per-panel copy against Zen 5's
//       rows read in place, one core / two: 96^3 0.79 / 0.70, 128^3 0.82 / 0.72, 64x256x256 0.95 / 0.84,
//       128x512x512 1.00 / 0.92; but with a thread's share of B past half of L2 64x1024x512 1.10 / 1.06,
//       64x1024x1024 1.13 / 1.08, 64x4096x1024 1.22 / 1.21, 128x1000x2048 1.11 / 1.09, 128x4096x1024 1.10 /
//       1.07. Copying only up to half of L2: those 0.98-1.01, the small ones as before. (The AVX2 tile packs
//       in groups on this row, b_group_rows, and is not limited.)
#include "opbench/microarch.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace opbench {

namespace {

constexpr MicroArchChoices kZen5{"Zen 5", "Zen 5", true, false, 0.0, 0, 8, 0, 0, 0, false, 20.0, true,
                                 0};  // [Z1, Z4, Z6]
constexpr MicroArchChoices kEmerald{"Emerald Rapids", "Emerald Rapids", false, true, 0.0, 32, 8, 64 << 20, 16,
                                    1024, true, 20.0, true, 0};  // [E1-E8, Z4, Z6]

// Zen 5's choices for the other AMD cores and for vendors with no row; Emerald Rapids' for the other
// Intel cores (not measured there).
constexpr MicroArchChoices taking(const char* name, const MicroArchChoices& from) {
  return {name,           from.measured, from.stream_prefetch_nta, from.split_loads_costly,
          from.split_loads_pack_max_l2, from.aliased_rows, from.stream_m, from.l3_counted_bytes,
          from.packed_ahead_steps, from.f32_a_in_place_max_k, from.bf16_on_fp32_units, from.strided_gather_cost,
          from.rows_of_b_prefetch, from.few_tiles_stream_row_bytes};
}
// Zen 4 ([Z2]) and Zen 3 ([Z3]) measured their own split-load choice and take Zen 5's for the rest.
constexpr MicroArchChoices with_split_loads_costly(const char* name) {
  MicroArchChoices row = taking(name, kZen5);
  row.measured = name;
  row.split_loads_costly = true;
  return row;
}
constexpr MicroArchChoices zen4() {
  MicroArchChoices row = with_split_loads_costly("Zen 4");
  row.split_loads_pack_max_l2 = 0.5;  // [Z7]
  return row;
}
constexpr MicroArchChoices kZen4 = zen4();
constexpr MicroArchChoices zen3() {
  MicroArchChoices row = with_split_loads_costly("Zen 3");
  row.strided_gather_cost = 4.0;          // [Z4]
  row.rows_of_b_prefetch = false;         // [Z5]
  row.few_tiles_stream_row_bytes = 8192;  // [Z6]
  return row;
}
constexpr MicroArchChoices kZen3 = zen3();
constexpr MicroArchChoices kZen2 = taking("Zen 2", kZen5);
constexpr MicroArchChoices kOtherAmd = taking("AMD (no row)", kZen5);
constexpr MicroArchChoices kSapphire = taking("Sapphire Rapids", kEmerald);
constexpr MicroArchChoices kGranite = taking("Granite Rapids", kEmerald);
constexpr MicroArchChoices kIceLake = taking("Ice Lake-SP", kEmerald);
constexpr MicroArchChoices kSkylake = taking("Skylake-SP / Cascade Lake", kEmerald);
constexpr MicroArchChoices kOtherIntel = taking("Intel (no row)", kEmerald);
constexpr MicroArchChoices kUnknown = taking("unknown", kZen5);

struct Row {
  const char* vendor;
  int family, first, last;
  const MicroArchChoices* choices;
};

// (vendor, family, first model, last model), as opbench/microarch.py's _TABLE.
constexpr Row kRows[] = {
    {"AuthenticAMD", 0x17, 0x30, 0xFF, &kZen2},     {"AuthenticAMD", 0x19, 0x00, 0x0F, &kZen3},
    {"AuthenticAMD", 0x19, 0x10, 0x1F, &kZen4},     {"AuthenticAMD", 0x19, 0x20, 0x5F, &kZen3},
    {"AuthenticAMD", 0x19, 0x60, 0x7F, &kZen4},     {"AuthenticAMD", 0x19, 0xA0, 0xAF, &kZen4},
    {"AuthenticAMD", 0x1A, 0x00, 0x1F, &kZen5},     {"AuthenticAMD", 0x1A, 0x40, 0x4F, &kZen5},
    {"GenuineIntel", 6, 0x55, 0x55, &kSkylake},     {"GenuineIntel", 6, 0x6A, 0x6A, &kIceLake},
    {"GenuineIntel", 6, 0x6C, 0x6C, &kIceLake},     {"GenuineIntel", 6, 0x8F, 0x8F, &kSapphire},
    {"GenuineIntel", 6, 0xCF, 0xCF, &kEmerald},     {"GenuineIntel", 6, 0xAD, 0xAD, &kGranite},
};

// The row of this name (MicroArchChoices::name), or nullptr.
const MicroArchChoices* microarch_named(const char* name) {
  for (const Row& row : kRows) {
    if (std::string(row.choices->name) == name) return row.choices;
  }
  return nullptr;
}

}  // namespace

const MicroArchChoices& microarch_choices(const CpuInfo& cpu) {
  // $OPBENCH_MICROARCH names a row (kernel_info()["microarch"]'s names) whose choices to take on any CPU: how
  // the tests run every row's paths on one machine, and how a developer compares two rows' choices side by
  // side. A name that is no row is ignored (kernel_info()["microarch"] says which row runs).
  // Read once: this runs on every blocked GEMM's way (l3_counted_bytes).
  static const MicroArchChoices* const forced = [] {
    const char* name = std::getenv("OPBENCH_MICROARCH");
    return name != nullptr && *name != '\0' ? microarch_named(name) : nullptr;
  }();
  if (forced != nullptr) return *forced;
  for (const Row& row : kRows) {
    if (cpu.vendor == row.vendor && cpu.family == row.family && row.first <= cpu.model && cpu.model <= row.last) {
      return *row.choices;
    }
  }
  if (cpu.vendor == "GenuineIntel") return kOtherIntel;
  if (cpu.vendor == "AuthenticAMD") return kOtherAmd;
  return kUnknown;
}

int64_t l3_counted_bytes(const CpuInfo& cpu) {
  const int64_t cap = microarch_choices(cpu).l3_counted_bytes;
  return cap > 0 ? std::min(cpu.l3.size_bytes, cap) : cpu.l3.size_bytes;
}

const MicroArchChoices& microarch() {
  static const MicroArchChoices& row = microarch_choices(cpu_info());
  return row;
}

}  // namespace opbench

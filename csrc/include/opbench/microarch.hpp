// The kernels' choices that differ by micro-architecture where the cache model cannot decide them (issue
// 41: "blocking by the machine found, not the one developed on"). Each row names its CPUID models and cites
// the side-by-side measurement that set each choice; a row that was not measured says whose choices it takes.
// The rows' CPUID ranges mirror opbench/microarch.py, which names the same micro-architectures for the
// datasheet peaks (tests/test_gemm_paths.py checks that both name this CPU alike).
#pragma once

#include <cstdint>

#include "opbench/cpu.hpp"

namespace opbench {

struct MicroArchChoices {
  const char* name;      // the micro-architecture: "Zen 5", "Emerald Rapids", ... or "unknown"
  const char* measured;  // where the choices were measured: this row's name, or the row it takes them from
  // The thin GEMM path's rows of A streamed from L3 or memory prefetched with prefetchnta (true) or
  // prefetcht0 (thin.hpp).
  bool stream_prefetch_nta;
  // Vector loads that split a cache line cost enough that the unpacked-B path packs a misaligned B per
  // micro-panel first (small.cpp) ...
  bool split_loads_costly;
  // ... where a thread's share of B (K x its columns) is at most this fraction of L2 (0: at any size).
  double split_loads_pack_max_l2;
  // A B read in place whose rows are a multiple of 4 KiB apart: the most rows of A for it (0: the cache
  // model's limit for any B, Blocking::unpacked_rows).
  int64_t aliased_rows;
  // The default stream_m: GEMMs of 2 to this many rows of A stream B row by row (small.cpp).
  int64_t stream_m;
  // The most L3 the blocking counts on (0: all that CPUID reports). A guest of a large Xeon is shown its
  // socket's whole L3, shared with the other guests (blocked.cpp's gemm_block_n, which narrows the model's nc).
  int64_t l3_counted_bytes;
  // The AVX-512 micro-kernel asks for the packed A and B micro-panels' lines this many steps of k ahead (0:
  // the hardware prefetchers alone; ukernel_avx512.cpp).
  int64_t packed_ahead_steps;
  // fp32 A is read in place (the AVX-512 kernel's ukernel_a, row tiles outside) instead of packed when the K
  // block is at most this deep (0: always packed; blocked.cpp's f32_a_in_place): by the blocked loops, and by
  // the unpacked-B path, which then packs each thread's B panels once (small.cpp).
  int64_t f32_a_in_place_max_k;
  // bf16 products run on the fp32 FMA units (bf16 widened to fp32 as it is packed, the fp32 micro-kernel)
  // instead of the AVX512-BF16 dot-product kernel, where this core's vdpbf16ps gives fewer FLOPs than its
  // fp32 FMAs (blocked.cpp's bf16_on_fp32_units). AMX kernels, where they run, are kept.
  bool bf16_on_fp32_units;
  // What gathering one element of a strided conv's B micro-panel costs the columns way, in FMA lanes (the
  // panel serves up to 96 of the kernel's rows), against the rows way's calls for micro-panels that straddle
  // output rows: conv2d_pixels.cpp's conv_pixels_as_rows; and at stride 1 against the tiles the in-place
  // columns waste on the padded width (csrc/conv/padded.hpp, columns_gather_at_stride1).
  double strided_gather_cost;
  // conv2d's columns read in place (stride 1) ask for the next micro-panel's part of B's rows as the kernel
  // multiplies this one (KernelSet::ukernel_rows), or run without (ukernel_rows_quiet, where a kernel set
  // has it): conv2d.cpp.
  bool rows_of_b_prefetch;
  // The few-rows GEMM path (B read in place, small.cpp) with a few register tiles of rows per thread and B
  // from memory takes K blocks of 32 rows (kFewTilesStreamKc) where a thread's share of each of B's rows is
  // at least this many bytes (0: the cache model's few_tiles_kc for any B).
  int64_t few_tiles_stream_row_bytes;
};

// The row of a CPU (its vendor, family and model), or the row $OPBENCH_MICROARCH names (microarch.cpp).
const MicroArchChoices& microarch_choices(const CpuInfo& cpu);

// This CPU's row, found once.
const MicroArchChoices& microarch();

// The L3 bytes the blocking counts on: CPUID's, at most the row's l3_counted_bytes.
int64_t l3_counted_bytes(const CpuInfo& cpu);

}  // namespace opbench

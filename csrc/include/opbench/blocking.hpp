// Cache-blocking parameters (tile_m/tile_n/tile_k) and the analytical model that derives defaults from cache geometry.
#pragma once

#include <cstdint>

#include "opbench/cpu.hpp"
#include "opbench/kernel_set.hpp"

namespace opbench {

// Integer helpers of the blocking arithmetic (generic translation units only; the ISA units do not include this).
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

struct Blocking {
  int64_t mc = 0;  // tile_m: rows of A packed per block (kept in L2)
  int64_t nc = 0;  // tile_n: columns of B packed per panel (kept in L3)
  int64_t kc = 0;  // tile_k: depth of one rank-kc update (B micro-panel kept in L1 or L2, see kernel_set.hpp)
  // The GEMM driver's path thresholds (csrc/gemm/README.md, "Paths by shape"), searched by the tuner like the
  // tiles. small_m: a GEMM with at most this many rows of A reads B in place instead of packing it
  // (csrc/gemm/small.cpp; -1: the default, 0: never).
  int64_t small_m = -1;
  // With the default small_m, a B whose rows are a multiple of aliased_row_bytes apart is read in place only
  // up to this many rows of A (analytical_blocking's unpacked_aliased_rows: fewer on Intel cores and for an
  // L1-fed register tile); a given small_m sets it to the same. Set by resolve_blocking.
  int64_t aliased_small_m = -1;
  // B's rows a multiple of this many bytes apart count as aliased (4 KiB; an L1-fed register tile's model may
  // say less: blocking.cpp's l1_home_unpacked_limits). Set by resolve_blocking.
  int64_t aliased_row_bytes = 4096;
  // stream_m: a GEMM with 2 to this many rows of A (at most thin::kMaxStreamM) streams B row by row
  // (gemm_rows, csrc/gemm/small.cpp) instead (-1: the default, 0 or 1: never; M = 1 always streams).
  int64_t stream_m = -1;
  // With the default stream_m, B must also be at least this many bytes: half of L2 (a B that stays in cache
  // is read faster by the register tile in place). A given stream_m leaves it 0. Set by resolve_blocking.
  int64_t stream_min_b_bytes = 0;
  // parallel_flops: a GEMM of fewer FLOPs runs on the calling thread alone, waking no other (-1: the default).
  int64_t parallel_flops = -1;
  bool kc_from_model = false;  // tile_k was not given (a path may then choose its own depth: small.cpp)
  bool nc_from_model = false;  // tile_n was not given (the blocked path may then narrow it: gemm_block_n)
  // The few-rows path's K block when tile_k was not given, and the rows up to which it is taken by default
  // (small_m): from the model (analytical_blocking), carried by resolve_blocking.
  int64_t unpacked_kc = 0;
  int64_t unpacked_rows = 0;
  int64_t unpacked_aliased_rows = 0;
  int64_t few_tiles_kc = 0;  // that path's K block when each thread has at most small.cpp's kFewTiles tiles
  // The implicit GEMMs' K and M blocks (conv2d's output pixels as columns or as rows): the model's kc and mc
  // for an L2-fed register tile; for an L1-fed one, whose B micro-panel, read from the image or gathered, must
  // stay in L1, the L1 placement's depth and the A block in all the L2 ways left beside it (blocking.cpp).
  int64_t implicit_kc = 0;
  int64_t implicit_mc = 0;
  // The bf16 kernels' layout in the AMX tile space (an index into kAmxShapes, opbench/isa.hpp; -1: the
  // kernel set's default). Only rows with a tile space take one (bf16_kernels(ks, blk)).
  int bf16_shape = -1;
};

// Whether the few-rows path packs fp32 B four micro-panels at a time on a register tile NR floats wide
// (small.cpp, b_group_rows): where split loads cost (microarch.cpp) and a micro-panel row is one 64-byte line.
bool few_rows_packs_b_groups(int nr);

// Low, Igual, Smith, Quintana-Orti, "Analytical modeling is enough for high-performance BLIS" (TOMS 2016):
// kc from the L2 the B micro-panel may take (see MicroPanelHome; the L1 placement's depth for the few-rows
// path and the implicit GEMMs of an L1-fed tile), mc from L2 ways, nc from L3 ways. elem_bytes is the packed size.
Blocking analytical_blocking(const CpuInfo& cpu, int mr, int nr, int elem_bytes, MicroPanelHome home);

}  // namespace opbench

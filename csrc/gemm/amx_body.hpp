// The AMX-BF16 micro-kernel, written once over a tile unit U and instantiated twice: on the real tiles
// (ukernel_amx.cpp: ldtilecfg, tileloadd, tdpbf16ps, tilestored) and on the exact emulator (ukernel_amx_emu.cpp,
// portable C++), so that every machine runs the blocking, packing and edge handling the AMX machine runs.
// Included only by those two translation units (like pack.hpp: each gets private instantiations).
//
// The register tile is 32 x 32 fp32: four accumulator tiles of 16 rows x 16 columns (C00 C01 / C10 C11), fed
// per K step of 32 by two A tiles (16 rows x 32 bf16 each: 64-byte rows of the packed A micro-panel,
// pack_a_tiles, or of A's own rows read in place, lda halves apart) and two B tiles (16 pair-rows x 16
// columns x 2 halves: the pairs layout of the packed 32-column B micro-panel, pack_pairs.hpp, whose pair-rows
// are 128 bytes, so each B tile is read in place from the panel with a 128-byte stride). Edges never read
// outside their operands: a K step past kc, rows past m and columns past n go through zero-padded 1-2 KiB
// copies in the unit's scratch, and C is loaded and stored directly only when the tile is whole.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "opbench/kernel_set.hpp"
#include "pack_pairs.hpp"

namespace opbench {
namespace amx {
// Internal to each including unit, which compiles it with its own flags (as pack.hpp's templates): one copy
// built with AVX-512 for ukernel_amx.cpp must never be linked into the emulator's baseline code.
namespace {

constexpr int kTileRows = 16;     // rows of every tile this kernel configures
constexpr int kTileBytes = 64;    // bytes of each row (16 fp32, 32 bf16 or 16 pairs)
constexpr int kMR = 32;           // the register tile: two tiles of rows
constexpr int kNR = 32;           //                    two tiles of columns
constexpr int64_t kKStep = 32;    // bf16 of k per A tile row (16 pairs)
constexpr int64_t kBRowBytes = kNR * 4;  // one pair-row of the packed B micro-panel
// The K block when the blocking is the model's (Bf16Kernels::kc). On a 16-vCPU Emerald Rapids guest (2 MiB L2
// per core), 16 threads, BERT-base GEMMs at 128-1024 tokens and 1024-4096 squares, interleaved in one process
// (benchmarks/amx.py): 1024 ran 1.01-1.32x faster than 512 on all 15 shapes, and 256 0.86-1.01x of 512.
constexpr int64_t kDefaultKc = 1024;

// Tile registers: four accumulators, two A tiles, two B tiles.
enum Tile : int { kC00 = 0, kC01 = 1, kC10 = 2, kC11 = 3, kA0 = 4, kA1 = 5, kB0 = 6, kB1 = 7 };

// The palette-1 configuration both units take: eight tiles of 16 rows x 64 bytes (Intel SDM vol. 1, 3.4:
// palette id, start row, then the bytes per row and the rows of each tile).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
inline TileConfig full_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = kTileBytes;
    cfg.rows[t] = kTileRows;
  }
  return cfg;
}

// Zero-padded staging for the edges (in the unit's scratch, per call, so nothing is shared between threads).
struct Scratch {
  alignas(64) uint16_t a[kMR][kKStep];        // an A step: 32 rows x 32 bf16
  alignas(64) uint16_t b[kTileRows][kNR * 2];  // a B step: 16 pair-rows x 32 columns x 2
  alignas(64) float c[kMR][kNR];              // the C tile, when it is not whole
};

// A packed for the tiles (pack_a_tiles): a kMR-row micro-panel of K = k holds each whole K step as the tile
// rows of its two A tiles, kMR rows x 32 halves (2 KiB, 64-byte rows, contiguous), then the last partial step
// as kMR rows of its halves rounded up to a pair. That is the size of the pairs micro-panel (kMR x 2
// ceil(k / 2) halves), so the blocked loops' A workspace serves both. Rows past m are zero. Read in place, a
// tile row can straddle two lines (numpy's buffers are 16-byte aligned) and a power-of-two lda puts all 32
// rows of a step in one L1 set. On the device machine's host (Emerald Rapids, 16 vCPUs), the builds interleaved
// (benchmarks/amx.py, ab_builds.py --dtype bf16 --isa amx), packed against in place: BERT-base's GEMMs and
// 1024-4096 squares 0.65-0.98x of the time on 16 threads (4096^3 0.65x, 2048^3 0.79x), 256x4096x1024 0.79x;
// but a product of one or two column panels, whose A rows each serve once or twice, lost the packing pass:
// N = 16 1.08-1.40x, 7680x2x2560 1.28-1.32x, 64-channel convs 1.09-1.13x on one thread. So A is read in place
// up to N = 2 kNR (Bf16Kernels::a_in_place_max_n) and packed past it.
inline int64_t packed_step(int64_t k0) { return k0 * kMR; }  // where the step at k0 starts, in halves
inline int64_t packed_tail_pitch(int64_t kk) { return (kk + 1) / 2 * 2; }

template <int MR>
void pack_a_tiles(const uint16_t* a, int64_t lda, int64_t m, int64_t k, uint16_t* dst) {
  static_assert(MR == kMR, "the tile layout is the register tile's rows");
  const int64_t whole = k / kKStep * kKStep, tail = packed_tail_pitch(k - whole);
  for (int64_t r0 = 0; r0 < m; r0 += MR) {
    const uint16_t* src = a + r0 * lda;
    const int rows = static_cast<int>(m - r0 < MR ? m - r0 : MR);
    for (int64_t k0 = 0; k0 < whole; k0 += kKStep) {
      uint16_t* d = dst + packed_step(k0);
      for (int i = 0; i < rows; ++i) std::memcpy(d + i * kKStep, src + i * lda + k0, kKStep * 2);
      if (rows < MR) std::memset(d + rows * kKStep, 0, static_cast<size_t>((MR - rows) * kKStep * 2));
    }
    if (tail > 0) {
      uint16_t* d = dst + packed_step(whole);
      std::memset(d, 0, static_cast<size_t>(MR * tail * 2));
      for (int i = 0; i < rows; ++i) std::memcpy(d + i * tail, src + i * lda + whole, static_cast<size_t>(k - whole) * 2);
    }
    dst += MR * (whole + tail);
  }
}

// Stage one K step (halves [k0, k0 + kk) of rows [0, rows)) of A into the scratch, zero elsewhere; `a` is
// row-major (in place) or, when `packed`, the micro-panel of pack_a_tiles (where only a partial last step,
// its rows packed_tail_pitch(kk) apart, is staged).
inline void stage_a(Scratch& s, const uint16_t* a, int64_t lda, bool packed, int64_t k0, int64_t kk, int rows) {
  std::memset(s.a, 0, sizeof(s.a));
  const uint16_t* from = packed ? a + packed_step(k0) : a + k0;
  const int64_t pitch = packed ? packed_tail_pitch(kk) : lda;
  for (int i = 0; i < rows; ++i) std::memcpy(s.a[i], from + i * pitch, static_cast<size_t>(kk) * 2);
}

// The micro-kernel: C[0:m, 0:n] (+)= A (m x kc) B (kc x n), B the packed pairs micro-panel of kNR columns.
// Out float: C fp32, accumulated when asked. Out uint16_t: C bf16, never accumulated: the finished tile goes
// through the scratch and is rounded into C by the unit (its kernel set's store_bf16), so a product whose K is
// one block needs no fp32 workspace and no second pass over C.
template <class U, class Out = float>
void tile_body(U& u, int64_t kc, const uint16_t* a, int64_t lda, bool a_packed, const uint16_t* bp, Out* c,
               int64_t ldc, bool accumulate, int m, int n) {
  constexpr bool kRound = std::is_same_v<Out, uint16_t>;
  Scratch& s = u.scratch();
  if (!U::ready()) u.configure();
  const bool rows2 = m > kTileRows, cols2 = n > kTileRows, whole = !kRound && m == kMR && n == kNR;
  if (kRound || !accumulate) {
    u.template zero<kC00>();
    u.template zero<kC01>();
    u.template zero<kC10>();
    u.template zero<kC11>();
  } else {
    const float* from = reinterpret_cast<const float*>(c);
    int64_t ld = ldc;
    if (!whole) {
      std::memset(s.c, 0, sizeof(s.c));
      for (int i = 0; i < m; ++i) std::memcpy(s.c[i], c + i * ldc, static_cast<size_t>(n) * 4);
      from = &s.c[0][0];
      ld = kNR;
    }
    u.template load<kC00>(from, ld * 4);
    u.template load<kC01>(from + kTileRows, ld * 4);
    u.template load<kC10>(from + kTileRows * ld, ld * 4);
    u.template load<kC11>(from + kTileRows * ld + kTileRows, ld * 4);
  }
  const int64_t pair_rows = packing::pairs_of(kc);
  for (int64_t k0 = 0; k0 < kc; k0 += kKStep) {
    const int64_t kk = kc - k0 < kKStep ? kc - k0 : kKStep;
    const int64_t p0 = k0 / 2;
    // A: a whole step's tiles straight from the packed panel (zero rows past m included), or from A's rows in
    // place when the tile's 16 rows exist; anything else staged with zeros.
    const uint16_t* a0 = nullptr;
    int64_t a_stride = kKStep * 2;
    if (kk == kKStep && a_packed) {
      a0 = a + packed_step(k0);
    } else if (kk == kKStep && m == kMR) {
      a0 = a + k0;
      a_stride = lda * 2;
    } else {
      stage_a(s, a, lda, a_packed, k0, kk, a_packed ? kMR : m);
      if (kk == kKStep && m >= kTileRows) {  // the first tile in place, the second staged
        u.template load<kA0>(a + k0, lda * 2);
      } else {
        u.template load<kA0>(&s.a[0][0], kKStep * 2);
      }
      if (rows2) u.template load<kA1>(&s.a[kTileRows][0], kKStep * 2);
    }
    if (a0 != nullptr) {
      u.template load<kA0>(a0, a_stride);
      if (rows2) u.template load<kA1>(reinterpret_cast<const char*>(a0) + kTileRows * a_stride, a_stride);
    }
    // B: the panel's pair-rows [p0, p0 + 16) in place, or the last ones staged with zero rows after them.
    const uint16_t* brow = bp + p0 * kNR * 2;
    if (pair_rows - p0 < kTileRows) {
      std::memset(s.b, 0, sizeof(s.b));
      std::memcpy(s.b, brow, static_cast<size_t>((pair_rows - p0) * kBRowBytes));
      brow = &s.b[0][0];
    }
    // The next step's B tiles (2 KiB, 32 lines) into L1 while this step multiplies: B streams from L2 past
    // A's rows. On the Emerald Rapids guest, with the tiles configured once per product, against neither,
    // interleaved (7 of benchmarks/amx.py's shapes): 1.00-1.21x on 16 threads, 1.00-1.13x on one. A's next
    // rows as well: 0.83-0.97x; B two steps ahead: 0.87-1.05x.
    if (p0 + kTileRows < pair_rows) {
      const char* next = reinterpret_cast<const char*>(bp + (p0 + kTileRows) * kNR * 2);
      for (int line = 0; line < kTileRows * kBRowBytes / 64; ++line) __builtin_prefetch(next + 64 * line, 0, 3);
    }
    u.template load<kB0>(brow, kBRowBytes);
    if (cols2) u.template load<kB1>(brow + kTileRows * 2, kBRowBytes);
    u.template dp<kC00, kA0, kB0>();
    if (cols2) u.template dp<kC01, kA0, kB1>();
    if (rows2) {
      u.template dp<kC10, kA1, kB0>();
      if (cols2) u.template dp<kC11, kA1, kB1>();
    }
  }
  float* to = whole ? reinterpret_cast<float*>(c) : &s.c[0][0];
  const int64_t ld = whole ? ldc : kNR;
  u.template store<kC00>(to, ld * 4);
  u.template store<kC01>(to + kTileRows, ld * 4);
  u.template store<kC10>(to + kTileRows * ld, ld * 4);
  u.template store<kC11>(to + kTileRows * ld + kTileRows, ld * 4);
  if constexpr (kRound) {
    u.round(&s.c[0][0], kNR, m, n, c, ldc);
  } else if (!whole) {
    for (int i = 0; i < m; ++i) std::memcpy(c + i * ldc, s.c[i], static_cast<size_t>(n) * 4);
  }
}

// The unit's Bf16Kernels: the micro-kernel's entries (packed A, packed A into bf16 C, A in place, A in place
// into bf16 C) on the tile packer of A and the pairs packers of B of a 32 x 32 tile, up to which N A is read in
// place, the K block, and the unit's begin and end (U::kBegin / U::kEnd: nullptr where it sets nothing up per
// product).
template <class U>
struct Entries {
  static void packed(int64_t kc, const uint16_t* ap, const uint16_t* bp, float* c, int64_t ldc, bool accumulate, int m,
                     int n) {
    U u;
    tile_body(u, kc, ap, 0, true, bp, c, ldc, accumulate, m, n);
  }
  static void packed_round(int64_t kc, const uint16_t* ap, const uint16_t* bp, uint16_t* c, int64_t ldc, int m, int n) {
    U u;
    tile_body(u, kc, ap, 0, true, bp, c, ldc, false, m, n);
  }
  static void in_place(int64_t kc, const uint16_t* a, int64_t lda, const uint16_t* bp, float* c, int64_t ldc,
                       bool accumulate, int m, int n) {
    U u;
    tile_body(u, kc, a, lda, false, bp, c, ldc, accumulate, m, n);
  }
  static void in_place_round(int64_t kc, const uint16_t* a, int64_t lda, const uint16_t* bp, uint16_t* c, int64_t ldc,
                             int m, int n) {
    U u;
    tile_body(u, kc, a, lda, false, bp, c, ldc, false, m, n);
  }
};

// An AMX row's kernel set: another row's, under the row's name (its bf16 kernels are the row's Beside column).
inline KernelSet renamed(const KernelSet& base, const char* isa) {
  KernelSet k = base;
  k.isa = isa;
  return k;
}

template <class U, class Cvt>
Bf16Kernels make_tile_kernels(const char* isa, const char* description) {
  Bf16Kernels k = packing::make_bf16_kernels<kMR, kNR, Cvt>(isa, description, Entries<U>::packed, Entries<U>::in_place,
                                                            Entries<U>::in_place_round);
  k.pack_a = pack_a_tiles<kMR>;
  k.ukernel_round = Entries<U>::packed_round;
  k.a_in_place_max_n = 2 * kNR;
  k.kc = kDefaultKc;
  k.begin = U::kBegin;
  k.end = U::kEnd;
  return k;
}

}  // namespace
}  // namespace amx
}  // namespace opbench

// The AMX-BF16 micro-kernel, written once over a tile unit U and instantiated twice: on the real tiles
// (ukernel_amx.cpp: ldtilecfg, tileloadd, tdpbf16ps, tilestored) and on the exact emulator (ukernel_amx_emu.cpp,
// portable C++), so that every machine runs the blocking, packing and edge handling the AMX machine runs.
// Included only by those two translation units (like pack.hpp: each gets private instantiations).
//
// The default register tile is 32 x 32 fp32: four accumulator tiles of 16 rows x 16 columns (C00 C01 / C10
// C11), fed per K step of 32 by two A tiles (16 rows x 32 bf16 each: 64-byte rows of the packed A micro-panel,
// pack_a_tiles, or of A's own rows read in place, lda halves apart) and two B tiles (16 pair-rows x 16
// columns x 2 halves: the pairs layout of the packed 32-column B micro-panel, pack_pairs.hpp, whose pair-rows
// are 128 bytes, so each B tile is read in place from the panel with a 128-byte stride). The tile space's
// other layouts (Layout below) share out the eight tiles otherwise. Edges never read outside their operands:
// a K step past kc, rows past m and columns past n go through zero-padded copies in a per-call scratch, and C
// is loaded and stored directly only when the tile is whole.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "opbench/isa.hpp"
#include "opbench/kernel_set.hpp"
#include "pack_pairs.hpp"

namespace opbench {
namespace amx {
// Internal to each including unit, which compiles it with its own flags (as pack.hpp's templates): one copy
// built with AVX-512 for ukernel_amx.cpp must never be linked into the emulator's baseline code.
namespace {

constexpr int kTileRows = 16;     // rows of every tile this kernel configures
constexpr int kTileBytes = 64;    // bytes of each row (16 fp32, 32 bf16 or 16 pairs)
constexpr int kTileCols = 16;     // fp32 columns of an accumulator tile, pair columns of a B tile
constexpr int64_t kKStep = 32;    // bf16 of k per A tile row (16 pairs)
// The K block when the blocking is the model's (Bf16Kernels::kc). On a 16-vCPU Emerald Rapids guest (2 MiB L2
// per core), 16 threads, BERT-base GEMMs at 128-1024 tokens and 1024-4096 squares, interleaved in one process
// (benchmarks/amx.py): 1024 ran 1.01-1.32x faster than 512 on all 15 shapes, and 256 0.86-1.01x of 512.
constexpr int64_t kDefaultKc = 1024;

// The palette-1 configuration both units take: eight tiles of 16 rows x 64 bytes (Intel SDM vol. 1, 3.4:
// palette id, start row, then the bytes per row and the rows of each tile). Every variant below uses these
// shapes; they differ in how the eight tiles are shared out.
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

// A variant of the micro-kernel (the AMX tile space, tuning/spaces/gemm_amx.toml): RT x CT accumulator tiles,
// the register tile 16 RT x 16 CT, fed per K step of 32 by RT A tiles and CT B tiles, with the operand tiles
// of KU steps loaded before their products are issued. The eight tile registers hold the RT CT accumulators
// (0 .. RT CT - 1), then per loaded step min(RT, 2) A and min(CT, 2) B registers: where RT > 2 the one B tile
// of a step serves all RT row tiles while A's tiles pass through two registers in turn (B reused RT times), and
// where CT > 2 the one A tile serves CT column tiles. Which tile serves which accumulator never changes the
// sums: every element's products are added in K order, one step at a time, so every variant gives the same
// bits (tests/test_amx.py holds them equal).
template <int RT, int CT, int KU>
struct Layout {
  static constexpr int kMR = kTileRows * RT;
  static constexpr int kNR = kTileCols * CT;
  static constexpr int kAcc = RT * CT;
  static constexpr int kARegs = RT < 2 ? RT : 2;
  static constexpr int kBRegs = CT < 2 ? CT : 2;
  static constexpr int kSlot = kARegs + kBRegs;
  static_assert(kAcc >= 1 && kAcc <= 4, "one to four accumulator tiles");
  static_assert(kAcc + KU * kSlot <= 8, "the accumulators and the loaded steps' operands fill eight tiles");
  static_assert(KU == 1 || (RT <= 2 && CT <= 2), "a streamed operand is loaded one step at a time");
  static constexpr int kRT = RT;  // row and column tiles
  static constexpr int kCT = CT;
  static constexpr int acc(int i, int j) { return i * CT + j; }
  static constexpr int row_of(int t) { return t / CT; }  // accumulator t's row and column tile
  static constexpr int col_of(int t) { return t % CT; }
  static constexpr int a_reg(int u, int i) { return kAcc + u * kSlot + i % kARegs; }
  static constexpr int b_reg(int u, int j) { return kAcc + u * kSlot + kARegs + j % kBRegs; }
  static constexpr int kKU = KU;
  static constexpr int64_t kBRowBytes = kNR * 4;  // one pair-row of the packed B micro-panel
};

// f(integral_constant<int, 0>), ..., f(integral_constant<int, N - 1>): the tile numbers stay constants.
template <class F, int... I>
inline void unroll_each(F& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
template <int N, class F>
inline void unroll(F&& f) {
  unroll_each(f, std::make_integer_sequence<int, N>{});
}

// Zero-padded staging for the edges (on the calling thread's stack, per call, so nothing is shared).
template <int MR, int NR>
struct Scratch {
  alignas(64) uint16_t a[MR][kKStep];         // an A step: MR rows x 32 bf16
  alignas(64) uint16_t b[kTileRows][NR * 2];  // a B step: 16 pair-rows x NR columns x 2
  alignas(64) float c[MR][NR];                // the C tile, when it is not whole
};

// A packed for the tiles (pack_a_tiles): an MR-row micro-panel of K = k holds each whole K step as the tile
// rows of its RT A tiles, MR rows x 32 halves (64-byte rows, contiguous), then the last partial step as MR rows
// of its halves rounded up to a pair. That is the size of the pairs micro-panel (MR x 2 ceil(k / 2) halves), so
// the blocked loops' A workspace serves both. Rows past m are zero. Read in place, a tile row can straddle two
// lines (numpy's buffers are 16-byte aligned) and a power-of-two lda puts all 32 rows of a step in one L1 set.
// On the device machine's host (Emerald Rapids, 16 vCPUs), the builds interleaved (benchmarks/amx.py,
// ab_builds.py --dtype bf16 --isa amx), packed against in place, 2x2 tiles: BERT-base's GEMMs and 1024-4096
// squares 0.65-0.98x of the time on 16 threads (4096^3 0.65x, 2048^3 0.79x), 256x4096x1024 0.79x; but a
// product of one or two column panels, whose A rows each serve once or twice, lost the packing pass: N = 16
// 1.08-1.40x, 7680x2x2560 1.28-1.32x, 64-channel convs 1.09-1.13x on one thread. So A is read in place up to
// two column panels (Bf16Kernels::a_in_place_max_n) and packed past them.
inline int64_t packed_tail_pitch(int64_t kk) { return (kk + 1) / 2 * 2; }

template <int MR>
void pack_a_tiles(const uint16_t* a, int64_t lda, int64_t m, int64_t k, uint16_t* dst) {
  const int64_t whole = k / kKStep * kKStep, tail = packed_tail_pitch(k - whole);
  for (int64_t r0 = 0; r0 < m; r0 += MR) {
    const uint16_t* src = a + r0 * lda;
    const int rows = static_cast<int>(m - r0 < MR ? m - r0 : MR);
    for (int64_t k0 = 0; k0 < whole; k0 += kKStep) {
      uint16_t* d = dst + k0 * MR;
      for (int i = 0; i < rows; ++i) std::memcpy(d + i * kKStep, src + i * lda + k0, kKStep * 2);
      if (rows < MR) std::memset(d + rows * kKStep, 0, static_cast<size_t>((MR - rows) * kKStep * 2));
    }
    if (tail > 0) {
      uint16_t* d = dst + whole * MR;
      std::memset(d, 0, static_cast<size_t>(MR * tail * 2));
      for (int i = 0; i < rows; ++i) std::memcpy(d + i * tail, src + i * lda + whole, static_cast<size_t>(k - whole) * 2);
    }
    dst += MR * (whole + tail);
  }
}

// The micro-kernel: C[0:m, 0:n] (+)= A (m x kc) B (kc x n), B the packed pairs micro-panel of L::kNR columns.
// Out float: C fp32, accumulated when asked. Out uint16_t: C bf16, never accumulated: the finished tile goes
// through the scratch and is rounded into C by the unit (its kernel set's store_bf16), so a product whose K is
// one block needs no fp32 workspace and no second pass over C. Row and column tiles wholly past m and n are
// neither loaded nor multiplied. A step's A tiles come straight from the packed panel (zero rows past m
// included) or from A's rows in place where the tile's 16 rows exist, B's from the panel in place; anything
// else (the last partial K step, B's last pair-rows, A's rows past m in place) goes through the scratch with
// zeros.
template <class L, class U, class Out = float>
void tile_body(U& u, int64_t kc, const uint16_t* a, int64_t lda, bool a_packed, const uint16_t* bp, Out* c,
               int64_t ldc, bool accumulate, int m, int n) {
  constexpr int MR = L::kMR, NR = L::kNR;
  constexpr bool kRound = std::is_same_v<Out, uint16_t>;
  Scratch<MR, NR> s;
  if (!U::ready()) u.configure();
  const int rows_used = (m + kTileRows - 1) / kTileRows, cols_used = (n + kTileCols - 1) / kTileCols;
  const bool whole = !kRound && m == MR && n == NR;
  const float* from = reinterpret_cast<const float*>(c);
  int64_t ld = ldc;
  if (!kRound && accumulate && !whole) {
    std::memset(s.c, 0, sizeof(s.c));
    for (int i = 0; i < m; ++i) std::memcpy(s.c[i], c + i * ldc, static_cast<size_t>(n) * 4);
    from = &s.c[0][0];
    ld = NR;
  }
  unroll<L::kAcc>([&](auto t) {
    constexpr int T = decltype(t)::value, I = L::row_of(T), J = L::col_of(T);
    if (kRound || !accumulate) {
      u.template zero<T>();
    } else {
      u.template load<T>(from + I * kTileRows * ld + J * kTileCols, ld * 4);
    }
  });
  const int64_t pair_rows = packing::pairs_of(kc);
  // B's pair-rows [p, p + rows) into L1 while the step before them multiplies: B streams from L2 past A's
  // rows. On the Emerald Rapids guest, 2x2 tiles configured once per product, one step ahead against none,
  // interleaved (7 of benchmarks/amx.py's shapes): 1.00-1.21x on 16 threads, 1.00-1.13x on one. A's next
  // rows as well: 0.83-0.97x; B two steps ahead: 0.87-1.05x.
  auto prefetch_b = [&](int64_t p, int64_t rows) {
    if (p >= pair_rows) return;
    const char* next = reinterpret_cast<const char*>(bp + p * NR * 2);
    for (int64_t line = 0; line < rows * L::kBRowBytes / 64; ++line) __builtin_prefetch(next + 64 * line, 0, 3);
  };
  // Where row tile i of the step at k0 starts and its stride in bytes: nullptr where it must be staged.
  auto a_tile = [&](int64_t k0, int64_t kk, int i, int64_t& stride) -> const uint16_t* {
    if (kk != kKStep) return nullptr;
    if (a_packed) {
      stride = kKStep * 2;
      return a + k0 * MR + i * kTileRows * kKStep;
    }
    if ((i + 1) * kTileRows > m) return nullptr;
    stride = lda * 2;
    return a + i * kTileRows * lda + k0;
  };
  // The products of one step whose operand tiles are not all loaded yet: each streamed tile is loaded just
  // before the products it serves.
  auto one_step = [&](int64_t k0) {
    const int64_t kk = kc - k0 < kKStep ? kc - k0 : kKStep, p0 = k0 / 2;
    bool staged_a = false;
    const uint16_t* at[L::kRT];
    int64_t astride[L::kRT];
    for (int i = 0; i < rows_used; ++i) {
      at[i] = a_tile(k0, kk, i, astride[i]);
      if (at[i] == nullptr) staged_a = true;
    }
    if (staged_a) {
      std::memset(s.a, 0, sizeof(s.a));
      const uint16_t* src = a_packed ? a + k0 * MR : a + k0;
      const int64_t pitch = a_packed ? packed_tail_pitch(kk) : lda;
      const int rows = a_packed ? MR : m;
      for (int i = 0; i < rows; ++i) std::memcpy(s.a[i], src + i * pitch, static_cast<size_t>(kk) * 2);
      for (int i = 0; i < rows_used; ++i) {
        if (at[i] == nullptr) {
          at[i] = &s.a[i * kTileRows][0];
          astride[i] = kKStep * 2;
        }
      }
    }
    const uint16_t* brow = bp + p0 * NR * 2;
    if (pair_rows - p0 < kTileRows) {
      std::memset(s.b, 0, sizeof(s.b));
      std::memcpy(s.b, brow, static_cast<size_t>((pair_rows - p0) * L::kBRowBytes));
      brow = &s.b[0][0];
    }
    prefetch_b(p0 + kTileRows, kTileRows);
    auto b_at = [&](int j) { return brow + j * kTileCols * 2; };
    if constexpr (L::kAcc > 1 && L::kARegs < L::kRT) {  // B kept, A streamed
      u.template load<L::b_reg(0, 0)>(b_at(0), L::kBRowBytes);
      unroll<L::kRT>([&](auto ti) {
        constexpr int I = decltype(ti)::value;
        if (I >= rows_used) return;
        u.template load<L::a_reg(0, I)>(at[I], astride[I]);
        u.template dp<L::acc(I, 0), L::a_reg(0, I), L::b_reg(0, 0)>();
      });
    } else {  // A kept; B streamed where CT > 2, else kept too
      unroll<L::kARegs>([&](auto ti) {
        constexpr int I = decltype(ti)::value;
        if (I < rows_used) u.template load<L::a_reg(0, I)>(at[I], astride[I]);
      });
      if constexpr (L::kBRegs == L::kCT) {
        unroll<L::kBRegs>([&](auto tj) {
          constexpr int J = decltype(tj)::value;
          if (J < cols_used) u.template load<L::b_reg(0, J)>(b_at(J), L::kBRowBytes);
        });
      }
      unroll<L::kAcc>([&](auto t) {
        constexpr int T = decltype(t)::value, I = L::row_of(T), J = L::col_of(T);
        if (I >= rows_used || J >= cols_used) return;
        if constexpr (L::kBRegs < L::kCT) u.template load<L::b_reg(0, J)>(b_at(J), L::kBRowBytes);
        u.template dp<L::acc(I, J), L::a_reg(0, I), L::b_reg(0, J)>();
      });
    }
  };
  int64_t k0 = 0;
  if constexpr (L::kKU == 2) {
    // Two whole steps at a time, every operand tile of both loaded before the first product, while neither
    // needs the scratch; the products still run in K order, so the sums are the one-step variant's.
    const bool a_whole = a_packed || m == MR;
    for (; k0 + 2 * kKStep <= kc && k0 / 2 + 2 * kTileRows <= pair_rows && a_whole; k0 += 2 * kKStep) {
      const int64_t p0 = k0 / 2;
      unroll<2>([&](auto tu) {
        constexpr int V = decltype(tu)::value;
        const int64_t ks = k0 + V * kKStep;
        unroll<L::kARegs>([&](auto ti) {
          constexpr int I = decltype(ti)::value;
          int64_t stride = 0;
          const uint16_t* ap = a_tile(ks, kKStep, I, stride);
          u.template load<L::a_reg(V, I)>(ap, stride);
        });
        const uint16_t* brow = bp + (p0 + V * kTileRows) * NR * 2;
        unroll<L::kBRegs>([&](auto tj) {
          constexpr int J = decltype(tj)::value;
          if (J < cols_used) u.template load<L::b_reg(V, J)>(brow + J * kTileCols * 2, L::kBRowBytes);
        });
      });
      prefetch_b(p0 + 2 * kTileRows, 2 * kTileRows);
      unroll<2>([&](auto tu) {
        constexpr int V = decltype(tu)::value;
        unroll<L::kAcc>([&](auto t) {
          constexpr int T = decltype(t)::value, I = L::row_of(T), J = L::col_of(T);
          if (I < rows_used && J < cols_used) u.template dp<L::acc(I, J), L::a_reg(V, I), L::b_reg(V, J)>();
        });
      });
    }
  }
  for (; k0 < kc; k0 += kKStep) one_step(k0);
  float* to = whole ? reinterpret_cast<float*>(c) : &s.c[0][0];
  const int64_t st = whole ? ldc : NR;
  unroll<L::kAcc>([&](auto t) {
    constexpr int T = decltype(t)::value, I = L::row_of(T), J = L::col_of(T);
    u.template store<T>(to + I * kTileRows * st + J * kTileCols, st * 4);
  });
  if constexpr (kRound) {
    u.round(&s.c[0][0], NR, m, n, c, ldc);
  } else if (!whole) {
    for (int i = 0; i < m; ++i) std::memcpy(c + i * ldc, s.c[i], static_cast<size_t>(n) * 4);
  }
}

// The unit's Bf16Kernels entries for one layout: packed A, packed A into bf16 C, A in place, A in place into
// bf16 C.
template <class L, class U>
struct Entries {
  static void packed(int64_t kc, const uint16_t* ap, const uint16_t* bp, float* c, int64_t ldc, bool accumulate, int m,
                     int n) {
    U u;
    tile_body<L>(u, kc, ap, 0, true, bp, c, ldc, accumulate, m, n);
  }
  static void packed_round(int64_t kc, const uint16_t* ap, const uint16_t* bp, uint16_t* c, int64_t ldc, int m, int n) {
    U u;
    tile_body<L>(u, kc, ap, 0, true, bp, c, ldc, false, m, n);
  }
  static void in_place(int64_t kc, const uint16_t* a, int64_t lda, const uint16_t* bp, float* c, int64_t ldc,
                       bool accumulate, int m, int n) {
    U u;
    tile_body<L>(u, kc, a, lda, false, bp, c, ldc, accumulate, m, n);
  }
  static void in_place_round(int64_t kc, const uint16_t* a, int64_t lda, const uint16_t* bp, uint16_t* c, int64_t ldc,
                             int m, int n) {
    U u;
    tile_body<L>(u, kc, a, lda, false, bp, c, ldc, false, m, n);
  }
};

// An AMX row's kernel set: another row's, under the row's name (its bf16 kernels are the row's Beside column).
inline KernelSet renamed(const KernelSet& base, const char* isa) {
  KernelSet k = base;
  k.isa = isa;
  return k;
}

// The unit's Bf16Kernels for one layout: the micro-kernel's entries on the tile packer of A and the pairs
// packers of B of a 16 RT x 16 CT tile, up to which N A is read in place, the K block, and the unit's begin
// and end (U::kBegin / U::kEnd: nullptr where it sets nothing up per product).
template <class U, class Cvt, class L>
Bf16Kernels make_tile_kernels(const char* isa, const char* description) {
  using E = Entries<L, U>;
  Bf16Kernels k = packing::make_bf16_kernels<L::kMR, L::kNR, Cvt>(isa, description, E::packed, E::in_place,
                                                                  E::in_place_round);
  k.pack_a = pack_a_tiles<L::kMR>;
  k.ukernel_round = E::packed_round;
  k.a_in_place_max_n = 2 * L::kNR;
  k.kc = kDefaultKc;
  k.begin = U::kBegin;
  k.end = U::kEnd;
  return k;
}

// Every layout of the tile space (kAmxShapes in opbench/isa.hpp, the default first): a unit's kernels for each,
// described by amx_shape_description (runtime/amx.cpp).
template <class U, class Cvt>
struct Variants {
  std::vector<std::string> descriptions;
  std::vector<Bf16Kernels> kernels;
  Variants(const char* isa, const char* how) { fill(isa, how, std::make_index_sequence<kAmxShapeCount>{}); }
  template <size_t... V>
  void fill(const char* isa, const char* how, std::index_sequence<V...>) {
    (descriptions.push_back(amx_shape_description(kAmxShapes[V], how)), ...);  // whole before c_str() is taken
    (kernels.push_back(
         make_tile_kernels<U, Cvt, Layout<kAmxShapes[V].rows, kAmxShapes[V].cols, kAmxShapes[V].ksteps>>(
             isa, descriptions[V].c_str())),
     ...);
  }
  const Bf16Kernels* at(int v) const { return v >= 0 && v < kAmxShapeCount ? &kernels[static_cast<size_t>(v)] : nullptr; }
};

}  // namespace
}  // namespace amx
}  // namespace opbench

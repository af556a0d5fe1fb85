// AVX512-BF16 micro-kernel for bf16 GEMM: a 14x32 fp32 register tile (28 zmm accumulators), each vdpbf16ps
// adding the two products of one k pair to 16 lanes. Per pair it loads B's 32 columns (two zmm of 16 pairs)
// and broadcasts each of A's 14 row pairs (32 bits) from memory: twice the fp32 kernel's multiplies per
// instruction, and half its panel bytes. Panels are in the pairs layout (pack_pairs.hpp). Compiled with the
// AVX-512 flags plus -mavx512bf16, only when the compiler knows it; called only on a CPU that reports
// AVX512-BF16 (runtime/isa.cpp, bf16_kernels).
#include <immintrin.h>

#include <type_traits>

#include "opbench/kernel_set.hpp"
#include "pack_pairs.hpp"

namespace opbench {
namespace {

constexpr int kTileRows = 14;
constexpr int kNV = 2;  // zmm per row of the tile
constexpr int kNR = kNV * 16;
// C's tile goes towards L2 as the kernel starts and into L1 this many pairs before the end (as in the fp32
// kernel, ukernel_avx512.cpp: a deep K block evicts C fetched at the start).
constexpr int64_t kCLatePairs = 32;
// A read in place: lines of each row fetched ahead of the pair being multiplied.
constexpr int64_t kAPrefetchLines = 4;

// The packing templates' conversion policy (the pairs packers copy halves; nothing widens fp16 here).
struct Cvt {
  static float widen(uint16_t h) { return _cvtsh_ss(h); }
};

// ROWS of the tile's kTileRows rows, for a micro-panel of A with only that many rows (its rows are still kTileRows
// apart in the panel): M = 128 at 14 rows would otherwise multiply 140 rows, 9% of them padding.
// kInPlace: A is not a packed micro-panel but ROWS rows of row-major A, lda halves apart (ukernel_a): a pair of
// row i is the 32 bits at row i's column 2p, so the broadcast reads A's own rows; an odd kc's last pair
// keeps its first half only (the second belongs to the next K block, or lies past the row).
// Out: float C (accumulated when asked), or uint16_t C that the tile is rounded into (ukernel_a_round).
template <int ROWS, bool kInPlace = false, class Out = float>
void ukernel_body(int64_t kc, const uint16_t* __restrict ap, int64_t lda, const uint16_t* __restrict bp,
                  Out* __restrict c, int64_t ldc, bool accumulate, int m, int n) {
  constexpr int kMR = ROWS;  // the rows computed; A's micro-panel holds kTileRows
  __m512 acc[kMR][kNV];
#pragma GCC unroll 14
  for (int i = 0; i < kMR; ++i) {
#pragma GCC unroll 2
    for (int j = 0; j < kNV; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  const int64_t pairs = packing::pairs_of(kc);
  const int64_t late = pairs > kCLatePairs ? pairs - kCLatePairs : 0;
#pragma GCC unroll 14
  for (int i = 0; i < kMR; ++i) {
    const char* row = reinterpret_cast<const char*>(c + i * ldc);
    if (late > 0) {
      _mm_prefetch(row, _MM_HINT_T1);
    } else {
      _mm_prefetch(row, _MM_HINT_T0);
      // A bf16 row of the tile is 64 bytes, across two lines unless C is aligned (numpy's large arrays are
      // 16 bytes past a line). 1536 QK products 128x128x64 from memory, two Zen 4 cores, against the build
      // that rounded in a second pass: 0.94-0.96x without this, 1.07-1.13x with it.
      if constexpr (std::is_same_v<Out, uint16_t>) _mm_prefetch(row + 63, _MM_HINT_T0);
    }
  }
  const auto* a32 = reinterpret_cast<const int32_t*>(ap);
  // In place, whole pairs of every row; an odd kc's last one is read as one half.
  const int64_t whole = kInPlace ? kc / 2 : pairs;
  const int64_t late_whole = late < whole ? late : whole;
  auto pair_of = [&](int i, int64_t p) __attribute__((always_inline)) {
    if constexpr (kInPlace) {
      int32_t v;
      __builtin_memcpy(&v, ap + i * lda + 2 * p, sizeof(v));
      return v;
    } else {
      return a32[p * kTileRows + i];
    }
  };
  const int64_t row_halves = (kc + 31) / 32 * 32;  // whole lines of a row's K block
  const int64_t ahead = row_halves < 32 * kAPrefetchLines ? row_halves : 32 * kAPrefetchLines;
  auto step = [&](int64_t p, bool half) __attribute__((always_inline)) {
    if constexpr (kInPlace) {
      // One row's line kAPrefetchLines ahead per step (at most the row's K block ahead): each row of A read
      // in place moves a line (16 pairs) every 16 steps, and from memory the 14 streams are more than the
      // prefetchers follow. Past the row's end the stream runs on into the same row of the next tile, MR
      // rows down (the caller's next call, or the next block's): rows of attention's K = 64-128 are 2-4
      // lines, so a prefetch within the row only fetched lines the tile was already reading. One Zen 4
      // core, builds interleaved: 1536 WV products 128x64x128 from memory 1.28-1.31x, QK 128x128x64
      // 1.09-1.11x, 512 of 384x64x384 1.04x; in cache and K = 1024 1.00x.
      const int64_t r = p & 15;
      if (r < kMR) {
        const int64_t at = 2 * (p - r) + ahead;  // halves into row r's stream
        const uint16_t* line = at < row_halves ? ap + r * lda + at : ap + (kTileRows + r) * lda + (at - row_halves);
        _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
      }
    }
    __m512bh b[kNV];
#pragma GCC unroll 2
    for (int j = 0; j < kNV; ++j) b[j] = (__m512bh)_mm512_load_si512(bp + (p * kNR + j * 16) * 2);
#pragma GCC unroll 14
    for (int i = 0; i < kMR; ++i) {
      const int32_t v = half ? static_cast<int32_t>(ap[i * lda + 2 * p]) : pair_of(i, p);
      const __m512bh a = (__m512bh)_mm512_set1_epi32(v);
#pragma GCC unroll 2
      for (int j = 0; j < kNV; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], a, b[j]);
    }
  };
  int64_t p = 0;
#pragma GCC unroll 2
  for (; p < late_whole; ++p) step(p, false);
  if (late > 0) {
#pragma GCC unroll 14
    for (int i = 0; i < kMR; ++i) {
#pragma GCC unroll 2
      for (int j = 0; j < kNV; ++j) _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + j * 16), _MM_HINT_T0);
    }
  }
#pragma GCC unroll 2
  for (; p < whole; ++p) step(p, false);
  if (kInPlace && whole < pairs) step(p, true);
  if constexpr (std::is_same_v<Out, uint16_t>) {
    // Both halves of a row's 32 columns rounded by one vcvtne2ps2bf16 (to nearest even, NaNs quieted, as
    // GemmKernels::store_bf16; it would flush a subnormal sum, but vdpbf16ps leaves none) and written by
    // one 64-byte store. store_bf16's integer rounding here, 7 instructions per 16 lanes, ran at 0.97x
    // (WV 128x64x128 and 384x64x384, builds interleaved, one Zen 4 core).
    static_assert(kNV == 2);
    const __mmask32 mask = n >= 32 ? ~__mmask32{0} : (__mmask32{1} << n) - 1;
#pragma GCC unroll 14
    for (int i = 0; i < kMR; ++i) {
      if (i >= m) break;
      const __m512i row = (__m512i)_mm512_cvtne2ps_pbh(acc[i][1], acc[i][0]);
      _mm512_mask_storeu_epi16(c + i * ldc, mask, row);
    }
  } else {
    __mmask16 mask[kNV];
#pragma GCC unroll 2
    for (int j = 0; j < kNV; ++j) mask[j] = packing::lanes_mask<Cvt>(n - j * 16);
#pragma GCC unroll 14
    for (int i = 0; i < kMR; ++i) {
      if (i >= m) break;
#pragma GCC unroll 2
      for (int j = 0; j < kNV; ++j) {
        float* cp = c + i * ldc + j * 16;
        const __m512 v = accumulate ? _mm512_add_ps(acc[i][j], _mm512_maskz_loadu_ps(mask[j], cp)) : acc[i][j];
        _mm512_mask_storeu_ps(cp, mask[j], v);
      }
    }
  }
}

template <bool kInPlace, class Out, int... R>
constexpr void (*kByRows[])(int64_t, const uint16_t*, int64_t, const uint16_t*, Out*, int64_t, bool, int,
                            int) = {ukernel_body<R + 1, kInPlace, Out>...};

template <bool kInPlace, class Out = float>
void by_rows(int64_t kc, const uint16_t* a, int64_t lda, const uint16_t* bp, Out* c, int64_t ldc, bool accumulate,
             int m, int n) {
  if (m >= kTileRows) {
    ukernel_body<kTileRows, kInPlace, Out>(kc, a, lda, bp, c, ldc, accumulate, m, n);
  } else {
    kByRows<kInPlace, Out, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12>[m - 1](kc, a, lda, bp, c, ldc, accumulate, m, n);
  }
}

void ukernel_a_round(int64_t kc, const uint16_t* a, int64_t lda, const uint16_t* bp, uint16_t* c, int64_t ldc, int m,
                     int n) {
  by_rows<true, uint16_t>(kc, a, lda, bp, c, ldc, false, m, n);
}

void ukernel(int64_t kc, const uint16_t* ap, const uint16_t* bp, float* c, int64_t ldc, bool accumulate, int m, int n) {
  by_rows<false>(kc, ap, 0, bp, c, ldc, accumulate, m, n);
}

constexpr Bf16Kernels kAvx512Bf16 = packing::make_bf16_kernels<kTileRows, kNR, Cvt>(
    "avx512bf16", "AVX512-BF16 14x32 bf16 pairs, vdpbf16ps into fp32", ukernel, by_rows<true>, ukernel_a_round);

}  // namespace

const Bf16Kernels& kernels_bf16_avx512bf16() { return kAvx512Bf16; }

}  // namespace opbench

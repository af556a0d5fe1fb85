// AVX512-BF16 micro-kernel for bf16 GEMM: a 14x32 fp32 register tile (28 zmm accumulators), each vdpbf16ps
// adding the two products of one k pair to 16 lanes. Per pair it loads B's 32 columns (two zmm of 16 pairs)
// and broadcasts each of A's 14 row pairs (32 bits) from memory: twice the fp32 kernel's multiplies per
// instruction, and half its panel bytes. Panels are in the pairs layout (pack_pairs.hpp). Compiled with the
// AVX-512 flags plus -mavx512bf16, only when the compiler knows it; called only on a CPU that reports
// AVX512-BF16 (runtime/isa.cpp, bf16_kernels).
#include <immintrin.h>

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

// The packing templates' conversion policy (the pairs packers copy halves; nothing widens fp16 here).
struct Cvt {
  static float widen(uint16_t h) { return _cvtsh_ss(h); }
};

// ROWS of the tile's kTileRows rows, for a micro-panel of A with only that many rows (its rows are still kTileRows
// apart in the panel): M = 128 at 14 rows would otherwise multiply 140 rows, 9% of them padding.
template <int ROWS>
void ukernel_body(int64_t kc, const uint16_t* __restrict ap, const uint16_t* __restrict bp, float* __restrict c,
                  int64_t ldc, bool accumulate, int m, int n) {
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
    }
  }
  const auto* a32 = reinterpret_cast<const int32_t*>(ap);
  auto step = [&](int64_t p) __attribute__((always_inline)) {
    __m512bh b[kNV];
#pragma GCC unroll 2
    for (int j = 0; j < kNV; ++j) b[j] = (__m512bh)_mm512_load_si512(bp + (p * kNR + j * 16) * 2);
#pragma GCC unroll 14
    for (int i = 0; i < kMR; ++i) {
      const __m512bh a = (__m512bh)_mm512_set1_epi32(a32[p * kTileRows + i]);
#pragma GCC unroll 2
      for (int j = 0; j < kNV; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], a, b[j]);
    }
  };
  int64_t p = 0;
#pragma GCC unroll 2
  for (; p < late; ++p) step(p);
  if (late > 0) {
#pragma GCC unroll 14
    for (int i = 0; i < kMR; ++i) {
#pragma GCC unroll 2
      for (int j = 0; j < kNV; ++j) _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + j * 16), _MM_HINT_T0);
    }
  }
#pragma GCC unroll 2
  for (; p < pairs; ++p) step(p);
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

template <int... R>
constexpr UkernelBf16 kByRows[] = {ukernel_body<R + 1>...};

void ukernel(int64_t kc, const uint16_t* ap, const uint16_t* bp, float* c, int64_t ldc, bool accumulate, int m, int n) {
  if (m >= kTileRows) {
    ukernel_body<kTileRows>(kc, ap, bp, c, ldc, accumulate, m, n);
  } else {
    kByRows<0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12>[m - 1](kc, ap, bp, c, ldc, accumulate, m, n);
  }
}

constexpr Bf16Kernels kAvx512Bf16 = packing::make_bf16_kernels<kTileRows, kNR, Cvt>(
    "avx512bf16", "AVX512-BF16 14x32 bf16 pairs, vdpbf16ps into fp32", ukernel);

}  // namespace

const Bf16Kernels& kernels_bf16_avx512bf16() { return kAvx512Bf16; }

}  // namespace opbench

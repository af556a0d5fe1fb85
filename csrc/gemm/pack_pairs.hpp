// bf16 GEMM panels in the pairs layout (opbench/kernel_set.hpp, Bf16Kernels): elements 2p and 2p + 1 of k side by
// side, as vdpbf16ps reads them, and the portable micro-kernel on that layout. Like pack.hpp, included only by
// the ISA translation units and templated on each unit's Cvt, so every ISA gets private instantiations.
//
// A pair is 32 bits, so packing A (rows along k) or B^T (rows along k) is a transpose of 32-bit elements: the
// 16x16 register transpose of pack.hpp moves them bit for bit. B read by rows interleaves two rows of halves.
#pragma once

#include <cstdint>

#include "opbench/bf16.hpp"
#include "opbench/kernel_set.hpp"
#include "pack.hpp"

namespace opbench {
namespace packing {

constexpr int64_t pairs_of(int64_t k) { return (k + 1) / 2; }

// One MR-row micro-panel of pairs per MR rows of A (m x k, row-major, lda halves): ceil(k / 2) x MR x 2 halves.
template <int MR, class Cvt>
void pack_a_pairs(const uint16_t* a, int64_t lda, int64_t m, int64_t k, uint16_t* dst) {
  const int64_t kp = pairs_of(k);
  for (int64_t r0 = 0; r0 < m; r0 += MR) {
    const uint16_t* src = a + r0 * lda;
    const int rows = static_cast<int>(m - r0 < MR ? m - r0 : MR);
    int64_t p = 0;
#if defined(__AVX512F__)
    if constexpr (MR <= 16) {
      if (lda % 2 == 0) {  // rows of pairs: 16 pairs of each of MR rows become 16 rows of MR pairs
        for (; 2 * (p + 16) <= k; p += 16) {
          // the next MR rows' same pairs, as pack_a does (csrc/gemm/README.md, "Packing")
          for (int i = 0; i < MR; ++i) __builtin_prefetch(src + (i + MR) * lda + 2 * p, 0, 2);
          transpose_16_columns<Cvt>(reinterpret_cast<const float*>(src + 2 * p), lda / 2, rows,
                                    reinterpret_cast<float*>(dst + 2 * p * MR), MR, MR);
        }
      }
    }
#endif
    for (; p < kp; ++p) {
      uint16_t* d = dst + 2 * p * MR;
      for (int i = 0; i < MR; ++i) {
        d[2 * i] = i < rows ? src[i * lda + 2 * p] : uint16_t{0};
        d[2 * i + 1] = (i < rows && 2 * p + 1 < k) ? src[i * lda + 2 * p + 1] : uint16_t{0};
      }
    }
    dst += 2 * kp * MR;
  }
}

// One NR-column micro-panel of pairs from rows [0, k) x columns [0, n) (n <= NR) of row-major B.
template <int NR, class Cvt>
void pack_b_pairs(const uint16_t* b, int64_t ldb, int64_t k, int64_t n, uint16_t* dst) {
  const int64_t kp = pairs_of(k);
  for (int64_t p = 0; p < kp; ++p) {
    const uint16_t* r0 = b + 2 * p * ldb;
    const uint16_t* r1 = 2 * p + 1 < k ? r0 + ldb : nullptr;
    uint16_t* d = dst + 2 * p * NR;
    int64_t j = 0;
#if defined(__AVX512BW__)
    if (r1 != nullptr) {  // 32 columns of two rows -> 32 pairs: one two-source permute per 16 pairs
      alignas(64) static constexpr uint16_t kInterleave[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                                               37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                                               11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
      const __m512i lo = _mm512_load_si512(kInterleave);
      const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
      for (; j + 32 <= n; j += 32) {
        const __m512i x0 = _mm512_loadu_si512(r0 + j), x1 = _mm512_loadu_si512(r1 + j);
        _mm512_storeu_si512(d + 2 * j, _mm512_permutex2var_epi16(x0, lo, x1));
        _mm512_storeu_si512(d + 2 * j + 32, _mm512_permutex2var_epi16(x0, hi, x1));
      }
    }
#endif
    for (; j < n; ++j) {
      d[2 * j] = r0[j];
      d[2 * j + 1] = r1 != nullptr ? r1[j] : uint16_t{0};
    }
    for (; j < NR; ++j) d[2 * j] = d[2 * j + 1] = 0;
  }
}

// The same micro-panel from B^T (n x k row-major, ldbt halves): column j's pair p is 32 bits of row j.
template <int NR, class Cvt>
void pack_bt_pairs(const uint16_t* bt, int64_t ldbt, int64_t k, int64_t n, uint16_t* dst) {
  const int64_t kp = pairs_of(k);
  int64_t p0 = 0;
#if defined(__AVX512F__)
  if constexpr (NR % 16 == 0) {
    if (ldbt % 2 == 0) {
      const int64_t whole = k / 2 / 16 * 16;  // pairs in whole groups of 16 (no odd last pair among them)
      for (int64_t j0 = 0; j0 < NR; j0 += 16) {
        const int rows = static_cast<int>(n - j0 < 0 ? 0 : (n - j0 < 16 ? n - j0 : 16));
        for (int64_t p = 0; p < whole; p += 16) {
          transpose_16_columns<Cvt>(reinterpret_cast<const float*>(bt + j0 * ldbt + 2 * p), ldbt / 2, rows,
                                    reinterpret_cast<float*>(dst + 2 * (p * NR + j0)), NR, 16);
        }
      }
      p0 = whole;
    }
  }
#endif
  for (int64_t p = p0; p < kp; ++p) {
    uint16_t* d = dst + 2 * p * NR;
    for (int64_t j = 0; j < NR; ++j) {
      const uint16_t* row = bt + j * ldbt;
      d[2 * j] = j < n ? row[2 * p] : uint16_t{0};
      d[2 * j + 1] = (j < n && 2 * p + 1 < k) ? row[2 * p + 1] : uint16_t{0};
    }
  }
}

// n bf16 values as fp32 (exact: the high half of the fp32 bits). Instantiated in each ISA's own translation
// unit, so that the compiler vectorises it with that unit's instructions.
template <class Cvt>
void widen_bf16(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}

// Rounds an m x n block of fp32 values to bf16 (round to nearest even).
template <class Cvt>
void store_bf16(const float* src, int64_t lds, int64_t m, int64_t n, uint16_t* dst, int64_t ldd) {
  for (int64_t i = 0; i < m; ++i) {
    int64_t j = 0;
#if defined(__AVX512F__)
    // float_to_bf16 on 16 lanes: add 0x7fff plus the last kept bit, keep the high halves; NaNs (unordered
    // with themselves) keep their high half with the quiet bit set. (The 7x7 stem's 1.6M outputs per call
    // took 6% of its samples converted one by one.)
    const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff), quiet = _mm512_set1_epi32(0x40);
    for (; j + 16 <= n; j += 16) {
      const __m512 f = _mm512_loadu_ps(src + i * lds + j);
      const __m512i x = _mm512_castps_si512(f);
      const __m512i high = _mm512_srli_epi32(x, 16);
      const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(bias, _mm512_and_si512(high, one))), 16);
      const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
      const __m512i out = _mm512_mask_or_epi32(rounded, nan, high, quiet);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i * ldd + j), _mm512_cvtepi32_epi16(out));
    }
#endif
    for (; j < n; ++j) dst[i * ldd + j] = float_to_bf16(src[i * lds + j]);
  }
}

// dst[j * ldd + i] = src[i * lds + j] for an m x n block of halves (csrc/conv/conv2d_bf16.cpp: x to NHWC, Y^T
// into y). With AVX-512, blocks of 32 rows x 16 columns: rows 2p and 2p + 1 interleaved into 16 pairs (one
// permute of the two loaded side by side), a pair being 32 bits, then the 16x16 register transpose of 32-bit
// elements (pack.hpp): its row j is column j's 32 halves, in order. The edges are copied one by one.
template <class Cvt>
void transpose_halves(const uint16_t* src, int64_t lds, int64_t m, int64_t n, uint16_t* dst, int64_t ldd) {
  int64_t i0 = 0;
#if defined(__AVX512BW__)
  alignas(64) static constexpr uint16_t kPairs[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i pairs = _mm512_load_si512(kPairs);
  for (; i0 + 32 <= m; i0 += 32) {
    int64_t j0 = 0;
    for (; j0 + 16 <= n; j0 += 16) {
      __m512 r[16], out[16];
      for (int p = 0; p < 16; ++p) {
        const uint16_t* row = src + (i0 + 2 * p) * lds + j0;
        const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row));
        const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + lds));
        const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        r[p] = _mm512_castsi512_ps(_mm512_permutexvar_epi16(pairs, both));
      }
      transpose16<Cvt>(r, out);
      for (int j = 0; j < 16; ++j) {
        _mm512_storeu_si512(static_cast<void*>(dst + (j0 + j) * ldd + i0), _mm512_castps_si512(out[j]));
      }
    }
    for (int64_t i = i0; i < i0 + 32; ++i) {
      for (int64_t j = j0; j < n; ++j) dst[j * ldd + i] = src[i * lds + j];
    }
  }
#endif
  for (int64_t i = i0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) dst[j * ldd + i] = src[i * lds + j];
  }
}

// The portable pairs micro-kernel: each product widened to fp32 (exact: 8 x 8 significand bits) and added to
// an fp32 accumulator, the even element of a pair first, as vdpbf16ps does.
template <int MR, int NR, class Cvt>
void ukernel_pairs(int64_t kc, const uint16_t* __restrict ap, const uint16_t* __restrict bp, float* __restrict c,
                   int64_t ldc, bool accumulate, int m, int n) {
  float acc[MR][NR] = {};
  for (int64_t p = 0; p < pairs_of(kc); ++p) {
    float b0[NR], b1[NR];
    for (int j = 0; j < NR; ++j) {
      b0[j] = bf16_to_float(bp[2 * j]);
      b1[j] = bf16_to_float(bp[2 * j + 1]);
    }
    for (int i = 0; i < MR; ++i) {
      const float a0 = bf16_to_float(ap[2 * i]), a1 = bf16_to_float(ap[2 * i + 1]);
      for (int j = 0; j < NR; ++j) acc[i][j] = (acc[i][j] + a0 * b0[j]) + a1 * b1[j];
    }
    ap += 2 * MR;
    bp += 2 * NR;
  }
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];
  }
}

// The Bf16Kernels of a unit: its portable pairs kernel on an MR x NR tile, or (with ukernel) its own.
template <int MR, int NR, class Cvt>
constexpr Bf16Kernels make_bf16_kernels(const char* isa, const char* description,
                                        UkernelBf16 ukernel = ukernel_pairs<MR, NR, Cvt>,
                                        UkernelBf16A ukernel_a = nullptr,
                                        UkernelBf16ARound ukernel_a_round = nullptr) {
  return {isa,         description,           MR, NR, ukernel, pack_a_pairs<MR, Cvt>, pack_b_pairs<NR, Cvt>,
          pack_bt_pairs<NR, Cvt>, ukernel_a, ukernel_a_round};
}

}  // namespace packing
}  // namespace opbench

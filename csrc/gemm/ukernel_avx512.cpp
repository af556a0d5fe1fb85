// AVX-512F micro-kernel, 14x32 fp32 register tile (28 zmm accumulators), masked edge stores, fp16 widened
// by vcvtph2ps in packing. Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c; called
// only after the ISA table (opbench/isa.hpp) found the CPU runs it.
#include <immintrin.h>

#include "opbench/microarch.hpp"
#include "opbench/kernel_set.hpp"
#include "make_kernel_set.hpp"
#include "ukernel_edges.hpp"

namespace opbench {
namespace {

// Register tiles: the main one, 14 rows x 2 zmm (28 accumulators), and a narrow one, 14 rows x 1 zmm, for
// problems with few columns (N <= 16 pads to 32 in the main tile: half its FMAs would be wasted).
constexpr int kMR = 14;
constexpr int kNR = 32;
constexpr int kNarrowNR = 16;

// A's rows in place (conv2d_pixels.cpp): each step reads another channel's or tap's stretch of the padded
// image, a stride the prefetchers do not follow; its lines are asked for this many steps ahead.
constexpr int64_t kAAhead = 16;

// Row-major A read in place (kMatrixA): lines of each row fetched this many ahead of the step.
constexpr int64_t kMatrixAheadLines = 4;

// B's rows read in place while packed (kMatrixAPackB): each row's lines fetched this many steps ahead.
constexpr int64_t kPackBAhead = 16;

constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

struct Cvt {
  static float widen(uint16_t h) { return _cvtsh_ss(h); }
  static void widen_row(const uint16_t* src, float* dst, int64_t n) {
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
      _mm512_storeu_ps(dst + j, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + j))));
    }
    for (; j < n; ++j) dst[j] = _cvtsh_ss(src[j]);
  }
  static void narrow_row(const float* src, uint16_t* dst, int64_t n) {
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j), _mm512_cvtps_ph(_mm512_loadu_ps(src + j), kRound));
    }
    for (; j < n; ++j) dst[j] = _cvtss_sh(src[j], kRound);
  }
};

// Row I of a tile of row-major A read in place (edges::kMatrixA), broadcast: rows 0-6 from lo, 7-13 from hi,
// each one addressing mode away (l = lda in bytes, l3 and l5 its multiples). Written as asm because the
// compiler kept one pointer per row instead, 14 of them, and spilled half to the stack: six more loads a
// step, and 0.93-0.95 of the packed kernel's speed in L1 where this runs at 0.97-1.00.
template <int I>
__m512 matrix_a_row(const float* lo, const float* hi, int64_t l, int64_t l3, int64_t l5) {
  const float* base = I < 7 ? lo : hi;
  __m512 v;
  switch (I % 7) {
    case 0: asm("vbroadcastss (%1), %0" : "=v"(v) : "r"(base)); break;
    case 1: asm("vbroadcastss (%1,%2,1), %0" : "=v"(v) : "r"(base), "r"(l)); break;
    case 2: asm("vbroadcastss (%1,%2,2), %0" : "=v"(v) : "r"(base), "r"(l)); break;
    case 3: asm("vbroadcastss (%1,%2,1), %0" : "=v"(v) : "r"(base), "r"(l3)); break;
    case 4: asm("vbroadcastss (%1,%2,4), %0" : "=v"(v) : "r"(base), "r"(l)); break;
    case 5: asm("vbroadcastss (%1,%2,1), %0" : "=v"(v) : "r"(base), "r"(l5)); break;
    default: asm("vbroadcastss (%1,%2,2), %0" : "=v"(v) : "r"(base), "r"(l3)); break;
  }
  return v;
}

template <int I, int MR>
__m512 matrix_a_bcast(const float* lo, const float* hi, const float* last, int64_t l, int64_t l3, int64_t l5) {
  if constexpr (I == MR - 1) {
    return matrix_a_row<0>(last, last, l, l3, l5);  // the tile's last row: its own pointer
  } else {
    return matrix_a_row<I>(lo, hi, l, l3, l5);
  }
}

// Rows I.. of the tile's FMAs for one step of row-major A in place: acc[i][j] += A[i][p] * bv[j].
template <int I, int MR, int NV>
__attribute__((always_inline)) inline void matrix_a_fmas(__m512 (&acc)[MR][NV], const __m512 (&bv)[NV], const float* lo,
                                                         const float* hi, const float* last, int64_t l1, int64_t l3,
                                                         int64_t l5) {
  if constexpr (I < MR) {
    const __m512 a = matrix_a_bcast<I, MR>(lo, hi, last, l1, l3, l5);
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[I][j] = _mm512_fmadd_ps(a, bv[j], acc[I][j]);
    matrix_a_fmas<I + 1, MR, NV>(acc, bv, lo, hi, last, l1, l3, l5);
  }
}

// One body for the three sources (edges::Source): packed micro-panels (B's row p at b + p * NR, 64-byte
// aligned), B's rows read in place (row p at b + b_off[p], unaligned), or A's rows read in place (step p's
// rows at ap + b_off[p], B packed).
// MR is the rows this instantiation computes; A's micro-panels hold kAStride rows (the kernel set's MR).
template <int MR, int NV, int kSrc, int kAStride>
void ukernel_body(int64_t kc, const float* __restrict ap, const float* __restrict b, const int64_t* __restrict b_off,
                  float* __restrict c, int64_t ldc, bool accumulate, int m, int n) {
  __m512 acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  const int64_t late = edges::late_c_step(kc);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    const char* row = reinterpret_cast<const char*>(c + i * ldc);
    // Every line of the tile's row: NV x 64 bytes, one line more when C's rows are not line-aligned
    // (numpy's large arrays are 16 bytes past a line). Only the first was fetched before, and with a short K
    // block the rest came from memory at the epilogue: fp32 on one Zen 4 core, builds interleaved, 512
    // attention QK products 384x384x64 1.19-1.31x, 16 of them 1.17-1.19x, 1536 of 128x128x64 1.10-1.11x,
    // 500x500x16 x64 1.33x, 4096x4096x128 1.03-1.05x; 1024^3 and 2048^3 1.00x, 1000x1000x64 0.97-0.99x.
    if (late > 0) {
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) _mm_prefetch(row + j * 64, _MM_HINT_T1);
      _mm_prefetch(row + NV * 64 - 1, _MM_HINT_T1);
    } else {
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) _mm_prefetch(row + j * 64, _MM_HINT_T0);
      _mm_prefetch(row + NV * 64 - 1, _MM_HINT_T0);
    }
  }
  constexpr bool kRows = kSrc == edges::kRowsOfB;
  constexpr bool kPackB = kSrc == edges::kMatrixAPackB;
  constexpr bool kMatrix = kSrc == edges::kMatrixA || kPackB;
  // Row-major A in place (kMatrixA): rows lda apart; a tile of fewer rows than MR reads its last row twice
  // rather than a row past A (its sums are never stored). a_span: the K block in whole lines.
  const int64_t lda = kMatrix ? b_off[0] : 0;
  // B's rows in place, packed on the way (kMatrixAPackB): row p at b + p * ldb, to b_out + p * NV * 16.
  const auto* packing = kPackB ? reinterpret_cast<const edges::PackingB*>(b_off) : nullptr;
  const int64_t ldb = kPackB ? packing->ldb : 0;
  float* const b_out = kPackB ? packing->out : nullptr;
  const float* a_last = ap + (m >= MR ? MR - 1 : (MR >= 2 ? MR - 2 : 0)) * lda;
  const float* a_hi = ap + 7 * lda;
  const int64_t l1 = lda * 4, l3 = 3 * l1, l5 = 5 * l1;
  const int64_t a_span = (kc + 15) / 16 * 16;
  const int64_t a_ahead = a_span < 16 * kMatrixAheadLines ? a_span : 16 * kMatrixAheadLines;
  // The packed micro-panels' lines asked for this many steps ahead (the micro-architecture table; 0: the
  // hardware prefetchers alone).
  const int64_t packed_ahead =
      kSrc == edges::kPacked || kSrc == edges::kMatrixA ? microarch().packed_ahead_steps : 0;
  const int64_t b_ahead = kPackB ? kPackBAhead * ldb : 0;
  auto step = [&](int64_t p) __attribute__((always_inline)) {
    __m512 bv[NV];
    const float* row = kRows ? b + b_off[p] : kPackB ? b + p * ldb : b + p * NV * 16;
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) {
      bv[j] = kRows || kPackB ? _mm512_loadu_ps(row + j * 16) : _mm512_load_ps(row + j * 16);
    }
    if constexpr (kPackB) {
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) _mm512_store_ps(b_out + (p * NV + j) * 16, bv[j]);
      if (p + kPackBAhead < kc) {
        const char* ahead = reinterpret_cast<const char*>(row + b_ahead);
#pragma GCC unroll 4
        for (int j = 0; j < NV; ++j) _mm_prefetch(ahead + j * 64, _MM_HINT_T0);
        _mm_prefetch(ahead + NV * 64 - 1, _MM_HINT_T0);
      }
    }
    if (kRows) {
      // In place, B's rows are scattered over the image, beyond the reach of the hardware prefetchers: fetch
      // the next micro-panel's part of this row (the caller's next tile) while this one is multiplied.
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) _mm_prefetch(reinterpret_cast<const char*>(row + (NV + j) * 16), _MM_HINT_T0);
    }
    if (kSrc != edges::kRowsOfB && kSrc != edges::kRowsOfA && packed_ahead > 0) {
      if (kSrc == edges::kPacked) {
        _mm_prefetch(reinterpret_cast<const char*>(ap + packed_ahead * kAStride), _MM_HINT_T0);
      }
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) {
        _mm_prefetch(reinterpret_cast<const char*>(row + (packed_ahead * NV + j) * 16), _MM_HINT_T0);
      }
    }
    const float* arow = kSrc == edges::kRowsOfA ? ap + b_off[p] : ap;
    if (kSrc == edges::kRowsOfA && p + kAAhead < kc) {
      const char* ahead = reinterpret_cast<const char*>(ap + b_off[p + kAAhead]);
      _mm_prefetch(ahead, _MM_HINT_T0);
      _mm_prefetch(ahead + MR * sizeof(float) - 1, _MM_HINT_T0);
    }
    if (kMatrix) {
      // One row's line kMatrixAheadLines ahead per step: each row moves a line every 16 steps, and 14 rows
      // are more streams than the prefetchers follow. Past the K block the stream runs on into the same row
      // of the next row tile (the blocked loops' next, once B's panels have passed).
      const int64_t r = p & 15;
      if (r < MR) {
        const int64_t at = (p - r) + a_ahead;
        const float* line = at < a_span ? ap + r * lda + at : ap + (kAStride + r) * lda + (at - a_span);
        _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
      }
    }
    if constexpr (kMatrix) {
      matrix_a_fmas<0, MR, NV>(acc, bv, ap + p, a_hi + p, a_last + p, l1, l3, l5);
    } else {
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const __m512 a = _mm512_set1_ps(arow[i]);
#pragma GCC unroll 4
        for (int j = 0; j < NV; ++j) acc[i][j] = _mm512_fmadd_ps(a, bv[j], acc[i][j]);
      }
    }
    if (kSrc != edges::kRowsOfA && !kMatrix) ap += kAStride;
  };
  int64_t p = 0;
#pragma GCC unroll 2
  for (; p < late; ++p) step(p);
  if (late > 0) edges::fetch_c_tile<MR, 3>(c, ldc, m, NV * 64);
#pragma GCC unroll 2
  for (; p < kc; ++p) step(p);
  if (m == MR && n == NV * 16) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) {
        float* cp = c + i * ldc + j * 16;
        const __m512 v = accumulate ? _mm512_add_ps(acc[i][j], _mm512_loadu_ps(cp)) : acc[i][j];
        _mm512_storeu_ps(cp, v);
      }
    }
    return;
  }
  __mmask16 mask[NV];
#pragma GCC unroll 4
  for (int j = 0; j < NV; ++j) {
    mask[j] = packing::lanes_mask<Cvt>(n - j * 16);
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    if (i >= m) break;
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) {
      float* cp = c + i * ldc + j * 16;
      const __m512 v =
          accumulate ? _mm512_add_ps(acc[i][j], _mm512_maskz_loadu_ps(mask[j], cp)) : acc[i][j];
      _mm512_mask_storeu_ps(cp, mask[j], v);
    }
  }
}

struct Body {
  template <int ROWS, int NV, int kSrc, int kAStride>
  static void run(int64_t kc, const float* ap, const float* b, const int64_t* b_off, float* c, int64_t ldc,
                  bool accumulate, int m, int n) {
    ukernel_body<ROWS, NV, kSrc, kAStride>(kc, ap, b, b_off, c, ldc, accumulate, m, n);
  }
};
using U = edges::Ukernels<Body, kMR, 2>;
using UN = edges::Ukernels<Body, kMR, 1>;

constexpr KernelSet kAvx512Narrow = with_bf16_widened<kMR, kNarrowNR, Cvt>(
    make_kernel_set<kMR, kNarrowNR, Cvt, 16>("avx512", "AVX-512F 14x16 fp32 (narrow tile for few columns)", UN::packed,
                                             UN::rows, UN::a_rows, MicroPanelHome::l1),
    "AVX-512F 14x16 fp32, bf16 widened to fp32 in packing (narrow tile)");
constexpr KernelSet with_a_in_place(KernelSet ks, UkernelAF32 ukernel_a, UkernelAPackBF32 ukernel_a_pack_b) {
  ks.gemm.ukernel_a = ukernel_a;
  ks.gemm.ukernel_a_pack_b = ukernel_a_pack_b;
  return ks;
}
constexpr KernelSet kAvx512 = with_bf16_widened<kMR, kNR, Cvt>(with_a_in_place(
    make_kernel_set<kMR, kNR, Cvt, 16>("avx512", "AVX-512F 14x32 fp32 (fp16 widened by vcvtph2ps in packing)",
                                       U::packed, U::rows, U::a_rows, MicroPanelHome::l2, &kAvx512Narrow),
    U::a_matrix, U::a_matrix_pack_b), "AVX-512F 14x32 fp32, bf16 widened to fp32 in packing");

}  // namespace

const KernelSet& kernels_avx512() { return kAvx512; }

}  // namespace opbench

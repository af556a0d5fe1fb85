// AVX2+FMA micro-kernel, 6x16 fp32 register tile (12 ymm accumulators), F16C conversions.
// Compiled with -mavx2 -mfma -mf16c; called only after the ISA table (opbench/isa.hpp)
// found the CPU runs it.
#include <immintrin.h>

#include "opbench/kernel_set.hpp"
#include "make_kernel_set.hpp"
#include "ukernel_edges.hpp"

namespace opbench {
namespace {

// Register tiles: 6 rows x 2 ymm (12 accumulators), and a narrow 6 x 1 ymm for problems with few columns.
constexpr int kMR = 6;
constexpr int kNR = 16;
constexpr int kNarrowNR = 8;

struct Cvt {
  static float widen(uint16_t h) { return _cvtsh_ss(h); }
  static void widen_row(const uint16_t* src, float* dst, int64_t n) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
      _mm256_storeu_ps(dst + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j))));
    }
    for (; j < n; ++j) dst[j] = _cvtsh_ss(src[j]);
  }
  static void narrow_row(const float* src, uint16_t* dst, int64_t n) {
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + j),
                       _mm256_cvtps_ph(_mm256_loadu_ps(src + j), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; j < n; ++j) dst[j] = _cvtss_sh(src[j], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
};

// One body for the three sources (edges::Source): packed micro-panels (B's row p at b + p * NR, 32-byte
// aligned), B's rows read in place (row p at b + b_off[p], unaligned), or A's rows read in place (step p's
// rows at ap + b_off[p], B packed).
// MR is the rows this instantiation computes; A's micro-panels hold kAStride rows (the kernel set's MR).
template <int MR, int NV, int kSrc, int kAStride>
void ukernel_body(int64_t kc, const float* __restrict ap, const float* __restrict b, const int64_t* __restrict b_off,
                  float* __restrict c, int64_t ldc, bool accumulate, int m, int n) {
  __m256 acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  // C's tile row by row, its first and last float (a row not line-aligned spans two lines), fetched as the kernel
  // starts: without it the epilogue waited on C from L3 or memory once per K block. Zen 4 without AVX-512, one
  // core, builds interleaved, new / old time: 2048^3 0.88 (2 cores 0.90), 256x4096x1024 0.78-0.90,
  // 448x1024x1024 0.87, 1x1 convs 0.87-0.88; up to 512^3 (C in L2) 0.99-1.01. A K block of L1's depth (168)
  // streams 15 KB through L1, which leaves C there. The blocked path's deeper block (blocking.cpp: kc 1024, 88
  // KB of A and B) evicts it, so there C is fetched towards L2 at the start and into L1 edges::kCLateSteps
  // steps before the end, as the AVX-512 kernel does.
  constexpr int NR = NV * 8;
  const int64_t late = edges::late_c_step(kc);
  if (late > 0) {
    edges::fetch_c_tile<MR, 2>(c, ldc, m, NR * 4);
  } else {
    edges::fetch_c_tile<MR, 3>(c, ldc, m, NR * 4);
  }
  auto step = [&](int64_t p) __attribute__((always_inline)) {
    __m256 bv[NV];
    constexpr bool kRows = kSrc == edges::kRowsOfB || kSrc == edges::kRowsOfBQuiet;
    const float* row = kRows ? b + b_off[p] : b + p * NV * 8;
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) bv[j] = kRows ? _mm256_loadu_ps(row + j * 8) : _mm256_load_ps(row + j * 8);
    if (kSrc == edges::kRowsOfB) {
      // In place, B's rows are scattered over the image, beyond the reach of the hardware prefetchers: fetch
      // the next micro-panel's part of this row (the caller's next tile) while this one is multiplied. (Not
      // where the micro-architecture table's rows_of_b_prefetch says it costs more: kRowsOfBQuiet.)
      _mm_prefetch(reinterpret_cast<const char*>(row + NV * 8), _MM_HINT_T0);
    }
    const float* arow = kSrc == edges::kRowsOfA ? ap + b_off[p] : ap;
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 a = _mm256_broadcast_ss(arow + i);
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[i][j] = _mm256_fmadd_ps(a, bv[j], acc[i][j]);
    }
    if (kSrc != edges::kRowsOfA) ap += kAStride;
  };
  int64_t p = 0;
#pragma GCC unroll 4
  for (; p < late; ++p) step(p);
  if (late > 0) edges::fetch_c_tile<MR, 3>(c, ldc, m, NR * 4);
#pragma GCC unroll 4
  for (; p < kc; ++p) step(p);
  if (m == MR && n == NR) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) {
        float* cp = c + i * ldc + j * 8;
        const __m256 v = accumulate ? _mm256_add_ps(acc[i][j], _mm256_loadu_ps(cp)) : acc[i][j];
        _mm256_storeu_ps(cp, v);
      }
    }
    return;
  }
  // Edge tile: spill the registers and copy the valid part. The spill is unrolled: indexed by a loop counter,
  // acc lived on the stack and GCC stored all 12 accumulators after every step of k (one 256-bit store a
  // cycle on Zen 4), which held the packed kernel at 35 of 90 GFLOPS on a Zen 4 core without AVX-512; 69.6 with
  // it unrolled (1024^3, blocked, one core).
  alignas(32) float tile[MR * NR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) _mm256_store_ps(tile + i * NR + j * 8, acc[i][j]);
  }
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) c[i * ldc + j] = accumulate ? c[i * ldc + j] + tile[i * NR + j] : tile[i * NR + j];
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

constexpr KernelSet kAvx2Narrow = with_bf16_widened<kMR, kNarrowNR, Cvt>(
    make_kernel_set<kMR, kNarrowNR, Cvt, 8>("avx2", "AVX2+FMA 6x8 fp32 (narrow tile for few columns)", UN::packed,
                                            UN::rows, UN::a_rows, MicroPanelHome::l1),
    "AVX2+FMA 6x8 fp32, bf16 widened to fp32 in packing (narrow tile)");
constexpr KernelSet with_quiet_rows(KernelSet ks, UkernelRowsF32 quiet) {
  ks.conv.ukernel_rows_quiet = quiet;
  return ks;
}
constexpr KernelSet kAvx2 = with_quiet_rows(
    with_bf16_widened<kMR, kNR, Cvt>(
        make_kernel_set<kMR, kNR, Cvt, 8>("avx2", "AVX2+FMA 6x16 fp32 (fp16 widened by F16C in packing)", U::packed,
                                          U::rows, U::a_rows, MicroPanelHome::l1, &kAvx2Narrow),
        "AVX2+FMA 6x16 fp32, bf16 widened to fp32 in packing"),
    U::rows_quiet);

}  // namespace

const KernelSet& kernels_avx2() { return kAvx2; }

}  // namespace opbench

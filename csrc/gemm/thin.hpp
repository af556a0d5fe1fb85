// GEMM with few columns (N <= 8: matrix-vector-like products such as DeepBench's 7680x1x2560, and tall
// skinny ones like 4096x8x4096): each output is a dot product of a row of A with a column of B, so A is
// streamed once, unpacked, and B^T (n x k, small) stays in L1 or L2. The blocked path would pad N to NR and
// pack an A that is used once. Each pass ends in R x N horizontal sums of L lanes, so for N > 4 the driver
// takes this path only for deep products (small.cpp). At N = 16 the B^T loads (one per FMA, from L2) made it
// half as fast as the blocked path's narrow tile; at N = 8, K >= 1024 it is 1.1-1.8x faster.
// Included only by the ISA translation units (like pack.hpp): the lane loops vectorise with the unit's own
// -m flags, and Cvt is the unit's private fp16 conversion policy.
#pragma once

#include <cstdint>

namespace opbench {
namespace thin {

constexpr int kMaxN = 8;

// Rows of A per pass for N columns and L lanes: as many as keep rows * N accumulators within the vector
// registers (24 of AVX-512's 32; 12 of AVX2's 16), at most 8.
constexpr int rows_per_pass(int L, int N) {
  const int budget = L >= 16 ? 24 : 12;
  const int r = budget / N;
  return r < 1 ? 1 : (r > 8 ? 8 : r);
}
constexpr int64_t kPrefetchAhead = 256;  // elements of A ahead of the current ones, per row

// Rows [0, m) of C (+)= A * B with B given as bt (n x k fp32, contiguous). L: lanes per accumulator (one
// vector register of the unit's ISA); N: columns (compile-time, so the accumulators stay in registers).
template <int L, int N, class Cvt, class T>
void rows(int64_t m, int64_t k, const T* a, int64_t lda, const float* bt, float* c, int64_t ldc, bool accumulate) {
  constexpr int kRows = rows_per_pass(L, N);
  alignas(64) float abuf[kRows][L];
  for (int64_t i0 = 0; i0 < m; i0 += kRows) {
    const int rows = static_cast<int>(m - i0 < kRows ? m - i0 : kRows);
    alignas(64) float acc[kRows][N][L] = {};
    int64_t p = 0;
    const T* src[kRows];
    for (int r = 0; r < kRows; ++r) src[r] = a + (i0 + (r < rows ? r : 0)) * lda;  // spare rows re-read row 0
    for (; p + L <= k; p += L) {
      // Software prefetch a quarter of a page ahead in each row: with several rows streamed at once the
      // hardware prefetchers fell behind on a busy shared machine (7680x1x2560 on one Zen 5 core: 5.5 ->
      // 12.6 GFLOPS, 2 cores 10.5 -> 16.8, measured side by side).
      for (int r = 0; r < kRows; ++r) __builtin_prefetch(src[r] + p + kPrefetchAhead, 0, 0);
      for (int r = 0; r < kRows; ++r) {
        const float* x;
        if constexpr (sizeof(T) == 2) {
          Cvt::widen_row(src[r] + p, abuf[r], L);
          x = abuf[r];
        } else {
          x = src[r] + p;
        }
        for (int j = 0; j < N; ++j) {
          const float* b = bt + j * k + p;
#pragma GCC unroll 16
          for (int l = 0; l < L; ++l) acc[r][j][l] += x[l] * b[l];
        }
      }
    }
    for (int r = 0; r < rows; ++r) {
      const T* src = a + (i0 + r) * lda;
      for (int j = 0; j < N; ++j) {
        float sum = 0.0f;
        for (int l = 0; l < L; ++l) sum += acc[r][j][l];
        for (int64_t q = p; q < k; ++q) {
          float x;
          if constexpr (sizeof(T) == 2) {
            x = Cvt::widen(src[q]);
          } else {
            x = src[q];
          }
          sum += x * bt[j * k + q];
        }
        float* out = c + (i0 + r) * ldc + j;
        *out = accumulate ? *out + sum : sum;
      }
    }
  }
}

// N = 1 (a matrix-vector product y = A x): one row at a time, so A is read as one sequential stream, which
// the hardware prefetchers follow without help (software prefetch at 256-4096 elements changed nothing);
// four accumulators per row keep the FMAs independent, and x stays in L1 (or L2). Interleaving 8 rows (the
// N = 2 layout) read 8 streams at once: 8192 x 1 x 8192 on 2 Zen 5 cores went from 0.78x OpenBLAS's sgemv
// to 0.95-1.02x, measured side by side.
template <int L, class Cvt, class T>
void row_dots(int64_t m, int64_t k, const T* a, int64_t lda, const float* x, float* c, int64_t ldc, bool accumulate) {
  constexpr int kAcc = 4;
  alignas(64) float abuf[kAcc][L];
  for (int64_t i = 0; i < m; ++i) {
    const T* row = a + i * lda;
    alignas(64) float acc[kAcc][L] = {};
    int64_t p = 0;
    for (; p + kAcc * L <= k; p += kAcc * L) {
      for (int u = 0; u < kAcc; ++u) {
        const float* v;
        if constexpr (sizeof(T) == 2) {
          Cvt::widen_row(row + p + u * L, abuf[u], L);
          v = abuf[u];
        } else {
          v = row + p + u * L;
        }
        const float* xv = x + p + u * L;
#pragma GCC unroll 16
        for (int l = 0; l < L; ++l) acc[u][l] += v[l] * xv[l];
      }
    }
    float sum = 0.0f;
    for (int u = 0; u < kAcc; ++u) {
      for (int l = 0; l < L; ++l) sum += acc[u][l];
    }
    for (; p < k; ++p) {
      float v;
      if constexpr (sizeof(T) == 2) {
        v = Cvt::widen(row[p]);
      } else {
        v = row[p];
      }
      sum += v * x[p];
    }
    c[i * ldc] = accumulate ? c[i * ldc] + sum : sum;
  }
}

template <int L, class Cvt, class T>
void dispatch(int64_t m, int n, int64_t k, const T* a, int64_t lda, const float* bt, float* c, int64_t ldc,
              bool accumulate) {
  switch (n) {
    case 1: row_dots<L, Cvt>(m, k, a, lda, bt, c, ldc, accumulate); break;
    case 2: rows<L, 2, Cvt>(m, k, a, lda, bt, c, ldc, accumulate); break;
    case 3: rows<L, 3, Cvt>(m, k, a, lda, bt, c, ldc, accumulate); break;
    case 4: rows<L, 4, Cvt>(m, k, a, lda, bt, c, ldc, accumulate); break;
    case 5: rows<L, 5, Cvt>(m, k, a, lda, bt, c, ldc, accumulate); break;
    case 6: rows<L, 6, Cvt>(m, k, a, lda, bt, c, ldc, accumulate); break;
    case 7: rows<L, 7, Cvt>(m, k, a, lda, bt, c, ldc, accumulate); break;
    default: rows<L, 8, Cvt>(m, k, a, lda, bt, c, ldc, accumulate); break;
  }
}

// The KernelSet entry point (ThinF32) for lanes L.
template <int L, class Cvt>
struct Thin {
  static void f32(int64_t m, int n, int64_t k, const void* a, bool a_f16, int64_t lda, const float* bt, float* c,
                  int64_t ldc, bool accumulate) {
    if (a_f16) {
      dispatch<L, Cvt>(m, n, k, static_cast<const uint16_t*>(a), lda, bt, c, ldc, accumulate);
    } else {
      dispatch<L, Cvt>(m, n, k, static_cast<const float*>(a), lda, bt, c, ldc, accumulate);
    }
  }
};

// The M = 1 path's inner loop (blocked.cpp, gemm_row): acc[0:nb) += sum over g < 8 rows of a[r] * rows[r],
// the accumulator read and written once per group of rows; the loop vectorises with the unit's -m flags.
template <class Cvt>
void row_axpy(int64_t nb, int g, const float* a, const float* const* rows, float* acc) {
  for (int r = 0; r < g; ++r) __builtin_prefetch(rows[r] + nb, 0, 0);
  if (g == 8) {
    const float a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3], a4 = a[4], a5 = a[5], a6 = a[6], a7 = a[7];
    const float *r0 = rows[0], *r1 = rows[1], *r2 = rows[2], *r3 = rows[3];
    const float *r4 = rows[4], *r5 = rows[5], *r6 = rows[6], *r7 = rows[7];
    for (int64_t j = 0; j < nb; ++j) {
      acc[j] += a0 * r0[j] + a1 * r1[j] + a2 * r2[j] + a3 * r3[j] + a4 * r4[j] + a5 * r5[j] + a6 * r6[j] +
                a7 * r7[j];
    }
    return;
  }
  for (int r = 0; r < g; ++r) {
    const float ar = a[r];
    const float* row = rows[r];
    for (int64_t j = 0; j < nb; ++j) acc[j] += ar * row[j];
  }
}

}  // namespace thin
}  // namespace opbench

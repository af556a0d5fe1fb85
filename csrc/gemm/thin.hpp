// GEMM with few columns (N <= thin::kMaxN: matrix-vector products such as DeepBench's 7680x1x2560, and tall
// skinny ones like 4096x16x4096): A is streamed once from memory, in place, and B (K x N, small) stays in L1
// or L2 in the thin layout (opbench/kernel_set.hpp, thin::group; packed once by small.cpp, or B's own rows
// when they already are that layout). The blocked path would pad N to NR and pack an A that is used once.
//
// For N >= 2 (tall()) each step broadcasts g consecutive elements of a row of A across a vector and
// multiplies the vector of B that holds those g rows of B interleaved, so every lane does useful work at any
// padded width; a row's N outputs are sums of g lanes each, once at the end. The register tile is R rows of
// A (R streams) by np / lanes vectors. csrc/gemm/README.md ("Few columns") has the measurements.
// Included only by the ISA translation units (like pack.hpp): the lane loops vectorise with the unit's own
// -m flags, and Cvt is the unit's private fp16 conversion policy.
#pragma once

#include <cstdint>
#include <cstring>
#include <immintrin.h>
#include <type_traits>

#include "opbench/cpu.hpp"
#include "opbench/kernel_set.hpp"
#include "opbench/microarch.hpp"

namespace opbench {
namespace thin {

template <int L>
struct Vec {
  typedef float type __attribute__((vector_size(L * sizeof(float))));
};

// Rows of A per pass (streams of A at once) for V vectors per row: as many as keep R x V accumulators
// within the vector registers (24 of AVX-512's 32; 12 of the 16 of AVX2 and SSE), at most 8 (of 6-16 rows,
// 8 was fastest on Zen 5; 16 spilled).
constexpr int rows_per_pass(int L, int V) {
  const int budget = L >= 16 ? 24 : 12;
  const int r = budget / V;
  return r < 1 ? 1 : (r > 8 ? 8 : r);
}
constexpr int64_t kPrefetchAhead = 256;  // elements of A ahead of the current ones, per row
constexpr int64_t kWidenChunk = 256;     // fp16 A: elements of each row widened to fp32 at a time

// g consecutive floats at x, repeated across L lanes: one broadcast load (vbroadcastsd for g = 2,
// vbroadcastf32x4 / vbroadcastf128 for g = 4, vbroadcastf32x8 for g = 8). Written with the unit's intrinsics:
// GCC built the generic forms (a splat of a double, a shuffle of a g-lane vector) through the stack.
template <int L, int G>
[[gnu::always_inline]] inline typename Vec<L>::type spread(const float* x) {
  using vec = typename Vec<L>::type;
#if defined(__AVX512F__)
  if constexpr (L == 16 && G == 2) return reinterpret_cast<vec>(_mm512_broadcastsd_pd(_mm_load_sd(reinterpret_cast<const double*>(x))));
  if constexpr (L == 16 && G == 4) return reinterpret_cast<vec>(_mm512_broadcast_f32x4(_mm_loadu_ps(x)));
  if constexpr (L == 16 && G == 8) return reinterpret_cast<vec>(_mm512_broadcast_f32x8(_mm256_loadu_ps(x)));
#endif
#if defined(__AVX__)
  if constexpr (L == 8 && G == 2) return reinterpret_cast<vec>(_mm256_broadcast_sd(reinterpret_cast<const double*>(x)));
  if constexpr (L == 8 && G == 4) return reinterpret_cast<vec>(_mm256_broadcast_ps(reinterpret_cast<const __m128*>(x)));
#endif
#if defined(__SSE2__)
  if constexpr (L == 4 && G == 2) return reinterpret_cast<vec>(_mm_load1_pd(reinterpret_cast<const double*>(x)));
#endif
  vec v;
  for (int l = 0; l < L; ++l) v[l] = x[l % G];
  return v;
}

// acc[r] += the products of elements [0, len) of rows x[r] (len a multiple of G) with the packed B at b,
// its groups ldbp floats apart (unaligned loads: B may be read in place). With prefetch, each row's stream is
// fetched up to kPrefetchAhead elements (at most len) ahead, running on into row r of the next pass (next, or
// nullptr for the last pass): rows shorter than the distance (attention's K of 64-384) otherwise started
// every pass with R misses from memory.
// The prefetches are prefetchnta (locality 0) where the micro-architecture table says so (microarch.cpp:
// AMD's rows), else prefetcht0.
[[gnu::always_inline]] inline void prefetch_stream(const float* at, bool nta) {
  if (nta) {
    __builtin_prefetch(at, 0, 0);  // the locality must be a constant
  } else {
    __builtin_prefetch(at, 0, 3);
  }
}

template <int L, int G, int V, int R>
[[gnu::always_inline]] inline void tall_steps(const float* const* x, int64_t len, const float* b, int64_t ldbp,
                                              typename Vec<L>::type (&acc)[R][V], bool prefetch,
                                              const float* const* next = nullptr, bool nta = true) {
  using vec = typename Vec<L>::type;
  auto step = [&](int64_t p) __attribute__((always_inline)) {
    vec bv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) std::memcpy(&bv[v], b + (p / G) * ldbp + v * L, sizeof(vec));
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      if constexpr (G == 1) {
        const float s = x[r][p];
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) acc[r][v] += s * bv[v];
      } else {
        acc[r][0] += spread<L, G>(x[r] + p) * bv[0];
      }
    }
  };
  const int64_t ahead = len < kPrefetchAhead ? len : kPrefetchAhead;
  int64_t p = 0;
  for (; p + 16 <= len; p += 16) {  // a cache line of each row per iteration
    if (prefetch && p + ahead < len) {
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) prefetch_stream(x[r] + p + ahead, nta);
    } else if (prefetch && next != nullptr) {
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) prefetch_stream(next[r] + (p + ahead - len), nta);
    }
#pragma GCC unroll 16
    for (int q = 0; q < 16; q += G) step(p + q);
  }
  for (; p < len; p += G) step(p);
}

// N in (np / 2, np], np >= 2: rows [0, m) of C (+)= A * B, B packed for L lanes.
template <int L, int NP, class Cvt, class T>
void tall(int64_t m, int n, int64_t k, const T* a, int64_t lda, const float* bp, int64_t ldbp, float* c,
          int64_t ldc, bool accumulate) {
  using vec = typename Vec<L>::type;
  constexpr int G = group(L, NP), V = NP > L ? NP / L : 1, W = V * L;
  constexpr int R = rows_per_pass(L, V);
  constexpr bool kWide = sizeof(T) == 2;
  const int64_t full = k / G * G;  // read in place; the last k - full (< G) from a zero-padded copy
  const bool nta = microarch().stream_prefetch_nta;
  alignas(64) float wide[kWide ? R : 1][kWide ? kWidenChunk : 1];
  alignas(64) float tail[R][G > 1 ? G : 1];
  for (int64_t i0 = 0; i0 < m; i0 += R) {
    const int rows = static_cast<int>(m - i0 < R ? m - i0 : R);
    const T* src[R];
    for (int r = 0; r < R; ++r) src[r] = a + (i0 + (r < rows ? r : 0)) * lda;  // spare rows re-read row 0
    vec acc[R][V];
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < V; ++v) acc[r][v] = vec{};
    }
    // This pass's rows of C, fetched for writing now: from memory, the sums' stores otherwise waited on them.
    for (int r = 0; r < rows; ++r) {
      const char* out = reinterpret_cast<const char*>(c + (i0 + r) * ldc);
      for (int64_t byte = 0; byte < int64_t(n) * int64_t(sizeof(float)); byte += 64) __builtin_prefetch(out + byte, 1, 3);
    }
    const float* x[R];
    if constexpr (kWide) {
      for (int64_t p0 = 0; p0 < full; p0 += kWidenChunk) {
        const int64_t len = full - p0 < kWidenChunk ? full - p0 : kWidenChunk;
        for (int r = 0; r < R; ++r) {
          Cvt::widen_row(src[r] + p0, wide[r], len);
          x[r] = wide[r];
        }
        tall_steps<L, G, V, R>(x, len, bp + p0 / G * ldbp, ldbp, acc, false);
      }
    } else {
      for (int r = 0; r < R; ++r) x[r] = src[r];
      const T* next[R];
      for (int r = 0; r < R; ++r) next[r] = a + (i0 + R + r < m ? i0 + R + r : i0) * lda;
      tall_steps<L, G, V, R>(x, full, bp, ldbp, acc, true, i0 + R < m ? next : nullptr, nta);
    }
    if (full < k) {
      for (int r = 0; r < R; ++r) {
        for (int t = 0; t < G; ++t) {
          const int64_t q = full + t;
          if (q >= k) {
            tail[r][t] = 0.0f;
          } else if constexpr (kWide) {
            tail[r][t] = Cvt::widen(src[r][q]);
          } else {
            tail[r][t] = src[r][q];
          }
        }
        x[r] = tail[r];
      }
      tall_steps<L, G, V, R>(x, G, bp + full / G * ldbp, ldbp, acc, false);
    }
    for (int r = 0; r < rows; ++r) {
      float* out = c + (i0 + r) * ldc;
      if constexpr (G == 1) {
        // One row of B per vector: the sums are the lanes themselves, stored as vectors where they are whole.
        // Copied out lane by lane, a short K paid more for the stores than for the products: on one Zen 4 core
        // without AVX-512 (R = 3 rows a pass), builds interleaved, new / old time 32^3 0.88, 32x16x32 0.78,
        // 3200x32x32 0.83, 3200x16x32 0.73, 64x32x64 0.90; 4096x16x1024 1.00.
        int v = 0;
        for (; v < V && (v + 1) * L <= n; ++v) {
          vec o = acc[r][v];
          if (accumulate) {
            vec prev;
            std::memcpy(&prev, out + v * L, sizeof(vec));
            o += prev;
          }
          std::memcpy(out + v * L, &o, sizeof(vec));
        }
        if (v * L == n) continue;
      }
      alignas(64) float lanes[W];
      for (int v = 0; v < V; ++v) std::memcpy(lanes + v * L, &acc[r][v], sizeof(vec));
      for (int j = G == 1 ? n / L * L : 0; j < n; ++j) {
        float sum = 0.0f;
        for (int t = 0; t < G; ++t) sum += lanes[j * G + t];
        out[j] = accumulate ? out[j] + sum : sum;
      }
    }
  }
}

// N = 1 (a matrix-vector product y = A x): R = 4 rows at a time, 4 sequential streams of A (one thread's
// single stream drew 31 GB/s on a Zen 5 core, 4 draw 40), two accumulators per row, x in L1 (or L2), and
// each row's sum reduced as vectors before its lanes (a chain of 64 scalar adds per row cost 4096x1x4096 a
// fifth). Interleaving 8 rows in the N = 2 layout was slower on 2 threads (0.78x OpenBLAS's sgemv); on one
// thread 4096x1x4096 went from 15.4 GFLOPS (one row at a time, scalar reduction) to 20-21, with numpy's
// OpenBLAS sgemv at 20-21 beside it, and R = 1, 2, 8 measured 18-19.
//
// fp32 rows that all start equally far into a cache line (lda a whole number of lines) take their first
// columns up to the line's end as scalars and the rest as aligned vectors: numpy's data starts 16 bytes into
// a line, and split loads of A cost 4096x1x4096 8% on one Zen 5 core and 11% on two (measured against the
// same A at an aligned address). (small.cpp's aligning_columns is the same arithmetic for the generic units;
// this header keeps its own, like everything an ISA unit compiles with its -m flags.)
template <int L, class Cvt, class T>
void row_dots(int64_t m, int64_t k, const T* a, int64_t lda, const float* x, float* c, int64_t ldc, bool accumulate) {
  using vec = typename Vec<L>::type;
  constexpr int R = 4;     // rows at once: R sequential streams
  constexpr int kAcc = 2;  // accumulators per row
  constexpr int64_t kLine = 64;
  alignas(64) float abuf[L];
  int64_t head = 0;
  if constexpr (sizeof(T) == 4) {
    const auto address = reinterpret_cast<std::uintptr_t>(a);
    if (address % sizeof(T) == 0 && (lda * int64_t(sizeof(T))) % kLine == 0) {
      head = static_cast<int64_t>((kLine - address % kLine) % kLine / sizeof(T));
      if (head > k) head = k;
    }
  }
  int64_t i = 0;
  for (; i < m; i += R) {
    const int rows = m - i < R ? static_cast<int>(m - i) : R;
    vec acc[R][kAcc] = {};
    int64_t p = head;
    for (; p + kAcc * L <= k; p += kAcc * L) {
#pragma GCC unroll 4
      for (int u = 0; u < kAcc; ++u) {
        vec xv;
        std::memcpy(&xv, x + p + u * L, sizeof(vec));
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          if (r >= rows) break;
          const T* row = a + (i + r) * lda + p + u * L;
          vec v;
          if constexpr (sizeof(T) == 2) {
            Cvt::widen_row(row, abuf, L);
            std::memcpy(&v, abuf, sizeof(vec));
          } else {
            std::memcpy(&v, row, sizeof(vec));
          }
          acc[r][u] += v * xv;
        }
      }
    }
    for (int r = 0; r < rows; ++r) {
      vec t = acc[r][0];
      for (int u = 1; u < kAcc; ++u) t += acc[r][u];
      float sum = 0.0f;
      for (int l = 0; l < L; ++l) sum += t[l];
      const T* row = a + (i + r) * lda;
      if constexpr (sizeof(T) == 4) {
        for (int64_t q = 0; q < head; ++q) sum += row[q] * x[q];
      }
      for (int64_t q = p; q < k; ++q) {
        float v;
        if constexpr (sizeof(T) == 2) {
          v = Cvt::widen(row[q]);
        } else {
          v = row[q];
        }
        sum += v * x[q];
      }
      c[(i + r) * ldc] = accumulate ? c[(i + r) * ldc] + sum : sum;
    }
  }
}

template <int L, class Cvt, class T>
void dispatch(int64_t m, int n, int64_t k, const T* a, int64_t lda, const float* bp, int64_t ldbp, float* c,
              int64_t ldc, bool accumulate) {
  switch (padded_n(n)) {
    case 1: row_dots<L, Cvt>(m, k, a, lda, bp, c, ldc, accumulate); break;
    case 2: tall<L, 2, Cvt>(m, n, k, a, lda, bp, ldbp, c, ldc, accumulate); break;
    case 4: tall<L, 4, Cvt>(m, n, k, a, lda, bp, ldbp, c, ldc, accumulate); break;
    case 8: tall<L, 8, Cvt>(m, n, k, a, lda, bp, ldbp, c, ldc, accumulate); break;
    case 16: tall<L, 16, Cvt>(m, n, k, a, lda, bp, ldbp, c, ldc, accumulate); break;
    case 32: tall<L, 32, Cvt>(m, n, k, a, lda, bp, ldbp, c, ldc, accumulate); break;
    case 48:
      if constexpr (L >= 16) tall<L, 48, Cvt>(m, n, k, a, lda, bp, ldbp, c, ldc, accumulate);
      break;
    default:
      if constexpr (L >= 16) tall<L, 64, Cvt>(m, n, k, a, lda, bp, ldbp, c, ldc, accumulate);
      break;
  }
}

// The KernelSet entry point (ThinF32) for lanes L.
template <int L, class Cvt>
struct Thin {
  static void f32(int64_t m, int n, int64_t k, const void* a, bool a_f16, int64_t lda, const float* bp,
                  int64_t ldbp, float* c, int64_t ldc, bool accumulate) {
    if (a_f16) {
      dispatch<L, Cvt>(m, n, k, static_cast<const uint16_t*>(a), lda, bp, ldbp, c, ldc, accumulate);
    } else {
      dispatch<L, Cvt>(m, n, k, static_cast<const float*>(a), lda, bp, ldbp, c, ldc, accumulate);
    }
  }
};

// The few-rows streaming path's inner loop (small.cpp, gemm_rows): for each of m <= kMaxStreamRows rows i,
// acc[i ld + 0:nb) += sum over r < kStreamGroup of a[i kStreamGroup + r] * rows[r][0:nb). A short group
// repeats its last row with a zero weight. Each accumulator vector is read and written once per group of
// rows, and each vector of B is loaded once for all m rows.
// *x across L lanes, loaded where it is used: one vbroadcastss from memory on AVX-512 (GCC otherwise hoisted
// the 64 broadcasts of M = 8 out of the loop and spilled them, or built them from scalar registers on the
// shuffle port).
template <int L>
[[gnu::always_inline]] inline typename Vec<L>::type splat(const float* x) {
#if defined(__AVX512F__)
  if constexpr (L == 16) {
    __m512 v;
    asm volatile("vbroadcastss %1, %0" : "=v"(v) : "m"(*x));
    return reinterpret_cast<typename Vec<L>::type>(v);
  }
#endif
  return typename Vec<L>::type{} + *x;
}

// L elements of a row of B from x as fp32 lanes: a plain load, or fp16 widened in the register (vcvtph2ps
// from memory on AVX-512 and F16C; element by element through Cvt elsewhere).
template <int L, class Cvt, class T>
[[gnu::always_inline]] inline typename Vec<L>::type load_row(const T* x) {
  using vec = typename Vec<L>::type;
  vec v;
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(&v, x, sizeof(vec));
  } else {
#if defined(__AVX512F__)
    if constexpr (L == 16) return reinterpret_cast<vec>(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x))));
#endif
#if defined(__F16C__) && defined(__AVX__)
    if constexpr (L == 8) return reinterpret_cast<vec>(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x))));
#endif
    for (int l = 0; l < L; ++l) v[l] = Cvt::widen(x[l]);
  }
  return v;
}

// V vectors of columns from column j: each of the M accumulators of each vector is read and written once,
// each vector of the G rows of B loaded once, and each weight broadcast once for the V vectors (or held in a
// register throughout when kHoist).
template <int L, int M, int V, bool kHoist, class Cvt, class T>
[[gnu::always_inline]] inline void rows_axpy_step(int64_t j, const float* a, const T* const* r,
                                                  const typename Vec<L>::type* w, float* acc, int64_t ld) {
  using vec = typename Vec<L>::type;
  constexpr int G = kStreamGroup;
  vec s[M][V];
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) std::memcpy(&s[i][v], acc + i * ld + j + v * L, sizeof(vec));
  }
#pragma GCC unroll 8
  for (int q = 0; q < G; ++q) {
    vec b[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      b[v] = load_row<L, Cvt>(r[q] + j + v * L);
      asm("" : "+v"(b[v]));  // loaded once into a register: GCC otherwise re-read it as each row's FMA operand
    }
#pragma GCC unroll 8
    for (int i = 0; i < M; ++i) {
      vec t;
      if constexpr (kHoist) {
        t = w[i * G + q];
      } else {
        t = splat<L>(a + i * G + q);
      }
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) s[i][v] += t * b[v];
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) std::memcpy(acc + i * ld + j + v * L, &s[i][v], sizeof(vec));
  }
}

template <int L, int M, class Cvt, class T>
void rows_axpy_m(int64_t nb, const float* a, const T* const* rows, float* acc, int64_t ld) {
  using vec = typename Vec<L>::type;
  constexpr int G = kStreamGroup;
  // Vectors per step: 4 while M V accumulators take at most 12 of 32 registers, else 2 while they take 16
  // (on one Zen 5 core, hot in L1: M = 3 ran at 194 GFLOPS with 4 and 166 with 2; M = 4 at 237 with 4 and
  // 267 with 2).
  constexpr int kRegs = L >= 16 ? 32 : 16;
  constexpr int V = M * 4 <= kRegs * 3 / 8 ? 4 : M * 2 <= kRegs / 2 ? 2 : 1;
  // Weights held in registers when they fit beside the accumulators and a row's vectors of B.
  constexpr bool kHoist = M * G + M * V + V <= kRegs - 2;
  const T* r[G];
  for (int q = 0; q < G; ++q) {
    r[q] = rows[q];
    __builtin_prefetch(rows[q] + nb, 0, 0);
  }
  vec w[kHoist ? M * G : 1];
  if constexpr (kHoist) {
    for (int t = 0; t < M * G; ++t) w[t] = vec{} + a[t];
  }
  int64_t j = 0;
  for (; j + V * L <= nb; j += V * L) rows_axpy_step<L, M, V, kHoist, Cvt>(j, a, r, w, acc, ld);
  for (; j + L <= nb; j += L) rows_axpy_step<L, M, 1, kHoist, Cvt>(j, a, r, w, acc, ld);
  for (; j < nb; ++j) {
    for (int i = 0; i < M; ++i) {
      float v = acc[i * ld + j];
      for (int q = 0; q < G; ++q) {
        if constexpr (std::is_same_v<T, float>) {
          v += a[i * G + q] * r[q][j];
        } else {
          v += a[i * G + q] * Cvt::widen(r[q][j]);
        }
      }
      acc[i * ld + j] = v;
    }
  }
}

// The KernelSet entry points (RowsAxpyF32 with T = float, RowsAxpyF16 with T = uint16_t).
template <int L, class Cvt, class T>
void rows_axpy(int64_t nb, int m, const float* a, const T* const* rows, float* acc, int64_t ld) {
  switch (m) {
    case 1: rows_axpy_m<L, 1, Cvt, T>(nb, a, rows, acc, ld); break;
    case 2: rows_axpy_m<L, 2, Cvt, T>(nb, a, rows, acc, ld); break;
    case 3: rows_axpy_m<L, 3, Cvt, T>(nb, a, rows, acc, ld); break;
    case 4: rows_axpy_m<L, 4, Cvt, T>(nb, a, rows, acc, ld); break;
    case 5: rows_axpy_m<L, 5, Cvt, T>(nb, a, rows, acc, ld); break;
    case 6: rows_axpy_m<L, 6, Cvt, T>(nb, a, rows, acc, ld); break;
    case 7: rows_axpy_m<L, 7, Cvt, T>(nb, a, rows, acc, ld); break;
    default: rows_axpy_m<L, 8, Cvt, T>(nb, a, rows, acc, ld); break;
  }
}

}  // namespace thin
}  // namespace opbench

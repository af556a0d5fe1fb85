// The weight gradient's micro-kernel for convolutions at stride 1 (csrc/conv/conv2d_weights.cpp,
// ConvKernels::weight_rows): dW^T's rows are sums over output pixels of a shifted window of the image times
// dY, out[i][0:NR] += sum over p of x[off[i] + p] * bt[p][0:NR]. Row i of A is read in place at its own
// offset (a padded copy of the image, or x itself for a 1x1 filter) and broadcast, one element per step, while
// B is an NR-column panel of dY transposed (pack_bt's layout): BLIS's micro-kernel with A's rows as shifted
// windows, so neither im2col nor A's packing is written. Included only by the ISA translation units (through
// make_kernel_set.hpp): the lane loops vectorise with the unit's own -m flags.
#pragma once

#include <cstdint>
#include <cstring>

#include "thin.hpp"

namespace opbench {
namespace weights {

// Rows per pass for V vectors per row: as many as keep the accumulators within 24 of AVX-512's 32 registers
// (12 of AVX2's and SSE's 16), at most 9 (one 3x3 filter's taps of a channel). On a 2-vCPU Emerald Rapids
// guest, 9 rows by 2 vectors ran at 163-167 GFLOPS with its data in L1, 92-94% of the FMA peak.
constexpr int rows_per_pass(int L, int V) {
  const int budget = L >= 16 ? 24 : 12;
  const int r = budget / V;
  return r < 1 ? 1 : (r > 9 ? 9 : r);
}

template <int L, int NR, int MR>
inline void pass(int64_t np, int64_t images, const float* x, int64_t x_image, const int64_t* off, const float* bt,
                 int64_t bt_image, float* out, int64_t ldo) {
  using vec = typename thin::Vec<L>::type;
  constexpr int V = NR / L;
  vec acc[MR][V];
  for (int i = 0; i < MR; ++i) {
    for (int v = 0; v < V; ++v) acc[i][v] = vec{};
  }
  for (int64_t img = 0; img < images; ++img) {
    const float* xr[MR];
    for (int i = 0; i < MR; ++i) xr[i] = x + img * x_image + off[i];
    const float* b = bt + img * bt_image;
    for (int64_t p = 0; p < np; ++p, b += NR) {
      vec bv[V];
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) std::memcpy(&bv[v], b + v * L, sizeof(vec));
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const float a = xr[i][p];
#pragma GCC unroll 4
        for (int v = 0; v < V; ++v) acc[i][v] += a * bv[v];
      }
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int v = 0; v < V; ++v) {
      vec o;
      std::memcpy(&o, out + i * ldo + v * L, sizeof(vec));
      o += acc[i][v];
      std::memcpy(out + i * ldo + v * L, &o, sizeof(vec));
    }
  }
}

// One pass of m <= M rows.
template <int L, int NR, int M>
inline void pass_of(int64_t m, int64_t np, int64_t images, const float* x, int64_t x_image, const int64_t* off,
                    const float* bt, int64_t bt_image, float* out, int64_t ldo) {
  if constexpr (M > 1) {
    if (m < M) return pass_of<L, NR, M - 1>(m, np, images, x, x_image, off, bt, bt_image, out, ldo);
  }
  pass<L, NR, M>(np, images, x, x_image, off, bt, bt_image, out, ldo);
}

// The kernel set's entry point: the rows in as few passes as MR allows, alike in size (64 rows on AVX-512 are
// 8 passes of 8, not 7 of 9 and one of 1, whose pass would stream the panel for a ninth of the work).
template <int L, int NR, int MR = rows_per_pass(L, NR / L)>
void rows(int64_t np, int64_t images, const float* x, int64_t x_image, const int64_t* off, int64_t nrows,
          const float* bt, int64_t bt_image, float* out, int64_t ldo) {
  static_assert(NR % L == 0, "the panel is whole vectors");
  const int64_t passes = (nrows + MR - 1) / MR;
  int64_t i = 0;
  for (int64_t q = 0; q < passes; ++q) {
    const int64_t m = (nrows - i + (passes - q) - 1) / (passes - q);
    pass_of<L, NR, MR>(m, np, images, x, x_image, off + i, bt, bt_image, out + i * ldo, ldo);
    i += m;
  }
}

}  // namespace weights
}  // namespace opbench

// The entry points of a register tile's micro-kernel body: packed or in-place B (kernel_set.hpp's UkernelF32
// and UkernelRowsF32), and edge tiles of m < MR rows run by the instantiation with the fewest rows >= m (MR,
// MR-1, MR-2, MR-4, ..., 2): 64 rows in MR = 14 cost four full tiles and one of 8 rows instead of five of 14,
// and an LSTM batch of 8 one tile of 8 rows. MR-1 is there for conv2d_pixels.cpp, whose micro-panels leave
// out the first or the last pixel on the filter columns that read only padding for it. Included only by the ISA translation units, like pack.hpp: `Body` is the
// unit's own type (anonymous namespace), so every instantiation stays private to the unit and its -m flags.
#pragma once

#include <cstdint>

namespace opbench {
namespace edges {

// Body::run<ROWS, NV, kRows, kAStride>(kc, ap, b, b_off, c, ldc, accumulate, m, n) computes ROWS rows of the
// tile (A's micro-panels hold kAStride rows); kRows selects B read in place (row p at b + b_off[p]).
template <class Body, int MR, int NV, bool kRows, int kRowsNow = MR>
void any_rows(int64_t kc, const float* ap, const float* b, const int64_t* b_off, float* c, int64_t ldc,
              bool accumulate, int m, int n) {
  if constexpr (kRowsNow <= 2) {
    Body::template run<kRowsNow, NV, kRows, MR>(kc, ap, b, b_off, c, ldc, accumulate, m, n);
  } else {
    if (m > kRowsNow - 2) {
      Body::template run<kRowsNow, NV, kRows, MR>(kc, ap, b, b_off, c, ldc, accumulate, m, n);
    } else {
      any_rows<Body, MR, NV, kRows, kRowsNow - 2>(kc, ap, b, b_off, c, ldc, accumulate, m, n);
    }
  }
}

template <class Body, int MR, int NV>
struct Ukernels {
  static void packed(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, bool accumulate, int m,
                     int n) {
    if (m == MR - 1) {
      Body::template run<MR - 1, NV, false, MR>(kc, ap, bp, nullptr, c, ldc, accumulate, m, n);
    } else {
      any_rows<Body, MR, NV, false>(kc, ap, bp, nullptr, c, ldc, accumulate, m, n);
    }
  }
  static void rows(int64_t kc, const float* ap, const float* b, const int64_t* b_off, float* c, int64_t ldc,
                   bool accumulate, int m, int n) {
    any_rows<Body, MR, NV, true>(kc, ap, b, b_off, c, ldc, accumulate, m, n);
  }
};

}  // namespace edges
}  // namespace opbench

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

// Where the micro-kernel body reads its operands: A and B packed; B's rows in place (row p at b + b_off[p]);
// A's rows in place (step p's rows at ap + b_off[p], B packed); row-major A in place (row i of step p at
// ap + i * b_off[0] + p, B packed: b_off[0] is A's leading dimension, and a tile of m < ROWS rows reads none
// past row m - 1).
// kMatrixAPackB: row-major A in place as kMatrixA, and B's rows read in place (row p at b + p * ldb, all NR
// floats) and written to a packed micro-panel as the kernel goes; b_off points at a PackingB.
// kRowsOfBQuiet: as kRowsOfB, without asking for the next micro-panel's part of each row (kernels that
// have both; the micro-architecture table's rows_of_b_prefetch picks one for conv2d.cpp).
enum Source : int { kPacked = 0, kRowsOfB = 1, kRowsOfA = 2, kMatrixA = 3, kMatrixAPackB = 4, kRowsOfBQuiet = 5 };

// kMatrixAPackB's operands: A's leading dimension first (where kMatrixA's b_off[0] has it), then B's, and
// the micro-panel B is packed into (kc x NR, 64-byte aligned).
struct PackingB {
  int64_t lda;
  int64_t ldb;
  float* out;
};

// C's tile is fetched towards L2 as the kernel starts and into L1 this many steps of k before the end: a deep K
// block streams 56 KB of A and 128 KB of B through L1 (AVX-512, kc 1024; AVX2's 88 KB), which evicted C
// fetched into L1 at the start, and the epilogue then waited on C from memory. 4096^3 on one Zen 5 core, ours
// / TensorFlow's oneDNN in one process, alternating processes: 0.93-0.96 without, 0.96-0.98 at 48 steps (96
// alike; into L2 only, 0.95).
constexpr int64_t kCLateSteps = 48;

// The step of k before which C's tile is fetched into L1 (0: a K block too short for a late fetch, C is
// fetched into L1 as the kernel starts).
inline int64_t late_c_step(int64_t kc) { return kc > kCLateSteps ? kc - kCLateSteps : 0; }

// Asks for C's tile, rows 0..m-1 of it, ldc floats apart and row_bytes long: each line from a row's start,
// and the line of its last byte (a row not line-aligned spans one more). kLocality as __builtin_prefetch's: 3
// into L1 (prefetcht0), 2 towards L2 (prefetcht1). The kernels' early and late fetches of a deep K block.
template <int MR, int kLocality>
[[gnu::always_inline]] inline void fetch_c_tile(const float* c, int64_t ldc, int m, int row_bytes) {
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    if (i < m) {
      const char* row = reinterpret_cast<const char*>(c + i * ldc);
      for (int at = 0; at < row_bytes; at += 64) __builtin_prefetch(row + at, 0, kLocality);
      __builtin_prefetch(row + row_bytes - 1, 0, kLocality);
    }
  }
}

// Body::run<ROWS, NV, kSrc, kAStride>(kc, ap, b, b_off, c, ldc, accumulate, m, n) computes ROWS rows of the
// tile (A's micro-panels hold kAStride rows) from the operands kSrc names.
template <class Body, int MR, int NV, int kRows, int kRowsNow = MR>
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
  // Edge tiles by any_rows, and MR - 1 rows by their own instantiation (conv2d_pixels.cpp's micro-panels).
  template <int kSrc>
  static void any_rows_or_one_less(int64_t kc, const float* ap, const float* b, const int64_t* b_off, float* c,
                                   int64_t ldc, bool accumulate, int m, int n) {
    if (m == MR - 1) {
      Body::template run<MR - 1, NV, kSrc, MR>(kc, ap, b, b_off, c, ldc, accumulate, m, n);
    } else {
      any_rows<Body, MR, NV, kSrc>(kc, ap, b, b_off, c, ldc, accumulate, m, n);
    }
  }
  static void packed(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, bool accumulate, int m,
                     int n) {
    any_rows_or_one_less<kPacked>(kc, ap, bp, nullptr, c, ldc, accumulate, m, n);
  }
  static void rows(int64_t kc, const float* ap, const float* b, const int64_t* b_off, float* c, int64_t ldc,
                   bool accumulate, int m, int n) {
    any_rows<Body, MR, NV, kRowsOfB>(kc, ap, b, b_off, c, ldc, accumulate, m, n);
  }
  static void rows_quiet(int64_t kc, const float* ap, const float* b, const int64_t* b_off, float* c, int64_t ldc,
                         bool accumulate, int m, int n) {
    any_rows<Body, MR, NV, kRowsOfBQuiet>(kc, ap, b, b_off, c, ldc, accumulate, m, n);
  }
  static void a_rows(int64_t kc, const float* a, const int64_t* a_off, const float* bp, float* c, int64_t ldc,
                     bool accumulate, int m, int n) {
    any_rows_or_one_less<kRowsOfA>(kc, a, bp, a_off, c, ldc, accumulate, m, n);
  }
  static void a_matrix(int64_t kc, const float* a, int64_t lda, const float* bp, float* c, int64_t ldc,
                       bool accumulate, int m, int n) {
    const int64_t ld[1] = {lda};
    any_rows_or_one_less<kMatrixA>(kc, a, bp, ld, c, ldc, accumulate, m, n);
  }
  // A read in place and B packed on the way (kMatrixAPackB): a whole micro-panel of B, n == NR.
  static void a_matrix_pack_b(int64_t kc, const float* a, int64_t lda, const float* b, int64_t ldb, float* bp_out,
                              float* c, int64_t ldc, bool accumulate, int m, int n) {
    const PackingB ops{lda, ldb, bp_out};
    any_rows_or_one_less<kMatrixAPackB>(kc, a, b, reinterpret_cast<const int64_t*>(&ops), c, ldc, accumulate, m, n);
  }
};

}  // namespace edges
}  // namespace opbench

// How the GEMM drivers (blocked.cpp, small.cpp) share work between threads. Generic translation units only.
#pragma once

#include <algorithm>
#include <cstdint>

#include "opbench/blocking.hpp"

namespace opbench {
namespace split {

// Half-open range [lo, hi) of `parts` near-equal shares of `total` items for share `idx`.
inline void share(int64_t total, int parts, int idx, int64_t& lo, int64_t& hi) {
  const int64_t base = total / parts, extra = total % parts;
  lo = idx * base + std::min<int64_t>(idx, extra);
  hi = lo + base + (idx < extra ? 1 : 0);
}

// share() over `total` items in steps of `step` (register tiles, vector-width chunks): [lo, hi) is whole steps
// of items, the last share ending at `total`.
inline void share_steps(int64_t total, int64_t step, int parts, int idx, int64_t& lo, int64_t& hi) {
  share(ceil_div(total, step), parts, idx, lo, hi);
  lo *= step;
  hi = std::min(total, hi * step);
}

// `rows` rows in `tiles` register tiles alike in size, in steps of 2 rows (the micro-kernels' edge
// instantiations step by 2: ukernel_edges.hpp): the first `bigger` tiles take 2 rows more than `base`, the last
// one any odd row left. 128 rows are 4 tiles of 14 and 6 of 12, not 9 of 14 and one of 2 that reads B again
// for 2 rows.
struct EvenTiles {
  int64_t tiles, base, bigger, odd;
  EvenTiles(int64_t rows, int64_t tiles_)
      : tiles(tiles_), base(rows / tiles_ / 2 * 2), bigger((rows - base * tiles_) / 2),
        odd(rows - base * tiles_ - 2 * bigger) {}
  int64_t first_row(int64_t t) const { return t * base + 2 * std::min(t, bigger); }
  int64_t rows(int64_t t) const { return base + (t < bigger ? 2 : 0) + (t == tiles - 1 ? odd : 0); }
};

// Split `threads` into a grid tm x tn over (MR-row panels of M) x (NR-column panels) that minimises the
// padded micro-tiles of the busiest thread. Splitting columns repeats A packing, but each thread then reads
// only the B micro-panels it packed itself (in its own L2); charging the repeated packing (tried: a cost of
// NR columns per row) made 256^3 to 512^3 on 2 Zen 5 cores 10-25% slower, because row splits read half of
// B from the other core.
// Ties go to more column groups when wide (N >= 2M: each row of B is used by few rows of A, so reading half
// of B from the other core costs most), else to more row groups. Measured on 2 Zen 5 cores, bf16, columns /
// rows: 128x2304x768 1.43x, 196-512x2304x768 1.25-1.09x, 1024x2304x768 0.99x; 256^3 0.94x, 512^3 0.97x,
// 1024x768x3072 0.97x (fp32, blocked path: 512x2304x768 1.09x, 1024x2304x768 1.05x, 1024x768x3072 1.01x). M
// = 16 had tied on rows: one thread took a 14-row panel, the other the 2 rows left, and waited (the bf16 LSTM
// at batch 16 spent 16% of its samples spinning; 1.16x faster by columns, fp32 1.22x).
inline void choose_grid(int threads, int64_t row_panels, int64_t col_panels, bool wide, int& tm, int& tn) {
  int64_t best = -1;
  tm = 1;
  tn = 1;
  for (int t_m = threads; t_m >= 1; --t_m) {
    if (threads % t_m != 0) continue;
    const int t_n = threads / t_m;
    const int64_t work = ceil_div(row_panels, t_m) * ceil_div(col_panels, t_n);
    if (best < 0 || work < best || (wide && work == best)) {
      best = work;
      tm = t_m;
      tn = t_n;
    }
  }
}

}  // namespace split
}  // namespace opbench

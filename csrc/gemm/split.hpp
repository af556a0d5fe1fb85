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

// Split `threads` into a grid tm x tn over (MR-row panels of M) x (NR-column panels) that minimises the
// padded micro-tiles of the busiest thread; ties prefer more row groups. Splitting columns repeats A
// packing, but each thread then reads only the B micro-panels it packed itself (in its own L2); charging the
// repeated packing (tried: a cost of NR columns per row) made 256^3 to 512^3 on 2 Zen 5 cores 10-25% slower,
// because row splits read half of B from the other core.
inline void choose_grid(int threads, int64_t row_panels, int64_t col_panels, int& tm, int& tn) {
  int64_t best = -1;
  tm = 1;
  tn = 1;
  for (int t_m = threads; t_m >= 1; --t_m) {
    if (threads % t_m != 0) continue;
    const int t_n = threads / t_m;
    const int64_t work = ceil_div(row_panels, t_m) * ceil_div(col_panels, t_n);
    if (best < 0 || work < best) {
      best = work;
      tm = t_m;
      tn = t_n;
    }
  }
}

}  // namespace split
}  // namespace opbench

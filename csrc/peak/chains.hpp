// What every throughput loop of the peak shares: kChains independent accumulators, each updated once per
// iteration by `step` (one FMA or dot-product instruction), then reduced by `reduce` into a volatile sink so
// that the loop is not removed. Included only by the per-ISA units, which compile it with their own -m
// flags and give it their vector type and instruction. Returns the FLOPs performed.
#pragma once

#include <cstdint>

namespace opbench::peak {

template <int kChains, class Acc, class Init, class Step, class Reduce>
inline double run_chains(int64_t iters, double flops_per_step, Init init, Step step, Reduce reduce) {
  Acc acc[kChains];
#pragma GCC unroll 32
  for (int i = 0; i < kChains; ++i) acc[i] = init(i);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 32
    for (int i = 0; i < kChains; ++i) acc[i] = step(acc[i]);
  }
  volatile float sink = reduce(acc);
  (void)sink;
  return static_cast<double>(iters) * kChains * flops_per_step;
}

}  // namespace opbench::peak

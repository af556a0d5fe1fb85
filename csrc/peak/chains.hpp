// What every throughput loop of the peak shares: kChains independent accumulators, each set to
// set1(0.001 * i) and updated once per iteration by `step` (one FMA or dot-product instruction), then summed
// with `add` and reduced to one lane by `hsum` into a volatile sink so that the loop is not removed. Included
// only by the per-ISA units, which compile it with their own -m flags and give it their vector type and
// instructions. Returns the FLOPs performed.
#pragma once

#include <cstdint>

namespace opbench::peak {

template <int kChains, class Acc, class Set1, class Step, class Add, class HSum>
inline double run_chains(int64_t iters, double flops_per_step, Set1 set1, Step step, Add add, HSum hsum) {
  Acc acc[kChains];
#pragma GCC unroll 32
  for (int i = 0; i < kChains; ++i) acc[i] = set1(0.001f * static_cast<float>(i));
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 32
    for (int i = 0; i < kChains; ++i) acc[i] = step(acc[i]);
  }
  Acc sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = add(sum, acc[i]);
  volatile float sink = hsum(sum);
  (void)sink;
  return static_cast<double>(iters) * kChains * flops_per_step;
}

}  // namespace opbench::peak

// Timing inside C++: run an operator `loops` times back to back and return the elapsed seconds, so that
// small problems are measured without interpreter overhead between calls.
#pragma once

#include <chrono>
#include <cstdint>

namespace opbench {

template <class F>
double time_loop(int64_t loops, F&& call) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < loops; ++i) call();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Reads and writes every cache line of a buffer of `bytes` so that later reads of other data miss in cache
// (cold-cache timing; csrc/runtime/flush.cpp).
void flush_cache(int64_t bytes);

}  // namespace opbench

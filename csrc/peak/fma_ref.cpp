// Portable fp32 multiply-add throughput loop (baseline flags: SSE2 multiply and add, no FMA).
#include "opbench/peak.hpp"

namespace opbench {

double fma_chains_f32_ref(int64_t iters) {
  constexpr int kChains = 32;  // 8 SSE vectors of 4 lanes once the compiler vectorises
  float acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = 0.001f * static_cast<float>(i);
  const float x = 0.999999f, y = 1e-7f;
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < kChains; ++i) acc[i] = acc[i] * x + y;
  }
  float sum = 0.0f;
  for (int i = 0; i < kChains; ++i) sum += acc[i];
  volatile float sink = sum;
  (void)sink;
  return static_cast<double>(iters) * kChains * 2;
}

}  // namespace opbench

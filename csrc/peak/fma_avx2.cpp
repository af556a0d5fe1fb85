// AVX2+FMA fp32 FMA-throughput loop: 12 independent ymm chains.
#include <immintrin.h>

#include "opbench/peak.hpp"

namespace opbench {

double fma_chains_f32_avx2(int64_t iters) {
  constexpr int kChains = 12;
  __m256 acc[kChains];
#pragma GCC unroll 12
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(0.001f * static_cast<float>(i));
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  }
  __m256 sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = _mm256_add_ps(sum, acc[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  volatile float sink = lanes[0];
  (void)sink;
  return static_cast<double>(iters) * kChains * 8 * 2;
}

}  // namespace opbench

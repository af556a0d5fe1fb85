// AVX2+FMA fp32 FMA-throughput loop: 12 independent ymm chains.
#include <immintrin.h>

#include "chains.hpp"
#include "opbench/peak.hpp"

namespace opbench {

double fma_chains_f32_avx2(int64_t iters) {
  constexpr int kChains = 12;
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  return peak::run_chains<kChains, __m256>(
      iters, 8 * 2, [](int i) { return _mm256_set1_ps(0.001f * static_cast<float>(i)); },
      [&](__m256 a) { return _mm256_fmadd_ps(a, x, y); },
      [](const __m256* acc) {
        __m256 sum = acc[0];
        for (int i = 1; i < kChains; ++i) sum = _mm256_add_ps(sum, acc[i]);
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, sum);
        return lanes[0];
      });
}

}  // namespace opbench

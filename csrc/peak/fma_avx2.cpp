// AVX2+FMA fp32 FMA-throughput loop: 12 independent ymm chains.
#include <immintrin.h>

#include "chains.hpp"
#include "opbench/peak.hpp"

namespace opbench {

double fma_chains_f32_avx2(int64_t iters) {
  constexpr int kChains = 12;
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-7f);
  return peak::run_chains<kChains, __m256>(
      iters, 8 * 2, [](float v) { return _mm256_set1_ps(v); }, [&](__m256 a) { return _mm256_fmadd_ps(a, x, y); },
      [](__m256 a, __m256 b) { return _mm256_add_ps(a, b); }, [](__m256 s) { return _mm256_cvtss_f32(s); });
}

}  // namespace opbench

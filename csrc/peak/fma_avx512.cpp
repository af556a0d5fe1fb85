// AVX-512F fp32 FMA-throughput loop: 16 independent zmm chains, enough to cover 2 pipes x 4-6 cycles latency.
#include <immintrin.h>

#include "opbench/peak.hpp"

namespace opbench {

double fma_chains_f32_avx512(int64_t iters) {
  constexpr int kChains = 16;
  __m512 acc[kChains];
#pragma GCC unroll 16
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  }
  __m512 sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = _mm512_add_ps(sum, acc[i]);
  volatile float sink = _mm512_reduce_add_ps(sum);
  (void)sink;
  return static_cast<double>(iters) * kChains * 16 * 2;
}

}  // namespace opbench

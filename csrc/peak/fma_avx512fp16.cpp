// AVX512-FP16 native half-precision FMA-throughput loop (vfmadd231ph, 32 lanes): 16 independent chains.
#include <immintrin.h>

#include "opbench/peak.hpp"

namespace opbench {

double fma_chains_f16_avx512fp16(int64_t iters) {
  constexpr int kChains = 16;
  __m512h acc[kChains];
#pragma GCC unroll 16
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ph(static_cast<_Float16>(0.001f * static_cast<float>(i)));
  const __m512h x = _mm512_set1_ph(static_cast<_Float16>(0.999f));
  const __m512h y = _mm512_set1_ph(static_cast<_Float16>(1e-4f));
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ph(acc[i], x, y);
  }
  __m512h sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = _mm512_add_ph(sum, acc[i]);
  volatile float sink = static_cast<float>(_mm512_reduce_add_ph(sum));
  (void)sink;
  return static_cast<double>(iters) * kChains * 32 * 2;
}

}  // namespace opbench

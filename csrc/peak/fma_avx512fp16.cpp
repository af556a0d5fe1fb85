// AVX512-FP16 native half-precision FMA-throughput loop (vfmadd231ph, 32 lanes): 16 independent chains.
#include <immintrin.h>

#include "chains.hpp"
#include "opbench/peak.hpp"

namespace opbench {

double fma_chains_f16_avx512fp16(int64_t iters) {
  constexpr int kChains = 16;
  const __m512h x = _mm512_set1_ph(static_cast<_Float16>(0.999f));
  const __m512h y = _mm512_set1_ph(static_cast<_Float16>(1e-4f));
  return peak::run_chains<kChains, __m512h>(
      iters, 32 * 2, [](int i) { return _mm512_set1_ph(static_cast<_Float16>(0.001f * static_cast<float>(i))); },
      [&](__m512h a) { return _mm512_fmadd_ph(a, x, y); },
      [](const __m512h* acc) {
        __m512h sum = acc[0];
        for (int i = 1; i < kChains; ++i) sum = _mm512_add_ph(sum, acc[i]);
        return static_cast<float>(_mm512_reduce_add_ph(sum));
      });
}

}  // namespace opbench

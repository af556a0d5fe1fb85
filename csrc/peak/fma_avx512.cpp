// AVX-512F fp32 FMA-throughput loop: 16 independent zmm chains, enough to cover 2 pipes x 4-6 cycles latency.
#include <immintrin.h>

#include "chains.hpp"
#include "opbench/peak.hpp"

namespace opbench {

double fma_chains_f32_avx512(int64_t iters) {
  constexpr int kChains = 16;
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-7f);
  return peak::run_chains<kChains, __m512>(
      iters, 16 * 2, [](float v) { return _mm512_set1_ps(v); }, [&](__m512 a) { return _mm512_fmadd_ps(a, x, y); },
      [](__m512 a, __m512 b) { return _mm512_add_ps(a, b); }, [](__m512 s) { return _mm512_reduce_add_ps(s); });
}

}  // namespace opbench

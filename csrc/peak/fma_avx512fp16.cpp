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
      iters, 32 * 2, [](float v) { return _mm512_set1_ph(static_cast<_Float16>(v)); },
      [&](__m512h a) { return _mm512_fmadd_ph(a, x, y); }, [](__m512h a, __m512h b) { return _mm512_add_ph(a, b); },
      [](__m512h s) { return static_cast<float>(_mm512_reduce_add_ph(s)); });
}

}  // namespace opbench

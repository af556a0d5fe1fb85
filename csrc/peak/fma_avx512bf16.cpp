// AVX512-BF16 dot-product-throughput loop (vdpbf16ps: 16 fp32 lanes, each adding two bf16 products, so 64
// FLOP per instruction): 16 independent chains.
#include <immintrin.h>

#include "chains.hpp"
#include "opbench/peak.hpp"

namespace opbench {

double dot_chains_bf16_avx512bf16(int64_t iters) {
  constexpr int kChains = 16;
  // bf16 1.0 (0x3f80) and a small value (0x3800, 2^-15): the sums stay finite and normal.
  const __m512bh x = (__m512bh)_mm512_set1_epi16(static_cast<short>(0x3f80));
  const __m512bh y = (__m512bh)_mm512_set1_epi16(static_cast<short>(0x3800));
  return peak::run_chains<kChains, __m512>(
      iters, 16 * 4, [](float v) { return _mm512_set1_ps(v); }, [&](__m512 a) { return _mm512_dpbf16_ps(a, x, y); },
      [](__m512 a, __m512 b) { return _mm512_add_ps(a, b); }, [](__m512 s) { return _mm512_reduce_add_ps(s); });
}

}  // namespace opbench

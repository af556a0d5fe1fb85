// AVX-512 LSTM cell: 16 units per step with a vectorised exp (Cody-Waite reduction, degree-7 Taylor
// polynomial on |r| <= ln2/2: truncation < 1e-8 relative, about 2 ulp in all), sigmoid and tanh from it.
// Compiled with the avx512 flags.
#include <immintrin.h>

#include "cells.hpp"

namespace opbench {

namespace {

constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

inline __m512 exp_ps(__m512 x) {
  // exp(88.3) < FLT_MAX and exp(-87.3) > FLT_MIN: the clamp keeps 2^n a normal number.
  // x second: max/min return their second operand when either is NaN, so a NaN input stays NaN (and so
  // does every gate computed from it) instead of being clamped to a finite value.
  x = _mm512_min_ps(_mm512_set1_ps(88.3f), _mm512_max_ps(_mm512_set1_ps(-87.3f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), kRound);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);  // ln2 split in two for an exact product
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

inline __m512 sigmoid_ps(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

inline __m512 tanh_ps(__m512 x) {  // 1 - 2 / (exp(2x) + 1): exact limits at +-inf, absolute error ~1 ulp
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = exp_ps(_mm512_add_ps(x, x));
  return _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
}

}  // namespace

void lstm_cell_avx512(int64_t rows, int64_t cols, const float* z, int64_t ldz, int64_t gate_stride, float* c,
                      int64_t ldc, float* h32, uint16_t* h16, int64_t ldh) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* zr = z + r * ldz;
    float* cr = c + r * ldc;
    for (int64_t j = 0; j < cols; j += 16) {
      const int64_t left = cols - j;
      const __mmask16 m = left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
      const __m512 i = sigmoid_ps(_mm512_maskz_loadu_ps(m, zr + j));
      const __m512 f = sigmoid_ps(_mm512_maskz_loadu_ps(m, zr + gate_stride + j));
      const __m512 g = tanh_ps(_mm512_maskz_loadu_ps(m, zr + 2 * gate_stride + j));
      const __m512 o = sigmoid_ps(_mm512_maskz_loadu_ps(m, zr + 3 * gate_stride + j));
      const __m512 cn = _mm512_fmadd_ps(f, _mm512_maskz_loadu_ps(m, cr + j), _mm512_mul_ps(i, g));
      _mm512_mask_storeu_ps(cr + j, m, cn);
      const __m512 h = _mm512_mul_ps(o, tanh_ps(cn));
      if (h32 != nullptr) {
        _mm512_mask_storeu_ps(h32 + r * ldh + j, m, h);
      } else {
        const __m256i hh = _mm512_cvtps_ph(h, kRound);
        _mm256_mask_storeu_epi16(h16 + r * ldh + j, m, hh);
      }
    }
  }
}

}  // namespace opbench

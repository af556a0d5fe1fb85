// AVX-512 recurrent cells: 16 units per step with a vectorised exp (Cody-Waite reduction, degree-7 Taylor
// polynomial on |r| <= ln2/2: truncation < 1e-8 relative, about 2 ulp in all), sigmoid and tanh from it;
// edges by masked loads and stores.
// Compiled with the avx512 flags.
#include <immintrin.h>

#include "cell_body.hpp"
#include "opbench/rnn_cells.hpp"

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

inline __mmask16 lanes(int n) { return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u); }

struct Zmm {
  using T = __m512;
  static constexpr int W = 16;
  static T load(const float* p, int n) { return _mm512_maskz_loadu_ps(lanes(n), p); }
  static void store(float* p, T v, int n) { _mm512_mask_storeu_ps(p, lanes(n), v); }
  static void store_f16(uint16_t* p, T v, int n) { _mm256_mask_storeu_epi16(p, lanes(n), _mm512_cvtps_ph(v, kRound)); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T fmadd(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T sigmoid(T x) { return sigmoid_ps(x); }
  static T tanh(T x) { return tanh_ps(x); }
  static T relu(T x) { return _mm512_max_ps(_mm512_setzero_ps(), x); }  // x second: NaN stays NaN
};

}  // namespace

OPBENCH_DEFINE_CELLS(avx512, Zmm)

}  // namespace opbench

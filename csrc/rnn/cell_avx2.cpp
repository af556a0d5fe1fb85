// AVX2 recurrent cells: 8 units per step with the same vectorised exp as the AVX-512 cell (2^n built from the
// exponent bits), edges handled by a spill to a local array. Compiled with the avx2 flags.
#include <immintrin.h>

#include <cstring>

#include "cell_body.hpp"
#include "opbench/rnn_cells.hpp"

namespace opbench {

namespace {

constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

inline __m256 exp_ps(__m256 x) {
  // x second: max/min return their second operand when either is NaN, so a NaN input stays NaN (and so
  // does every gate computed from it) instead of being clamped to a finite value.
  x = _mm256_min_ps(_mm256_set1_ps(88.3f), _mm256_max_ps(_mm256_set1_ps(-87.3f), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), kRound);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // n is in [-126, 127] after the clamp, so (n + 127) << 23 is the bit pattern of the normal float 2^n.
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

inline __m256 sigmoid_ps(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

inline __m256 tanh_ps(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = exp_ps(_mm256_add_ps(x, x));
  return _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
}

struct Ymm {
  using T = __m256;
  static constexpr int W = 8;
  static T load(const float* p, int n) {
    if (n == 8) return _mm256_loadu_ps(p);
    alignas(32) float tmp[8] = {};
    std::memcpy(tmp, p, sizeof(float) * n);
    return _mm256_load_ps(tmp);
  }
  static void store(float* p, T v, int n) {
    if (n == 8) return _mm256_storeu_ps(p, v);
    alignas(32) float tmp[8];
    _mm256_store_ps(tmp, v);
    std::memcpy(p, tmp, sizeof(float) * n);
  }
  static void store_f16(uint16_t* p, T v, int n) {
    const __m128i h = _mm256_cvtps_ph(v, kRound);
    if (n == 8) return _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
    alignas(16) uint16_t tmp[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(tmp), h);
    std::memcpy(p, tmp, sizeof(uint16_t) * n);
  }
  static T add(T a, T b) { return _mm256_add_ps(a, b); }
  static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T fmadd(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T sigmoid(T x) { return sigmoid_ps(x); }
  static T tanh(T x) { return tanh_ps(x); }
  static T relu(T x) { return _mm256_max_ps(_mm256_setzero_ps(), x); }  // x second: NaN stays NaN
};

}  // namespace

OPBENCH_DEFINE_CELLS(avx2, Ymm)

}  // namespace opbench

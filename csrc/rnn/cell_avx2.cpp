// AVX2 LSTM cell: 8 units per step with the same vectorised exp as the AVX-512 cell (2^n built from the
// exponent bits), edges handled by a spill to a local array. Compiled with the avx2 flags.
#include <immintrin.h>

#include "cells.hpp"

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

// Units [0, n) of one row, n <= 8.
inline void cell8(const float* z, int64_t gs, float* c, float* h32, uint16_t* h16, int n) {
  alignas(32) float zi[8] = {}, zf[8] = {}, zg[8] = {}, zo[8] = {}, cc[8] = {}, hh[8];
  for (int j = 0; j < n; ++j) {
    zi[j] = z[j];
    zf[j] = z[gs + j];
    zg[j] = z[2 * gs + j];
    zo[j] = z[3 * gs + j];
    cc[j] = c[j];
  }
  const __m256 i = sigmoid_ps(_mm256_load_ps(zi)), f = sigmoid_ps(_mm256_load_ps(zf));
  const __m256 g = tanh_ps(_mm256_load_ps(zg)), o = sigmoid_ps(_mm256_load_ps(zo));
  const __m256 cn = _mm256_fmadd_ps(f, _mm256_load_ps(cc), _mm256_mul_ps(i, g));
  _mm256_store_ps(cc, cn);
  _mm256_store_ps(hh, _mm256_mul_ps(o, tanh_ps(cn)));
  for (int j = 0; j < n; ++j) {
    c[j] = cc[j];
    if (h32 != nullptr) {
      h32[j] = hh[j];
    } else {
      h16[j] = _cvtss_sh(hh[j], kRound);
    }
  }
}

}  // namespace

void lstm_cell_avx2(int64_t rows, int64_t cols, const float* z, int64_t ldz, int64_t gate_stride, float* c,
                    int64_t ldc, float* h32, uint16_t* h16, int64_t ldh) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* zr = z + r * ldz;
    float* cr = c + r * ldc;
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8) {
      const __m256 i = sigmoid_ps(_mm256_loadu_ps(zr + j));
      const __m256 f = sigmoid_ps(_mm256_loadu_ps(zr + gate_stride + j));
      const __m256 g = tanh_ps(_mm256_loadu_ps(zr + 2 * gate_stride + j));
      const __m256 o = sigmoid_ps(_mm256_loadu_ps(zr + 3 * gate_stride + j));
      const __m256 cn = _mm256_fmadd_ps(f, _mm256_loadu_ps(cr + j), _mm256_mul_ps(i, g));
      _mm256_storeu_ps(cr + j, cn);
      const __m256 h = _mm256_mul_ps(o, tanh_ps(cn));
      if (h32 != nullptr) {
        _mm256_storeu_ps(h32 + r * ldh + j, h);
      } else {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(h16 + r * ldh + j), _mm256_cvtps_ph(h, kRound));
      }
    }
    if (j < cols) {
      cell8(zr + j, gate_stride, cr + j, h32 ? h32 + r * ldh + j : nullptr, h32 ? nullptr : h16 + r * ldh + j,
            static_cast<int>(cols - j));
    }
  }
}

}  // namespace opbench

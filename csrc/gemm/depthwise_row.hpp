// The depthwise convolution's inner loop (csrc/conv/depthwise.cpp): one output row as a weighted sum of
// filter-tap rows, out[0:n] (+)= sum over t < taps of w[t] * src[t][0:n]. Included only by the ISA
// translation units (through make_kernel_set.hpp, like pack.hpp and thin.hpp): the lane loop vectorises with
// the unit's own -m flags.
#pragma once

#include <cstdint>
#include <cstring>
#include <immintrin.h>

#include "opbench/kernel_set.hpp"
#include "thin.hpp"

namespace opbench {
namespace depthwise {

// Up to 9 taps (a 3x3 filter) per pass over the row: the sum is formed in registers and the output is read
// (when accumulating) and written once per pass; wider filters take several passes.
constexpr int kTapsPerPass = 9;

template <int T>
inline void pass(int64_t n, const float* __restrict w, const float* const* __restrict src, float* __restrict out,
                 bool accumulate) {
  const float* s[T];
  float c[T];
  for (int t = 0; t < T; ++t) {
    s[t] = src[t];
    c[t] = w[t];
  }
  if (accumulate) {
    for (int64_t j = 0; j < n; ++j) {
      float v = out[j];
#pragma GCC unroll 9
      for (int t = 0; t < T; ++t) v += c[t] * s[t][j];
      out[j] = v;
    }
  } else {
    for (int64_t j = 0; j < n; ++j) {
      float v = c[0] * s[0][j];
#pragma GCC unroll 9
      for (int t = 1; t < T; ++t) v += c[t] * s[t][j];
      out[j] = v;
    }
  }
}

// The kernel set's entry point (ConvKernels::depthwise_row).
template <class Cvt>
void row(int64_t n, int taps, const float* w, const float* const* src, float* out) {
  for (int t0 = 0; t0 < taps; t0 += kTapsPerPass) {
    const int g = taps - t0 < kTapsPerPass ? taps - t0 : kTapsPerPass;
    const bool acc = t0 > 0;
    switch (g) {
      case 1: pass<1>(n, w + t0, src + t0, out, acc); break;
      case 2: pass<2>(n, w + t0, src + t0, out, acc); break;
      case 3: pass<3>(n, w + t0, src + t0, out, acc); break;
      case 4: pass<4>(n, w + t0, src + t0, out, acc); break;
      case 5: pass<5>(n, w + t0, src + t0, out, acc); break;
      case 6: pass<6>(n, w + t0, src + t0, out, acc); break;
      case 7: pass<7>(n, w + t0, src + t0, out, acc); break;
      case 8: pass<8>(n, w + t0, src + t0, out, acc); break;
      default: pass<9>(n, w + t0, src + t0, out, acc); break;
    }
  }
}

// The weight gradient's inner loop (ConvKernels::depthwise_dot): acc[t] += the dot product of g's `rows`
// rows of n (ldg apart) with tap t's rows src[t] (ld apart), for up to 9 taps per pass. Each of g's vectors is
// loaded once for all taps, one L-lane accumulator per tap (9 independent FMA chains); a row's last n % L
// elements are loaded masked, so no element past a row's n is read (nor multiplied: an Inf in the padding
// columns of the plane must not turn a zero of g into NaN).
template <int L>
[[gnu::always_inline]] inline typename thin::Vec<L>::type lanes_from(const float* x, int64_t rem) {
  using vec = typename thin::Vec<L>::type;
#if defined(__AVX512F__)
  if constexpr (L == 16) return reinterpret_cast<vec>(_mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << rem) - 1u), x));
#endif
#if defined(__AVX2__)
  // vmaskmovps: lanes past rem read nothing and come back zero. Element by element, the 10 partial vectors of
  // a row's tail cost as much as its whole vectors at 28 columns.
  if constexpr (L == 8) {
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(rem)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return reinterpret_cast<vec>(_mm256_maskload_ps(x, mask));
  }
#endif
  vec v = {};
  for (int64_t l = 0; l < rem; ++l) v[l] = x[l];
  return v;
}

template <int L, int T>
inline void dot_pass(int64_t rows, int64_t n, const float* __restrict g, int64_t ldg, const float* const* src,
                     int64_t ld, float* acc) {
  using vec = typename thin::Vec<L>::type;
  vec a[T];
  for (int t = 0; t < T; ++t) a[t] = vec{};
  for (int64_t i = 0; i < rows; ++i) {
    const float* gi = g + i * ldg;
    const float* s[T];
    for (int t = 0; t < T; ++t) s[t] = src[t] + i * ld;
    int64_t j = 0;
    for (; j + L <= n; j += L) {
      vec gv;
      std::memcpy(&gv, gi + j, sizeof(vec));
#pragma GCC unroll 9
      for (int t = 0; t < T; ++t) {
        vec sv;
        std::memcpy(&sv, s[t] + j, sizeof(vec));
        a[t] += gv * sv;
      }
    }
    if (j < n) {
      const vec gv = lanes_from<L>(gi + j, n - j);
#pragma GCC unroll 9
      for (int t = 0; t < T; ++t) a[t] += gv * lanes_from<L>(s[t] + j, n - j);
    }
  }
  for (int t = 0; t < T; ++t) {
    float sum = 0.0f;
    for (int l = 0; l < L; ++l) sum += a[t][l];
    acc[t] += sum;
  }
}

template <int L>
void dot(int64_t rows, int64_t n, int taps, const float* g, int64_t ldg, const float* const* src, int64_t ld,
         float* acc) {
  for (int t0 = 0; t0 < taps; t0 += kTapsPerPass) {
    const int k = taps - t0 < kTapsPerPass ? taps - t0 : kTapsPerPass;
    const float* const* s = src + t0;
    float* out = acc + t0;
    switch (k) {
      case 1: dot_pass<L, 1>(rows, n, g, ldg, s, ld, out); break;
      case 2: dot_pass<L, 2>(rows, n, g, ldg, s, ld, out); break;
      case 3: dot_pass<L, 3>(rows, n, g, ldg, s, ld, out); break;
      case 4: dot_pass<L, 4>(rows, n, g, ldg, s, ld, out); break;
      case 5: dot_pass<L, 5>(rows, n, g, ldg, s, ld, out); break;
      case 6: dot_pass<L, 6>(rows, n, g, ldg, s, ld, out); break;
      case 7: dot_pass<L, 7>(rows, n, g, ldg, s, ld, out); break;
      case 8: dot_pass<L, 8>(rows, n, g, ldg, s, ld, out); break;
      default: dot_pass<L, 9>(rows, n, g, ldg, s, ld, out); break;
    }
  }
}

// 3x3 taps, stride 1, dilation 1: `rows` output rows of n outputs, row i = sum over r, s < 3 of
// w[3 r + s] * in[(i + r) ld_in + j + s], in blocks of 4 rows that share their 6 input rows: 18 loads for 36
// FMAs instead of 36 (the generic row kernel loads every tap for every output).
inline void block3x3(int64_t n, const float* __restrict w, const float* __restrict in, int64_t ld_in,
                     float* __restrict out, int64_t ld_out) {
  const float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6], w7 = w[7], w8 = w[8];
  const float *r0 = in, *r1 = in + ld_in, *r2 = in + 2 * ld_in, *r3 = in + 3 * ld_in, *r4 = in + 4 * ld_in,
              *r5 = in + 5 * ld_in;
  float *o0 = out, *o1 = out + ld_out, *o2 = out + 2 * ld_out, *o3 = out + 3 * ld_out;
  for (int64_t j = 0; j < n; ++j) {
    const float a0 = r0[j], a1 = r0[j + 1], a2 = r0[j + 2];
    const float b0 = r1[j], b1 = r1[j + 1], b2 = r1[j + 2];
    const float c0 = r2[j], c1 = r2[j + 1], c2 = r2[j + 2];
    const float d0 = r3[j], d1 = r3[j + 1], d2 = r3[j + 2];
    const float e0 = r4[j], e1 = r4[j + 1], e2 = r4[j + 2];
    const float f0 = r5[j], f1 = r5[j + 1], f2 = r5[j + 2];
    o0[j] = w0 * a0 + w1 * a1 + w2 * a2 + w3 * b0 + w4 * b1 + w5 * b2 + w6 * c0 + w7 * c1 + w8 * c2;
    o1[j] = w0 * b0 + w1 * b1 + w2 * b2 + w3 * c0 + w4 * c1 + w5 * c2 + w6 * d0 + w7 * d1 + w8 * d2;
    o2[j] = w0 * c0 + w1 * c1 + w2 * c2 + w3 * d0 + w4 * d1 + w5 * d2 + w6 * e0 + w7 * e1 + w8 * e2;
    o3[j] = w0 * d0 + w1 * d1 + w2 * d2 + w3 * e0 + w4 * e1 + w5 * e2 + w6 * f0 + w7 * f1 + w8 * f2;
  }
}

// The kernel set's entry point (ConvKernels::depthwise_3x3): 4-row blocks, then the last rows one at a time.
template <class Cvt>
void rows3x3(int64_t n, int64_t rows, const float* w, const float* in, int64_t ld_in, float* out, int64_t ld_out) {
  int64_t i = 0;
  for (; i + 4 <= rows; i += 4) block3x3(n, w, in + i * ld_in, ld_in, out + i * ld_out, ld_out);
  for (; i < rows; ++i) {
    const float* src[9];
    for (int t = 0; t < 9; ++t) src[t] = in + (i + t / 3) * ld_in + t % 3;
    row<Cvt>(n, 9, w, src, out + i * ld_out);
  }
}

// The kernel set's entry point (ConvKernels::depthwise_split): stride 2, the common one, as a loop the
// compiler turns into loads and permutes; other strides element by element.
template <class Cvt>
void split(const float* row, int64_t n, int stride, float* const* phases) {
  if (stride == 2) {
    float* __restrict even = phases[0];
    float* __restrict odd = phases[1];
    for (int64_t j = 0; j < n; ++j) {
      even[j] = row[2 * j];
      odd[j] = row[2 * j + 1];
    }
    return;
  }
  for (int f = 0; f < stride; ++f) {
    float* __restrict out = phases[f];
    for (int64_t j = 0; j < n; ++j) out[j] = row[j * stride + f];
  }
}

// The kernel set's entry point (ConvKernels::depthwise_merge), split's inverse: stride 2 as a loop the
// compiler turns into loads and interleaving permutes; other strides element by element.
template <class Cvt>
void merge(const float* const* phases, int64_t n, int stride, float* row) {
  if (stride == 2) {
    const float* __restrict even = phases[0];
    const float* __restrict odd = phases[1];
    float* __restrict out = row;
    for (int64_t j = 0; j < n; ++j) {
      out[2 * j] = even[j];
      out[2 * j + 1] = odd[j];
    }
    return;
  }
  for (int f = 0; f < stride; ++f) {
    const float* __restrict in = phases[f];
    for (int64_t j = 0; j < n; ++j) row[j * stride + f] = in[j];
  }
}


// The kernel set's entry point (ConvKernels::depthwise_plane, AVX-512 only; nullptr elsewhere): a whole fp32
// plane, 3x3 taps at dilation 1 and stride S (1 or 2), any padding, read straight from the input with no
// padded copy. Per block of RB output rows and 16 output columns, each of the S (RB - 1) + 3 input rows it
// needs is loaded once as aligned-or-not vectors (lanes outside the row masked to zero, so the padding is
// never stored) and its three taps made in registers: at stride 1 from two loads by valignd (unaligned
// loads of the three shifted vectors were mostly cache-line splits and ran at 0.4x the aligned speed), at
// stride 2 by an even/odd permute of two loads and a valignd. Each such row feeds the up to 3 (stride 1) or
// 2 (stride 2) output rows it belongs to; the RB accumulators are stored once.
#if defined(__AVX512F__)
namespace plane {

// Lanes l with 0 <= c0 + l < w.
[[gnu::always_inline]] inline __mmask16 lanes_in(int64_t c0, int64_t w) {
  const int64_t lo = c0 < 0 ? -c0 : 0;
  const int64_t hi = w - c0 < 16 ? w - c0 : 16;
  if (hi <= lo) return 0;
  return static_cast<__mmask16>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

template <int N>
[[gnu::always_inline]] inline __m512 shift(__m512 hi, __m512 lo) {  // lanes N .. N + 15 of (lo, hi)
  return _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(hi), _mm512_castps_si512(lo), N));
}

// One block: RB output rows from o0, 16 output columns from q0. The column masks (which lanes of each load
// lie inside the row) are the same for every row and made once; Checked blocks (the first and last rows of
// the plane) also skip the input rows outside it.
template <int S, int RB, bool Checked>
[[gnu::always_inline]] inline void block(const float* x, int64_t h, int64_t w, int64_t pad_h, int64_t pad_w,
                                         const __m512* c, float* y, int64_t q, int64_t ldy, int64_t o0, int64_t q0) {
  constexpr int kLoads = S == 1 ? 2 : 3;
  const int64_t base = S * q0 - pad_w;  // the input column of tap 0 of output column q0
  __mmask16 m[kLoads];
  for (int l = 0; l < kLoads; ++l) m[l] = lanes_in(base + 16 * l, w);
  __m512 acc[RB];
  for (int o = 0; o < RB; ++o) acc[o] = _mm512_setzero_ps();
  const float* top = x + (S * o0 - pad_h) * w + base;  // row r of the block is top + r w (masked lanes never read)
#pragma GCC unroll 32
  for (int r = 0; r < S * (RB - 1) + 3; ++r) {
    if constexpr (Checked) {
      const int64_t ih = S * o0 - pad_h + r;
      if (ih < 0 || ih >= h) continue;
    }
    const float* row = top + r * w;
    __m512 t0, t1, t2;
    if constexpr (S == 1) {
      const __m512 v0 = _mm512_maskz_loadu_ps(m[0], row), v1 = _mm512_maskz_loadu_ps(m[1], row + 16);
      t0 = v0;
      t1 = shift<1>(v1, v0);
      t2 = shift<2>(v1, v0);
    } else {
      const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
      const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
      const __m512 v0 = _mm512_maskz_loadu_ps(m[0], row), v1 = _mm512_maskz_loadu_ps(m[1], row + 16);
      const __m512 v2 = _mm512_maskz_loadu_ps(m[2] & 1, row + 32);  // only column base + 32 is a tap
      t0 = _mm512_permutex2var_ps(v0, even, v1);
      t1 = _mm512_permutex2var_ps(v0, odd, v1);
      t2 = shift<1>(v2, t0);
    }
#pragma GCC unroll 3
    for (int k = 0; k < 3; ++k) {  // input row r is filter row k of output row (r - k) / S
      if (r - k < 0 || (r - k) % S != 0 || (r - k) / S >= RB) continue;
      __m512& a = acc[(r - k) / S];
      a = _mm512_fmadd_ps(c[3 * k], t0, a);
      a = _mm512_fmadd_ps(c[3 * k + 1], t1, a);
      a = _mm512_fmadd_ps(c[3 * k + 2], t2, a);
    }
  }
  const __mmask16 store = lanes_in(q0, q);
  for (int o = 0; o < RB; ++o) _mm512_mask_storeu_ps(y + (o0 + o) * ldy + q0, store, acc[o]);
}

template <int S, int RB>
void block_rows(const float* x, int64_t h, int64_t w, int64_t pad_h, int64_t pad_w, const __m512* c, float* y,
                int64_t q, int64_t ldy, int64_t o0) {
  const bool inside = S * o0 - pad_h >= 0 && S * o0 - pad_h + S * (RB - 1) + 3 <= h;
  for (int64_t q0 = 0; q0 < q; q0 += 16) {
    if (inside) {
      block<S, RB, false>(x, h, w, pad_h, pad_w, c, y, q, ldy, o0, q0);
    } else {
      block<S, RB, true>(x, h, w, pad_h, pad_w, c, y, q, ldy, o0, q0);
    }
  }
}

template <int S>
void rows(const float* x, int64_t h, int64_t w, int64_t pad_h, int64_t pad_w, const float* wt, float* y, int64_t p,
          int64_t q) {
  __m512 c[9];
  for (int t = 0; t < 9; ++t) c[t] = _mm512_set1_ps(wt[t]);
  int64_t o = 0;
  for (; o + 8 <= p; o += 8) block_rows<S, 8>(x, h, w, pad_h, pad_w, c, y, q, q, o);
  if (o + 4 <= p) block_rows<S, 4>(x, h, w, pad_h, pad_w, c, y, q, q, o), o += 4;
  if (o + 2 <= p) block_rows<S, 2>(x, h, w, pad_h, pad_w, c, y, q, q, o), o += 2;
  if (o < p) block_rows<S, 1>(x, h, w, pad_h, pad_w, c, y, q, q, o);
}

inline void entry(const float* x, int64_t h, int64_t w, int64_t pad_h, int64_t pad_w, int stride, const float* wt,
                  float* y, int64_t p, int64_t q) {
  if (stride == 1) {
    rows<1>(x, h, w, pad_h, pad_w, wt, y, p, q);
  } else {
    rows<2>(x, h, w, pad_h, pad_w, wt, y, p, q);
  }
}

}  // namespace plane
constexpr DepthwisePlaneF32 kPlane = plane::entry;
#else
constexpr DepthwisePlaneF32 kPlane = nullptr;
#endif

}  // namespace depthwise
}  // namespace opbench

// The depthwise convolution's inner loop (csrc/conv/depthwise.cpp): one output row as a weighted sum of
// filter-tap rows, out[0:n] (+)= sum over t < taps of w[t] * src[t][0:n]. Included only by the ISA
// translation units (through make_kernel_set.hpp, like pack.hpp and thin.hpp): the lane loop vectorises with
// the unit's own -m flags.
#pragma once

#include <cstdint>

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

}  // namespace depthwise
}  // namespace opbench

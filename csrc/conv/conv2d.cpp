// Conv2d forward: im2col (threaded, zero-filled at the borders) and one tiled GEMM per image and group.
#include <algorithm>
#include <cstring>

#include "opbench/aligned.hpp"
#include "opbench/conv.hpp"
#include "opbench/thread_pool.hpp"

namespace opbench {

namespace {

// Rows [row_lo, row_hi) of the (C_g*R*S) x (P*Q) im2col matrix of one image and group.
template <class T>
void im2col_rows(const T* x, const ConvProblem& p, int64_t row_lo, int64_t row_hi, T* col) {
  const int64_t P = p.out_h(), Q = p.out_w(), H = p.h, W = p.w_in;
  for (int64_t row = row_lo; row < row_hi; ++row) {
    const int64_t ch = row / (p.r * p.s), kr = (row / p.s) % p.r, kc = row % p.s;
    const T* plane = x + ch * H * W;
    T* dst_row = col + row * P * Q;
    // Output columns q whose input column q*stride - pad + kc*dil lies inside [0, W).
    const int64_t off = kc * p.dil_w - p.pad_w;
    int64_t q0 = off >= 0 ? 0 : (-off + p.stride_w - 1) / p.stride_w;
    int64_t q1 = W - off <= 0 ? 0 : (W - off + p.stride_w - 1) / p.stride_w;
    q0 = std::min(q0, Q);
    q1 = std::max(q0, std::min(q1, Q));
    for (int64_t oh = 0; oh < P; ++oh) {
      T* dst = dst_row + oh * Q;
      const int64_t ih = oh * p.stride_h - p.pad_h + kr * p.dil_h;
      if (ih < 0 || ih >= H) {
        std::memset(dst, 0, sizeof(T) * Q);
        continue;
      }
      const T* src = plane + ih * W;
      std::memset(dst, 0, sizeof(T) * q0);
      if (p.stride_w == 1) {
        if (q1 > q0) std::memcpy(dst + q0, src + q0 + off, sizeof(T) * (q1 - q0));
      } else {
        for (int64_t q = q0; q < q1; ++q) dst[q] = src[q * p.stride_w + off];
      }
      std::memset(dst + q1, 0, sizeof(T) * (Q - q1));
    }
  }
}

template <class T>
void im2col(const T* x, const ConvProblem& p, T* col, int threads) {
  const int64_t rows = (p.c / p.groups) * p.r * p.s;
  const int t = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, rows)));
  ThreadPool::instance().run(t, [&](int tid) {
    const int64_t lo = rows * tid / t, hi = rows * (tid + 1) / t;
    im2col_rows(x, p, lo, hi, col);
  });
}

}  // namespace

void conv2d(const KernelSet& ks, const ConvProblem& p, const Blocking& blk, int threads) {
  static thread_local AlignedBuffer col_buffer;
  const int64_t P = p.out_h(), Q = p.out_w(), PQ = P * Q;
  const int64_t cg = p.c / p.groups, kg = p.k / p.groups, crs = cg * p.r * p.s;
  const int64_t elem = p.dtype == Dtype::f16 ? 2 : 4;
  const bool direct = p.r == 1 && p.s == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 && p.pad_w == 0;
  void* col = direct ? nullptr : col_buffer.reserve(static_cast<size_t>(crs * PQ * elem));

  for (int64_t img = 0; img < p.n; ++img) {
    for (int64_t g = 0; g < p.groups; ++g) {
      const int64_t x_off = (img * p.c + g * cg) * p.h * p.w_in;
      const void* b;
      if (direct) {
        b = static_cast<const char*>(p.x) + x_off * elem;
      } else if (p.dtype == Dtype::f16) {
        im2col(static_cast<const uint16_t*>(p.x) + x_off, p, static_cast<uint16_t*>(col), threads);
        b = col;
      } else {
        im2col(static_cast<const float*>(p.x) + x_off, p, static_cast<float*>(col), threads);
        b = col;
      }
      GemmProblem gp;
      gp.in_dtype = gp.out_dtype = p.dtype;
      gp.a = static_cast<const char*>(p.w) + g * kg * crs * elem;
      gp.b = b;
      gp.c = static_cast<char*>(p.y) + (img * p.k + g * kg) * PQ * elem;
      gp.m = kg;
      gp.n = PQ;
      gp.k = crs;
      gp.lda = crs;
      gp.ldb = PQ;
      gp.ldc = PQ;
      gemm(ks, gp, blk, threads);
    }
  }
}

}  // namespace opbench

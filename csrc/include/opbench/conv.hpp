// Conv2d forward (NCHW input, KCRS weights) as im2col + the tiled GEMM, so tile sizes apply to conv too.
#pragma once

#include <cstdint>

#include "opbench/gemm.hpp"

namespace opbench {

struct ConvProblem {
  Dtype dtype = Dtype::f32;
  const void* x = nullptr;  // n x c x h x w, C-contiguous
  const void* w = nullptr;  // k x (c / groups) x r x s, C-contiguous
  void* y = nullptr;        // n x k x out_h() x out_w(), C-contiguous
  int64_t n = 1, c = 1, h = 1, w_in = 1, k = 1, r = 1, s = 1;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1, groups = 1;

  int64_t out_h() const { return (h + 2 * pad_h - dil_h * (r - 1) - 1) / stride_h + 1; }
  int64_t out_w() const { return (w_in + 2 * pad_w - dil_w * (s - 1) - 1) / stride_w + 1; }
};

// Per image and group: Y[k_g, P*Q] = W[k_g, C_g*R*S] * col[C_g*R*S, P*Q]. A 1x1, stride-1, unpadded conv
// multiplies the image directly (no im2col).
void conv2d(const KernelSet& ks, const ConvProblem& p, const Blocking& blk, int threads);

}  // namespace opbench

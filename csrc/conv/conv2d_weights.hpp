// The weight gradient of a convolution without im2col (csrc/conv/conv2d_weights.cpp), for conv2d_backward:
// any stride, padding, dilation and groups, but not a depthwise convolution (depthwise_backward.cpp's).
#pragma once

#include <cstdint>

#include "opbench/conv.hpp"
#include "opbench/kernel_set.hpp"

namespace opbench {

// The bytes conv2d_weights allocates for p on `threads` threads (overflow-checked).
int64_t conv2d_weights_workspace_bytes(const KernelSet& ks, const ConvProblem& p, int threads);

// dw (k x c/groups x r x s, fp32) of p from x and dy (fp32, p's layouts), written whole. Returns false and
// leaves dw alone where x holds a NaN or an Inf: the padded copy's gap columns would multiply it by a zero
// of dY that no tap meets, so the caller takes the im2col path, which never reads it.
bool conv2d_weights(const KernelSet& ks, const ConvProblem& p, const float* x, const float* dy, float* dw, int threads);

}  // namespace opbench

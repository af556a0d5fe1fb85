// The weight gradient of a convolution at stride 1 without im2col (csrc/conv/conv2d_weights.cpp), for
// conv2d_backward.
#pragma once

#include <cstdint>

#include "opbench/conv.hpp"
#include "opbench/kernel_set.hpp"

namespace opbench {

// Whether conv2d_weights runs p: stride 1 in both directions, and not a depthwise convolution.
bool conv2d_weights_apply(const ConvProblem& p);

// The bytes conv2d_weights allocates for p on `threads` threads (overflow-checked; 0 where it does not apply).
int64_t conv2d_weights_workspace_bytes(const KernelSet& ks, const ConvProblem& p, int threads);

// dw (k x c/groups x r x s, fp32) of p from x and dy (fp32, p's layouts), written whole. Returns false and
// leaves dw alone where x holds a NaN or an Inf: the padded copy's gap columns would multiply it by a zero
// of dY that no tap meets, so the caller takes the im2col path, which never reads it.
bool conv2d_weights(const KernelSet& ks, const ConvProblem& p, const float* x, const float* dy, float* dw, int threads);

}  // namespace opbench

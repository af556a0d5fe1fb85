// The depthwise convolution's padded, stride-phased planes (csrc/conv/depthwise.cpp), shared by its backward
// (depthwise_backward.cpp).
#pragma once

#include <cstdint>

#include "opbench/conv.hpp"

namespace opbench {

// The padded input split by stride phase in both directions: phase (fh, fw) holds padded rows fh, fh + sh,
// ... and of those the columns fw, fw + sw, ...; each phase is ph rows of pw floats, the phases one after
// the other, then `slack` floats the flattened rows may read past the last one (results that are dropped).
struct Phases {
  int64_t hp, wp, sh, sw, ph, pw, slack;
  int64_t floats() const { return sh * sw * ph * pw + slack; }
  float* at(float* base, int64_t fh, int64_t fw) const { return base + (fh * sw + fw) * ph * pw; }
};

Phases phases_of(const ConvProblem& p);

// The common 3x3 filter at stride 1 without dilation (MobileNet's, EfficientNet's), which the kernel set's
// depthwise_3x3 computes four output rows at a time from six input rows: the forward's rows, and the
// backward's dX with the filter flipped.
inline bool dense_3x3(const ConvProblem& p) {
  return p.r == 3 && p.s == 3 && p.stride_h == 1 && p.stride_w == 1 && p.dil_h == 1 && p.dil_w == 1;
}

// The phases of input plane `src` (h x w_in, of p's dtype), zero-padded, into dst (g.floats()); `row` holds
// sw * pw floats and phase_rows sw pointers (scratch).
void build_phases(const KernelSet& ks, const ConvProblem& p, const Phases& g, const void* src, float* row, float* dst,
                  float** phase_rows);

// Planes [first, first + count) of p's input x (p's dtype) as their phases, plane i - first at
// dst + (i - first) * stride (stride >= g.floats()), on up to `threads` threads; thread tid's row scratch is
// the sw * pw floats at scratch + tid * sw * pw. With `check` (fp32 x), returns whether any of those planes
// holds a NaN or an Inf (false without it).
bool build_phase_planes(const KernelSet& ks, const ConvProblem& p, const Phases& g, const void* x, int64_t first,
                        int64_t count, int64_t stride, float* dst, float* scratch, int threads, bool check);

// Where tap t = (r, s) of output (0, 0) is within the phases: the input of output (oh, ow) is at
// off[t] + oh pw + ow.
void phase_tap_offsets(const ConvProblem& p, const Phases& g, int64_t* off);

// The backward of a depthwise convolution (conv2d_is_depthwise(p)) on fp32 arrays (conv2d_backward's views),
// csrc/conv/depthwise_backward.cpp; and an upper bound of the floats of workspace it takes.
void conv2d_depthwise_backward(const KernelSet& ks, const ConvProblem& p, const float* x, const float* w,
                               const float* dy, float* dx, float* dw, int threads);
int64_t depthwise_backward_workspace_floats(const ConvProblem& p, int threads);

}  // namespace opbench

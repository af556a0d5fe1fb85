// Conv2d forward (NCHW input, KCRS weights) as an implicit GEMM on the ISA's micro-kernels, so tile sizes apply
// to conv too (see csrc/conv/conv2d.cpp for the loops).
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
  // pad_h / pad_w pad the top and the left; the bottom and the right are padded by pad_h_end / pad_w_end
  // (benchdnn's padding_r, implied by an output size), or alike when those are -1.
  int64_t pad_h_end = -1, pad_w_end = -1;

  int64_t pad_bottom() const { return pad_h_end < 0 ? pad_h : pad_h_end; }
  int64_t pad_right() const { return pad_w_end < 0 ? pad_w : pad_w_end; }
  int64_t padded_h() const { return h + pad_h + pad_bottom(); }
  int64_t padded_w() const { return w_in + pad_w + pad_right(); }
  int64_t out_h() const { return (padded_h() - dil_h * (r - 1) - 1) / stride_h + 1; }
  int64_t out_w() const { return (padded_w() - dil_w * (s - 1) - 1) / stride_w + 1; }
};

// Per image and group: Y[k_g, P*Q] = W[k_g, C_g*R*S] * col[C_g*R*S, P*Q], as an implicit GEMM (the col
// matrix is gathered micro-panel by micro-panel from a zero-padded copy of x, never written out whole).
// `blk` is what resolve_conv_blocking returned for this problem, kernel set and thread count (resolved once by
// the caller, not at every call).
void conv2d(const KernelSet& ks, const ConvProblem& p, const Blocking& blk, int threads);

// Checks the problem before anything is derived from it (std::invalid_argument naming the argument): stride,
// padding and dilation within limits.hpp's bounds, groups dividing the channels, a non-empty output, and the
// output and padded-input sizes within 64 bits. After it, out_h() and out_w() cannot overflow.
void validate_conv2d(const ConvProblem& p);

// The bytes conv2d allocates as workspace for this problem, blocking and thread count (overflow-checked).
int64_t conv2d_workspace_bytes(const KernelSet& ks, const ConvProblem& p, const Blocking& blk, int threads);

// The blocking conv2d uses: tile_k = kc (depth of a rank-kc update, from the cache model), tile_m = mc (output
// channels per work unit, rounded up to MR), tile_n = nc (output pixels per work unit, rounded up to NR;
// by default the widest that keeps a unit's C block and W block within half of L2 and the threads evenly
// loaded). Given fields are kept (clamped to the problem); rows are split further only when a default
// tile_m leaves threads idle. With output pixels as rows (conv_pixels_as_rows) tile_m counts pixels of all
// images and tile_n output channels.
// The implicit GEMM of one image and group: m output channels, n GEMM columns (output pixels, over the padded
// width on the stride-1 path), k = input channels x filter taps; with output pixels as rows, m = the pixels
// of all images and n = the group's output channels. What tile_m, tile_n and tile_k block.
struct ConvGemmDims {
  int64_t m, n, k;
};
ConvGemmDims conv_gemm_dims(const KernelSet& ks, const ConvProblem& p);

// The register tile conv2d runs for this problem: its GEMM columns are the output pixels (over the padded
// width on the stride-1 path), or the output channels with pixels as rows, and few of them pick the kernel
// set's narrow tile.
const KernelSet& conv_tile_kernels(const KernelSet& ks, const ConvProblem& p);

Blocking resolve_conv_blocking(const KernelSet& ks, const ConvProblem& p, Blocking requested, int threads);

// Output pixels as the GEMM's rows (csrc/conv/conv2d_pixels.cpp): Y^T = im2col^T W^T over all images at
// once, taken when it wastes at least a tenth fewer FMAs than pixels as columns (small planes: 7x7, 14x14).
// ks is the kernel set's main tile; the blocking's mc then counts pixels and nc output channels.
bool conv_pixels_as_rows(const KernelSet& ks, const ConvProblem& p);
Blocking resolve_conv_pixels_blocking(const KernelSet& ks, const ConvProblem& p, Blocking requested, int threads);
int64_t conv_pixels_workspace_floats(const KernelSet& ks, const ConvProblem& p, const Blocking& blk, int threads);
void conv2d_pixels(const KernelSet& ks, const ConvProblem& p, const Blocking& blk, int threads);

// Depthwise convolutions (one input channel per group, at most kDepthwiseMaxMultiplier output channels per
// group) run as a direct vectorised loop (csrc/conv/depthwise.cpp) instead of the implicit GEMM; the tiles do
// not apply to them. conv2d() takes that path by itself.
constexpr int64_t kDepthwiseMaxMultiplier = 4;
bool conv2d_is_depthwise(const ConvProblem& p);
void conv2d_depthwise(const KernelSet& ks, const ConvProblem& p, int threads);
// fp32 3x3 at stride 1 or 2 on a kernel set with depthwise_plane: the planes are read in place, no scratch.
bool depthwise_reads_planes_in_place(const KernelSet& ks, const ConvProblem& p);
// fp16 and bf16 planes the plane kernel serves: widened whole to fp32 per plane, the output rounded once.
bool depthwise_widens_planes(const KernelSet& ks, const ConvProblem& p);

// bf16 (csrc/conv/conv2d_bf16.cpp): im2col written out in bf16 per image and group, then the bf16 GEMM
// (blk: the GEMM's blocking for the bf16 kernels, not resolve_conv_blocking's). conv2d() takes it by itself.
int64_t conv2d_bf16_workspace_bytes(const KernelSet& ks, const ConvProblem& p, const Blocking& blk, int threads);
void conv2d_bf16(const KernelSet& ks, const ConvProblem& p, const Blocking& blk, int threads);
// A 1x1 convolution at stride 1 without padding on a large plane: x itself is the GEMM's B (nothing copied).
bool conv2d_bf16_reads_x_as_col(const ConvProblem& p);
// Which of its ways conv2d_bf16 takes for this problem, for provenance, and the GEMM the tiles block (the
// largest: a chunk of patch rows).
const char* conv2d_bf16_path(const ConvProblem& p);
ConvGemmDims conv2d_bf16_gemm_dims(const ConvProblem& p);
int64_t depthwise_workspace_floats(const KernelSet& ks, const ConvProblem& p, int threads);

}  // namespace opbench

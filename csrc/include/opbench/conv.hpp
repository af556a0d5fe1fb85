// Conv2d forward (NCHW input, KCRS weights) as an implicit GEMM on the ISA's micro-kernels, so tile sizes apply
// to conv too (see csrc/conv/conv2d.cpp for the loops).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

// Checks the problem before anything is derived from it (std::invalid_argument naming the argument): stride,
// padding and dilation within limits.hpp's bounds, groups dividing the channels, a non-empty output, and the
// output and padded-input sizes within 64 bits. After it, out_h() and out_w() cannot overflow.
void validate_conv2d(const ConvProblem& p);

// The ways conv2d runs a problem, one of which plan_conv2d picks.
enum class ConvPath {
  depthwise_in_place,    // direct depthwise loop, fp32 3x3 planes read in place (depthwise.cpp)
  depthwise_widened,     // direct depthwise loop, 16-bit planes widened whole to fp32
  depthwise_padded,      // direct depthwise loop on padded plane copies
  pixels_as_rows,        // implicit GEMM, output pixels of all images as rows (conv2d_pixels.cpp)
  columns_in_place,      // implicit GEMM per image and group, stride 1: B rows read in place (conv2d.cpp)
  columns_gathered,      // implicit GEMM per image and group: B micro-panels gathered
  im2col_gemm,           // one GEMM per group on an explicit im2col matrix of all images (conv2d_im2col.cpp)
  pointwise_gemm,        // 1x1 at stride 1 without padding: W_g * x on the batched GEMM, x read in place as B
  bf16_x_as_col,         // bf16 GEMM W * x per image and group, a 1x1 x read in place (conv2d_bf16.cpp)
  bf16_patches_w_order,  // bf16 GEMM patches * W^T, patch rows in W's order (c, r, s) from x
  bf16_patches_nhwc,     // bf16 GEMM patches * W^T, patch rows (r, s, c) from x in NHWC
};

constexpr bool is_depthwise(ConvPath path) { return path <= ConvPath::depthwise_padded; }

// A way the caller forces instead of the planner's model (kernels.conv2d's tiles.conv_path, the tuner's
// conv_paths space): `model` lets plan_conv2d choose. fp32 and fp16 only; each is refused (invalid_argument,
// naming why) where it cannot run the problem: columns_in_place needs stride 1, pointwise_gemm a 1x1 filter at
// stride 1 without padding.
enum class ConvPathChoice {
  model,
  columns_in_place,
  columns_gathered,
  rows_in_place,
  rows_gathered,
  pointwise_gemm,
  im2col_gemm
};
// The choice a name ("model", "columns_in_place", ...) names; invalid_argument listing the names otherwise.
ConvPathChoice conv_path_choice(const std::string& name);
// The names, in the enum's order ("model" first).
const std::vector<std::string>& conv_path_names();

// The GEMM the tiles block: per image and group, m output channels, n GEMM columns (output pixels, over the
// padded width on the stride-1 path), k = input channels x filter taps; with output pixels as rows, m = the
// pixels of all images and n = the group's output channels; bf16, the GEMM its way runs.
struct ConvGemmDims {
  int64_t m, n, k;
};

// Everything conv2d needs to know about a problem, decided once by plan_conv2d: the way, the register tile
// that runs (its kernel set, or the bf16 kernels'), the blocking, the GEMM it blocks and the workspace.
struct ConvPlan {
  ConvPath path = ConvPath::columns_gathered;
  const KernelSet* tile = nullptr;  // the kernel set whose register tile the implicit GEMM runs
  const char* kernel = "";          // that register tile's description (bf16: the bf16 kernels')
  int mr = 0, nr = 0;
  Blocking blocking;
  ConvGemmDims gemm{0, 0, 0};
  int64_t workspace_bytes = 0;
  int threads = 1;
  bool a_in_place = false;  // pixels_as_rows: A's micro-panels read in the padded input, not gathered

  // The register tile that runs: tile, kernel, mr and nr from the kernel set `tile`, which is returned.
  const KernelSet& run_on(const KernelSet& tile) {
    this->tile = &tile;
    kernel = tile.description;
    mr = tile.mr;
    nr = tile.nr;
    return tile;
  }

  bool depthwise() const { return is_depthwise(path); }
  bool bf16_gemm() const { return path >= ConvPath::bf16_x_as_col; }
  // Which way runs, for provenance (plan.tiles()["path"] and the records' details.path).
  const char* describe(Dtype dtype) const;
  // The ConvPathChoice name of the way that runs ("rows_in_place", ...; "" for depthwise and bf16 ways, which
  // no choice names): plan.tiles()["conv_path"].
  const char* choice_name() const;
};

// The plan for a validated problem on kernel set ks: `requested` blocking fields (0: from the model) are
// kept, clamped to the problem. tile_k = kc (depth of a rank-kc update), tile_m = mc (output channels per
// work unit, rounded up to MR), tile_n = nc (output pixels per work unit, rounded up to NR; by default the
// widest that keeps a unit's C block and W block within half of L2 and the threads evenly loaded); rows are
// split further only when a default tile_m leaves threads idle. With output pixels as rows tile_m counts
// pixels of all images and tile_n output channels; bf16 blocks the bf16 GEMM (its k pairs). `choice` forces
// a way (ConvPathChoice), the blocking then the model's for that way.
ConvPlan plan_conv2d(const KernelSet& ks, const ConvProblem& p, Blocking requested, int threads,
                     ConvPathChoice choice = ConvPathChoice::model);

// Runs the plan: per image and group, Y[k_g, P*Q] = W[k_g, C_g*R*S] * col[C_g*R*S, P*Q] as an implicit GEMM
// (the col matrix gathered micro-panel by micro-panel from a zero-padded copy of x, never written out
// whole), or the plan's other way.
void conv2d(const KernelSet& ks, const ConvProblem& p, const ConvPlan& plan);

// The planner's parts, each in the file of its way.
// Output pixels as the GEMM's rows (csrc/conv/conv2d_pixels.cpp): Y^T = im2col^T W^T over all images at
// once, taken when it wastes at least a tenth fewer FMAs than pixels as columns (small planes: 7x7, 14x14).
// ks is the kernel set's main tile; the blocking's mc then counts pixels and nc output channels.
bool conv_pixels_as_rows(const KernelSet& ks, const ConvProblem& p);
// Whether that orientation reads A's micro-panels (ks.mr pixels) in place instead of gathering them.
bool conv_pixels_a_in_place(const KernelSet& ks, const ConvProblem& p);
// Whether that orientation, reading A in place or not, reads the input's stride phases (strided, A in place),
// and the floats those take.
bool conv_pixels_phased(const ConvProblem& p, bool a_in_place);
int64_t conv_pixels_phased_floats(const ConvProblem& p, int threads);
Blocking resolve_conv_pixels_blocking(const KernelSet& ks, const ConvProblem& p, Blocking requested, int threads);
int64_t conv_pixels_workspace_floats(const KernelSet& ks, const ConvProblem& p, const Blocking& blk, int threads);
void conv2d_pixels(const KernelSet& ks, const ConvProblem& p, const Blocking& blk, bool a_in_place, int threads);

// An explicit im2col matrix (csrc/conv/conv2d_im2col.cpp): per group, all images' patch columns side by side
// in fp32, one GEMM by W_g on the GEMM driver, C copied out to Y. conv_im2col_gemm: the model's choice (on
// 8-lane tiles, fp32 stride-1 convs of 64 or more channels per group whose columns path wastes a fifth more
// columns, the matrix within a quarter of the last-level cache); the GEMM it runs and the workspace, the
// GEMM's own included.
bool conv_im2col_gemm(const KernelSet& ks, const ConvProblem& p);
ConvGemmDims conv_im2col_gemm_dims(const ConvProblem& p);
int64_t conv_im2col_workspace_bytes(const KernelSet& ks, const ConvProblem& p, const Blocking& blk, int threads);
void conv2d_im2col(const KernelSet& ks, const ConvProblem& p, const Blocking& blk, int threads);

// Depthwise convolutions (one input channel per group, at most kDepthwiseMaxMultiplier output channels per
// group) run as a direct vectorised loop (csrc/conv/depthwise.cpp) instead of the implicit GEMM; the tiles do
// not apply to them. depthwise_way: in place (fp32 3x3 at stride 1 or 2 on a kernel set with
// depthwise_plane), widened (fp16 and bf16 planes that kernel serves) or padded copies.
constexpr int64_t kDepthwiseMaxMultiplier = 4;
bool conv2d_is_depthwise(const ConvProblem& p);
ConvPath depthwise_way(const KernelSet& ks, const ConvProblem& p);
int64_t depthwise_workspace_floats(const KernelSet& ks, const ConvProblem& p, ConvPath path, int threads);
void conv2d_depthwise(const KernelSet& ks, const ConvProblem& p, ConvPath path, int threads);

// bf16 (csrc/conv/conv2d_bf16.cpp): im2col written out in bf16 per image and group, then the bf16 GEMM
// (blk: the GEMM's blocking for the bf16 kernels); a 1x1 at stride 1 without padding on a large plane
// multiplies x in place. conv2d_bf16_way says which, conv2d_bf16_gemm_dims the GEMM the tiles block (the
// largest: a chunk of patch rows).
ConvPath conv2d_bf16_way(const ConvProblem& p);
ConvGemmDims conv2d_bf16_gemm_dims(const ConvProblem& p, ConvPath path);
int64_t conv2d_bf16_workspace_bytes(const KernelSet& ks, const ConvProblem& p, const Blocking& blk, ConvPath path,
                                    int threads);
void conv2d_bf16(const KernelSet& ks, const ConvProblem& p, const Blocking& blk, ConvPath path, int threads);

}  // namespace opbench

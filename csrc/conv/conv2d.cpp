// Conv2d forward as an implicit GEMM: per image and group Y[k_g, P*Q] = W[k_g, C_g*R*S] * B[C_g*R*S, P*Q],
// where B, the im2col matrix, is never written out. B's row (c, r, s) is the input plane of channel c
// shifted by filter tap (r, s), and its columns are output pixels. W is packed once per call.
//
// B's source is a zero-padded fp32 copy of the input (Hp = H + pad_h + the bottom's rows of Wp = W + pad_w + the right's):
// * stride 1: the micro-kernel reads B's rows in place (KernelSet::ukernel_rows). Output pixels are
//   numbered over the padded width (column j = oh * Wp + ow, ow < Wp), so that tap (r, s) of pixel j is
//   at j + r*dil_h*Wp + s*dil_w: every row of every micro-panel is NR consecutive floats. Columns with
//   ow >= Q are computed and dropped (Wp / Q extra work: 3.6% for 3x3 at 56x56) instead of packing.
// * otherwise (strided): each NR-column micro-panel is gathered from the padded copy
//   (KernelSet::pack_b_gather) right before it is multiplied, so it goes from the image into L1.
//
// Loops (one thread's share of the work units, each an image x group x row block x column block):
//   for pc in K blocks (kc)                 the unit's C block (mb x nb, fp32) stays in L2 across K blocks
//     for q in NR-column micro-panels       B micro-panel: rows in place, or gathered into L1
//       for r in MR-row micro-panels        A micro-panel from the W block packed once (L2)
//         ukernel(kc, A[r], B[q], C[r, q], accumulate = pc > 0)
//   then the valid columns of the C block go to Y (rounded to fp16 for fp16 output). Gathered fp32, whose
//   columns are Y's own pixels, accumulates its tiles in Y instead, with no C block and no copy.
#include <algorithm>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "opbench/aligned.hpp"
#include "opbench/limits.hpp"
#include "opbench/conv.hpp"
#include "opbench/microarch.hpp"
#include "opbench/gemm.hpp"
#include "opbench/isa.hpp"
#include "opbench/thread_pool.hpp"
#include "padded.hpp"

namespace opbench {

namespace {

// Output pixels as GEMM columns: P rows of `row_w` columns each, of which the first Q are real pixels
// (row_w = Wp on the in-place path, Q when gathering).
struct Columns {
  int64_t rows, row_w, q;
  bool in_place;
  int64_t count() const { return rows * row_w; }
};

// B's rows are read in place (over the padded width) at stride 1, unless `gathered` says to gather them.
Columns columns_of(const ConvProblem& p, bool gathered) {
  const bool in_place = p.stride_h == 1 && p.stride_w == 1 && !gathered;
  return {p.out_h(), in_place ? p.padded_w() : p.out_w(), p.out_w(), in_place};
}

// The model's columns on a tile nr wide: gathered where columns_gather_at_stride1 says so at stride 1, always
// strided.
Columns model_columns(const ConvProblem& p, int64_t nr) { return columns_of(p, columns_gather_at_stride1(p, nr)); }

// The runs (GatherRun) of one gathered micro-panel: columns [j0, j0 + NR), one run per stretch of an output
// row, a zero run past the last pixel. Output pixel (oh, ow) reads the padded input at
// (oh*stride_h) * Wp + ow*stride_w for filter tap (0, 0).
int panel_runs(const ConvProblem& p, const Columns& cols, int64_t wp, int64_t j0, int64_t nr, GatherRun* runs) {
  int count = 0;
  int64_t j = j0;
  const int64_t end = std::min(j0 + nr, cols.count());
  while (j < end) {
    const int64_t oh = j / cols.row_w, ow = j % cols.row_w;
    const int64_t len = std::min(cols.row_w - ow, end - j);
    runs[count++] = {static_cast<int32_t>(j - j0), static_cast<int32_t>(len), static_cast<int32_t>(p.stride_w),
                     oh * p.stride_h * wp + ow * p.stride_w};
    j += len;
  }
  if (end - j0 < nr) runs[count++] = {static_cast<int32_t>(end - j0), static_cast<int32_t>(j0 + nr - end), 0, 0};
  return count;
}

// Busiest thread's cost for column blocks of nc: its share of the units times their padded width, plus a
// fixed cost per unit (its runs, the first touch and the copy-out of its C block) of about two micro-panels.
int64_t split_cost(int64_t units_per_col_block, int64_t ncols, int64_t nc, int64_t nr, int threads) {
  const int64_t units = units_per_col_block * ceil_div(ncols, nc);
  return ceil_div(units, threads) * (round_up(std::min(nc, ncols), nr) + 2 * nr);
}

// Copies the real pixels among columns [j0, j0 + nb) of a C block (mb rows, leading dimension ldc, fp32)
// to Y (rows PQ apart), rounding to fp16 when Y is fp16.
void copy_out(const KernelSet& ks, const ConvProblem& p, const Columns& cols, const float* c, int64_t ldc, int64_t mb,
              int64_t j0, int64_t nb, void* y_rows) {
  const int64_t PQ = p.out_h() * p.out_w();
  for (int64_t j = j0; j < j0 + nb;) {
    const int64_t oh = j / cols.row_w, ow = j % cols.row_w;
    const int64_t row_end = (oh + 1) * cols.row_w;
    const int64_t len = std::min(cols.q, j0 + nb + ow - j) - ow;  // real pixels of this output row in range
    if (len > 0) {
      const float* src = c + (j - j0);
      const int64_t at = oh * cols.q + ow;
      if (p.dtype != Dtype::f32) {
        store_of(ks, p.dtype)(src, ldc, mb, len, static_cast<uint16_t*>(y_rows) + at, PQ);
      } else {
        for (int64_t i = 0; i < mb; ++i) {
          std::memcpy(static_cast<float*>(y_rows) + i * PQ + at, src + i * ldc, sizeof(float) * len);
        }
      }
    }
    j = row_end;
  }
}

}  // namespace

namespace {

// The blocking of the implicit GEMM with output pixels as columns, on the register tile ks that runs.
Blocking resolve_columns_blocking(const KernelSet& ks, const ConvProblem& p, const Columns& cols, Blocking requested,
                                  int threads) {
  const int64_t ncols = cols.count(), kg = p.k / p.groups, crs = (p.c / p.groups) * p.r * p.s;

  const int64_t MR = ks.mr, NR = ks.nr;
  const Blocking model = analytical_blocking(cpu_info(), ks.mr, ks.nr, sizeof(float), ks.b_panel_home);
  Blocking b;
  b.kc = std::min(requested.kc > 0 ? requested.kc : model.implicit_kc, crs);
  b.mc = round_up(std::min(requested.mc > 0 ? requested.mc : model.implicit_mc, kg), MR);
  if (requested.nc > 0) {
    b.nc = round_up(std::min(requested.nc, ncols), NR);
  } else {
    // A unit's C block (mc x nc) and its A block (mc x kc) share half of L2; then the widest column blocks
    // that keep every thread equally busy.
    const int64_t l2 = std::max<int64_t>(cpu_info().l2.size_bytes, 256 * 1024);
    const int64_t cap = std::max(NR, (l2 / 2 / int64_t(sizeof(float)) / b.mc - b.kc) / NR * NR);
    const int64_t per_col_block = p.n * p.groups * ceil_div(kg, b.mc);
    b.nc = std::min(cap, round_up(ncols, NR));
    int64_t best = split_cost(per_col_block, ncols, b.nc, NR, threads);
    for (int64_t nc = b.nc - NR; nc >= NR; nc -= NR) {
      const int64_t cost = split_cost(per_col_block, ncols, nc, NR, threads);
      if (cost < best) {
        best = cost;
        b.nc = nc;
      }
    }
  }
  // Too few units for the threads (one image, few pixels): split the rows as well.
  const int64_t units = p.n * p.groups * ceil_div(ncols, b.nc);
  if (requested.mc <= 0 && units < threads) {
    b.mc = std::max(MR, round_up(ceil_div(kg, ceil_div(threads, units)), MR));
  }
  return b;
}

// A 1x1 convolution at stride 1 without padding is a GEMM per image and group, Y[K_g, HW] = W_g * x[C_g, HW],
// with x's channel planes as B's rows: on a plane of at least kPointwisePixels it runs on the GEMM driver,
// images batched (W shared), whose few-rows path reads B in place with its columns aligned and its rows
// prefetched, where the implicit GEMM's in-place path read them unaligned and unprefetched (ResNet-50's 1x1
// layers at 56x56 and 28x28, 8 images, 1 thread on a 2-vCPU Intel Xeon EMR: 34-74 GFLOPS on the implicit
// GEMM, 0.29-0.65x torch, against 112-150 on the GEMM, docs/benchmarks.md). Smaller planes (14x14, 7x7
// with 1024-2048 channels) ran as fast or faster on the implicit GEMM, which deals images and row blocks
// to the threads together.
constexpr int64_t kPointwisePixels = 256;

bool pointwise_as_gemm(const ConvProblem& p) {
  return p.r == 1 && p.s == 1 && p.stride_h == 1 && p.stride_w == 1 && p.padded_h() == p.h &&
         p.padded_w() == p.w_in && p.h * p.w_in >= kPointwisePixels && !conv2d_is_depthwise(p);
}

// Image 0, group g's product; the images follow BatchStrides{0, C HW, K HW}.
GemmProblem pointwise_product(const ConvProblem& p, int64_t g) {
  const int64_t HW = p.h * p.w_in, cg = p.c / p.groups, kg = p.k / p.groups, elem = p.dtype == Dtype::f32 ? 4 : 2;
  const char* w = static_cast<const char*>(p.w);
  const char* x = static_cast<const char*>(p.x);
  char* y = static_cast<char*>(p.y);
  return gemm_product(p.dtype, p.dtype, w == nullptr ? nullptr : w + g * kg * cg * elem, cg, false,
                      x == nullptr ? nullptr : x + g * cg * HW * elem, HW, false,
                      y == nullptr ? nullptr : y + g * kg * HW * elem, HW, kg, HW, cg, false);
}

}  // namespace

void validate_conv2d(const ConvProblem& p) {
  for (auto [v, name] : {std::pair{p.stride_h, "stride"}, {p.stride_w, "stride"}, {p.dil_h, "dilation"},
                         {p.dil_w, "dilation"}}) {
    check_range(v, 1, kMaxConvParam, name);
  }
  for (int64_t pad : {p.pad_h, p.pad_w, p.pad_bottom(), p.pad_right()}) check_range(pad, 0, kMaxConvParam, "padding");
  if (p.groups < 1 || p.c % p.groups != 0 || p.k % p.groups != 0) {
    throw std::invalid_argument("groups=" + std::to_string(p.groups) + " must divide input channels (" +
                                std::to_string(p.c) + ") and output channels (" + std::to_string(p.k) + ")");
  }
  const int64_t hp = checked::add(p.h, p.pad_h + p.pad_bottom(), "padded input height");
  const int64_t wp = checked::add(p.w_in, p.pad_w + p.pad_right(), "padded input width");
  const int64_t eh = checked::add(checked::mul(p.dil_h, p.r - 1, "dilated filter height"), 1, "dilated filter height");
  const int64_t ew = checked::add(checked::mul(p.dil_w, p.s - 1, "dilated filter width"), 1, "dilated filter width");
  if (hp < eh || wp < ew) {
    throw std::invalid_argument("output would be empty: input " + std::to_string(p.h) + "x" + std::to_string(p.w_in) +
                                " with filter " + std::to_string(p.r) + "x" + std::to_string(p.s) + ", dilation (" +
                                std::to_string(p.dil_h) + ", " + std::to_string(p.dil_w) + ") and padding (" +
                                std::to_string(p.pad_h) + "/" + std::to_string(p.pad_bottom()) + ", " + std::to_string(p.pad_w) + "/" +
                                std::to_string(p.pad_right()) + ")");
  }
  const int64_t oh = (hp - eh) / p.stride_h + 1, ow = (wp - ew) / p.stride_w + 1;
  checked::mul(checked::mul(checked::mul(p.n, p.k, "output size"), oh, "output size"), ow, "output size");
  checked::mul(checked::mul(p.n, p.c, "padded input size"), checked::mul(hp, wp, "padded input size"),
               "padded input size");
  checked::mul(checked::mul(p.c, p.r, "filter size"), p.s, "filter size");
}

namespace {

// The bytes an fp32 or fp16 plan allocates as workspace (overflow-checked). The implicit GEMM's buffers are
// sized whatever the path: the direct depthwise loop uses none of them, but their sizes are its overflow checks.
int64_t workspace_bytes(const KernelSet& ks_main, const KernelSet& ks, const ConvProblem& p, const Blocking& blk,
                        ConvPath path, bool a_in_place, int threads) {
  using checked::add;
  using checked::mul;
  const Columns cols = columns_of(p, path == ConvPath::columns_gathered);
  [[maybe_unused]] const int64_t ncols = mul(cols.rows, cols.row_w, "conv columns");  // overflow check
  const int64_t MR = ks.mr, NR = ks.nr, kg = p.k / p.groups, crs = (p.c / p.groups) * p.r * p.s;
  const int64_t Hp = p.padded_h(), Wp = p.padded_w();
  const int64_t padded = add(mul(mul(p.n, p.c, "padded input"), mul(Hp, Wp, "padded input"), "padded input"),
                             (p.s - 1) * p.dil_w + NR, "padded input");
  const int64_t packed_w = mul(mul(p.groups, round_up(kg, MR), "packed filter"), crs, "packed filter");
  const int64_t panels = ceil_div(blk.nc, NR);
  const int64_t per_thread = add(add(mul(blk.mc, blk.nc, "conv C block"), mul(blk.kc, NR, "conv B panel"), "scratch"),
                                 mul(panels, (NR + 1) * int64_t(sizeof(GatherRun)) / 4 + 1, "gather runs"), "scratch");
  const int64_t floats = add(add(padded, packed_w, "conv workspace"), mul(per_thread, threads, "conv scratch"),
                             "conv workspace");
  const int64_t bytes = add(mul(floats, int64_t(sizeof(float)), "conv workspace"), mul(crs, 8, "conv offsets"), "conv workspace");
  if (path == ConvPath::pixels_as_rows) {
    const int64_t input = conv_pixels_phased(p, a_in_place) ? conv_pixels_phased_floats(p, threads) : padded;
    return add(mul(add(input, conv_pixels_workspace_floats(ks, p, blk, threads), "conv workspace"),
                   int64_t(sizeof(float)), "conv workspace"),
               mul(crs, 8, "conv offsets"), "conv workspace");
  }
  if (!is_depthwise(path)) return bytes;
  return mul(depthwise_workspace_floats(ks_main, p, path, threads), int64_t(sizeof(float)), "depthwise scratch");
}

constexpr const char* kChoiceNames[] = {"model",         "columns_in_place", "columns_gathered", "rows_in_place",
                                        "rows_gathered", "pointwise_gemm",   "im2col_gemm"};

// Why a forced way cannot run p ("" where it can).
std::string refusal(const KernelSet& ks, const ConvProblem& p, ConvPathChoice choice) {
  const std::string name = kChoiceNames[static_cast<int>(choice)];
  const bool rows = choice == ConvPathChoice::rows_in_place || choice == ConvPathChoice::rows_gathered;
  if (p.dtype == Dtype::bf16 && !bf16_without_unit(ks)) {
    return "conv_path=" + name + " applies to fp32 and fp16 convs (bf16 has its own ways on this kernel set)";
  }
  if (p.dtype == Dtype::bf16 && rows) {
    return "conv_path=" + name +
           " applies to fp32 and fp16 convs (bf16 widened takes the columns, pointwise and im2col ways)";
  }
  const bool stride1 = p.stride_h == 1 && p.stride_w == 1;
  if (choice == ConvPathChoice::columns_in_place && !stride1) {
    return "conv_path=columns_in_place needs stride 1 (B's rows are read in place from the padded input); got "
           "stride (" + std::to_string(p.stride_h) + ", " + std::to_string(p.stride_w) + ")";
  }
  if (choice == ConvPathChoice::pointwise_gemm &&
      !(p.r == 1 && p.s == 1 && stride1 && p.padded_h() == p.h && p.padded_w() == p.w_in)) {
    return "conv_path=pointwise_gemm needs a 1x1 filter at stride 1 without padding";
  }
  return "";
}

// bf16 on a kernel set without a bf16 unit (gemm.hpp, bf16_without_unit): the fp32 ways instead of the bf16
// GEMM on patch rows, with x widened into the padded copy (or the im2col matrix), W widened as it is packed and
// Y rounded once from the fp32 sums, the error bound of the bf16 GEMM. The bf16 way writes the patch rows out
// in bf16, multiplies them with the portable pairs' packers and transposes Y^T back, where the columns ways
// read the image in place. Builds interleaved on the Zen 4 guest (AVX2 tile), new / old time, one core / two:
// 3x3s at 56x56 0.76 / 0.78-0.80, at 28x28 0.82-0.93 / 0.82-1.02, stride 2 from 56x56 0.92 / 0.84; on
// planes of 14x14 and less no gain (14x14 0.96-1.02 / 0.97-1.10, 7x7 0.99 / 1.00-1.02, stride 2 to 14x14
// 0.97 / 0.96), so the model widens from kWidenedMinPixels output pixels on. A 1x1 that the bf16 GEMM reads in
// place (bf16_x_as_col) keeps it: 1024 -> 256 at 14x14 ran 1.07 on the batched fp32 way. The pixels-as-rows
// way is not taught bf16 (its W^T packer and output transposition are fp32 and fp16 only): where the model
// takes it (the 7x7 stem), the bf16 GEMM stays. A forced way runs as forced (rows_* are refused: refusal),
// depthwise too, as in fp32.
constexpr int64_t kWidenedMinPixels = 28 * 28;

bool conv_bf16_widened(const KernelSet& ks, const ConvProblem& p, bool forced) {
  if (p.dtype != Dtype::bf16 || !bf16_without_unit(ks)) return false;
  if (forced) return true;
  return !conv2d_is_depthwise(p) && p.out_h() * p.out_w() >= kWidenedMinPixels &&
         conv2d_bf16_way(p) != ConvPath::bf16_x_as_col && !conv_pixels_as_rows(ks, p);
}

}  // namespace

ConvPathChoice conv_path_choice(const std::string& name) {
  for (int i = 0; i < static_cast<int>(std::size(kChoiceNames)); ++i) {
    if (name == kChoiceNames[i]) return static_cast<ConvPathChoice>(i);
  }
  std::string known;
  for (const char* n : kChoiceNames) known += std::string(known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown conv_path '" + name + "' (known: " + known + ")");
}

const std::vector<std::string>& conv_path_names() {
  static const std::vector<std::string> names(std::begin(kChoiceNames), std::end(kChoiceNames));
  return names;
}

ConvPlan plan_conv2d(const KernelSet& ks, const ConvProblem& p, Blocking requested, int threads, ConvPathChoice choice) {
  ConvPlan plan;
  plan.threads = threads;
  const bool forced = choice != ConvPathChoice::model;
  if (forced) {
    if (const std::string why = refusal(ks, p, choice); !why.empty()) throw std::invalid_argument(why);
  }
  const int64_t kg = p.k / p.groups, crs = (p.c / p.groups) * p.r * p.s;
  if (p.dtype == Dtype::bf16 && !conv_bf16_widened(ks, p, forced)) {
    // the bf16 GEMM on patch rows, or a direct depthwise loop: the GEMM's blocking either way
    plan.path = conv2d_is_depthwise(p) ? depthwise_way(ks, p) : conv2d_bf16_way(p);
    const Bf16Kernels& bk = bf16_kernels(ks, requested);  // (an AMX tile layout, where one is asked for)
    plan.tile = &ks;
    plan.gemm = conv2d_bf16_gemm_dims(p, plan.path);
    // the K block the GEMM runs (gemm.hpp, problem_blocking), and its register tile: the bf16 kernels', or
    // the fp32 one with bf16 widened (bf16_on_fp32), for the plan's tiles
    GemmProblem g;
    g.in_dtype = Dtype::bf16;
    g.m = plan.gemm.m;
    g.k = plan.gemm.k;
    const bool on_fp32 = bf16_on_fp32(ks, g);
    plan.kernel = on_fp32 ? ks.gemm.bf16_widened : bk.description;
    plan.mr = on_fp32 ? ks.mr : bk.mr;
    plan.nr = on_fp32 ? ks.nr : bk.nr;
    plan.blocking = problem_blocking(ks, g, resolve_blocking(ks, requested, Dtype::bf16));
    plan.workspace_bytes = conv2d_bf16_workspace_bytes(ks, p, plan.blocking, plan.path, threads);
    return plan;
  }
  // bf16 widened (conv_bf16_widened): the fp32 tile's description that says so
  const auto widened = [&](ConvPlan& done) -> ConvPlan& {
    if (p.dtype == Dtype::bf16) done.kernel = done.tile->gemm.bf16_widened;
    return done;
  };
  if (forced ? choice == ConvPathChoice::im2col_gemm : conv_im2col_gemm(ks, p)) {
    plan.path = ConvPath::im2col_gemm;
    plan.gemm = conv_im2col_gemm_dims(p);
    const KernelSet& tile = plan.run_on(tile_kernels(ks, plan.gemm.n));
    plan.blocking = resolve_blocking(tile, requested);
    plan.workspace_bytes = conv_im2col_workspace_bytes(ks, p, plan.blocking, threads);
    return widened(plan);
  }
  if (forced ? choice == ConvPathChoice::pointwise_gemm : pointwise_as_gemm(p)) {
    const int64_t HW = p.h * p.w_in;
    const KernelSet& tile = plan.run_on(tile_kernels(ks, HW));
    plan.path = ConvPath::pointwise_gemm;
    plan.gemm = {kg, HW, crs};
    const GemmProblem one = pointwise_product(p, 0);
    // the K block the GEMM runs (bf16 widened: the fp32 tile's, blocked.cpp's problem_blocking)
    plan.blocking = problem_blocking(ks, one, resolve_blocking(tile, requested, p.dtype));
    plan.workspace_bytes = gemm_batch_rows(one, p.n, threads, tile.mr) > 0
                               ? checked::mul(gemm_workspace_bytes(ks, one, plan.blocking, 1), threads, "conv workspace")
                               : gemm_workspace_bytes(ks, one, plan.blocking, threads);
    return widened(plan);
  }
  const bool pixels = forced ? choice == ConvPathChoice::rows_in_place || choice == ConvPathChoice::rows_gathered
                                  : conv_pixels_as_rows(ks, p);
  const Columns cols = forced ? columns_of(p, choice == ConvPathChoice::columns_gathered) : model_columns(p, ks.nr);
  plan.path = !forced && conv2d_is_depthwise(p) ? depthwise_way(ks, p)
              : pixels                               ? ConvPath::pixels_as_rows
              : cols.in_place                        ? ConvPath::columns_in_place
                                                     : ConvPath::columns_gathered;
  // the register tile: few GEMM columns (output pixels, or channels with pixels as rows) pick the narrow one
  const KernelSet& tile = plan.run_on(tile_kernels(ks, pixels ? kg : cols.count()));
  plan.a_in_place = pixels && (forced ? choice == ConvPathChoice::rows_in_place : conv_pixels_a_in_place(tile, p));
  plan.blocking = pixels ? resolve_conv_pixels_blocking(tile, p, requested, threads)
                         : resolve_columns_blocking(tile, p, cols, requested, threads);
  plan.gemm = pixels ? ConvGemmDims{p.n * p.out_h() * p.out_w(), kg, crs} : ConvGemmDims{kg, cols.count(), crs};
  plan.workspace_bytes = workspace_bytes(ks, tile, p, plan.blocking, plan.path, plan.a_in_place, threads);
  return widened(plan);
}

const char* ConvPlan::choice_name() const {
  switch (path) {
    case ConvPath::pixels_as_rows:
      return a_in_place ? kChoiceNames[int(ConvPathChoice::rows_in_place)] : kChoiceNames[int(ConvPathChoice::rows_gathered)];
    case ConvPath::columns_in_place:
      return kChoiceNames[int(ConvPathChoice::columns_in_place)];
    case ConvPath::columns_gathered:
      return kChoiceNames[int(ConvPathChoice::columns_gathered)];
    case ConvPath::pointwise_gemm:
      return kChoiceNames[int(ConvPathChoice::pointwise_gemm)];
    case ConvPath::im2col_gemm:
      return kChoiceNames[int(ConvPathChoice::im2col_gemm)];
    default:
      return "";
  }
}

const char* ConvPlan::describe(Dtype dtype) const {
  if (depthwise() && dtype == Dtype::bf16) {
    return "depthwise: a direct loop in fp32 (bf16 widened, each output rounded once)";
  }
  if (dtype == Dtype::bf16 && !bf16_gemm()) {  // conv_bf16_widened
    switch (path) {
      case ConvPath::columns_in_place:
        return "implicit GEMM, B rows read in place (bf16 widened into the padded copy and W's packing, Y rounded "
               "once)";
      case ConvPath::columns_gathered:
        return "implicit GEMM, B micro-panels gathered (bf16 widened into the padded copy and W's packing, Y "
               "rounded once)";
      case ConvPath::pointwise_gemm:
        return "1x1: W * x on the batched GEMM over images, x read in place as B (bf16 widened as it is packed)";
      case ConvPath::im2col_gemm:
        return "im2col of all images side by side (bf16 widened to fp32), one GEMM per group, C rounded out to Y";
      default:
        break;
    }
  }
  switch (path) {
    case ConvPath::depthwise_in_place:
      return "direct depthwise, planes read in place (tiles do not apply)";
    case ConvPath::depthwise_widened:
      return "direct depthwise, fp16 planes widened whole to fp32 (tiles do not apply)";
    case ConvPath::depthwise_padded:
      return "direct depthwise, padded plane copies (tiles do not apply)";
    case ConvPath::pixels_as_rows:
      return a_in_place ? "implicit GEMM, output pixels as rows (A read in place, W^T packed, padding taps skipped)"
                        : "implicit GEMM, output pixels as rows (A gathered, W^T packed, padding taps skipped)";
    case ConvPath::columns_in_place:
      return "implicit GEMM, B rows read in place";
    case ConvPath::columns_gathered:
      return "implicit GEMM, B micro-panels gathered";
    case ConvPath::pointwise_gemm:
      return "1x1: W * x on the batched GEMM over images, x read in place as B";
    case ConvPath::im2col_gemm:
      return "im2col of all images side by side (fp32), one GEMM per group, C copied out to Y";
    case ConvPath::bf16_x_as_col:
      return "bf16 GEMM W * x per image and group (1x1: x read in place as B)";
    case ConvPath::bf16_patches_w_order:
      return "bf16 GEMM patches * W^T, patch rows in W's order (c, r, s) from x, Y^T transposed";
    case ConvPath::bf16_patches_nhwc:
      return "bf16 GEMM patches * W^T, patch rows (r, s, c) from x in NHWC, W reordered, Y^T transposed";
  }
  return "";
}

int64_t pixel_columns(const ConvProblem& p, int64_t nr) { return model_columns(p, nr).count(); }

double columns_gather_share(const ConvProblem& p) {
  return microarch().strided_gather_cost / std::min(double(p.k / p.groups), kColumnsGatherReuse);
}

bool columns_gather_at_stride1(const ConvProblem& p, int64_t nr) {
  if (p.stride_h != 1 || p.stride_w != 1) return false;
  const Columns in_place = columns_of(p, false), gathered = columns_of(p, true);
  const double waste = 1.0 - double(round_up(gathered.count(), nr)) / double(round_up(in_place.count(), nr));
  return waste > kColumnsGatherMargin * columns_gather_share(p);
}

float* padded_input(const KernelSet& ks, const ConvProblem& p, int64_t slack, int threads, AlignedBuffer& buffer) {
  const WidenF16 widen = widen_of(ks, p.dtype);  // nullptr: fp32, copied
  const int64_t Wp = p.padded_w(), plane = p.padded_h() * Wp, planes = p.n * p.c;
  auto* xp = static_cast<float*>(buffer.reserve(static_cast<size_t>(planes * plane + slack) * sizeof(float)));
  const int t = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, planes)));
  ThreadPool::instance().run(t, [&](int tid) {
    for (int64_t pl = planes * tid / t; pl < planes * (tid + 1) / t; ++pl) {
      float* dst = xp + pl * plane;
      std::memset(dst, 0, sizeof(float) * p.pad_h * Wp);
      std::memset(dst + (p.pad_h + p.h) * Wp, 0, sizeof(float) * p.pad_bottom() * Wp);
      for (int64_t ih = 0; ih < p.h; ++ih) {
        float* row = dst + (p.pad_h + ih) * Wp;
        std::memset(row, 0, sizeof(float) * p.pad_w);
        std::memset(row + p.pad_w + p.w_in, 0, sizeof(float) * p.pad_right());
        const int64_t at = (pl * p.h + ih) * p.w_in;
        if (widen != nullptr) {
          widen(static_cast<const uint16_t*>(p.x) + at, row + p.pad_w, p.w_in);
        } else {
          std::memcpy(row + p.pad_w, static_cast<const float*>(p.x) + at, sizeof(float) * p.w_in);
        }
      }
    }
  });
  std::memset(xp + planes * plane, 0, sizeof(float) * slack);
  return xp;
}

void tap_offsets(const ConvProblem& p, int64_t* row_off, TapOrder order, int64_t plane, const int64_t* tap_off) {
  const int64_t cg = p.c / p.groups, taps = p.r * p.s;
  const bool column_major = order == TapOrder::filter_column_major;
  for (int64_t row = 0; row < cg * taps; ++row) {
    const int64_t ch = column_major ? row % cg : row / taps;
    const int64_t fr = column_major ? row / cg % p.r : row % taps / p.s;
    const int64_t fs = column_major ? row / cg / p.r : row % taps % p.s;
    row_off[row] = ch * plane + tap_off[fr * p.s + fs];
  }
}

void tap_offsets(const ConvProblem& p, int64_t* row_off, TapOrder order) {
  const int64_t Wp = p.padded_w();
  std::vector<int64_t> tap_off(static_cast<size_t>(p.r * p.s));
  for (int64_t fr = 0; fr < p.r; ++fr) {
    for (int64_t fs = 0; fs < p.s; ++fs) tap_off[static_cast<size_t>(fr * p.s + fs)] = fr * p.dil_h * Wp + fs * p.dil_w;
  }
  tap_offsets(p, row_off, order, p.padded_h() * Wp, tap_off.data());
}

void conv2d(const KernelSet& ks_main, const ConvProblem& p, const ConvPlan& plan) {
  const int threads = plan.threads;
  const Blocking& blk = plan.blocking;
  if (plan.depthwise()) {  // every dtype: a direct loop in fp32
    conv2d_depthwise(ks_main, p, plan.path, threads);
    return;
  }
  if (plan.bf16_gemm()) {
    conv2d_bf16(ks_main, p, blk, plan.path, threads);
    return;
  }
  if (plan.path == ConvPath::pixels_as_rows) {
    conv2d_pixels(*plan.tile, p, blk, plan.a_in_place, threads);
    return;
  }
  if (plan.path == ConvPath::im2col_gemm) {
    conv2d_im2col(ks_main, p, blk, threads);
    return;
  }
  if (plan.path == ConvPath::pointwise_gemm) {
    const int64_t HW = p.h * p.w_in;
    const BatchStrides strides{0, p.c * HW, p.k * HW};
    for (int64_t g = 0; g < p.groups; ++g) {
      const GemmProblem one = pointwise_product(p, g);
      gemm_batched(ks_main, one, blk, p.n, strides, threads, gemm_batch_rows(one, p.n, threads, plan.tile->mr));
    }
    return;
  }
  static thread_local AlignedBuffer padded_buffer, a_buffer;
  const Columns cols = columns_of(p, plan.path == ConvPath::columns_gathered);
  const int64_t ncols = cols.count(), PQ = p.out_h() * p.out_w();
  const int64_t cg = p.c / p.groups, kg = p.k / p.groups, crs = cg * p.r * p.s;
  const bool f16 = p.dtype == Dtype::f16, bf16 = p.dtype == Dtype::bf16;  // bf16: conv_bf16_widened
  const KernelSet& ks = *plan.tile;
  const int64_t MR = ks.mr, NR = ks.nr;
  const int64_t kc = blk.kc, mc = blk.mc, nc = blk.nc;

  // The padded fp32 copy of the input. In place, the last micro-panel of the last plane reads up to
  // (S-1)*dil_w + NR floats past it: that slack is zeroed too.
  const int64_t Hp = p.padded_h(), Wp = p.padded_w(), plane = Hp * Wp;
  const float* xp = padded_input(ks, p, (p.s - 1) * p.dil_w + NR, threads, padded_buffer);

  // B's rows within a group: (channel, filter row, filter column) -> that tap's offset in the planes.
  std::vector<int64_t> row_off(static_cast<size_t>(crs));
  tap_offsets(p, row_off.data());

  // W packed once: per group, its K blocks in order, each ceil(kg / MR) MR-row micro-panels of depth kb.
  const int64_t a_rows = round_up(kg, MR), a_group = a_rows * crs;
  auto* a_packed = static_cast<float*>(a_buffer.reserve(static_cast<size_t>(p.groups * a_group) * sizeof(float)));
  {
    const int64_t k_blocks = ceil_div(crs, kc), items = p.groups * k_blocks;
    const int t = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, items)));
    ThreadPool::instance().run(t, [&](int tid) {
      for (int64_t it = items * tid / t; it < items * (tid + 1) / t; ++it) {
        const int64_t g = it / k_blocks, pc = (it % k_blocks) * kc, kb = std::min(kc, crs - pc);
        float* dst = a_packed + g * a_group + a_rows * pc;
        if (f16 || bf16) {
          (bf16 ? ks.gemm.pack_a_bf16 : ks.gemm.pack_a_f16)(static_cast<const uint16_t*>(p.w) + g * kg * crs + pc, crs,
                                                             kg, kb, dst);
        } else {
          ks.gemm.pack_a_f32(static_cast<const float*>(p.w) + g * kg * crs + pc, crs, kg, kb, dst);
        }
      }
    });
  }

  const int64_t col_blocks = ceil_div(ncols, nc), row_blocks = ceil_div(kg, mc);
  const int64_t units = p.n * p.groups * row_blocks * col_blocks;
  const int t = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, units)));
  const int64_t panels = ceil_div(nc, NR);
  const int64_t elem = f16 || bf16 ? 2 : 4;
  // Gathered fp32: the GEMM's columns are Y's pixels (row_w = Q), so the tiles are accumulated in Y itself
  // and nothing is copied out. (In place, the columns run over the padded width; fp16 and bf16 are rounded
  // from an fp32 block.)
  const bool direct = !cols.in_place && p.dtype == Dtype::f32;
  // B's rows in place, with or without the next panel's rows fetched (microarch.hpp, rows_of_b_prefetch)
  const UkernelRowsF32 rows_kernel = microarch().rows_of_b_prefetch || ks.conv.ukernel_rows_quiet == nullptr
                                         ? ks.conv.ukernel_rows
                                         : ks.conv.ukernel_rows_quiet;
  ThreadPool::instance().run(t, [&](int tid) {
    // Per-thread scratch, reused across calls: the unit's fp32 C block and, when gathering, one B
    // micro-panel and the runs of the unit's micro-panels.
    static thread_local AlignedBuffer c_buffer, b_buffer, run_buffer;
    auto* c = direct ? nullptr : static_cast<float*>(c_buffer.reserve(static_cast<size_t>(mc * nc) * sizeof(float)));
    float* bp = nullptr;
    GatherRun* runs = nullptr;
    std::vector<int> run_count;
    if (!cols.in_place) {
      bp = static_cast<float*>(b_buffer.reserve(static_cast<size_t>(kc * NR) * sizeof(float)));
      runs = static_cast<GatherRun*>(run_buffer.reserve(static_cast<size_t>(panels * (NR + 1)) * sizeof(GatherRun)));
      run_count.resize(static_cast<size_t>(panels));
    }

    for (int64_t u = units * tid / t; u < units * (tid + 1) / t; ++u) {
      const int64_t cb = u % col_blocks, rb = (u / col_blocks) % row_blocks;
      const int64_t g = (u / (col_blocks * row_blocks)) % p.groups, img = u / (col_blocks * row_blocks * p.groups);
      const int64_t j0 = cb * nc, nb = std::min(nc, ncols - j0), m0 = rb * mc, mb = std::min(mc, kg - m0);
      const int64_t q_count = ceil_div(nb, NR);
      const float* base = xp + (img * p.c + g * cg) * plane;
      if (!cols.in_place) {
        for (int64_t q = 0; q < q_count; ++q) {
          run_count[static_cast<size_t>(q)] = panel_runs(p, cols, Wp, j0 + q * NR, NR, runs + q * (NR + 1));
        }
      }
      // Tiles are computed NR columns wide into the C block (nc columns): the copy-out keeps real pixels.
      // Directly in Y, a tile covers only the unit's columns.
      float* y_unit = direct ? static_cast<float*>(p.y) + (img * p.k + g * kg + m0) * PQ + j0 : nullptr;
      const int64_t ldc = direct ? PQ : nc;
      for (int64_t pc = 0; pc < crs; pc += kc) {
        const int64_t kb = std::min(kc, crs - pc);
        const float* a_block = a_packed + g * a_group + a_rows * pc + m0 * kb;
        const int64_t* offs = row_off.data() + pc;
        for (int64_t q = 0; q < q_count; ++q) {
          float* c_col = (direct ? y_unit : c) + q * NR;
          const int n = direct ? static_cast<int>(std::min(NR, nb - q * NR)) : static_cast<int>(NR);
          if (cols.in_place) {
            const float* b = base + j0 + q * NR;
            for (int64_t r = 0; r * MR < mb; ++r) {
              const int rows = static_cast<int>(std::min(MR, mb - r * MR));
              rows_kernel(kb, a_block + r * MR * kb, b, offs, c_col + r * MR * nc, nc, pc > 0, rows, int(NR));
            }
          } else {
            ks.conv.pack_b_gather(kb, base, offs, runs + q * (NR + 1), run_count[static_cast<size_t>(q)], bp);
            for (int64_t r = 0; r * MR < mb; ++r) {
              const int rows = static_cast<int>(std::min(MR, mb - r * MR));
              ks.gemm.ukernel(kb, a_block + r * MR * kb, bp, c_col + r * MR * ldc, ldc, pc > 0, rows, n);
            }
          }
        }
      }
      if (!direct) {
        copy_out(ks, p, cols, c, nc, mb, j0, nb, static_cast<char*>(p.y) + (img * p.k + g * kg + m0) * PQ * elem);
      }
    }
  });
}

}  // namespace opbench

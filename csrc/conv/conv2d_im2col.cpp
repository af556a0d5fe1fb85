// Conv2d as one GEMM on an explicit im2col matrix: per group, every image's patch columns written side by
// side (B: C_g R S rows x N P Q columns, fp32), multiplied by W_g (K_g x C_g R S) on the GEMM driver, and C
// (K_g x N P Q) copied out to Y's channel planes. The copies cost one write and one read of B and of C; in
// exchange the GEMM multiplies no padding column (the columns path computes the padded width: 9 of 7, 16 of
// 14) and sees all of the batch's columns at once, where a small plane gives each image's product only P Q
// columns (49 at 7x7: four register tiles of 16, the last partial).
#include <algorithm>
#include <cstring>

#include "opbench/aligned.hpp"
#include "opbench/bf16.hpp"
#include "opbench/conv.hpp"
#include "opbench/cpu.hpp"
#include "opbench/fp16.hpp"
#include "opbench/gemm.hpp"
#include "opbench/isa.hpp"
#include "opbench/limits.hpp"
#include "opbench/thread_pool.hpp"

namespace opbench {

namespace {

// The im2col matrix's columns: all images' output pixels.
int64_t im2col_columns(const ConvProblem& p) { return p.n * p.out_h() * p.out_w(); }

// Row (ch, fr, fs) of group g's im2col matrix for image n: its P Q columns, zero where the tap reads padding.
void im2col_row(const KernelSet& ks, const ConvProblem& p, int64_t g, int64_t row, int64_t n, float* dst) {
  const int64_t taps = p.r * p.s, ch = g * (p.c / p.groups) + row / taps, fr = row % taps / p.s, fs = row % p.s;
  const int64_t P = p.out_h(), Q = p.out_w(), plane = p.h * p.w_in;
  const bool f16 = p.dtype == Dtype::f16, bf16 = p.dtype == Dtype::bf16;  // bf16: conv_bf16_widened
  const int64_t at = (n * p.c + ch) * plane;
  // the output columns whose tap reads inside the row: ow in [lo, hi)
  const int64_t off = fs * p.dil_w - p.pad_w;
  const int64_t lo = std::min(Q, std::max<int64_t>(0, ceil_div(-off, p.stride_w)));
  const int64_t hi = std::max(lo, std::min(Q, off >= p.w_in ? 0 : ceil_div(p.w_in - off, p.stride_w)));
  // Plain loops, not memcpy and fill: a row is 7-28 floats, where a library call per piece cost the 14x14
  // 3x3 at batch 4 a tenth of its time on two Zen 4 cores.
  const float* x32 = static_cast<const float*>(p.x) + at + off;
  const uint16_t* x16 = static_cast<const uint16_t*>(p.x) + at + off;
  for (int64_t oh = 0; oh < P; ++oh, dst += Q) {
    const int64_t ih = oh * p.stride_h - p.pad_h + fr * p.dil_h;
    float* __restrict d = dst;
    if (ih < 0 || ih >= p.h || hi <= lo) {
      for (int64_t ow = 0; ow < Q; ++ow) d[ow] = 0.0f;
      continue;
    }
    for (int64_t ow = 0; ow < lo; ++ow) d[ow] = 0.0f;
    if ((f16 || bf16) && p.stride_w == 1) {
      widen_of(ks, p.dtype)(x16 + ih * p.w_in + lo, d + lo, hi - lo);
    } else if (f16 || bf16) {
      const uint16_t* x = x16 + ih * p.w_in;
      for (int64_t ow = lo; ow < hi; ++ow) {
        d[ow] = bf16 ? bf16_to_float(x[ow * p.stride_w]) : half_to_float(x[ow * p.stride_w]);
      }
    } else if (p.stride_w == 1) {
      const float* __restrict x = x32 + ih * p.w_in;
      for (int64_t ow = lo; ow < hi; ++ow) d[ow] = x[ow];
    } else {
      const float* x = x32 + ih * p.w_in;
      for (int64_t ow = lo; ow < hi; ++ow) d[ow] = x[ow * p.stride_w];
    }
    for (int64_t ow = hi; ow < Q; ++ow) d[ow] = 0.0f;
  }
}

}  // namespace

// Taken on 8-lane tiles (AVX2's 6x16, where it was measured) for an fp32 stride-1 conv of at least
// kIm2colMinChannels output channels per group whose columns path wastes a fifth more of its register tiles'
// columns than the im2col GEMM (padding columns, a short last tile per image), with the matrix within a
// quarter of the last-level cache, so that the GEMM's packing reads it back from there. On 2 Zen 4 cores
// (AVX2 tile), 3x3 at batch 4, one process, interleaved, GFLOPS of the columns path / this way / torch: 7x7
// 512 ch (wasted columns 1.31 / 1.06) 61 / 67 / 72 on one core, 103 / 124 / 130 on two; 14x14 256 ch (1.14 /
// 1.00) 73 / 73 / 83, 134 / 138 / 147; batch 8 at 28x28 (stride 1 and 2) 9-27% slower than the model's ways.
// The GEMM alone on the same matrix ran 7x7 at 72 and 137. Each element of the matrix is written and read
// back once and used by the group's output channels: with few of them the copies outweigh what the GEMM
// saves (the measured convs had 256 and 512).
constexpr int64_t kIm2colMinChannels = 64;

bool conv_im2col_gemm(const KernelSet& ks, const ConvProblem& p) {
  const bool stride1 = p.stride_h == 1 && p.stride_w == 1;
  // (bf16 reaches this model only widened onto the fp32 ways: conv2d.cpp, conv_bf16_widened)
  if (ks.thin_lanes >= 16 || p.dtype == Dtype::f16 || conv2d_is_depthwise(p) || !stride1) return false;
  if (p.k / p.groups < kIm2colMinChannels) return false;
  const int64_t P = p.out_h(), PQ = P * p.out_w(), cols = im2col_columns(p), nr = ks.nr;
  const double columns_waste = double(round_up(P * p.padded_w(), nr)) / double(PQ);
  const double im2col_waste = double(round_up(cols, nr)) / double(cols);
  const double b_bytes = double((p.c / p.groups) * p.r * p.s) * double(cols) * sizeof(float);
  return columns_waste >= 1.2 * im2col_waste && b_bytes <= double(cpu_info().l3.size_bytes) / 4;
}

ConvGemmDims conv_im2col_gemm_dims(const ConvProblem& p) {
  return {p.k / p.groups, im2col_columns(p), (p.c / p.groups) * p.r * p.s};
}

int64_t conv_im2col_workspace_bytes(const KernelSet& ks, const ConvProblem& p, const Blocking& blk, int threads) {
  using checked::add;
  using checked::mul;
  const ConvGemmDims d = conv_im2col_gemm_dims(p);
  const int64_t floats = add(add(mul(d.k, d.n, "im2col matrix"), mul(d.m, d.n, "im2col product"), "im2col"),
                             p.dtype != Dtype::f32 ? mul(d.m, d.k, "widened filter") : 0, "im2col");
  const GemmProblem g = gemm_product(Dtype::f32, Dtype::f32, nullptr, d.k, false, nullptr, d.n, false, nullptr, d.n,
                                     d.m, d.n, d.k, false);
  return add(mul(floats, int64_t(sizeof(float)), "im2col workspace"), gemm_workspace_bytes(ks, g, blk, threads),
             "im2col workspace");
}

void conv2d_im2col(const KernelSet& ks, const ConvProblem& p, const Blocking& blk, int threads) {
  static thread_local AlignedBuffer buffer;
  const ConvGemmDims d = conv_im2col_gemm_dims(p);
  const int64_t kg = d.m, cols = d.n, crs = d.k, PQ = p.out_h() * p.out_w();
  const bool narrow = p.dtype != Dtype::f32;  // fp16, or bf16 (conv2d.cpp, conv_bf16_widened)
  const int64_t floats = crs * cols + kg * cols + (narrow ? kg * crs : 0);
  auto* b = static_cast<float*>(buffer.reserve(static_cast<size_t>(floats) * sizeof(float)));
  float* c = b + crs * cols;
  float* w32 = c + kg * cols;
  const int64_t elem = narrow ? 2 : 4;
  for (int64_t g = 0; g < p.groups; ++g) {
    const int64_t items = crs * p.n;
    const int t = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, items)));
    ThreadPool::instance().run(t, [&](int tid) {
      for (int64_t it = items * tid / t; it < items * (tid + 1) / t; ++it) {
        const int64_t row = it / p.n, n = it % p.n;
        im2col_row(ks, p, g, row, n, b + row * cols + n * PQ);
      }
      if (narrow) {  // W_g widened, a share of its rows per thread
        const auto* w = static_cast<const uint16_t*>(p.w) + g * kg * crs;
        const WidenF16 widen = widen_of(ks, p.dtype);
        for (int64_t k = kg * tid / t; k < kg * (tid + 1) / t; ++k) widen(w + k * crs, w32 + k * crs, crs);
      }
    });
    const float* a = narrow ? w32 : static_cast<const float*>(p.w) + g * kg * crs;
    gemm(ks, gemm_product(Dtype::f32, Dtype::f32, a, crs, false, b, cols, false, c, cols, kg, cols, crs, false), blk,
         threads);
    // C's columns are the images' planes side by side: image n's channel rows go to Y[n, g kg + k, :].
    const int tn = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, p.n)));
    ThreadPool::instance().run(tn, [&](int tid) {
      for (int64_t n = p.n * tid / tn; n < p.n * (tid + 1) / tn; ++n) {
        char* y = static_cast<char*>(p.y) + (n * p.k + g * kg) * PQ * elem;
        if (narrow) {
          store_of(ks, p.dtype)(c + n * PQ, cols, kg, PQ, reinterpret_cast<uint16_t*>(y), PQ);
        } else {
          for (int64_t k = 0; k < kg; ++k) {
            std::memcpy(reinterpret_cast<float*>(y) + k * PQ, c + k * cols + n * PQ, sizeof(float) * PQ);
          }
        }
      }
    });
  }
}

}  // namespace opbench

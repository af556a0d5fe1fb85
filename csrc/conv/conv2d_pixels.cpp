// Conv2d forward as an implicit GEMM with output pixels as the rows: per group,
//   Y^T[N*P*Q, k_g] = A[N*P*Q, C_g*R*S] * W^T[C_g*R*S, k_g],
// where row i of A is output pixel i (image, oh, ow) of every image at once and its columns are the
// im2col taps. conv2d.cpp's orientation (output channels as rows, one image's pixels as columns) computes
// whole micro-panels of NR columns over the padded width: at 7x7 that is 64 columns for 49 pixels (77% of
// the FMAs useful), at 14x14 224 for 196. Here 4 images of 7x7 are 196 rows, 14 register tiles of 14 rows,
// and 512 output channels are 16 panels of 32: no FMA is wasted.
//
// W^T is packed once per call (pack_bt: W's rows are the columns of B). A's micro-panels are gathered from
// the zero-padded input (pack_a_gather, runs of consecutive pixels within an output row) once per K block
// of a work unit and used by every column panel of the unit. The unit's C block (pixels x channels, fp32)
// is then written to Y transposed: for each channel, the unit's pixels of each image are consecutive in Y.
//
// Loops (one thread's share of the work units, each a group x pixel block x channel block):
//   for pc in K blocks (kc)
//     gather the unit's A block: ceil(mb / MR) micro-panels of depth kb
//     for q in NR-column micro-panels of W^T (packed once)
//       for r in MR-row micro-panels of A
//         ukernel(kb, A[r], W^T[q], C[r, q], accumulate = pc > 0)
//   then C's columns go to Y's channel rows.
#include <algorithm>
#include <cstring>
#include <vector>

#include "opbench/aligned.hpp"
#include "opbench/conv.hpp"
#include "opbench/fp16.hpp"
#include "opbench/limits.hpp"
#include "opbench/thread_pool.hpp"
#include "padded.hpp"

namespace opbench {

namespace {

// The useful share of the FMAs each orientation computes, as the register tile pads them.
double pixels_as_columns_share(const ConvProblem& p, int64_t mr, int64_t nr) {
  const int64_t kg = p.k / p.groups;
  return double(p.out_h() * p.out_w()) / double(round_up(pixel_columns(p), nr)) * double(kg) / double(round_up(kg, mr));
}

double pixels_as_rows_share(const ConvProblem& p, int64_t mr, int64_t nr) {
  const int64_t kg = p.k / p.groups, pixels = p.n * p.out_h() * p.out_w();
  return double(pixels) / double(round_up(pixels, mr)) * double(kg) / double(round_up(kg, nr));
}

// The runs of one MR-pixel micro-panel of A: pixels [i0, i0 + MR) of all N*P*Q, one run per stretch of an
// output row, a zero run past the last pixel. Pixel (img, oh, ow) reads tap (0, 0) of its image's first
// channel at img*C*plane + (oh*stride_h)*Wp + ow*stride_w of the padded input.
int pixel_runs(const ConvProblem& p, int64_t wp, int64_t image, int64_t i0, int64_t mr, GatherRun* runs) {
  const int64_t Q = p.out_w(), PQ = p.out_h() * Q, total = p.n * PQ;
  const int64_t end = std::min(i0 + mr, total);
  int count = 0;
  for (int64_t i = i0; i < end;) {
    const int64_t img = i / PQ, rem = i % PQ, oh = rem / Q, ow = rem % Q;
    const int64_t len = std::min(Q - ow, end - i);
    runs[count++] = {static_cast<int32_t>(i - i0), static_cast<int32_t>(len), static_cast<int32_t>(p.stride_w),
                     img * image + oh * p.stride_h * wp + ow * p.stride_w};
    i += len;
  }
  if (end - i0 < mr) runs[count++] = {static_cast<int32_t>(end - i0), static_cast<int32_t>(i0 + mr - end), 0, 0};
  return count;
}

// Columns [0, nb) of a C block (pixels i0 .. i0 + mb, leading dimension ldc) to Y's channels n0 .. n0 + nb
// of group g: channel by channel, each image's pixels of the block being consecutive in Y.
void copy_out_transposed(const ConvProblem& p, const float* c, int64_t ldc, int64_t i0, int64_t mb, int64_t g,
                         int64_t n0, int64_t nb) {
  const int64_t PQ = p.out_h() * p.out_w(), kg = p.k / p.groups;
  const bool f16 = p.dtype == Dtype::f16;
  for (int64_t i = i0; i < i0 + mb;) {
    const int64_t img = i / PQ, pix = i % PQ, len = std::min(PQ - pix, i0 + mb - i);
    const float* src = c + (i - i0) * ldc;
    const int64_t y0 = (img * p.k + g * kg + n0) * PQ + pix;
    for (int64_t j = 0; j < nb; ++j) {
      if (f16) {
        uint16_t* dst = static_cast<uint16_t*>(p.y) + y0 + j * PQ;
        for (int64_t t = 0; t < len; ++t) dst[t] = float_to_half(src[t * ldc + j]);
      } else {
        float* dst = static_cast<float*>(p.y) + y0 + j * PQ;
        for (int64_t t = 0; t < len; ++t) dst[t] = src[t * ldc + j];
      }
    }
    i += len;
  }
}

// Busiest thread's share: whole units of mb x nb outputs, plus a fixed cost per unit (gathering its A block
// once per K block, writing its C block out) of about two micro-panel columns.
int64_t unit_cost(int64_t pixels, int64_t kg, int64_t groups, int64_t mc, int64_t nc, int64_t nr, int threads) {
  const int64_t units = groups * ceil_div(pixels, mc) * ceil_div(kg, nc);
  return ceil_div(units, threads) * std::min(mc, pixels) * (std::min(nc, round_up(kg, nr)) + 2 * nr);
}

}  // namespace

bool conv_pixels_as_rows(const KernelSet& ks, const ConvProblem& p) {
  if (conv2d_is_depthwise(p)) return false;
  const int64_t kg = p.k / p.groups;
  // Gathering an element of A costs about kGatherCost FMA lanes and serves kg of them (the stride-1 columns
  // path gathers nothing; strided, it gathers B for about kGatherReuse rows). Pixels as rows must come out 5%
  // ahead. Fitted on 2 Zen 5 cores, 3x3 convs at batch 4 (rows / columns, one process): 7x7 512 ch 432 / 341
  // GFLOPS, 14x14 256 ch 467 / 430, 28x28 128 ch 464 / 455, 56x56 64 ch 430 / 479.
  constexpr double kGatherCost = 20.0;
  constexpr double kGatherReuse = 96.0;
  const bool strided = p.stride_h != 1 || p.stride_w != 1;
  const double rows = pixels_as_rows_share(p, ks.mr, ks.nr) / (1.0 + kGatherCost / double(kg));
  const double cols = pixels_as_columns_share(p, ks.mr, ks.nr) /
                      (strided ? 1.0 + kGatherCost / std::min(double(kg), kGatherReuse) : 1.0);
  return rows >= 1.05 * cols;
}

Blocking resolve_conv_pixels_blocking(const KernelSet& ks, const ConvProblem& p, Blocking requested, int threads) {
  const int64_t kg = p.k / p.groups, crs = (p.c / p.groups) * p.r * p.s, pixels = p.n * p.out_h() * p.out_w();
  const int64_t MR = ks.mr, NR = ks.nr;
  const Blocking model = analytical_blocking(cpu_info(), ks.mr, ks.nr, sizeof(float), ks.b_panel_home);
  Blocking b;
  b.kc = std::min(requested.kc > 0 ? requested.kc : model.kc, crs);
  const bool given_m = requested.mc > 0, given_n = requested.nc > 0;
  b.mc = round_up(std::min(given_m ? requested.mc : model.mc, pixels), MR);
  b.nc = round_up(std::min(given_n ? requested.nc : kg, kg), NR);
  if (given_m && given_n) return b;
  // Pixel blocks up to twice the model's A block and channel blocks up to all of kg, within three quarters
  // of L2 for the A block beside the C block: the pair that keeps the busiest thread least busy, the largest
  // blocks among equals.
  const int64_t l2 = std::max<int64_t>(cpu_info().l2.size_bytes, 256 * 1024) / int64_t(sizeof(float)) * 3 / 4;
  int64_t best = -1;
  const int64_t m_hi = given_m ? b.mc : std::min(round_up(pixels, MR), std::max(MR, 2 * model.mc / MR * MR));
  const int64_t n_hi = given_n ? b.nc : round_up(kg, NR);
  for (int64_t nc = n_hi; nc >= (given_n ? n_hi : NR); nc -= NR) {
    for (int64_t mc = m_hi; mc >= (given_m ? m_hi : MR); mc -= MR) {
      if (mc * (b.kc + nc) > l2 && mc > MR) continue;
      const int64_t cost = unit_cost(pixels, kg, p.groups, mc, nc, NR, threads);
      if (best < 0 || cost < best) {
        best = cost;
        b.mc = mc;
        b.nc = nc;
      }
    }
  }
  return b;
}

int64_t conv_pixels_workspace_floats(const KernelSet& ks, const ConvProblem& p, const Blocking& blk, int threads) {
  using checked::add;
  using checked::mul;
  const int64_t kg = p.k / p.groups, crs = (p.c / p.groups) * p.r * p.s;
  const int64_t NR = ks.nr, MR = ks.mr;
  const int64_t packed_w = mul(mul(p.groups, round_up(kg, NR), "packed filter"), crs, "packed filter");
  const int64_t per_thread = add(mul(blk.mc, blk.nc, "conv C block"), mul(round_up(blk.mc, MR), blk.kc, "conv A block"),
                                 "scratch");
  return add(packed_w, mul(per_thread, threads, "conv scratch"), "conv workspace");
}

void conv2d_pixels(const KernelSet& ks, const ConvProblem& p, const Blocking& blk, int threads) {
  static thread_local AlignedBuffer padded_buffer, w_buffer;
  const int64_t cg = p.c / p.groups, kg = p.k / p.groups, crs = cg * p.r * p.s;
  const int64_t pixels = p.n * p.out_h() * p.out_w();
  const bool f16 = p.dtype == Dtype::f16;
  const int64_t MR = ks.mr, NR = ks.nr;
  const int64_t kc = blk.kc, mc = blk.mc, nc = blk.nc;
  const int64_t Wp = p.w_in + 2 * p.pad_w, plane = (p.h + 2 * p.pad_h) * Wp, image = p.c * plane;
  const float* xp = padded_input(ks, p, 0, threads, padded_buffer);
  std::vector<int64_t> row_off(static_cast<size_t>(crs));
  tap_offsets(p, row_off.data());

  // W^T packed once: per group, its K blocks in order, each round_up(kg, NR) / NR micro-panels of depth kb.
  const int64_t b_cols = round_up(kg, NR), b_group = b_cols * crs;
  auto* b_packed = static_cast<float*>(w_buffer.reserve(static_cast<size_t>(p.groups * b_group) * sizeof(float)));
  {
    // Items of one micro-panel of one K block, in W's order (a thread reads whole stretches of W's rows).
    const int64_t k_blocks = ceil_div(crs, kc), n_panels = b_cols / NR, items = p.groups * n_panels * k_blocks;
    const int t = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, items)));
    ThreadPool::instance().run(t, [&](int tid) {
      for (int64_t it = items * tid / t; it < items * (tid + 1) / t; ++it) {
        const int64_t g = it / (n_panels * k_blocks), n0 = (it / k_blocks) % n_panels * NR;
        const int64_t pc = (it % k_blocks) * kc, kb = std::min(kc, crs - pc);
        const int64_t cols = std::min(NR, kg - n0), at = (g * kg + n0) * crs + pc;
        float* dst = b_packed + g * b_group + b_cols * pc + n0 * kb;
        if (f16) {
          ks.gemm.pack_bt_f16(static_cast<const uint16_t*>(p.w) + at, crs, kb, cols, dst);
        } else {
          ks.gemm.pack_bt_f32(static_cast<const float*>(p.w) + at, crs, kb, cols, dst);
        }
      }
    });
  }

  const int64_t row_blocks = ceil_div(pixels, mc), col_blocks = ceil_div(kg, nc);
  const int64_t units = p.groups * row_blocks * col_blocks;
  const int t = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, units)));
  ThreadPool::instance().run(t, [&](int tid) {
    // The unit's A block and C block side by side in one huge page: physically contiguous, they spread over
    // L2's sets whatever pages the process draws. (Separate huge pages, both starting at set 0, ran 7x7 at
    // 362-382 GFLOPS in eight processes; 4 KiB pages and this layout both at 380-449, within the VM's drift.)
    static thread_local AlignedBuffer block_buffer, run_buffer;
    const int64_t a_floats = round_up(round_up(mc, MR) * kc, 1024);
    auto* a = static_cast<float*>(block_buffer.reserve(static_cast<size_t>(a_floats + mc * nc) * sizeof(float), true));
    float* c = a + a_floats;
    const int64_t panels = ceil_div(mc, MR);
    auto* runs = static_cast<GatherRun*>(run_buffer.reserve(static_cast<size_t>(panels * (MR + 1)) * sizeof(GatherRun)));
    std::vector<int> run_count(static_cast<size_t>(panels));
    for (int64_t u = units * tid / t; u < units * (tid + 1) / t; ++u) {
      const int64_t cb = u % col_blocks, rb = (u / col_blocks) % row_blocks, g = u / (col_blocks * row_blocks);
      const int64_t i0 = rb * mc, mb = std::min(mc, pixels - i0), n0 = cb * nc, nb = std::min(nc, kg - n0);
      const int64_t r_count = ceil_div(mb, MR), q_count = ceil_div(nb, NR);
      const float* base = xp + g * cg * plane;
      for (int64_t r = 0; r < r_count; ++r) {
        run_count[static_cast<size_t>(r)] = pixel_runs(p, Wp, image, i0 + r * MR, MR, runs + r * (MR + 1));
      }
      for (int64_t pc = 0; pc < crs; pc += kc) {
        const int64_t kb = std::min(kc, crs - pc);
        const int64_t* offs = row_off.data() + pc;
        for (int64_t r = 0; r < r_count; ++r) {
          ks.conv.pack_a_gather(kb, base, offs, runs + r * (MR + 1), run_count[static_cast<size_t>(r)], a + r * MR * kb);
        }
        const float* b_block = b_packed + g * b_group + b_cols * pc + n0 * kb;
        for (int64_t q = 0; q < q_count; ++q) {
          const int cols = static_cast<int>(std::min(NR, nb - q * NR));
          for (int64_t r = 0; r < r_count; ++r) {
            const int rows = static_cast<int>(std::min(MR, mb - r * MR));
            ks.gemm.ukernel(kb, a + r * MR * kb, b_block + q * NR * kb, c + r * MR * nc + q * NR, nc, pc > 0, rows,
                            cols);
          }
        }
      }
      copy_out_transposed(p, c, nc, i0, mb, g, n0, nb);
    }
  });
}

}  // namespace opbench

// dW of a convolution without im2col (ConvKernels::weight_rows, csrc/gemm/weight_rows.hpp). When the image
// is laid out as its stride phases (depthwise_phases.hpp: at stride 1, the padded image itself) with rows
// `pitch` floats apart and the output pixels with the same pitch, the window that tap (r, s) of channel c meets
// starts at a fixed offset for every pixel: p = oh pitch + ow meets image[c][off(c, r, s) + p]. So each image
// is copied once into that layout (a 1x1 filter at stride 1 without padding reads x itself), dY is transposed
// into NR-column panels with the same pitch (its gap columns zero), and dW^T[c, r, s][k] = the sum over p of
// image[c][off + p] * panel[p][k]: the micro-kernel broadcasts the image's elements in place and loads dY's
// panel rows. The im2col path wrote each element of x R x S / (stride_h stride_w) times and packed it again;
// this one writes x once and dY once.
//
// Threads take whole rows of dW^T (channel and tap), so no sum is split between threads. Images are summed in
// registers a few at a time when their planes are small (7x7), so that each call of the kernel runs a few
// hundred steps.
#include "conv2d_weights.hpp"
#include "depthwise_phases.hpp"
#include "padded.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "opbench/aligned.hpp"
#include "opbench/cpu.hpp"
#include "opbench/limits.hpp"
#include "opbench/thread_pool.hpp"

namespace opbench {

namespace {

struct Layout {
  int64_t C, K, G, Cg, Kg, RS, CRS, HW, PQ, OW;
  bool copy_x;     // false: a 1x1 filter at stride 1 without padding reads x in place
  Phases phases;   // the image's layout when copied
  bool swap;       // a 1x1 filter with more output than input channels: dY's rows are read in place against
                   // x's panels (dW itself, not dW^T), so that the smaller of the two is transposed
  int64_t pitch;   // floats between rows of the padded image and between pixel rows of the panels
  int64_t plane;   // floats per row of the side read in place: the padded copy's, or H W (P Q) in place
  int64_t pixels;  // panel rows per image: out_h x pitch, the gap columns past out_w zero
  int64_t rows;    // rows read in place per group: C/G R S (dW^T), or K/G (dW)
  int64_t cols;    // columns of the panels per group: K/G (dY), or C/G (x)
  int64_t panels;  // NR-column panels per group
  int64_t images;  // images per pass, summed in registers by one call of the kernel
  int64_t block;   // panel rows per call (an image's all when images > 1)
  bool gaps() const { return pitch > OW; }
};

Layout layout_of(const KernelSet& ks, const ConvProblem& p) {
  Layout l{};
  l.C = p.c;
  l.K = p.k;
  l.G = p.groups;
  l.Cg = p.c / p.groups;
  l.Kg = p.k / p.groups;
  l.RS = p.r * p.s;
  l.CRS = l.Cg * l.RS;
  l.HW = p.h * p.w_in;
  l.PQ = p.out_h() * p.out_w();
  l.OW = p.out_w();
  const int64_t pl = p.pad_w, pr = p.pad_right();
  l.copy_x = !(p.r == 1 && p.s == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 && p.pad_bottom() == 0 &&
               pl == 0 && pr == 0);
  l.swap = !l.copy_x && l.Kg > l.Cg;
  l.phases = phases_of(p);
  if (p.stride_w == 1) {
    // One phase, its rows closer than the padded width: a row's columns past the pitch spill into the next
    // row's left padding, which stays zero while pitch >= W + max(left, right) (7x7 planes: 8 floats, not 9).
    l.phases.pw = std::max(l.OW, p.w_in + std::max(pl, pr));
  }
  l.pitch = l.copy_x ? l.phases.pw : p.w_in;
  l.plane = l.copy_x ? (l.phases.floats() + 15) / 16 * 16 : l.HW;
  l.pixels = checked::mul(p.out_h(), l.pitch, "dY panel");
  l.rows = l.swap ? l.Kg : l.CRS;
  l.cols = l.swap ? l.Cg : l.Kg;
  l.panels = (l.cols + ks.nr - 1) / ks.nr;
  // Three quarters of L1 hold a block of the panel while the rows take turns reading it; the blocks of an
  // image are alike in size (a short last one would cost a call's fixed work for a few steps).
  const int64_t target = std::max<int64_t>(64, cpu_info().l1d.size_bytes * 3 / 4 / (ks.nr * int64_t(sizeof(float))));
  l.images = std::max<int64_t>(1, std::min<int64_t>(p.n, target / l.pixels));
  const int64_t blocks = l.images > 1 ? 1 : (l.pixels + target - 1) / target;
  l.block = (l.pixels + blocks - 1) / blocks;
  return l;
}

struct Sizes {
  int64_t image, panel, dwt, table;  // floats, floats, floats, int64s
};

Sizes sizes_of(const KernelSet& ks, const Layout& l, int threads) {
  using checked::mul;
  Sizes s{};
  // the copies, and each thread's row of the stride phases (Phases: sw pw floats)
  s.image = l.copy_x ? checked::add(mul(mul(l.images, l.C, "padded image"), l.plane, "padded image"),
                                    mul(threads, mul(l.phases.sw, l.phases.pw, "phase row"), "phase row"), "padded image")
                     : 0;
  s.panel = mul(mul(mul(l.images, l.G, "dY panels"), mul(l.panels, l.pixels, "dY panels"), "dY panels"), ks.nr,
                "dY panels");
  s.dwt = mul(mul(l.G, l.rows, "weight gradient"), mul(l.panels, ks.nr, "weight gradient"), "weight gradient");
  s.table = checked::add(l.PQ, l.rows, "weight gradient table");
  return s;
}

}  // namespace

int64_t conv2d_weights_workspace_bytes(const KernelSet& ks, const ConvProblem& p, int threads) {
  const Sizes s = sizes_of(ks, layout_of(ks, p), std::max(1, threads));
  using checked::add;
  using checked::mul;
  return add(mul(add(add(s.image, s.panel, "weight gradient"), s.dwt, "weight gradient"), int64_t(sizeof(float)),
                 "weight gradient"),
             mul(s.table, int64_t(sizeof(int64_t)), "weight gradient"), "weight gradient");
}

bool conv2d_weights(const KernelSet& ks, const ConvProblem& p, const float* x, const float* dy, float* dw, int threads) {
  static thread_local AlignedBuffer image_buffer, panel_buffer, dwt_buffer, table_buffer;
  const Layout l = layout_of(ks, p);
  const Sizes sz = sizes_of(ks, l, std::max(1, threads));
  const int64_t NR = ks.nr, Kp = l.panels * NR, N = p.n;
  float* image = l.copy_x ? static_cast<float*>(image_buffer.reserve(size_t(sz.image) * sizeof(float))) : nullptr;
  float* panel = static_cast<float*>(panel_buffer.reserve(size_t(sz.panel) * sizeof(float)));
  float* dwt = static_cast<float*>(dwt_buffer.reserve(size_t(sz.dwt) * sizeof(float), true));
  int64_t* row_dst = static_cast<int64_t*>(table_buffer.reserve(size_t(sz.table) * sizeof(int64_t)));
  int64_t* off = row_dst + l.PQ;
  // The gap columns and the last panel's columns past the channels are written here once and never again
  // (build_phases writes all of each image's phases).
  std::memset(panel, 0, size_t(sz.panel) * sizeof(float));
  std::memset(dwt, 0, size_t(sz.dwt) * sizeof(float));
  for (int64_t q = 0; q < l.PQ; ++q) row_dst[q] = (q / l.OW * l.pitch + q % l.OW) * NR;
  if (l.copy_x) {
    std::vector<int64_t> taps(static_cast<size_t>(l.RS));
    phase_tap_offsets(p, l.phases, taps.data());
    tap_offsets(p, off, TapOrder::channel_major, l.plane, taps.data());
  } else {  // a 1x1 in place: x's channels, or dY's when swapped
    for (int64_t i = 0; i < l.rows; ++i) off[i] = i * (l.swap ? l.PQ : l.HW);
  }
  // The side read in place (the padded image, x, or dY when swapped) and the side packed into panels.
  const float* in_place = l.copy_x ? image : (l.swap ? dy : x);
  const int64_t in_place_image = l.swap ? l.K * l.PQ : l.C * l.plane, in_place_group = l.swap ? l.Kg * l.PQ : l.Cg * l.plane;
  const float* packed = l.swap ? x : dy;
  const int64_t packed_channels = l.swap ? l.C : l.K;
  ThreadPool& pool = ThreadPool::instance();
  const int T = std::max(1, threads);
  ConvProblem q32 = p;  // x is fp32 here, whatever the call's dtype
  q32.dtype = Dtype::f32;
  for (int64_t n0 = 0; n0 < N; n0 += l.images) {
    const int64_t nimg = std::min(l.images, N - n0);
    if (l.copy_x) {
      const bool nonfinite = build_phase_planes(ks, q32, l.phases, x, n0 * l.C, nimg * l.C, l.plane, image,
                                                image + l.images * l.C * l.plane, T, l.gaps());
      if (nonfinite) return false;
    }
    const int64_t units = nimg * l.G * l.panels;
    pool.run(T, [&](int tid) {
      for (int64_t u = units * tid / T; u < units * (tid + 1) / T; ++u) {
        const int64_t img = u / (l.G * l.panels), grp = u / l.panels % l.G, j = u % l.panels;
        const float* src = packed + ((n0 + img) * packed_channels + grp * l.cols + j * NR) * l.PQ;
        ks.conv.pack_wt_f32(src, l.PQ, l.PQ, std::min(NR, l.cols - j * NR), row_dst, panel + u * l.pixels * NR);
      }
    });
    const float* rows_n = in_place + (l.copy_x ? 0 : n0 * in_place_image);
    pool.run(T, [&](int tid) {
      const int64_t r0 = l.rows * tid / T, r1 = l.rows * (tid + 1) / T;
      if (r0 == r1) return;
      for (int64_t grp = 0; grp < l.G; ++grp) {
        for (int64_t b0 = 0; b0 < l.pixels; b0 += l.block) {
          const int64_t nb = std::min(l.block, l.pixels - b0);
          for (int64_t j = 0; j < l.panels; ++j) {
            const float* bt = panel + ((grp * l.panels + j) * l.pixels + b0) * NR;
            ks.conv.weight_rows(nb, nimg, rows_n + grp * in_place_group + b0, in_place_image, off + r0, r1 - r0, bt,
                                l.G * l.panels * l.pixels * NR, dwt + (grp * l.rows + r0) * Kp + j * NR, Kp);
          }
        }
      }
    });
  }
  // dW from dW^T's first K/G columns per group, 16 x 16 blocks at a time (the kernel set's transposing store),
  // or from dW's first C/G columns when swapped; threads take blocks of dW's rows.
  const int64_t kblocks = (l.Kg + 15) / 16, units = l.G * kblocks;
  pool.run(static_cast<int>(std::min<int64_t>(T, units)), [&](int tid) {
    const int nt = static_cast<int>(std::min<int64_t>(T, units));
    for (int64_t u = units * tid / nt; u < units * (tid + 1) / nt; ++u) {
      const int64_t grp = u / kblocks, k0 = u % kblocks * 16, k1 = std::min(l.Kg, k0 + 16);
      const float* src = dwt + grp * l.rows * Kp;
      float* dst = dw + grp * l.Kg * l.CRS;
      if (l.swap) {
        for (int64_t k = k0; k < k1; ++k) std::memcpy(dst + k * l.Cg, src + k * Kp, size_t(l.Cg) * sizeof(float));
        continue;
      }
      for (int64_t i0 = 0; i0 < l.CRS; i0 += 16) {
        ks.conv.store_transposed(src + i0 * Kp + k0, Kp, static_cast<int>(std::min<int64_t>(16, l.CRS - i0)),
                                 static_cast<int>(k1 - k0), dst + k0 * l.CRS + i0, l.CRS);
      }
    }
  });
  return true;
}

}  // namespace opbench

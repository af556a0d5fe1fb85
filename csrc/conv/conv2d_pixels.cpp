// Conv2d forward as an implicit GEMM with output pixels as the rows: per group,
//   Y^T[N*P*Q, k_g] = A[N*P*Q, R*S*C_g] * W^T[R*S*C_g, k_g],
// where row i of A is an output pixel (image, oh, ow) of every image at once (ordered as PixelOrder says)
// and its columns are the im2col taps, filter column major: k = (s * R + r) * C_g + c. conv2d.cpp's orientation
// (output channels as rows, one image's pixels as columns) computes whole micro-panels of NR columns over the
// padded width: at 7x7 that is 64 columns for 49 pixels (77% of the FMAs useful), at 14x14 224 for 196. Here
// 4 images of 7x7 are 196 rows, 14 register tiles of 14 rows, and 512 output channels are 16 panels of 32.
//
// W^T is packed once per call (pack_wt: W's rows are the columns of B, and each packed row is placed at its
// k). A's micro-panels are gathered from the zero-padded input (pack_a_gather, runs of consecutive pixels
// within an output row) once per K block of a work unit and used by every column panel of the unit. Each
// micro-panel multiplies only the taps that read some input for its pixels (panel_segments): the top and
// bottom output rows skip the filter rows that fall in the padding, the first and last pixels of a row the
// filter columns, as oneDNN's direct convolutions do. The unit's C block (pixels x channels, fp32) is then
// written to Y transposed, a stretch of an output row at a time.
//
// Loops (one thread's share of the work units, each a group x pixel block x channel block):
//   for pc in K blocks (kc)
//     gather the unit's A block: ceil(mb / MR) micro-panels of depth kb, each over its segments' share
//     for q in NR-column micro-panels of W^T (packed once)
//       for r in MR-row micro-panels of A
//         for each segment of r in this block (the one with the most rows first)
//           ukernel(its K, its rows of A[r], W^T[q], its rows of C[r, q], accumulate = after r's first)
//   then C's columns go to Y's channel rows (zeros for pixels that read only padding).

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <vector>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "opbench/aligned.hpp"
#include "opbench/conv.hpp"
#include "opbench/gemm.hpp"
#include "opbench/limits.hpp"
#include "opbench/microarch.hpp"
#include "opbench/thread_pool.hpp"
#include "depthwise_phases.hpp"
#include "padded.hpp"

namespace opbench {

namespace {

// The useful share of the FMAs each orientation computes, as the register tile pads them.
double pixels_as_columns_share(const ConvProblem& p, int64_t mr, int64_t nr) {
  const int64_t kg = p.k / p.groups;
  return double(p.out_h() * p.out_w()) / double(round_up(pixel_columns(p, nr), nr)) * double(kg) /
         double(round_up(kg, mr));
}

double pixels_as_rows_share(const ConvProblem& p, int64_t mr, int64_t nr) {
  const int64_t kg = p.k / p.groups, pixels = p.n * p.out_h() * p.out_w();
  return double(pixels) / double(round_up(pixels, mr)) * double(kg) / double(round_up(kg, nr));
}

// The GEMM's rows are the output pixels of all images, in groups of `batch` images (the last group may
// hold fewer): within a group, pixel (oh, img, ow) is row (oh * batch + img) * Q + ow. The rows of the group's
// images at the same oh are then consecutive, and batch is the fewest images whose output row lengths add up
// to whole micro-panels: at 7x7 and MR 14, two (a micro-panel is one output row of two images, where one
// image alone gives micro-panels of rows oh and oh + 1); at 14x14 and 28x28, one (rows in image order). A
// micro-panel then lies within one output row, and the filter rows that read only padding for all of its
// pixels are skipped (panel_segments below). Batch 1 where no count up to N works. Threads take consecutive
// pixel blocks, so as in image order they share lines of Y only where a block boundary cuts a group; ordering
// all N images this way had the two threads of 7x7 write the same lines of every channel, 7% slower.
struct PixelOrder {
  int64_t n, q, pq, batch;
  PixelOrder(const ConvProblem& p, int64_t mr) : n(p.n), q(p.out_w()), pq(p.out_h() * p.out_w()), batch(1) {
    for (int64_t b = 1; b <= n; ++b) {
      if (b * q % mr == 0) {
        batch = b;
        break;
      }
    }
  }
};
struct Pixel {
  int64_t img, oh, ow;
};
Pixel pixel_at(const PixelOrder& o, int64_t i) {
  const int64_t group = i / (o.batch * o.pq), row = i % (o.batch * o.pq) / o.q;
  const int64_t images = std::min(o.batch, o.n - group * o.batch);
  return {group * o.batch + row % images, row / images, i % o.q};
}

// The runs of one MR-pixel micro-panel of A: pixels [i0, i0 + MR) of all N*P*Q, one run per stretch of an
// output row, a zero run past the last pixel. Pixel (img, oh, ow) reads tap (0, 0) of its image's first
// channel at img*image + oh*row_pitch + ow*step: row_pitch = stride_h*Wp and step = stride_w in the padded
// input, row_pitch = the phase width and step = 1 in the stride phases.
int pixel_runs(const ConvProblem& p, const PixelOrder& order, int64_t row_pitch, int64_t step, int64_t image,
               int64_t i0, int64_t mr, GatherRun* runs) {
  const int64_t Q = p.out_w(), total = p.n * p.out_h() * Q;
  const int64_t end = std::min(i0 + mr, total);
  int count = 0;
  for (int64_t i = i0; i < end;) {
    const Pixel px = pixel_at(order, i);
    const int64_t len = std::min(Q - px.ow, end - i);
    runs[count++] = {static_cast<int32_t>(i - i0), static_cast<int32_t>(len), static_cast<int32_t>(step),
                     px.img * image + px.oh * row_pitch + px.ow * step};
    i += len;
  }
  if (end - i0 < mr) runs[count++] = {static_cast<int32_t>(end - i0), static_cast<int32_t>(i0 + mr - end), 0, 0};
  return count;
}

// The filter rows (or columns) [lo, hi] of output row (column) o that read input: o * stride - pad + r * dil
// in [0, extent). Empty (lo > hi) when all read padding.
std::pair<int64_t, int64_t> valid_taps(int64_t o, int64_t stride, int64_t pad, int64_t dil, int64_t extent,
                                       int64_t taps) {
  const int64_t start = o * stride - pad;
  const int64_t lo = start >= 0 ? 0 : (-start + dil - 1) / dil;
  const int64_t hi = extent - 1 - start < 0 ? -1 : std::min(taps - 1, (extent - 1 - start) / dil);
  return {lo, hi};
}

// Its inverse: the outputs [lo, hi] whose filter tap t reads input (o * stride - pad + t * dil in [0, extent)),
// empty (lo > hi) when none does.
std::pair<int64_t, int64_t> outputs_reading(int64_t t, int64_t stride, int64_t pad, int64_t dil, int64_t extent) {
  const int64_t from = pad - t * dil, to = extent - 1 + pad - t * dil;
  if (to < 0) return {0, -1};
  return {from <= 0 ? 0 : ceil_div(from, stride), to / stride};
}

// What one micro-panel multiplies, filter column by filter column: K runs filter-column major,
// k = (s * R + r) * C_g + c, so a filter column's rows are one stretch of K. For filter column s, the segment
// is the filter rows [r_lo, r_hi] that read input for some pixel of the panel that column s reads input for,
// and the panel's rows [row_lo, row_hi) from the first such pixel to the last. Everything outside reads
// padding and is neither gathered nor multiplied: with padding 1, a 3x3 filter and 14x14 outputs (a
// micro-panel is one output row), the top and bottom rows skip a filter row, the first pixel of every row
// skips filter column 0 and the last column 2, together 9.3% of the FMAs, as oneDNN's direct convolutions
// skip them. At 7x7 (a micro-panel is row oh of two images) the padding pixels of filter columns 0 and 2 are
// rows 0 and 7, and 6 and 13, and only the ones at the panel's ends are left out: 13.8% of the FMAs, where
// oneDNN skips 18%. A segment of MR - 1 rows runs through the kernel set's instantiation of MR - 1 rows.
struct Segment {
  int64_t k_lo, k_hi;
  int row_lo, row_hi;
};
// What panel_segments reads of the problem, once per call: each output row's filter rows that read input
// (valid_taps), each filter column's outputs that read input (outputs_reading), and the outputs that every
// filter column reads input for. (Computing them per micro-panel took about 5% of the 7x7 stride-2 stem on
// one Zen 4 core.)
struct PaddingTaps {
  std::vector<std::pair<int64_t, int64_t>> rows, cols;
  int64_t ow_lo = 0, ow_hi = -1;
  explicit PaddingTaps(const ConvProblem& p) {
    rows.resize(static_cast<size_t>(p.out_h()));
    for (int64_t oh = 0; oh < p.out_h(); ++oh) {
      rows[static_cast<size_t>(oh)] = valid_taps(oh, p.stride_h, p.pad_h, p.dil_h, p.h, p.r);
    }
    ow_hi = p.out_w() - 1;
    for (int64_t s = 0; s < p.s; ++s) {
      cols.push_back(outputs_reading(s, p.stride_w, p.pad_w, p.dil_w, p.w_in));
      ow_lo = std::max(ow_lo, cols.back().first);
      ow_hi = std::min(ow_hi, cols.back().second);
    }
  }
};

int panel_segments(const ConvProblem& p, const PixelOrder& order, const PaddingTaps& taps, int64_t i0, int64_t rows,
                   Segment* out) {
  const int64_t cg = p.c / p.groups, Q = p.out_w();
  // Most micro-panels read input at every tap: one segment, all of K and every row.
  bool every_tap = true;
  for (int64_t i = i0; every_tap && i < i0 + rows;) {
    const Pixel px = pixel_at(order, i);
    const int64_t len = std::min(Q - px.ow, i0 + rows - i);
    const auto [rl, rh] = taps.rows[static_cast<size_t>(px.oh)];
    every_tap = rl == 0 && rh == p.r - 1 && px.ow >= taps.ow_lo && px.ow + len - 1 <= taps.ow_hi;
    i += len;
  }
  if (every_tap) {
    out[0] = {0, cg * p.r * p.s, 0, static_cast<int>(rows)};
    return 1;
  }
  struct Reach {
    int64_t r_lo, r_hi, row_lo, row_hi;
  };
  static thread_local std::vector<Reach> reach;
  reach.assign(static_cast<size_t>(p.s), Reach{p.r, -1, rows, -1});
  // Run by run (a stretch of one output row): its filter rows are the same for every pixel, and the pixels
  // that filter column s reads input for are those with ow * stride_w - pad_w + s * dil_w in [0, W).
  for (int64_t i = i0; i < i0 + rows;) {
    const Pixel px = pixel_at(order, i);
    const int64_t len = std::min(Q - px.ow, i0 + rows - i), row = i - i0;
    i += len;
    const auto [rl, rh] = taps.rows[static_cast<size_t>(px.oh)];
    if (rl > rh) continue;
    for (int64_t s = 0; s < p.s; ++s) {
      const auto [ow_lo, ow_hi] = taps.cols[static_cast<size_t>(s)];
      const int64_t a = std::max(px.ow, ow_lo), b = std::min(px.ow + len - 1, ow_hi);
      if (a > b) continue;
      Reach& e = reach[static_cast<size_t>(s)];
      e.r_lo = std::min(e.r_lo, rl);
      e.r_hi = std::max(e.r_hi, rh);
      e.row_lo = std::min(e.row_lo, row + a - px.ow);
      e.row_hi = std::max(e.row_hi, row + b - px.ow);
    }
  }
  int count = 0;
  for (int64_t s = 0; s < p.s; ++s) {
    const Reach& e = reach[static_cast<size_t>(s)];
    if (e.row_hi < 0) continue;
    const Segment seg{(s * p.r + e.r_lo) * cg, (s * p.r + e.r_hi + 1) * cg, static_cast<int>(e.row_lo),
                      static_cast<int>(e.row_hi + 1)};
    if (count > 0 && out[count - 1].k_hi == seg.k_lo && out[count - 1].row_lo == seg.row_lo &&
        out[count - 1].row_hi == seg.row_hi) {
      out[count - 1].k_hi = seg.k_hi;
    } else {
      out[count++] = seg;
    }
  }
  return count;
}

// The share of the nominal FMAs that panel_segments skips, where micro-panels lie in single output rows (0
// where they straddle rows). A panel's filter rows depend only on its output row oh, and which of its pixels
// a filter column reads input for only on their ow, so the share is separable: the filter rows kept summed
// over oh, times the pixel rows kept per filter column summed over the micro-panels of one output row of an
// image group. O(P + batch Q S), and 0 past 2^16 output rows or columns: this runs on every call, and before
// the output's size has been checked.
double padding_skip_share(const ConvProblem& p, int64_t mr) {
  constexpr int64_t kMaxScan = int64_t(1) << 16;
  const PixelOrder order(p, mr);
  if (p.out_h() > kMaxScan || order.q > kMaxScan) return 0.0;
  const int64_t width = order.batch * order.q;
  if (width % mr != 0) return 0.0;
  const PaddingTaps taps(p);
  int64_t rows_kept = 0;
  for (const auto& [lo, hi] : taps.rows) rows_kept += std::max<int64_t>(0, hi - lo + 1);
  int64_t cols_kept = 0;
  for (const auto& [ow_lo, ow_hi] : taps.cols) {
    for (int64_t i0 = 0; i0 < width; i0 += mr) {
      int64_t first = -1, last = -1;
      for (int64_t i = i0; i < i0 + mr; ++i) {
        if (i % order.q < ow_lo || i % order.q > ow_hi) continue;
        if (first < 0) first = i;
        last = i;
      }
      if (first >= 0) cols_kept += last - first + 1;
    }
  }
  return 1.0 - double(rows_kept) / double(p.out_h() * p.r) * double(cols_kept) / double(width * p.s);
}

// Columns [0, nb) of a C block (pixels i0 .. i0 + mb, leading dimension ldc) to Y's channels n0 .. n0 + nb
// of group g: channel by channel, a stretch of consecutive pixels of Y at a time (an image's rows follow one
// another in the pixel order of one image per group, so the stretch runs on across output rows; with
// several images per group it is one output row).
// With `stream` (stream_output) the stretch's 16-pixel blocks that start on a cache line go through the kernel
// set's non-temporal stream_transposed, the others through the cache.
void copy_out_transposed(const KernelSet& ks, const ConvProblem& p, const PixelOrder& order, const float* c,
                         int64_t ldc, int64_t i0, int64_t mb, int64_t g, int64_t n0, int64_t nb, bool stream) {
  const int64_t Q = p.out_w(), PQ = p.out_h() * Q, kg = p.k / p.groups;
  const bool f16 = p.dtype == Dtype::f16;
  for (int64_t i = i0; i < i0 + mb;) {
    const Pixel px = pixel_at(order, i);
    const int64_t len = std::min(order.batch == 1 ? PQ - px.oh * Q - px.ow : Q - px.ow, i0 + mb - i);
    const float* src = c + (i - i0) * ldc;
    const int64_t y0 = (px.img * p.k + g * kg + n0) * PQ + px.oh * Q + px.ow;
    if (f16) {
      // Blocks of 16 pixels x 16 channels transposed into fp32 scratch, then rounded a channel row at a time
      // by the kernel set's vector conversion. (Element by element, the 7x7 stride-2 stem in fp16 ran at 24
      // GFLOPS against 60 as columns on one Zen 3 core.)
      alignas(64) float block[16 * 16];
      const StoreF16 store = store_of(ks, p.dtype);
      uint16_t* dst = static_cast<uint16_t*>(p.y) + y0;
      for (int64_t j0 = 0; j0 < nb; j0 += 16) {
        const int cols = static_cast<int>(std::min<int64_t>(16, nb - j0));
        for (int64_t t0 = 0; t0 < len; t0 += 16) {
          const int rows = static_cast<int>(std::min<int64_t>(16, len - t0));
          ks.conv.store_transposed(src + t0 * ldc + j0, ldc, rows, cols, block, 16);
          store(block, 16, cols, rows, dst + j0 * PQ + t0, PQ);
        }
      }
    } else {
      // Blocks of 16 pixels x 16 channels through the kernel set's transpose (element by element, the copy
      // took 1.2% of 14x14 256 -> 256 ch at batch 4 on one Zen 5 core).
      float* dst = static_cast<float*>(p.y) + y0;
      // Pixels before the first line boundary (all of them without streaming), then whole lines, the rest.
      const int64_t head = stream ? std::min<int64_t>(len, (16 - reinterpret_cast<uintptr_t>(dst) / 4 % 16) % 16) : len;
      const int64_t lines_end = head + (len - head) / 16 * 16;
      for (int64_t j0 = 0; j0 < nb; j0 += 16) {
        const int cols = static_cast<int>(std::min<int64_t>(16, nb - j0));
        for (int64_t t0 = 0; t0 < len;) {
          if (t0 >= head && t0 < lines_end) {
            ks.conv.stream_transposed(src + t0 * ldc + j0, ldc, cols, dst + j0 * PQ + t0, PQ);
            t0 += 16;
            continue;
          }
          const int64_t rows = std::min<int64_t>(16, (t0 < head ? head : len) - t0);
          ks.conv.store_transposed(src + t0 * ldc + j0, ldc, static_cast<int>(rows), cols, dst + j0 * PQ + t0, PQ);
          t0 += rows;
        }
      }
    }
    i += len;
  }
}

// Work units are group x channel block x pixel block, pixel blocks fastest, and thread tid takes units
// [first(tid), first(tid + 1)). threads_of(g, cb) is the range of threads that multiply channel block cb of
// group g.
struct Units {
  int64_t row_blocks, col_blocks, count;
  int threads;
  Units(int64_t pixels, int64_t kg, int64_t groups, int64_t mc, int64_t nc, int max_threads)
      : row_blocks(ceil_div(pixels, mc)), col_blocks(ceil_div(kg, nc)), count(groups * row_blocks * col_blocks),
        threads(static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(max_threads, count)))) {}
  int64_t first(int tid) const { return count * tid / threads; }
  int owner(int64_t u) const {  // the thread whose range holds unit u
    int tid = static_cast<int>(u * threads / count);
    while (first(tid + 1) <= u) ++tid;
    while (first(tid) > u) --tid;
    return tid;
  }
  std::pair<int, int> threads_of(int64_t g, int64_t cb) const {
    const int64_t u0 = (g * col_blocks + cb) * row_blocks;
    return {owner(u0), owner(u0 + row_blocks - 1)};
  }
};

// Busiest thread's share: whole units of mb x nb outputs, plus a fixed cost per unit (gathering its A block
// once per K block, writing its C block out) of about two micro-panel columns, plus kWRead per output channel
// whose W^T the thread reads. Each thread packs the W^T it multiplies (a channel block that several threads
// multiply is packed by them together), so threads that split the channels read only their own: at 7x7,
// 512 -> 512 channels on 2 Zen 5 cores, splitting the pixels (each thread reading all 9.4 MB of W^T, half of
// it packed by the other core) ran at 350-365 GFLOPS and splitting the channels at 457-470 (one process,
// alternating); at 14x14 (2.4 MB of W^T) splitting the pixels was as fast or faster (507 / 487). kWRead lies
// between what those two choices require (above 25, below 196). Each unit also costs about kUnitRows pixels
// of its channels whatever its size (its set-up, its B block brought back to L1): without it the 7x7 stride-2
// stem at batch 8 on 2 Zen 4 cores (AVX2 tile) took units of 6 pixels, which balanced the threads to one
// unit, and ran at 99 GFLOPS against 122 with blocks of 576.
int64_t unit_cost(int64_t pixels, int64_t kg, int64_t groups, int64_t mc, int64_t nc, int64_t nr, int threads) {
  constexpr int64_t kWRead = 64, kUnitRows = 16;
  const Units units(pixels, kg, groups, mc, nc, threads);
  int64_t busiest = 0;
  for (int tid = 0; tid < units.threads; ++tid) {
    int64_t cost = 0, last_block = -1;
    for (int64_t u = units.first(tid); u < units.first(tid + 1); ++u) {
      const int64_t block = u / units.row_blocks, rb = u % units.row_blocks, cb = block % units.col_blocks;
      const int64_t mb = std::min(mc, pixels - rb * mc), nb = std::min(nc, round_up(kg, nr) - cb * nc);
      cost += (mb + kUnitRows) * nb + mb * 2 * nr;
      if (block != last_block) cost += kWRead * nb;
      last_block = block;
    }
    busiest = std::max(busiest, cost);
  }
  return busiest;
}

// The input as its stride phases (Phases), N x C planes of ph.floats() floats, written by `threads` threads.
float* phased_input(const KernelSet& ks, const ConvProblem& p, const Phases& ph, int threads, AlignedBuffer& buffer) {
  const int64_t planes = p.n * p.c;
  auto* xp = static_cast<float*>(
      buffer.reserve(static_cast<size_t>(planes * ph.floats() + threads * ph.sw * ph.pw) * sizeof(float)));
  build_phase_planes(ks, p, ph, p.x, 0, planes, ph.floats(), xp, xp + planes * ph.floats(), threads, false);
  return xp;
}

}  // namespace

namespace {

// Gathering an element of A costs about this many FMA lanes, and serves the unit's kg output channels (see
// conv_pixels_as_rows).
double rows_gather_cost(const KernelSet& ks) { return ks.thin_lanes < 16 ? 150.0 : 20.0; }

// Reading A in place, what the micro-panels that straddle output rows cost, per micro-panel and as a share of
// one: such a panel is multiplied run by run, a call per run, each loading all of the panel's B. Over the
// pixel order a row boundary falls every Q pixels, inside a panel unless at a multiple of MR: (MR -
// gcd(Q, MR)) / Q extra calls per panel, each counted kStraddle. On 2 Zen 4 cores with the AVX2 tile (6x16),
// 3x3 convs at batch 8, A in place / gathered, GFLOPS: 56x56 64 ch (0.07 extra calls) 92 / 61, 28x28 128 ch
// (0.14) 108 / 89, stride 2 to 28x28 (0.14) 79 / 76, 14x14 256 ch (0.29) 99 / 113, stride 2 to 14x14 (0.29)
// 84 / 100, 7x7 512 ch at batch 4 (0.71) 101 / 110; the 7x7 stride-2 stem (0.04) 117 / 82. kStraddle = 4
// against the gather's cost picks the faster side in all of them.
double straddle_cost(const ConvProblem& p, int64_t mr) {
  constexpr double kStraddle = 4.0;
  const int64_t q = p.out_w();
  return q <= 0 ? 0.0 : kStraddle * double(mr - std::gcd(q, mr)) / double(q);
}

}  // namespace

// Each micro-panel's pixels are stretches of output rows: one stretch when the rows are whole micro-panels
// (out_w a multiple of MR), else one or more. At stride 1 a stretch is consecutive in the padded input for
// every tap; strided, in the input's stride phases (depthwise_phases.hpp: tap (r, s) reads phase (r dil mod
// sh, s dil mod sw) at a fixed offset, consecutive along the row). Either way the micro-kernel reads A there
// (ukernel_a_rows, a call per stretch) and nothing is gathered, where the straddling panels cost less than
// gathering would.
bool conv_pixels_a_in_place(const KernelSet& ks, const ConvProblem& p) {
  return straddle_cost(p, ks.mr) <= rows_gather_cost(ks) / double(std::max<int64_t>(1, p.k / p.groups));
}

bool conv_pixels_phased(const ConvProblem& p, bool a_in_place) {
  return a_in_place && (p.stride_h != 1 || p.stride_w != 1);
}

int64_t conv_pixels_phased_floats(const ConvProblem& p, int threads) {
  const Phases ph = phases_of(p);
  using checked::add;
  using checked::mul;
  return add(mul(mul(p.n, p.c, "phased input"), ph.floats(), "phased input"),
             mul(threads, mul(ph.sw, ph.pw, "phase row"), "phase row"), "phased input");
}

bool conv_pixels_as_rows(const KernelSet& ks, const ConvProblem& p) {
  if (conv2d_is_depthwise(p)) return false;
  const int64_t kg = p.k / p.groups;
  // Gathering an element of A costs about kGatherCost FMA lanes and serves kg of them (the columns path
  // gathers B for up to kColumnsGatherReuse rows where it gathers). Pixels as rows must come out 5%
  // ahead. Fitted on 2 Zen 5 cores, 3x3 convs at batch 4 (rows / columns, one process): 7x7 512 ch 432 / 341
  // GFLOPS, 14x14 256 ch 467 / 430, 28x28 128 ch 464 / 455, 56x56 64 ch 430 / 479.
  // With 8-lane vectors (the AVX2 6x16 tile) the rows lost wherever a model of the gather alone chose them:
  // MR = 6 rarely cuts a 7- or 14-pixel output row into whole micro-panels, and a panel's segments then run
  // with fewer rows. On one Zen 4 core without AVX-512, columns / rows time, builds interleaved, 3x3 convs:
  // 7x7 512 ch at batch 1, 2, 4 0.69, 0.85, 0.90 (batch 8 1.07), 160 -> 320 ch 0.96; 14x14 256 ch at
  // batch 1, 4, 8 0.80, 0.89, 0.92, 128 -> 256 ch 0.91, 192 -> 384 ch 0.96; 28x28 128 ch 0.97; 32x32
  // 96 -> 128 ch 1.00. A cost of 150 picks the faster side in all of them.
  const double kGatherCost = rows_gather_cost(ks);
  // The columns' gather of B's micro-panels (reused by all kg rows up to 96) costs about as much on either
  // tile: the micro-architecture table's strided_gather_cost (microarch.cpp [Z4]; 20 fitted where the AVX2
  // tile's 150 took the 3x3 stride-2 convs as rows at 0.72-0.83 of the columns' speed, 2 Zen 4 cores, batch
  // 8, 56x56 128 ch and 28x28 256 ch: 76 / 106 and 100 / 121 GFLOPS), as a share of the FMAs
  // (columns_gather_share). The columns gather strided, and at stride 1 where their padded width wastes
  // more tiles than that (columns_gather_at_stride1).
  const bool gathered = p.stride_h != 1 || p.stride_w != 1 || columns_gather_at_stride1(p, ks.nr);
  // Skipped padding taps (padding_skip_share) raise the rows' useful share: 28x28 128 -> 128 channels at
  // batch 4 had measured rows / columns 464 / 455 GFLOPS on 2 Zen 5 cores before the skip, and its top and
  // bottom rows skip 2.4% of the FMAs.
  // Where A is read in place (conv_pixels_a_in_place) nothing is gathered, and straddling panels cost calls.
  const double gather = conv_pixels_a_in_place(ks, p) ? straddle_cost(p, ks.mr) : kGatherCost / double(kg);
  const double rows = pixels_as_rows_share(p, ks.mr, ks.nr) / (1.0 - padding_skip_share(p, ks.mr)) / (1.0 + gather);
  const double cols = pixels_as_columns_share(p, ks.mr, ks.nr) /
                      (gathered ? 1.0 + columns_gather_share(p) : 1.0);
  return rows >= 1.05 * cols;
}

Blocking resolve_conv_pixels_blocking(const KernelSet& ks, const ConvProblem& p, Blocking requested, int threads) {
  const int64_t kg = p.k / p.groups, crs = (p.c / p.groups) * p.r * p.s, pixels = p.n * p.out_h() * p.out_w();
  const int64_t MR = ks.mr, NR = ks.nr;
  const Blocking model = analytical_blocking(cpu_info(), ks.mr, ks.nr, sizeof(float), ks.b_panel_home);
  Blocking b;
  b.kc = std::min(requested.kc > 0 ? requested.kc : model.implicit_kc, crs);
  const bool given_m = requested.mc > 0, given_n = requested.nc > 0;
  b.mc = round_up(std::min(given_m ? requested.mc : model.implicit_mc, pixels), MR);
  b.nc = round_up(std::min(given_n ? requested.nc : kg, kg), NR);
  if (given_m && given_n) return b;
  // Pixel blocks up to twice the model's A block and channel blocks up to all of kg, within three quarters
  // of L2 for the A block beside the C block: the pair that keeps the busiest thread least busy, the largest
  // blocks among equals.
  const int64_t l2 = std::max<int64_t>(cpu_info().l2.size_bytes, 256 * 1024) / int64_t(sizeof(float)) * 3 / 4;
  int64_t best = -1;
  const int64_t m_hi = given_m ? b.mc : std::min(round_up(pixels, MR), std::max(MR, 2 * model.implicit_mc / MR * MR));
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

namespace {

// Whether Y is written with non-temporal stores: fp32, a kernel set that has them, channel planes of whole
// cache lines (so a line boundary falls at the same pixel in every channel) and a Y larger than half the
// last-level cache (shared with the other cores, and with the input and W), whose lines the next operator
// would read from memory anyway: streaming them saves reading each line before it is written. Smaller Ys
// stay cached for the next operator, although a benchmark that calls the same conv again is faster
// streaming them too. The 7x7 stride-2 stem on one core of a Zen 4 guest (AVX2 tile, 32 MiB L3),
// streamed / cached time: batch 8 (25.7 MB of Y) 0.91, batch 4 0.89, batch 2 0.94, batch 1 0.97.
bool stream_output(const KernelSet& ks, const ConvProblem& p) {
  const int64_t pq = p.out_h() * p.out_w();
  const int64_t llc = std::max<int64_t>(cpu_info().l3.size_bytes, cpu_info().l2.size_bytes);
  return p.dtype == Dtype::f32 && ks.conv.stream_transposed != nullptr && pq % 16 == 0 &&
         reinterpret_cast<uintptr_t>(p.y) % sizeof(float) == 0 &&
         double(p.n) * double(p.k) * double(pq) * double(sizeof(float)) > double(llc) / 2;
}

}  // namespace

void conv2d_pixels(const KernelSet& ks, const ConvProblem& p, const Blocking& blk, bool a_in_place, int threads) {
  static thread_local AlignedBuffer padded_buffer, w_buffer;
  const int64_t cg = p.c / p.groups, kg = p.k / p.groups, crs = cg * p.r * p.s;
  const int64_t pixels = p.n * p.out_h() * p.out_w();
  const bool f16 = p.dtype == Dtype::f16;
  const int64_t MR = ks.mr, NR = ks.nr;
  const int64_t kc = blk.kc, mc = blk.mc, nc = blk.nc;
  const PixelOrder order(p, MR);
  // Strided with A read in place: the input as its stride phases instead of padded.
  const bool phased = conv_pixels_phased(p, a_in_place);
  const Phases ph = phases_of(p);
  const int64_t Wp = p.padded_w(), plane = phased ? ph.floats() : p.padded_h() * Wp, image = p.c * plane;
  const float* xp = phased ? phased_input(ks, p, ph, threads, padded_buffer) : padded_input(ks, p, 0, threads, padded_buffer);
  // K is filter-column major here, k = (s * R + r) * C_g + c (W's own order is (c * R + r) * S + s).
  const int64_t taps = p.r * p.s;
  std::vector<int64_t> row_off(static_cast<size_t>(crs));
  if (phased) {
    std::vector<int64_t> tap_off(static_cast<size_t>(taps));
    phase_tap_offsets(p, ph, tap_off.data());
    tap_offsets(p, row_off.data(), TapOrder::filter_column_major, plane, tap_off.data());
  } else {
    tap_offsets(p, row_off.data(), TapOrder::filter_column_major);
  }

  const Units units(pixels, kg, p.groups, mc, nc, threads);
  // Set when W holds a NaN or Inf: then no padding tap is skipped, since 0 times it is NaN (as in float64).
  std::atomic<bool> nonfinite_w{false};

  // W^T packed once: per group, its K blocks in order, each round_up(kg, NR) / NR micro-panels of depth kb.
  // pack_wt reads W's rows in W's order and places each panel row at its filter-column-major K.
  const int64_t b_cols = round_up(kg, NR), b_group = b_cols * crs;
  auto* b_packed = static_cast<float*>(w_buffer.reserve(static_cast<size_t>(p.groups * b_group) * sizeof(float)));
  {
    // Where W's column j (filter-column-major k) lands in a group's packed W^T, for the panel at n0:
    // b_cols * pc + (k - pc) * NR + n0 * kb, with pc and kb the K block of k.
    std::vector<int64_t> dst_base(static_cast<size_t>(crs)), dst_kb(static_cast<size_t>(crs));
    for (int64_t j = 0; j < crs; ++j) {
      const int64_t t = j % taps, k = (t % p.s * p.r + t / p.s) * cg + j / taps, pc = k / kc * kc;
      dst_base[static_cast<size_t>(j)] = b_cols * pc + (k - pc) * NR;
      dst_kb[static_cast<size_t>(j)] = std::min(kc, crs - pc);
    }
    // A channel block's items (one micro-panel, one stretch of kc of W's columns: a thread reads whole
    // stretches of rows) are shared among the threads that multiply it, so a thread reads the W^T it packed.
    const int64_t k_blocks = ceil_div(crs, kc), block_panels = nc / NR, n_panels = b_cols / NR;
    ThreadPool::instance().run(units.threads, [&](int tid) {
      std::vector<int64_t> row_dst(static_cast<size_t>(kc));
      for (int64_t block = 0; block < p.groups * units.col_blocks; ++block) {
        const int64_t g = block / units.col_blocks, cb = block % units.col_blocks;
        const auto [t0, t1] = units.threads_of(g, cb);
        if (tid < t0 || tid > t1) continue;
        const int64_t items = std::min(block_panels, n_panels - cb * block_panels) * k_blocks, share = t1 - t0 + 1;
        for (int64_t it = items * (tid - t0) / share; it < items * (tid - t0 + 1) / share; ++it) {
          const int64_t n0 = (cb * block_panels + it / k_blocks) * NR;
          const int64_t w0 = (it % k_blocks) * kc, wb = std::min(kc, crs - w0);
          for (int64_t j = 0; j < wb; ++j) {
            const auto at = static_cast<size_t>(w0 + j);
            row_dst[static_cast<size_t>(j)] = dst_base[at] + n0 * dst_kb[at];
          }
          const int64_t cols = std::min(NR, kg - n0), at = (g * kg + n0) * crs + w0;
          float* dst = b_packed + g * b_group;
          const bool bad =
              f16 ? ks.conv.pack_wt_f16(static_cast<const uint16_t*>(p.w) + at, crs, wb, cols, row_dst.data(), dst)
                  : ks.conv.pack_wt_f32(static_cast<const float*>(p.w) + at, crs, wb, cols, row_dst.data(), dst);
          if (bad) nonfinite_w.store(true, std::memory_order_relaxed);
        }
      }
    });
  }

  const bool skip_padding = !nonfinite_w.load();
  const PaddingTaps padding_taps(p);
  const bool stream = stream_output(ks, p);
  ThreadPool::instance().run(units.threads, [&](int tid) {
    // The unit's A block and C block side by side in one huge page: physically contiguous, they spread over
    // L2's sets whatever pages the process draws. (Separate huge pages, both starting at set 0, ran 7x7 at
    // 362-382 GFLOPS in eight processes; 4 KiB pages and this layout both at 380-449, within the VM's drift.)
    static thread_local AlignedBuffer block_buffer, run_buffer;
    const int64_t a_floats = round_up(round_up(mc, MR) * kc, 1024);
    auto* a = static_cast<float*>(block_buffer.reserve(static_cast<size_t>(a_floats + mc * nc) * sizeof(float), true));
    float* c = a + a_floats;
    const int64_t panels = ceil_div(mc, MR);
    auto* runs = static_cast<GatherRun*>(run_buffer.reserve(static_cast<size_t>(panels * (MR + 1)) * sizeof(GatherRun)));
    std::vector<int> run_count(static_cast<size_t>(panels)), seg_count(static_cast<size_t>(panels));
    std::vector<int> first_seg(static_cast<size_t>(panels));
    std::vector<Segment> segs(static_cast<size_t>(panels * p.s));
    std::vector<char> started(static_cast<size_t>(panels));
    for (int64_t u = units.first(tid); u < units.first(tid + 1); ++u) {
      const int64_t rb = u % units.row_blocks, cb = u / units.row_blocks % units.col_blocks;
      const int64_t g = u / (units.row_blocks * units.col_blocks);
      const int64_t i0 = rb * mc, mb = std::min(mc, pixels - i0), n0 = cb * nc, nb = std::min(nc, kg - n0);
      const int64_t r_count = ceil_div(mb, MR), q_count = ceil_div(nb, NR);
      const float* base = xp + g * cg * plane;
      for (int64_t r = 0; r < r_count; ++r) {
        const auto ri = static_cast<size_t>(r);
        // In place, where each run's first pixel reads tap (0, 0) of its image's first channel.
        run_count[ri] = phased ? pixel_runs(p, order, ph.pw, 1, image, i0 + r * MR, MR, runs + r * (MR + 1))
                               : pixel_runs(p, order, p.stride_h * Wp, p.stride_w, image, i0 + r * MR, MR,
                                            runs + r * (MR + 1));
        const int64_t rows = std::min(MR, mb - r * MR);
        if (skip_padding) {
          seg_count[ri] = panel_segments(p, order, padding_taps, i0 + r * MR, rows, segs.data() + r * p.s);
        } else {
          segs[static_cast<size_t>(r * p.s)] = {0, crs, 0, static_cast<int>(rows)};
          seg_count[ri] = 1;
        }
        started[ri] = 0;
      }
      for (int64_t pc = 0; pc < crs; pc += kc) {
        const int64_t kb = std::min(kc, crs - pc);
        // Segment j of micro-panel r within this K block: K [lo, hi) relative to pc, empty when lo >= hi.
        auto span = [&](int64_t r, int j) {
          const Segment& seg = segs[static_cast<size_t>(r * p.s + j)];
          return std::pair<int64_t, int64_t>{std::max(pc, seg.k_lo) - pc, std::min(pc + kb, seg.k_hi) - pc};
        };
        // Each micro-panel's segments in this block are gathered, and the one with the most rows is found: it
        // goes first, since a tile's first product writes its rows instead of adding to them, and the rows
        // outside a narrower first segment would have to be zeroed. None (-1): the panel has nothing here.
        for (int64_t r = 0; r < r_count; ++r) {
          const Segment* seg = segs.data() + r * p.s;
          int& first = first_seg[static_cast<size_t>(r)];
          first = -1;
          for (int j = 0; j < seg_count[static_cast<size_t>(r)]; ++j) {
            const auto [lo, hi] = span(r, j);
            if (lo >= hi) continue;
            if (!a_in_place) {
              ks.conv.pack_a_gather(hi - lo, base, row_off.data() + pc + lo, runs + r * (MR + 1),
                                    run_count[static_cast<size_t>(r)], a + r * MR * kb + lo * MR);
            }
            if (first < 0 || seg[j].row_hi - seg[j].row_lo > seg[first].row_hi - seg[first].row_lo) first = j;
          }
        }
        const float* b_block = b_packed + g * b_group + b_cols * pc + n0 * kb;
        for (int64_t q = 0; q < q_count; ++q) {
          const int cols = static_cast<int>(std::min(NR, nb - q * NR));
          for (int64_t r = 0; r < r_count; ++r) {
            const int rows = static_cast<int>(std::min(MR, mb - r * MR));
            float* tile = c + r * MR * nc + q * NR;
            bool accumulate = started[static_cast<size_t>(r)] != 0;
            const Segment* seg0 = segs.data() + r * p.s;
            const int count = seg_count[static_cast<size_t>(r)], first = first_seg[static_cast<size_t>(r)];
            for (int n = 0; first >= 0 && n < count; ++n) {  // first, then the others in order
              const int j = n == 0 ? first : (n <= first ? n - 1 : n);
              const auto [lo, hi] = span(r, j);
              if (lo >= hi) continue;
              const Segment& seg = seg0[j];
              if (!accumulate && (seg.row_lo > 0 || seg.row_hi < rows)) {
                for (int i = 0; i < rows; ++i) std::fill_n(tile + i * nc, cols, 0.0f);
                accumulate = true;
              }
              if (a_in_place) {  // run by run: each run's pixels are consecutive in the input as laid out
                const GatherRun* run = runs + r * (MR + 1);
                for (int t = 0; t < run_count[static_cast<size_t>(r)]; ++t) {
                  const int from = std::max(seg.row_lo, run[t].col), to = std::min(seg.row_hi, run[t].col + run[t].len);
                  if (from >= to) continue;
                  ks.conv.ukernel_a_rows(hi - lo, base + run[t].off + (from - run[t].col), row_off.data() + pc + lo,
                                         b_block + q * NR * kb + lo * NR, tile + from * nc, nc, accumulate, to - from,
                                         cols);
                }
              } else {
                ks.gemm.ukernel(hi - lo, a + r * MR * kb + lo * MR + seg.row_lo, b_block + q * NR * kb + lo * NR,
                                tile + seg.row_lo * nc, nc, accumulate, seg.row_hi - seg.row_lo, cols);
              }
              accumulate = true;
            }
          }
        }
        for (int64_t r = 0; r < r_count; ++r) {
          if (first_seg[static_cast<size_t>(r)] >= 0) started[static_cast<size_t>(r)] = 1;
        }
      }
      // Pixels whose every tap reads padding: their outputs are zero.
      for (int64_t r = 0; r < r_count; ++r) {
        if (started[static_cast<size_t>(r)] != 0) continue;
        for (int64_t i = r * MR; i < std::min(mb, (r + 1) * MR); ++i) std::fill_n(c + i * nc, nb, 0.0f);
      }
      copy_out_transposed(ks, p, order, c, nc, i0, mb, g, n0, nb, stream);
    }
#if defined(__x86_64__)
    if (stream) _mm_sfence();  // the streamed lines reach memory before the pool reports this thread done
#endif
  });
}

}  // namespace opbench

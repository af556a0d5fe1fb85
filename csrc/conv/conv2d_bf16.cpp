// bf16 conv2d forward on the bf16 GEMM (pairs packing, fp32 sums, one rounding: the GEMM's error bound). Per
// group, patch rows (one per output pixel, all images; zeros where a tap reads padding) are written out in
// bf16 in chunks of rows (kChunkBytes) and multiplied as they come, with output pixels as the GEMM's rows:
//   Y^T[pixels, K_g] = patches * W_g^T (W_g read as B^T), then each chunk's Y^T is transposed into y (NCHW).
// The GEMM has many rows to split and W is packed once per chunk. A 1x1 convolution at stride 1 without
// padding on a plane of at least kInPlacePixels multiplies Y[K_g, P*Q] = W_g * x[C_g, P*Q] per image
// instead, x read in place as B, nothing copied.
// Patch columns come in one of two orders:
// - (r, s, c), where there are more pixels than filters: x is copied once to NHWC, so that a patch row is
//   R runs of S*C contiguous halves (R*S runs of C_g with groups or dilation along w), and W is reordered
//   once per call to (k, r, s, c);
// - (c, r, s), W's own order, where there are at most as many pixels (all images) as filters: each element
//   is read from x (NCHW) by itself, which costs less than reordering W (K*C*R*S elements: a third of the
//   samples of a 7x7 3x3 layer 512 -> 512 at batch 2 in (r, s, c) order).
// Measured on 2 Zen 5 cores (ResNet-50 shapes, batch 2, this file's ways against each other in one process,
// benchmarks/ab_builds.py style): the whole im2col written per image and W * col ran the 3x3s at half of
// torch's oneDNN (the GEMM has only K_g rows, and writing im2col took as long as the GEMM); pixels as rows
// brought them to 0.8-1.0x. 1x1 in place against pixels as rows: 28^2 1.21-1.58x, 14^2 1.15-1.53x, 7^2
// 0.97x. Filters as rows (Y = W_g * patches^T straight into y, no transposition) ran 3x3 64 -> 64 at 56^2
// 1.12-1.14x faster while the transpositions were scalar; once they ran on transpose_halves, pixels as rows
// was as fast or faster (0.99-1.07x over 3x3 layers of 48-64 filters), and that way was dropped.
#include <algorithm>
#include <cstring>
#include <vector>

#include "opbench/aligned.hpp"
#include "opbench/conv.hpp"
#include "opbench/limits.hpp"
#include "opbench/thread_pool.hpp"

namespace opbench {

namespace {

constexpr int64_t kInPlacePixels = 128;
constexpr int64_t kChunkBytes = int64_t(8) << 20;  // patches written out per chunk of rows
constexpr int64_t kMinChunkRows = 1024;            // (fewer rows would repack W for little work)

int64_t chunk_rows(const ConvProblem& p) {
  const int64_t row_bytes = p.r * p.s * (p.c / p.groups) * 2, rows = p.n * p.out_h() * p.out_w();
  return std::min(rows, std::max(kMinChunkRows, kChunkBytes / std::max<int64_t>(1, row_bytes)));
}

// Copies n halves, or zeros them when src is null: a library call from 8 halves up (the 7x7 stem's filter
// rows are runs of 21: 1.13x faster than an inline loop), inline below.
inline void copy_or_zero(uint16_t* dst, const uint16_t* src, int64_t n) {
  if (n >= 8) {
    if (src != nullptr) {
      std::memcpy(dst, src, sizeof(uint16_t) * n);
    } else {
      std::memset(dst, 0, sizeof(uint16_t) * n);
    }
  } else if (src != nullptr) {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = 0;
  }
}

// Patch rows [row_lo, row_hi) (global pixel index over all images) of group g from NHWC x: columns (r, s, c).
// Without dilation along w and with one group, a filter row's S taps are one run of S*C halves in NHWC.
void patch_rows(const ConvProblem& p, const uint16_t* nhwc, int64_t g, int64_t row_lo, int64_t row_hi,
                uint16_t* dst, int64_t ld) {
  const int64_t P = p.out_h(), Q = p.out_w(), cg = p.c / p.groups;
  const bool taps_run = p.dil_w == 1 && p.groups == 1;
  for (int64_t row = row_lo; row < row_hi; ++row, dst += ld) {
    const int64_t img = row / (P * Q), oh = (row / Q) % P, ow = row % Q;
    const int64_t iw0 = ow * p.stride_w - p.pad_w;
    uint16_t* out = dst;
    for (int64_t r = 0; r < p.r; ++r) {
      const int64_t ih = oh * p.stride_h - p.pad_h + r * p.dil_h;
      const uint16_t* line = ih >= 0 && ih < p.h ? nhwc + (img * p.h + ih) * p.w_in * p.c + g * cg : nullptr;
      if (taps_run) {  // taps [s_lo, s_hi) inside the row, zeros around them
        const int64_t s_lo = line == nullptr ? p.s : std::clamp<int64_t>(-iw0, 0, p.s);
        const int64_t s_hi = line == nullptr ? p.s : std::clamp<int64_t>(p.w_in - iw0, s_lo, p.s);
        copy_or_zero(out, nullptr, s_lo * cg);
        if (s_hi > s_lo) copy_or_zero(out + s_lo * cg, line + (iw0 + s_lo) * p.c, (s_hi - s_lo) * cg);
        copy_or_zero(out + s_hi * cg, nullptr, (p.s - s_hi) * cg);
        out += p.s * cg;
        continue;
      }
      for (int64_t s = 0; s < p.s; ++s, out += cg) {
        const int64_t iw = iw0 + s * p.dil_w;
        copy_or_zero(out, line != nullptr && iw >= 0 && iw < p.w_in ? line + iw * p.c : nullptr, cg);
      }
    }
  }
}

// The same rows in W's order (c, r, s), read from x in NCHW. A pixel's R*S taps land at the same offsets in
// every channel's plane (or in padding): those are found once per pixel, then each channel's taps are copied
// through them (element by element with the bounds tested per tap, this took 28% of a 7x7 3x3 layer).
void patch_rows_nchw(const ConvProblem& p, const uint16_t* x, int64_t g, int64_t row_lo, int64_t row_hi,
                     uint16_t* dst_rows, int64_t ld) {
  const int64_t P = p.out_h(), Q = p.out_w(), cg = p.c / p.groups, HW = p.h * p.w_in, RS = p.r * p.s;
  std::vector<int64_t> tap(static_cast<size_t>(RS));  // offset in a plane, or -1: padding
  for (int64_t row = row_lo; row < row_hi; ++row) {
    const int64_t img = row / (P * Q), oh = (row / Q) % P, ow = row % Q;
    bool all_inside = true;
    for (int64_t r = 0; r < p.r; ++r) {
      const int64_t ih = oh * p.stride_h - p.pad_h + r * p.dil_h;
      for (int64_t s = 0; s < p.s; ++s) {
        const int64_t iw = ow * p.stride_w - p.pad_w + s * p.dil_w;
        const bool inside = ih >= 0 && ih < p.h && iw >= 0 && iw < p.w_in;
        tap[static_cast<size_t>(r * p.s + s)] = inside ? ih * p.w_in + iw : -1;
        all_inside = all_inside && inside;
      }
    }
    const uint16_t* plane = x + (img * p.c + g * cg) * HW;
    uint16_t* dst = dst_rows + (row - row_lo) * ld;
    const int64_t* t = tap.data();
    for (int64_t c = 0; c < cg; ++c, plane += HW, dst += RS) {
      if (all_inside) {
        for (int64_t k = 0; k < RS; ++k) dst[k] = plane[t[k]];
      } else {
        for (int64_t k = 0; k < RS; ++k) dst[k] = t[k] >= 0 ? plane[t[k]] : uint16_t(0);
      }
    }
  }
}

// Splits [0, n) between the pool's threads.
template <class F>
void parallel_rows(int threads, int64_t n, F&& f) {
  const int t = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, n)));
  ThreadPool::instance().run(t, [&](int tid) { f(n * tid / t, n * (tid + 1) / t); });
}

// A 1x1 convolution at stride 1 without padding on a large plane: x itself is the GEMM's B (nothing copied).
bool reads_x_as_col(const ConvProblem& p) {
  return p.r == 1 && p.s == 1 && p.stride_h == 1 && p.stride_w == 1 && p.padded_h() == p.h && p.padded_w() == p.w_in &&
         p.h * p.w_in >= kInPlacePixels;
}

// Patch rows in W's order (c, r, s), read from x in place, instead of x in NHWC and W reordered.
bool patches_in_w_order(const ConvProblem& p) { return p.r * p.s > 1 && p.n * p.out_h() * p.out_w() <= p.k; }

}  // namespace

ConvPath conv2d_bf16_way(const ConvProblem& p) {
  if (reads_x_as_col(p)) return ConvPath::bf16_x_as_col;
  return patches_in_w_order(p) ? ConvPath::bf16_patches_w_order : ConvPath::bf16_patches_nhwc;
}

ConvGemmDims conv2d_bf16_gemm_dims(const ConvProblem& p, ConvPath path) {
  const int64_t PQ = p.out_h() * p.out_w(), kg = p.k / p.groups, crs = (p.c / p.groups) * p.r * p.s;
  if (path == ConvPath::bf16_x_as_col) return {kg, PQ, crs};
  return {chunk_rows(p), kg, crs};
}

int64_t conv2d_bf16_workspace_bytes(const KernelSet& ks, const ConvProblem& p, const Blocking& blk, ConvPath path,
                                    int threads) {
  using checked::add;
  using checked::mul;
  const int64_t PQ = mul(p.out_h(), p.out_w(), "output pixels"), cg = p.c / p.groups, kg = p.k / p.groups;
  const int64_t crs = mul(cg, p.r * p.s, "patch width");
  if (is_depthwise(path)) {  // the direct fp32 loop (depthwise.cpp), not the bf16 GEMM
    return mul(depthwise_workspace_floats(ks, p, path, threads), int64_t(sizeof(float)), "depthwise scratch");
  }
  if (path == ConvPath::bf16_x_as_col) {
    const GemmProblem per_image = gemm_product(Dtype::bf16, Dtype::bf16, nullptr, crs, false, nullptr, PQ, false,
                                               nullptr, PQ, kg, PQ, crs, false);
    return gemm_workspace_bytes(ks, per_image, blk, threads);
  }
  const int64_t rows = chunk_rows(p);
  const int64_t nhwc = mul(mul(p.n, p.c, "NHWC copy"), mul(p.h, p.w_in, "NHWC copy"), "NHWC copy");
  const int64_t weights = mul(p.k, crs + 1, "reordered filter");
  const int64_t chunks = add(mul(rows, crs + 1, "patches"), mul(rows, p.k, "Y^T"), "bf16 conv");
  const int64_t buffers = add(add(nhwc, weights, "bf16 conv"), chunks, "bf16 conv");
  const GemmProblem chunk = gemm_product(Dtype::bf16, Dtype::bf16, nullptr, crs + 1, false, nullptr, crs + 1, true,
                                         nullptr, p.k, rows, kg, crs, false);
  const int64_t gemm = gemm_workspace_bytes(ks, chunk, blk, threads);
  return add(mul(buffers, 2, "bf16 conv workspace"), gemm, "bf16 conv workspace");
}

void conv2d_bf16(const KernelSet& ks, const ConvProblem& p, const Blocking& blk, ConvPath path, int threads) {
  const int64_t P = p.out_h(), Q = p.out_w(), PQ = P * Q, HW = p.h * p.w_in;
  const int64_t cg = p.c / p.groups, kg = p.k / p.groups, RS = p.r * p.s, crs = cg * RS;
  const auto* x = static_cast<const uint16_t*>(p.x);
  const auto* w = static_cast<const uint16_t*>(p.w);
  auto* y = static_cast<uint16_t*>(p.y);
  if (path == ConvPath::bf16_x_as_col) {
    for (int64_t img = 0; img < p.n; ++img) {
      for (int64_t g = 0; g < p.groups; ++g) {
        gemm(ks,
             gemm_product(Dtype::bf16, Dtype::bf16, w + g * kg * crs, crs, false, x + (img * p.c + g * cg) * HW, PQ,
                          false, y + (img * p.k + g * kg) * PQ, PQ, kg, PQ, crs, false),
             blk, threads);
      }
    }
    return;
  }

  static thread_local AlignedBuffer nhwc_buffer, w_buffer, patch_buffer, yt_buffer;
  const int64_t rows_per_chunk = chunk_rows(p), total = p.n * PQ;
  const bool w_order = path == ConvPath::bf16_patches_w_order;
  uint16_t* nhwc = nullptr;
  // (1x1 filters are (k, c) already.)
  // Patch rows (and W reordered) an even number of halves apart: the pairs packing of A and of B^T moves
  // whole 32-bit pairs only along rows that start on a pair (an odd patch, the 7x7 stem's 147, packed
  // element by element: 17% of its samples).
  const int64_t ldp = round_up(crs, 2);
  const uint16_t* wt = w;
  int64_t ldw = crs;
  if (RS > 1 && !w_order) {
    auto* reordered = static_cast<uint16_t*>(w_buffer.reserve(static_cast<size_t>(p.k * ldp) * 2));
    ldw = ldp;
    parallel_rows(threads, p.k, [&](int64_t lo, int64_t hi) {
      // Each filter's (c, rs) block read in order, its RS taps stored to RS streams (a 32 x 32 tiled
      // transpose of these RS-wide rows took a third of a 7x7 3x3 conv's samples).
      for (int64_t k = lo; k < hi; ++k) {
        const uint16_t* src = w + k * crs;
        uint16_t* dst = reordered + k * ldp;
        for (int64_t c = 0; c < cg; ++c, src += RS) {
          for (int64_t rs = 0; rs < RS; ++rs) dst[rs * cg + c] = src[rs];
        }
      }
    });
    wt = reordered;
  }
  auto* patches = static_cast<uint16_t*>(patch_buffer.reserve(static_cast<size_t>(rows_per_chunk * ldp) * 2));
  auto* yt = static_cast<uint16_t*>(yt_buffer.reserve(static_cast<size_t>(rows_per_chunk * p.k) * 2));

  // x (per image C x HW) -> NHWC (HW x C); W (k, c, rs) -> (k, rs, c) above.
  if (!w_order) {
    nhwc = static_cast<uint16_t*>(nhwc_buffer.reserve(static_cast<size_t>(p.n * p.c * HW) * 2));
    parallel_rows(threads, HW, [&](int64_t lo, int64_t hi) {  // threads split the pixels of every image
      for (int64_t img = 0; img < p.n; ++img) {
        ks.gemm.transpose_halves(x + img * p.c * HW + lo, HW, p.c, hi - lo, nhwc + (img * HW + lo) * p.c, p.c);
      }
    });
  }

  for (int64_t r0 = 0; r0 < total; r0 += rows_per_chunk) {
    const int64_t rows = std::min(rows_per_chunk, total - r0);
    for (int64_t g = 0; g < p.groups; ++g) {
      parallel_rows(threads, rows, [&](int64_t lo, int64_t hi) {
        if (w_order) {
          patch_rows_nchw(p, x, g, r0 + lo, r0 + hi, patches + lo * ldp, ldp);
        } else {
          patch_rows(p, nhwc, g, r0 + lo, r0 + hi, patches + lo * ldp, ldp);
        }
      });
      gemm(ks,
           gemm_product(Dtype::bf16, Dtype::bf16, patches, ldp, false, wt + g * kg * ldw, ldw, true, yt + g * kg, p.k,
                        rows, kg, crs, false),
           blk, threads);
    }
    // Y^T rows [r0, r0 + rows) -> y: each image's stretch of pixels, transposed.
    parallel_rows(threads, rows, [&](int64_t lo, int64_t hi) {  // threads split the rows (whole lines of Y^T)
      const int64_t first = r0;
      for (int64_t row = first + lo; row < first + hi;) {
        const int64_t img = row / PQ, pix = row % PQ, len = std::min(PQ - pix, first + hi - row);
        ks.gemm.transpose_halves(yt + (row - first) * p.k, p.k, len, p.k, y + img * p.k * PQ + pix, PQ);
        row += len;
      }
    });
  }
}

}  // namespace opbench

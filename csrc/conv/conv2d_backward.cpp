// Conv2d backward (see backward.hpp). dW: from the image read in place against dY's panels
// (conv2d_weights.cpp), or, where x holds a NaN or an Inf, per image, group and block of output pixels from
// the block's im2col rows gathered into a bounded tile T (CRS x block) on the blocked GEMM. dX: at stride 1
// the forward convolution of dY with the flipped filter; otherwise dX's columns computed into the same tile
// and scattered back (col2im). Threads split the GEMMs, the gather and the scatter. Depthwise convolutions
// go to their own direct loops (depthwise_backward.cpp).
#include <algorithm>
#include <cstring>
#include <vector>

#include "conv2d_weights.hpp"
#include "depthwise_phases.hpp"
#include "opbench/aligned.hpp"
#include "opbench/backward.hpp"
#include "opbench/cpu.hpp"
#include "opbench/limits.hpp"
#include "opbench/thread_pool.hpp"

namespace opbench {

namespace {

// Where output pixel column j of a block starts in the input, for the tap (r, s) of a CRS row: rows of the
// block are walked output row by output row, each a stretch of consecutive output columns.
struct Geometry {
  int64_t C, H, W, K, R, S, P, Q, G, Cg, Kg, RS, CRS, PQ;
  int64_t sh, sw, ph, pw, dh, dw;
  explicit Geometry(const ConvProblem& p)
      : C(p.c), H(p.h), W(p.w_in), K(p.k), R(p.r), S(p.s), P(p.out_h()), Q(p.out_w()), G(p.groups),
        Cg(p.c / p.groups), Kg(p.k / p.groups), RS(p.r * p.s), CRS(p.c / p.groups * p.r * p.s),
        PQ(p.out_h() * p.out_w()), sh(p.stride_h), sw(p.stride_w), ph(p.pad_h), pw(p.pad_w), dh(p.dil_h),
        dw(p.dil_w) {}
};

// For row `crs` of the tile and the block's pixels [p0, p0 + nb): calls f(j, at, len) for each run of
// consecutive output columns whose tap lands inside the image: tile columns [j, j + len) meet input
// elements at, at + sw, ... (input index h * W + w). Taps in the padding are zero in im2col and receive
// nothing in col2im.
template <class F>
void for_each_run(const Geometry& g, int64_t crs, int64_t p0, int64_t nb, F&& f) {
  const int64_t tap = crs % g.RS, r = tap / g.S, s = tap % g.S;
  const int64_t base = s * g.dw - g.pw;  // w = ow * sw + base
  const int64_t lo_all = base >= 0 ? 0 : (-base + g.sw - 1) / g.sw;
  const int64_t hi_all = g.W - 1 - base < 0 ? 0 : (g.W - 1 - base) / g.sw + 1;
  int64_t j = 0;
  while (j < nb) {
    const int64_t pix = p0 + j, oh = pix / g.Q, ow0 = pix % g.Q;
    const int64_t len = std::min(g.Q - ow0, nb - j);
    const int64_t h = oh * g.sh - g.ph + r * g.dh;
    if (h >= 0 && h < g.H) {
      const int64_t lo = std::max(lo_all, ow0), hi = std::min(hi_all, ow0 + len);
      if (hi > lo) f(j + (lo - ow0), h * g.W + lo * g.sw + base, hi - lo);
    }
    j += len;
  }
}

// At stride 1 (and padding within the dilated filter) dX is a forward convolution of dY with the filter
// flipped and its channels exchanged, W'[c][k][R-1-r][S-1-s] = W[k][c][r][s], padded by dil*(R-1) - pad:
// the forward implicit GEMM, whose depth (K/groups x R x S) keeps the micro-kernel busy, where the col2im
// path's product is only K/groups deep.
bool data_gradient_as_conv(const ConvProblem& p) {
  return p.stride_h == 1 && p.stride_w == 1 && std::max(p.pad_h, p.pad_bottom()) <= p.dil_h * (p.r - 1) &&
         std::max(p.pad_w, p.pad_right()) <= p.dil_w * (p.s - 1);
}

// A 1x1 filter at stride 1 without padding: the im2col rows are x's planes, read in place as dW's A (and dX
// is the flipped-filter, here the transposed 1x1, convolution).
bool x_is_im2col(const ConvProblem& p) {
  return p.r == 1 && p.s == 1 && p.stride_h == 1 && p.stride_w == 1 && p.out_h() == p.h && p.out_w() == p.w_in;
}

ConvProblem data_gradient_conv(const ConvProblem& p, const float* dy, const float* w_flipped, float* dx) {
  ConvProblem q;
  q.dtype = Dtype::f32;
  q.x = dy;
  q.w = w_flipped;
  q.y = dx;
  q.n = p.n;
  q.c = p.k;
  q.h = p.out_h();
  q.w_in = p.out_w();
  q.k = p.c;
  q.r = p.r;
  q.s = p.s;
  q.pad_h = p.dil_h * (p.r - 1) - p.pad_h;
  q.pad_w = p.dil_w * (p.s - 1) - p.pad_w;
  q.pad_h_end = p.dil_h * (p.r - 1) - p.pad_bottom();  // the output (dx) is H x W: the sides swap roles
  q.pad_w_end = p.dil_w * (p.s - 1) - p.pad_right();
  q.dil_h = p.dil_h;
  q.dil_w = p.dil_w;
  q.groups = p.groups;
  return q;
}

void flip_filter(const Geometry& g, const float* w, float* out) {
  for (int64_t grp = 0; grp < g.G; ++grp) {
    for (int64_t k = 0; k < g.Kg; ++k) {
      for (int64_t c = 0; c < g.Cg; ++c) {
        for (int64_t r = 0; r < g.R; ++r) {
          for (int64_t s = 0; s < g.S; ++s) {
            out[(((grp * g.Cg + c) * g.Kg + k) * g.R + (g.R - 1 - r)) * g.S + (g.S - 1 - s)] =
                w[(((grp * g.Kg + k) * g.Cg + c) * g.R + r) * g.S + s];
          }
        }
      }
    }
  }
}

}  // namespace

const char* conv2d_backward_path(const ConvProblem& p) {
  if (conv2d_is_depthwise(p)) return "direct depthwise: dW as tap dot products, dX as the transposed taps (tiles do not apply)";
  if (x_is_im2col(p)) return "1x1: dW from x's rows in place against dY's panels; dX as the transposed 1x1 forward conv";
  if (data_gradient_as_conv(p)) {
    return "dW from the padded image's rows in place against dY's panels (im2col tiles where x holds NaN or Inf); dX as "
           "the flipped-filter forward conv";
  }
  return "dW from the padded image's stride phases in place against dY's panels (im2col tiles where x holds NaN or "
         "Inf); dX by col2im of tiles per pixel block";
}

int64_t conv2d_backward_pixel_block(const ConvProblem& p, int64_t given) {
  const Geometry g(p);
  if (given > 0) return std::min(given, g.PQ);
  const int64_t half_l2 = std::max<int64_t>(cpu_info().l2.size_bytes / 2, 128 << 10);
  const int64_t fit = std::max<int64_t>(16, half_l2 / (4 * g.CRS) / 16 * 16);
  return std::min(g.PQ, fit);
}

int64_t conv2d_backward_workspace_bytes(const KernelSet& ks, const ConvBackwardProblem& p, const Blocking& blk,
                                        int threads) {
  using checked::add;
  using checked::mul;
  const Geometry g(p.conv);
  const int64_t nb = conv2d_backward_pixel_block(p.conv, p.pixel_block);
  const int64_t n = p.conv.n;
  const int64_t tile = mul(g.CRS, nb, "conv backward tile");
  const int64_t dw32 = mul(g.K, g.CRS, "weight gradient");
  const int64_t dwt = dw32;
  const int64_t f16 = p.conv.dtype == Dtype::f16
                          ? add(add(mul(mul(n, g.K, "dy"), g.PQ, "dy"), mul(mul(n, g.C, "x"), g.H * g.W, "x"), "fp16"),
                                add(mul(mul(n, g.C, "dx"), g.H * g.W, "dx"), dw32, "fp16"), "fp16")
                          : 0;
  if (conv2d_is_depthwise(p.conv)) {
    return mul(add(f16, depthwise_backward_workspace_floats(p.conv, threads), "conv backward"), int64_t(sizeof(float)),
               "conv backward");
  }
  const int64_t gemm_ws = std::max(
      gemm_workspace_bytes(ks, f32_product(nullptr, 0, false, nullptr, 0, true, nullptr, 0, g.CRS, g.Kg, nb, true), blk,
                           threads),
      gemm_workspace_bytes(ks, f32_product(nullptr, 0, true, nullptr, 0, false, nullptr, 0, g.CRS, nb, g.Kg, false), blk,
                           threads));
  int64_t as_conv = 0;
  if (data_gradient_as_conv(p.conv)) {
    const ConvProblem q = data_gradient_conv(p.conv, nullptr, nullptr, nullptr);
    as_conv = add(plan_conv2d(ks, q, Blocking{}, threads).workspace_bytes, mul(dw32, int64_t(sizeof(float)), "flipped filter"), "conv backward");
  }
  return add(add(add(mul(add(add(tile, dwt, "conv backward"), f16, "conv backward"), int64_t(sizeof(float)),
                         "conv backward"),
                     gemm_ws, "conv backward"),
                 as_conv, "conv backward"),
             conv2d_weights_workspace_bytes(ks, p.conv, threads), "conv backward");
}

void conv2d_backward(const KernelSet& ks, const ConvBackwardProblem& p, const Blocking& blk, int threads) {
  static thread_local AlignedBuffer tile_buffer, x_buffer, w_buffer, dy_buffer, dx_buffer, dw_buffer, flip_buffer, dwt_buffer;
  const ConvProblem& cp = p.conv;
  const Geometry g(cp);
  const int64_t N = cp.n, HW = g.H * g.W, nb_max = conv2d_backward_pixel_block(cp, p.pixel_block);
  const float* x = f32_view(ks, x_buffer, cp.dtype, cp.x, N * g.C * HW);
  const float* w = f32_view(ks, w_buffer, cp.dtype, cp.w, g.K * g.CRS);
  const float* dy = f32_view(ks, dy_buffer, cp.dtype, p.dy, N * g.K * g.PQ);
  float* dx = f32_out(dx_buffer, cp.dtype, p.dx, N * g.C * HW);
  float* dw = f32_out(dw_buffer, cp.dtype, p.dw, g.K * g.CRS);
  if (conv2d_is_depthwise(cp)) {
    conv2d_depthwise_backward(ks, cp, x, w, dy, dx, dw, threads);
    f32_finish(ks, cp.dtype, dx, p.dx, N * g.C, HW);
    f32_finish(ks, cp.dtype, dw, p.dw, g.K, g.CRS);
    return;
  }
  float* tile = static_cast<float*>(tile_buffer.reserve(static_cast<size_t>(g.CRS * nb_max) * sizeof(float)));
  // dW accumulates transposed, per group CRS x Kg, and is transposed into place at the end.
  float* dwt = static_cast<float*>(dwt_buffer.reserve(static_cast<size_t>(g.K * g.CRS) * sizeof(float)));
  const bool as_conv = data_gradient_as_conv(cp);
  const bool x_in_place = x_is_im2col(cp);
  if (as_conv) {
    float* flipped = static_cast<float*>(flip_buffer.reserve(static_cast<size_t>(g.K * g.CRS) * sizeof(float)));
    flip_filter(g, w, flipped);
    const ConvProblem q = data_gradient_conv(cp, dy, flipped, dx);
    conv2d(ks, q, plan_conv2d(ks, q, Blocking{}, threads));
  } else {
    std::memset(dx, 0, static_cast<size_t>(N * g.C * HW) * sizeof(float));
  }
  // dW without im2col (conv2d_weights.cpp); with dX from the flipped-filter conv, nothing is left for the
  // pixel blocks below.
  const bool weights_done = conv2d_weights(ks, cp, x, dy, dw, threads);
  ThreadPool& pool = ThreadPool::instance();
  const int row_threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, g.CRS)));
  const int chan_threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, g.Cg)));

  for (int64_t n = 0; n < (weights_done && as_conv ? 0 : N); ++n) {
    for (int64_t grp = 0; grp < g.G; ++grp) {
      const float* x_g = x + (n * g.C + grp * g.Cg) * HW;
      const float* dy_g = dy + (n * g.K + grp * g.Kg) * g.PQ;
      const float* w_g = w + grp * g.Kg * g.CRS;
      float* dx_g = dx + (n * g.C + grp * g.Cg) * HW;
      float* dwt_g = dwt + grp * g.CRS * g.Kg;
      for (int64_t p0 = 0; p0 < g.PQ; p0 += nb_max) {
        const int64_t nb = std::min(nb_max, g.PQ - p0);
        if (!weights_done && x_in_place) {
          // dW_g^T (CRS x Kg) (+)= x_g's block (its im2col rows, read in place) * dY_g[:, block]^T
          gemm(ks, f32_product(x_g + p0, HW, false, dy_g + p0, g.PQ, true, dwt_g, g.Kg, g.CRS, g.Kg, nb, n > 0 || p0 > 0),
               blk, threads);
        } else if (!weights_done) {
          // T = the block's im2col rows (zero where a tap falls in the padding).
          pool.run(row_threads, [&](int tid) {
            for (int64_t crs = g.CRS * tid / row_threads; crs < g.CRS * (tid + 1) / row_threads; ++crs) {
              float* row = tile + crs * nb;
              std::memset(row, 0, static_cast<size_t>(nb) * sizeof(float));
              const float* plane = x_g + (crs / g.RS) * HW;
              for_each_run(g, crs, p0, nb, [&](int64_t j, int64_t at, int64_t len) {
                if (g.sw == 1) {
                  std::memcpy(row + j, plane + at, static_cast<size_t>(len) * sizeof(float));
                } else {
                  for (int64_t i = 0; i < len; ++i) row[j + i] = plane[at + i * g.sw];
                }
              });
            }
          });
          // dW_g^T (CRS x Kg) (+)= T (CRS x nb) * dY_g[:, block]^T: T's CRS rows are the long side, packed as
          // A; dY's Kg x nb block is read as B^T. (dW_g = dY T^T would pack all of T as B for only Kg rows.)
          gemm(ks, f32_product(tile, nb, false, dy_g + p0, g.PQ, true, dwt_g, g.Kg, g.CRS, g.Kg, nb, n > 0 || p0 > 0),
               blk, threads);
        }
        if (as_conv) continue;  // dX came from the flipped-filter convolution
        // T = W_g^T (CRS x Kg) * dY_g[:, block] (Kg x nb): W_g is Kg x CRS, read as A^T.
        gemm(ks, f32_product(w_g, g.CRS, true, dy_g + p0, g.PQ, false, tile, nb, g.CRS, nb, g.Kg, false), blk, threads);
        // dX_g += col2im(T); threads take whole channels, whose planes no other thread touches.
        pool.run(chan_threads, [&](int tid) {
          for (int64_t c = g.Cg * tid / chan_threads; c < g.Cg * (tid + 1) / chan_threads; ++c) {
            float* plane = dx_g + c * HW;
            for (int64_t crs = c * g.RS; crs < (c + 1) * g.RS; ++crs) {
              const float* row = tile + crs * nb;
              for_each_run(g, crs, p0, nb, [&](int64_t j, int64_t at, int64_t len) {
                for (int64_t i = 0; i < len; ++i) plane[at + i * g.sw] += row[j + i];
              });
            }
          }
        });
      }
    }
  }
  for (int64_t grp = 0; grp < (weights_done ? 0 : g.G); ++grp) {
    for (int64_t crs = 0; crs < g.CRS; ++crs) {
      for (int64_t k = 0; k < g.Kg; ++k) dw[(grp * g.Kg + k) * g.CRS + crs] = dwt[(grp * g.CRS + crs) * g.Kg + k];
    }
  }
  f32_finish(ks, cp.dtype, dx, p.dx, N * g.C, HW);
  f32_finish(ks, cp.dtype, dw, p.dw, g.K, g.CRS);
}

}  // namespace opbench

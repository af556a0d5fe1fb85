// The depthwise convolution's backward (one input channel per group, as conv2d_is_depthwise), as direct loops
// over planes like its forward (depthwise.cpp) instead of the im2col products of conv2d_backward.cpp: one
// group's products there are (R*S) x mult x pixels, a register tile with nothing to reuse, and a call of
// the blocked GEMM per image and group.
//
// Per (channel, image) plane a thread
//  - builds the forward's zero-padded phases of the input plane, and adds to dW[k][t] the dot product of dY's
//    plane k with tap t's shifted input rows (the kernel set's depthwise_dot: dY's vectors loaded once for
//    all taps);
//  - lays dY's planes out on the phases' grid (rows pw apart, zeros around them), where dX's padded plane is a
//    gather again: phase f of it is the sum over the taps t of phase f of w[k][t] times dY shifted by the tap,
//    the forward's row kernel (depthwise_row) over the whole phase. At stride 1 with a 3x3 filter and one
//    output channel per input channel this is the forward's 3x3 kernel with the filter flipped, written
//    straight into dX; otherwise the phases are dealt back to dX's rows.
// Threads take whole planes in channel-major order (dX planes are theirs alone) and sum dW in a partial of
// their own; the partials are added in thread order at the end.
#include <algorithm>
#include <cstring>
#include <vector>

#include "depthwise_phases.hpp"
#include "opbench/aligned.hpp"
#include "opbench/backward.hpp"
#include "opbench/limits.hpp"
#include "opbench/thread_pool.hpp"

namespace opbench {

namespace {

struct Layout {
  ConvProblem q;  // the geometry in fp32 (the views conv2d_backward made)
  Phases g;
  std::vector<int64_t> off;  // tap offsets within the phases (phase_tap_offsets)
  int64_t margin = 0;        // the largest shift of a tap within its phase: dY's place in its grid buffer
  int64_t grid = 0;          // floats of one dY grid buffer
  bool dense3x3 = false;     // dX by the forward's 3x3 kernel, flipped filter, straight into dX

  explicit Layout(const ConvProblem& p) : q(p), g(), off(static_cast<size_t>(p.r * p.s)) {
    q.dtype = Dtype::f32;
    g = phases_of(q);
    phase_tap_offsets(q, g, off.data());
    for (int64_t o : off) margin = std::max(margin, o % (g.ph * g.pw));
    grid = margin + g.ph * g.pw;
    dense3x3 = p.k == p.c && dense_3x3(p);
  }
  int64_t per_thread_floats(int64_t mult) const {
    using checked::add;
    using checked::mul;
    const int64_t phases = mul(mul(g.sh, g.sw, "phases"), mul(g.ph, g.pw, "phases"), "phases");
    return add(add(g.floats(), mul(g.sw, g.pw, "padded row"), "depthwise backward"),
               add(mul(mult, grid, "dY grid"), phases, "depthwise backward"), "depthwise backward");
  }
};

}  // namespace

int64_t depthwise_backward_workspace_floats(const ConvProblem& p, int threads) {
  using checked::add;
  using checked::mul;
  const Layout lay(p);
  const int64_t partial = mul(p.k, p.r * p.s, "weight gradient");
  return mul(add(lay.per_thread_floats(p.k / p.c), partial, "depthwise backward"), threads, "depthwise backward");
}

void conv2d_depthwise_backward(const KernelSet& ks, const ConvProblem& p, const float* x, const float* w,
                               const float* dy, float* dx, float* dw, int threads) {
  static thread_local AlignedBuffer partial_buffer;
  const Layout lay(p);
  const Phases& g = lay.g;
  const int64_t N = p.n, C = p.c, K = p.k, H = p.h, W = p.w_in, P = p.out_h(), Q = p.out_w(), PQ = P * Q;
  const int64_t mult = K / C, taps = p.r * p.s, planes = N * C, phase = g.ph * g.pw;
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, planes)));
  const int64_t part_floats = K * taps;
  auto* partial = static_cast<float*>(partial_buffer.reserve(static_cast<size_t>(threads * part_floats) * sizeof(float)));
  std::fill(partial, partial + threads * part_floats, 0.0f);
  // The taps of each dX phase: phase f gathers tap t of output channel m from dY's grid m at margin - shift.
  std::vector<std::vector<int64_t>> by_phase(static_cast<size_t>(g.sh * g.sw));
  for (int64_t t = 0; t < taps; ++t) by_phase[static_cast<size_t>(lay.off[static_cast<size_t>(t)] / phase)].push_back(t);

  ThreadPool::instance().run(threads, [&](int tid) {
    static thread_local AlignedBuffer buffer;
    static thread_local std::vector<const float*> src;
    static thread_local std::vector<float> wl;
    static thread_local std::vector<float*> phase_rows;
    static thread_local std::vector<const float*> dx_phase_rows;
    auto* xp = static_cast<float*>(buffer.reserve(static_cast<size_t>(lay.per_thread_floats(mult)) * sizeof(float)));
    float* row = xp + g.floats();
    float* grids = row + g.sw * g.pw;
    float* dxp = grids + mult * lay.grid;
    src.resize(static_cast<size_t>(std::max(taps, mult * taps)));
    wl.resize(static_cast<size_t>(mult * taps));
    phase_rows.resize(static_cast<size_t>(g.sw));
    dx_phase_rows.resize(static_cast<size_t>(g.sw));
    float* part = partial + tid * part_floats;
    for (int64_t pl = planes * tid / threads; pl < planes * (tid + 1) / threads; ++pl) {
      const int64_t c = pl / N, n = pl % N;
      // dW: dY's planes against the taps of the padded input plane.
      build_phases(ks, lay.q, g, x + (n * C + c) * H * W, row, xp, phase_rows.data());
      for (int64_t t = 0; t < taps; ++t) src[static_cast<size_t>(t)] = xp + lay.off[static_cast<size_t>(t)];
      for (int64_t m = 0; m < mult; ++m) {
        const int64_t k = c * mult + m;
        ks.conv.depthwise_dot(P, Q, static_cast<int>(taps), dy + (n * K + k) * PQ, Q, src.data(), g.pw,
                              part + k * taps);
      }
      // dX: dY's planes on the phases' grid, zero around them.
      for (int64_t m = 0; m < mult; ++m) {
        float* grid = grids + m * lay.grid;
        std::fill(grid, grid + lay.grid, 0.0f);
        const float* dy_plane = dy + (n * K + c * mult + m) * PQ;
        for (int64_t oh = 0; oh < P; ++oh) {
          std::memcpy(grid + lay.margin + oh * g.pw, dy_plane + oh * Q, static_cast<size_t>(Q) * sizeof(float));
        }
      }
      float* dx_plane = dx + (n * C + c) * H * W;
      if (lay.dense3x3) {
        const float* wk = w + c * taps;
        for (int64_t t = 0; t < 9; ++t) wl[static_cast<size_t>(t)] = wk[8 - t];
        ks.conv.depthwise_3x3(W, H, wl.data(), grids + p.pad_h * g.pw + p.pad_w, g.pw, dx_plane, W);
        continue;
      }
      for (size_t f = 0; f < by_phase.size(); ++f) {
        float* out = dxp + static_cast<int64_t>(f) * phase;
        int count = 0;
        for (int64_t m = 0; m < mult; ++m) {
          const float* grid = grids + m * lay.grid + lay.margin;
          for (int64_t t : by_phase[f]) {
            wl[static_cast<size_t>(count)] = w[(c * mult + m) * taps + t];
            src[static_cast<size_t>(count)] = grid - lay.off[static_cast<size_t>(t)] % phase;
            ++count;
          }
        }
        if (count == 0) {
          std::fill(out, out + phase, 0.0f);
        } else {
          ks.conv.depthwise_row(phase, count, wl.data(), src.data(), out);
        }
      }
      for (int64_t ih = 0; ih < H; ++ih) {
        const int64_t rr = ih + p.pad_h;
        const float* prow = dxp + (rr % g.sh) * g.sw * phase + (rr / g.sh) * g.pw;
        float* dst = dx_plane + ih * W;
        if (g.sw == 1) {
          std::memcpy(dst, prow + p.pad_w, static_cast<size_t>(W) * sizeof(float));
          continue;
        }
        // The padded row back from its phases (column c of it is phase c % sw's c / sw), then dX's part.
        for (int64_t fw = 0; fw < g.sw; ++fw) dx_phase_rows[static_cast<size_t>(fw)] = prow + fw * phase;
        ks.conv.depthwise_merge(dx_phase_rows.data(), g.pw, static_cast<int>(g.sw), row);
        std::memcpy(dst, row + p.pad_w, static_cast<size_t>(W) * sizeof(float));
      }
    }
  });
  for (int64_t i = 0; i < part_floats; ++i) {
    float sum = partial[i];
    for (int tid = 1; tid < threads; ++tid) sum += partial[tid * part_floats + i];
    dw[i] = sum;
  }
}

}  // namespace opbench

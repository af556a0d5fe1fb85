// Depthwise convolution (one input channel per group: groups == C, each group's K/groups output channels
// from its own channel) as a direct vectorised loop, not an implicit GEMM: the GEMM of one group would be
// K/groups x (R*S) x (P*Q), one row deep per channel, where the register tile has nothing to reuse.
//
// Per (image, channel) plane, a thread builds a zero-padded fp32 copy of the plane in its own buffer (L2),
// split by stride phase: phase f holds the padded columns f, f + stride_w, f + 2 stride_w, ..., so that for
// every filter tap the inputs of consecutive output pixels are consecutive floats (tap (r, s) of output
// (oh, ow) is phase (s dil_w) % stride_w, row oh stride_h + r dil_h, column ow + (s dil_w) / stride_w). An
// output row is then the weighted sum of R*S contiguous tap rows: the kernel set's depthwise_row (vectorised
// per ISA, csrc/conv/depthwise_row.hpp), written once per row with no intermediate.
//
// Where the kernel set has depthwise_plane (AVX-512) the common case, fp32 3x3 at stride 1 or 2, skips the
// copy: the kernel reads the plane in place with masked loads (ConvPath::depthwise_in_place).
//
// fp16 and bf16 planes are widened to fp32 in the copy, the taps summed in fp32, and each output rounded
// once to the dtype (bf16 has no depthwise GEMM worth the name either: the bf16 implicit GEMM ran a 3x3
// depthwise layer at under 0.1% of the dot-product peak).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "opbench/aligned.hpp"
#include "opbench/bf16.hpp"
#include "opbench/conv.hpp"
#include "opbench/fp16.hpp"
#include "opbench/limits.hpp"
#include "opbench/thread_pool.hpp"
#include "depthwise_phases.hpp"

namespace opbench {

Phases phases_of(const ConvProblem& p) {
  Phases g;
  g.hp = p.padded_h();
  g.wp = p.padded_w();
  g.sh = p.stride_h;
  g.sw = p.stride_w;
  g.ph = ceil_div(g.hp, g.sh);
  g.pw = ceil_div(g.wp, g.sw);
  g.slack = g.pw + (p.s - 1) * p.dil_w + 64;
  return g;
}

void phase_tap_offsets(const ConvProblem& p, const Phases& g, int64_t* off) {
  for (int64_t r = 0; r < p.r; ++r) {
    for (int64_t s = 0; s < p.s; ++s) {
      const int64_t row = r * p.dil_h, col = s * p.dil_w;
      off[r * p.s + s] = ((row % g.sh) * g.sw + col % g.sw) * g.ph * g.pw + (row / g.sh) * g.pw + col / g.sw;
    }
  }
}

namespace {

// Element `at` of a 16-bit (fp16 or bf16) array as fp32.
float half_at(const void* src, int64_t at, bool bf16) {
  const uint16_t h = static_cast<const uint16_t*>(src)[at];
  return bf16 ? bf16_to_float(h) : half_to_float(h);
}

}  // namespace

void build_phases(const KernelSet& ks, const ConvProblem& p, const Phases& g, const void* src, float* row, float* dst,
                  float** phase_rows) {
  const WidenF16 widen = widen_of(ks, p.dtype);
  for (int64_t rr = 0; rr < g.ph * g.sh; ++rr) {
    const int64_t fh = rr % g.sh, prow = rr / g.sh, ih = rr - p.pad_h;
    for (int64_t fw = 0; fw < g.sw; ++fw) phase_rows[fw] = g.at(dst, fh, fw) + prow * g.pw;
    if (ih < 0 || ih >= p.h) {  // padding rows (and the rows that round the last phase up)
      for (int64_t fw = 0; fw < g.sw; ++fw) std::fill(phase_rows[fw], phase_rows[fw] + g.pw, 0.0f);
      continue;
    }
    float* padded = g.sw == 1 ? phase_rows[0] : row;
    const int64_t at = ih * p.w_in;
    std::fill(padded, padded + p.pad_w, 0.0f);
    if (widen != nullptr) {
      widen(static_cast<const uint16_t*>(src) + at, padded + p.pad_w, p.w_in);
    } else {
      std::memcpy(padded + p.pad_w, static_cast<const float*>(src) + at, sizeof(float) * p.w_in);
    }
    std::fill(padded + p.pad_w + p.w_in, padded + g.sw * g.pw, 0.0f);
    if (g.sw > 1) ks.conv.depthwise_split(padded, g.pw, static_cast<int>(g.sw), phase_rows);
  }
  std::fill(dst + g.floats() - g.slack, dst + g.floats(), 0.0f);
}

bool build_phase_planes(const KernelSet& ks, const ConvProblem& p, const Phases& g, const void* x, int64_t first,
                        int64_t count, int64_t stride, float* dst, float* scratch, int threads, bool check) {
  const int64_t hw = p.h * p.w_in, row = g.sw * g.pw;
  const size_t elem = p.dtype == Dtype::f32 ? sizeof(float) : sizeof(uint16_t);
  const int t = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, count)));
  std::atomic<bool> nonfinite{false};
  ThreadPool::instance().run(t, [&](int tid) {
    std::vector<float*> phase_rows(static_cast<size_t>(g.sw));
    uint32_t seen = 0;
    for (int64_t i = count * tid / t; i < count * (tid + 1) / t; ++i) {
      const char* src = static_cast<const char*>(x) + static_cast<size_t>((first + i) * hw) * elem;
      if (check) {  // the exponent's bits all set: Inf or NaN
        for (int64_t j = 0; j < hw; ++j) {
          uint32_t bits;
          std::memcpy(&bits, src + j * sizeof(float), sizeof bits);
          seen |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
        }
      }
      build_phases(ks, p, g, src, scratch + tid * row, dst + i * stride, phase_rows.data());
    }
    if (seen != 0) nonfinite.store(true, std::memory_order_relaxed);
  });
  return nonfinite.load();
}

bool conv2d_is_depthwise(const ConvProblem& p) { return p.c == p.groups && p.k / p.groups <= kDepthwiseMaxMultiplier; }

namespace {

// The plane kernel (AVX-512) serves this geometry: 3x3, no dilation, stride 1 or 2 in both directions.
bool plane_kernel_fits(const KernelSet& ks, const ConvProblem& p) {
  return ks.conv.depthwise_plane != nullptr && p.r == 3 && p.s == 3 && p.dil_h == 1 && p.dil_w == 1 &&
         p.stride_h == p.stride_w && (p.stride_h == 1 || p.stride_h == 2);
}

}  // namespace

ConvPath depthwise_way(const KernelSet& ks, const ConvProblem& p) {
  if (!plane_kernel_fits(ks, p)) return ConvPath::depthwise_padded;
  return p.dtype == Dtype::f32 ? ConvPath::depthwise_in_place : ConvPath::depthwise_widened;
}

int64_t depthwise_workspace_floats(const KernelSet& ks, const ConvProblem& p, ConvPath path, int threads) {
  if (path == ConvPath::depthwise_in_place) return 0;
  using checked::add;
  using checked::mul;
  if (path == ConvPath::depthwise_widened) {  // a 16-bit plane widened to fp32, its output plane in fp32
    const int64_t per_thread = add(mul(p.h, p.w_in, "plane"), mul(p.out_h(), p.out_w(), "output plane"), "planes");
    return mul(per_thread, threads, "depthwise scratch");
  }
  const Phases g = phases_of(p);
  const int64_t planes = add(mul(mul(mul(g.sh, g.sw, "phases"), g.ph, "phases"), g.pw, "phases"), g.slack, "phases");
  const int64_t rows = add(mul(g.sw, g.pw, "padded row"), mul(p.out_h(), g.pw, "output block"), "rows");
  const int64_t per_thread = add(add(planes, rows, "depthwise scratch"), 2 * p.r * p.s, "taps");
  return mul(per_thread, threads, "depthwise scratch");
}

void conv2d_depthwise(const KernelSet& ks, const ConvProblem& p, ConvPath path, int threads) {
  const Phases g = phases_of(p);
  const int64_t P = p.out_h(), Q = p.out_w(), PQ = P * Q;
  const int64_t mult = p.k / p.groups, taps = p.r * p.s;
  const int64_t planes = p.n * p.c;
  // 16-bit planes (fp16, bf16) are widened in build_phases and the outputs rounded by the dtype's store.
  const bool half = p.dtype != Dtype::f32, bf16 = p.dtype == Dtype::bf16;
  const StoreF16 store = store_of(ks, p.dtype);
  const int64_t elem = half ? 2 : 4;
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, planes)));
  if (path == ConvPath::depthwise_in_place) {
    ThreadPool::instance().run(threads, [&](int tid) {
      for (int64_t pl = planes * tid / threads; pl < planes * (tid + 1) / threads; ++pl) {
        const int64_t img = pl / p.c, ch = pl % p.c;
        const float* x = static_cast<const float*>(p.x) + pl * p.h * p.w_in;
        for (int64_t m = 0; m < mult; ++m) {
          const int64_t kch = ch * mult + m;
          ks.conv.depthwise_plane(x, p.h, p.w_in, p.pad_h, p.pad_w, static_cast<int>(p.stride_h),
                                  static_cast<const float*>(p.w) + kch * taps, static_cast<float*>(p.y) + (img * p.k + kch) * PQ,
                                  P, Q);
        }
      }
    });
    return;
  }
  if (path == ConvPath::depthwise_widened) {
    // 16-bit planes: widened whole into the thread's fp32 plane, the plane kernel's output rounded in one call.
    const WidenF16 widen = widen_of(ks, p.dtype);
    ThreadPool::instance().run(threads, [&](int tid) {
      static thread_local AlignedBuffer in_buffer, out_buffer;
      auto* xf = static_cast<float*>(in_buffer.reserve(static_cast<size_t>(p.h * p.w_in) * sizeof(float)));
      auto* yf = static_cast<float*>(out_buffer.reserve(static_cast<size_t>(PQ) * sizeof(float)));
      float wt[9];
      for (int64_t pl = planes * tid / threads; pl < planes * (tid + 1) / threads; ++pl) {
        const int64_t img = pl / p.c, ch = pl % p.c, at = pl * p.h * p.w_in;
        const auto* src = static_cast<const uint16_t*>(p.x) + at;
        widen(src, xf, p.h * p.w_in);
        for (int64_t m = 0; m < mult; ++m) {
          const int64_t kch = ch * mult + m;
          for (int64_t t = 0; t < taps; ++t) wt[t] = half_at(p.w, kch * taps + t, bf16);
          ks.conv.depthwise_plane(xf, p.h, p.w_in, p.pad_h, p.pad_w, static_cast<int>(p.stride_h), wt, yf, P, Q);
          // Both planes are contiguous: rounded as one row of P*Q (a 7x7 plane is 4 vectors, not 7 rows).
          store(yf, PQ, 1, PQ, static_cast<uint16_t*>(p.y) + (img * p.k + kch) * PQ, PQ);
        }
      }
    });
    return;
  }
  // Output rows are computed pw floats apart, as one flattened row of (P - 1) pw + Q outputs: tap (r, s)
  // reads its phase from tap_off onwards, and output (oh, ow) lands at oh pw + ow (columns ow >= Q, which
  // read into the next row, are dropped). One call per plane, no divisions in the loops.
  std::vector<int64_t> tap_off(static_cast<size_t>(taps));
  phase_tap_offsets(p, g, tap_off.data());
  const int64_t flat = (P - 1) * g.pw + Q;
  const bool dense3x3 = dense_3x3(p);
  ThreadPool::instance().run(threads, [&](int tid) {
    static thread_local AlignedBuffer plane_buffer, row_buffer, out_buffer;
    static thread_local std::vector<const float*> src;
    static thread_local std::vector<float> wt;
    static thread_local std::vector<float*> phase_rows;
    phase_rows.resize(static_cast<size_t>(g.sw));
    src.resize(static_cast<size_t>(taps));
    wt.resize(static_cast<size_t>(taps));
    auto* xp = static_cast<float*>(plane_buffer.reserve(static_cast<size_t>(g.floats()) * sizeof(float)));
    auto* row = static_cast<float*>(row_buffer.reserve(static_cast<size_t>(g.sw * g.pw) * sizeof(float)));
    auto* block = static_cast<float*>(out_buffer.reserve(static_cast<size_t>(P * g.pw) * sizeof(float)));
    for (int64_t t = 0; t < taps; ++t) src[static_cast<size_t>(t)] = xp + tap_off[static_cast<size_t>(t)];
    for (int64_t pl = planes * tid / threads; pl < planes * (tid + 1) / threads; ++pl) {
      const int64_t img = pl / p.c, ch = pl % p.c;
      build_phases(ks, p, g, static_cast<const char*>(p.x) + pl * p.h * p.w_in * elem, row, xp, phase_rows.data());
      for (int64_t m = 0; m < mult; ++m) {
        const int64_t kch = ch * mult + m;
        for (int64_t t = 0; t < taps; ++t) {
          const int64_t at = kch * taps + t;
          wt[static_cast<size_t>(t)] = half ? half_at(p.w, at, bf16) : static_cast<const float*>(p.w)[at];
        }
        char* y_plane = static_cast<char*>(p.y) + (img * p.k + kch) * PQ * elem;
        if (dense3x3) {  // output rows straight into Y (fp32) or the fp32 block (fp16, bf16)
          float* out = half ? block : reinterpret_cast<float*>(y_plane);
          ks.conv.depthwise_3x3(Q, P, wt.data(), xp, g.pw, out, half ? g.pw : Q);
          if (half) store(block, g.pw, P, Q, reinterpret_cast<uint16_t*>(y_plane), Q);
          continue;
        }
        // Straight into Y when its rows are pw apart already (no padding, stride 1 and a 1-wide filter).
        const bool direct = !half && g.pw == Q;
        float* out = direct ? reinterpret_cast<float*>(y_plane) : block;
        ks.conv.depthwise_row(flat, static_cast<int>(taps), wt.data(), src.data(), out);
        if (half) {
          store(block, g.pw, P, Q, reinterpret_cast<uint16_t*>(y_plane), Q);
        } else if (!direct) {
          for (int64_t oh = 0; oh < P; ++oh) {
            std::memcpy(reinterpret_cast<float*>(y_plane) + oh * Q, block + oh * g.pw, sizeof(float) * Q);
          }
        }
      }
    }
  });
}

}  // namespace opbench

// Backpropagation through time for the RNN, GRU and LSTM (see backward.hpp): an element-wise pass per step
// over the saved gates, one GEMM per step for the recurrent gradient, three GEMMs over all steps for the
// weight and input gradients.
#include <algorithm>
#include <cstring>

#include "opbench/aligned.hpp"
#include "opbench/backward.hpp"
#include "opbench/limits.hpp"
#include "opbench/thread_pool.hpp"

namespace opbench {

namespace {

void column_sums(const float* a, int64_t rows, int64_t cols, float* out) {
  std::fill(out, out + cols, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = a + r * cols;
    for (int64_t j = 0; j < cols; ++j) out[j] += row[j];
  }
}

float sigmoid_grad(float s) { return s * (1.0f - s); }

}  // namespace

int64_t rnn_backward_workspace_bytes(const KernelSet& ks, const RnnBackwardProblem& p, const Blocking& blk,
                                     int threads) {
  using checked::add;
  using checked::mul;
  const RnnProblem& f = p.fwd;
  const int64_t T = f.seq_len, B = f.batch, I = f.input_size, H = f.hidden, G = mul(rnn_gates(f.mode), H, "gates");
  const int64_t TB = mul(T, B, "seq_len * batch");
  const int64_t grads = mul(mul(TB, G, "gate gradients"), f.mode == RnnMode::gru ? 2 : 1, "gate gradients");
  const int64_t state = mul(B, H, "state") * 4;  // dh, dc, direct, scratch
  int64_t f16 = 0;
  if (f.dtype == Dtype::f16) {  // widened inputs and fp32 gradients
    const int64_t in = add(add(mul(TB, I, "x"), mul(TB, H, "y"), "inputs"), mul(G, add(I, H, "I + H"), "w"), "f16");
    f16 = add(mul(in, 2, "f16"), add(mul(TB, H, "dy"), mul(4, G, "biases"), "f16"), "f16");
  }
  const GemmProblem rec = f32_product(nullptr, G, false, nullptr, H, false, nullptr, H, B, H, G, false);
  const GemmProblem wih = f32_product(nullptr, G, true, nullptr, I, false, nullptr, I, G, I, TB, false);
  const GemmProblem dx = f32_product(nullptr, G, false, nullptr, I, false, nullptr, I, TB, I, G, false);
  const int64_t gemm_ws = std::max({gemm_workspace_bytes(ks, rec, blk, threads),
                                    gemm_workspace_bytes(ks, wih, blk, threads),
                                    gemm_workspace_bytes(ks, dx, blk, threads)});
  const int64_t packed = mul(mul(add(G, 64, "gates"), add(H, 1024, "hidden"), "packed W_hh"), 1, "packed W_hh");
  const int64_t floats = add(add(add(grads, state, "rnn backward"), f16, "rnn backward"), packed, "rnn backward");
  return add(mul(floats, int64_t(sizeof(float)), "rnn backward"), gemm_ws, "rnn backward");
}

void rnn_backward(const KernelSet& ks, const RnnBackwardProblem& p, const Blocking& blk, int threads) {
  static thread_local AlignedBuffer in_x, in_y, in_wih, in_whh, in_h0, in_c0, in_dy, in_dhn, in_dcn;
  static thread_local AlignedBuffer gx_buf, gh_buf, dh_buf, dc_buf, direct_buf, w_hh_packed;
  static thread_local AlignedBuffer o_dx, o_dwih, o_dwhh, o_dbih, o_dbhh, o_dh0, o_dc0;
  const RnnProblem& f = p.fwd;
  const Dtype dt = f.dtype;
  const RnnMode mode = f.mode;
  const bool lstm = mode == RnnMode::lstm, gru = mode == RnnMode::gru;
  const int64_t T = f.seq_len, B = f.batch, I = f.input_size, H = f.hidden, G = rnn_gates(mode) * H;
  const int64_t TB = T * B, BH = B * H;

  const float* x = f32_view(ks, in_x, dt, f.x, TB * I);
  const float* y = f32_view(ks, in_y, dt, f.y, TB * H);
  const float* w_ih = f32_view(ks, in_wih, dt, f.w_ih, G * I);
  const float* w_hh = f32_view(ks, in_whh, dt, f.w_hh, G * H);
  const float* h0 = f32_view(ks, in_h0, dt, f.h0, BH);
  const float* c0 = lstm ? f32_view(ks, in_c0, dt, f.c0, BH) : nullptr;
  const float* dy = f32_view(ks, in_dy, dt, p.dy, TB * H);
  const float* dh_n = f32_view(ks, in_dhn, dt, p.dh_n, BH);
  const float* dc_n = lstm ? f32_view(ks, in_dcn, dt, p.dc_n, BH) : nullptr;

  // dZ for every step (GRU: the input side dGx and the recurrent side dGh).
  float* dgx = static_cast<float*>(gx_buf.reserve(static_cast<size_t>(TB * G) * sizeof(float)));
  float* dgh = gru ? static_cast<float*>(gh_buf.reserve(static_cast<size_t>(TB * G) * sizeof(float))) : dgx;
  float* dh = f32_out(o_dh0, dt, p.dh0, BH);  // the running dh, which ends as dh0
  float* dc = lstm ? f32_out(o_dc0, dt, p.dc0, BH) : nullptr;
  float* direct = static_cast<float*>(direct_buf.reserve(static_cast<size_t>(BH) * sizeof(float)));
  std::memcpy(dh, dh_n, static_cast<size_t>(BH) * sizeof(float));
  if (lstm) std::memcpy(dc, dc_n, static_cast<size_t>(BH) * sizeof(float));
  const int row_threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, B)));
  // Every step's recurrent gradient multiplies by the same W_hh (G x H): packed once per call, as the
  // forward packs it.
  GemmProblem rec = f32_product(nullptr, G, false, w_hh, H, false, dh, H, B, H, G, false);
  if (T > 1 && gemm_packs_b(ks, rec)) {
    void* packed = w_hh_packed.reserve(static_cast<size_t>(packed_b_bytes(ks, rec, blk)));
    pack_b_all(ks, rec, blk, packed, threads);
    rec.b_packed = packed;
  }

  for (int64_t t = T - 1; t >= 0; --t) {
    const float* dy_t = dy + t * BH;
    const float* h_prev = t == 0 ? h0 : y + (t - 1) * BH;
    float* gx_t = dgx + t * B * G;
    float* gh_t = dgh + t * B * G;
    // The element-wise pass, rows split between threads (each row's units are independent).
    ThreadPool::instance().run(row_threads, [&](int tid) {
    for (int64_t b = B * tid / row_threads; b < B * (tid + 1) / row_threads; ++b) {
      for (int64_t j = 0; j < H; ++j) {
        const int64_t at = b * H + j;
        const float d = dh[at] + dy_t[at];
        float* gx = gx_t + b * G;
        if (mode == RnnMode::rnn_tanh) {
          const float h = y[t * BH + at];
          gx[j] = d * (1.0f - h * h);
        } else if (mode == RnnMode::rnn_relu) {
          gx[j] = y[t * BH + at] > 0.0f ? d : 0.0f;
        } else if (lstm) {
          const float* s = p.saved.gates + (t * B + b) * G;  // i, f, g, o activated
          const float i = s[j], fg = s[H + j], g = s[2 * H + j], o = s[3 * H + j];
          const float tc = p.saved.tanh_c[t * BH + at];
          const float c_prev = t == 0 ? c0[at] : p.saved.state[(t - 1) * BH + at];
          const float dcell = dc[at] + d * o * (1.0f - tc * tc);
          gx[j] = dcell * g * sigmoid_grad(i);
          gx[H + j] = dcell * c_prev * sigmoid_grad(fg);
          gx[2 * H + j] = dcell * i * (1.0f - g * g);
          gx[3 * H + j] = d * tc * sigmoid_grad(o);
          dc[at] = dcell * fg;
        } else {  // GRU: r, z, n and q = W_hn h + b_hn saved
          const float* s = p.saved.gates + (t * B + b) * G;
          const float r = s[j], z = s[H + j], n = s[2 * H + j], q = p.saved.state[t * BH + at];
          const float dn_pre = d * (1.0f - z) * (1.0f - n * n);
          const float dz_pre = d * (h_prev[at] - n) * sigmoid_grad(z);
          const float dr_pre = dn_pre * q * sigmoid_grad(r);
          float* gh = gh_t + b * G;
          gx[j] = gh[j] = dr_pre;
          gx[H + j] = gh[H + j] = dz_pre;
          gx[2 * H + j] = dn_pre;
          gh[2 * H + j] = dn_pre * r;
          direct[at] = d * z;
        }
      }
    }
    });
    // dh_{t-1} = dZ_t W_hh (+ the GRU's direct path z * dh).
    if (gru) std::memcpy(dh, direct, static_cast<size_t>(BH) * sizeof(float));
    rec.a = gh_t;
    rec.accumulate = gru;
    gemm(ks, rec, blk, threads);
  }

  float* dw_hh = f32_out(o_dwhh, dt, p.dw_hh, G * H);
  float* dw_ih = f32_out(o_dwih, dt, p.dw_ih, G * I);
  float* dx = f32_out(o_dx, dt, p.dx, TB * I);
  float* db_ih = f32_out(o_dbih, dt, p.db_ih, G);
  float* db_hh = f32_out(o_dbhh, dt, p.db_hh, G);
  // dW_hh = dGh^T [h0; y[:-1]]: the first step against h0, the others against y's first T - 1 steps.
  gemm(ks, f32_product(dgh, G, true, h0, H, false, dw_hh, H, G, H, B, false), blk, threads);
  if (T > 1) {
    gemm(ks, f32_product(dgh + B * G, G, true, y, H, false, dw_hh, H, G, H, (T - 1) * B, true), blk, threads);
  }
  gemm(ks, f32_product(dgx, G, true, x, I, false, dw_ih, I, G, I, TB, false), blk, threads);  // dW_ih = dGx^T x
  gemm(ks, f32_product(dgx, G, false, w_ih, I, false, dx, I, TB, I, G, false), blk, threads);  // dx = dGx W_ih
  column_sums(dgx, TB, G, db_ih);
  column_sums(dgh, TB, G, db_hh);

  f32_finish(ks, dt, dx, p.dx, TB, I);
  f32_finish(ks, dt, dw_ih, p.dw_ih, G, I);
  f32_finish(ks, dt, dw_hh, p.dw_hh, G, H);
  f32_finish(ks, dt, db_ih, p.db_ih, 1, G);
  f32_finish(ks, dt, db_hh, p.db_hh, 1, G);
  f32_finish(ks, dt, dh, p.dh0, B, H);
  if (lstm) f32_finish(ks, dt, dc, p.dc0, B, H);
}

}  // namespace opbench

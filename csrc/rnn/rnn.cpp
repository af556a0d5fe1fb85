// One-layer RNN, GRU and LSTM forward over the tiled GEMM and the ISA's fused cells (see rnn.hpp).
#include "opbench/rnn.hpp"

#include <algorithm>
#include <cstring>

#include "opbench/aligned.hpp"
#include "opbench/bf16.hpp"
#include "opbench/cpu.hpp"
#include "opbench/fp16.hpp"
#include "opbench/limits.hpp"
#include "opbench/thread_pool.hpp"

namespace opbench {

namespace {

float load(Dtype dt, const void* base, int64_t i) {
  switch (dt) {
    case Dtype::f16:
      return half_to_float(static_cast<const uint16_t*>(base)[i]);
    case Dtype::bf16:
      return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    default:
      return static_cast<const float*>(base)[i];
  }
}

// Gate pre-activations z (m x g, fp32) += a (m x k) * w^T, w in PyTorch's layout (g x k): the shape of both
// the input projection and the recurrent product.
GemmProblem gates_product(Dtype dtype, const void* a, const void* w, float* z, int64_t m, int64_t k, int64_t g) {
  return gemm_product(dtype, Dtype::f32, a, k, false, w, k, true, z, g, m, g, k, true);
}

// Each step's threads meet twice (after the product, after the cells), and the product of a small batch is
// a few MFLOP: woken threads with too little work each cost more than they do. On the device machine's host
// (Emerald Rapids, 16 vCPUs; 2026-11-29), bf16 on AMX and fp32 on AVX-512, ten LSTMs of batch 1-64 and hidden
// 256-1024 with every step on 1, 2, 4, 8 or 16 threads interleaved: all 16 were best from 8.4 MFLOP a step
// (2 * B * 4H * H), and 8 at 4.2 (T50 B8 H256: bf16 338 GFLOPS on 8, 159 on 16; fp32 415 and 188). Half a
// MFLOP a thread puts each of them on the threads that were best or within 0.82 of them, except batch 1 at
// hidden 512 (2.1 MFLOP), where 8 threads beat 4 by 1.4x (bf16) and 1.6x (fp32). The second bound, W_hh in
// a quarter of each L2, puts fp32's 4 MiB of it on 8 threads there; bf16's 2 MiB stays on 4.
constexpr int64_t kStepFlopsPerThread = int64_t{1} << 19;

int64_t packed_bytes(const KernelSet& ks, const GemmProblem& rec, const Blocking& blk) {
  if (gemm_packs_b(ks, rec)) return packed_b_bytes(ks, rec, blk);
  return rec.n * rec.k * (rec.in_dtype == Dtype::f32 ? 4 : 2);
}

}  // namespace

int rnn_step_threads(const KernelSet& ks, const RnnProblem& p, const Blocking& blk, int threads) {
  const int64_t G = rnn_gates(p.mode) * p.hidden;
  const GemmProblem rec = gates_product(p.dtype, nullptr, p.w_hh, nullptr, p.batch, p.hidden, G);
  const int64_t work = 2 * p.batch * G * p.hidden / kStepFlopsPerThread;
  const int64_t share = std::max<int64_t>(1, cpu_info().l2.size_bytes / 4);
  const int64_t cache = (packed_bytes(ks, rec, blk) + share - 1) / share;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, std::max(work, cache))));
}

int rnn_gates(RnnMode mode) {
  switch (mode) {
    case RnnMode::lstm:
      return 4;
    case RnnMode::gru:
      return 3;
    default:
      return 1;
  }
}

int64_t rnn_workspace_bytes(const KernelSet& ks, const RnnProblem& p, const Blocking& blk, int threads) {
  using checked::add;
  using checked::mul;
  const int64_t G = mul(rnn_gates(p.mode), p.hidden, "gates * hidden");
  const int64_t TB = mul(p.seq_len, p.batch, "seq_len * batch");
  const int64_t f32 = sizeof(float);
  const int64_t gates = mul(mul(TB, G, "gates"), f32, "gates");
  const int64_t bh = mul(mul(p.batch, p.hidden, "state"), f32, "state");
  // GRU: the recurrent product's own buffer (B x G) and b_hn; every cell: one fp32 state.
  const int64_t extra = p.mode == RnnMode::gru ? add(mul(mul(p.batch, G, "gh"), f32, "gh"), mul(p.hidden, f32, "b_hn"), "gru")
                                                : 0;
  const int64_t packed = mul(mul(add(G, 64, "gates * hidden"), add(p.hidden, 1024, "hidden"), "packed W_hh"), f32,
                             "packed W_hh");
  const GemmProblem input = gates_product(p.dtype, p.x, p.w_ih, nullptr, TB, p.input_size, G);
  const GemmProblem rec = gates_product(p.dtype, nullptr, p.w_hh, nullptr, p.batch, p.hidden, G);
  const int64_t own = add(add(add(gates, bh, "rnn workspace"), extra, "rnn workspace"), packed, "rnn workspace");
  return add(own, std::max(gemm_workspace_bytes(ks, input, blk, threads), gemm_workspace_bytes(ks, rec, blk, threads)),
             "rnn workspace");
}

RnnSavedSizes rnn_saved_floats(const RnnProblem& p) {
  const int64_t TB = checked::mul(p.seq_len, p.batch, "seq_len * batch");
  const int64_t TBH = checked::mul(TB, p.hidden, "saved state");
  switch (p.mode) {
    case RnnMode::lstm:
      return {checked::mul(TBH, 4, "saved gates"), TBH, TBH};
    case RnnMode::gru:
      return {checked::mul(TBH, 3, "saved gates"), TBH, 0};
    default:
      return {0, 0, 0};
  }
}

void rnn_forward(const KernelSet& ks, const RnnKernels& rnn, const RnnProblem& p, const Blocking& blk, int threads) {
  static thread_local AlignedBuffer gates_buffer, state_buffer, gh_buffer, w_hh_buffer, h_buffer;
  const int64_t T = p.seq_len, B = p.batch, I = p.input_size, H = p.hidden, G = rnn_gates(p.mode) * H;
  const bool f16 = p.dtype == Dtype::f16, gru = p.mode == RnnMode::gru, lstm = p.mode == RnnMode::lstm;
  // bf16: the cells write h in fp32 to h_f32 (B x H), and each thread rounds its share to bf16 into y.
  const bool bf16 = p.dtype == Dtype::bf16;
  const int64_t elem = f16 || bf16 ? 2 : 4;
  float* h_f32 = bf16 ? static_cast<float*>(h_buffer.reserve(static_cast<size_t>(B * H) * sizeof(float))) : nullptr;
  const RnnSaved* save = (lstm || gru) ? p.save : nullptr;  // the Elman cell's backward needs only y
  float* gates = save != nullptr ? save->gates
                                 : static_cast<float*>(gates_buffer.reserve(static_cast<size_t>(T * B * G) * sizeof(float)));

  // Gates of every step start as the biases (the GRU keeps b_hn apart: r multiplies it); the input
  // projection is accumulated onto them in one GEMM.
  for (int64_t j = 0; j < G; ++j) {
    gates[j] = load(p.dtype, p.b_ih, j) + (gru && j >= 2 * H ? 0.0f : load(p.dtype, p.b_hh, j));
  }
  for (int64_t row = 1; row < T * B; ++row) std::memcpy(gates + row * G, gates, sizeof(float) * G);
  gemm(ks, gates_product(p.dtype, p.x, p.w_ih, gates, T * B, I, G), blk, threads);

  // The fp32 state: the LSTM's c, the GRU's h (the Elman cell's state is its output).
  float* state = static_cast<float*>(state_buffer.reserve(static_cast<size_t>(B * H + (gru ? H : 0)) * sizeof(float)));
  const void* state0 = lstm ? p.c0 : p.h0;
  if (lstm || gru) {
    for (int64_t i = 0; i < B * H; ++i) state[i] = load(p.dtype, state0, i);
  }
  float* b_hn = state + B * H;
  if (gru) {
    for (int64_t j = 0; j < H; ++j) b_hn[j] = load(p.dtype, p.b_hh, 2 * H + j);
  }
  float* gh = gru ? static_cast<float*>(gh_buffer.reserve(static_cast<size_t>(B * G) * sizeof(float))) : nullptr;

  // Each step runs on step_threads; its units are split between them by rows when there are enough rows,
  // else by 64-wide column blocks.
  const int step_threads = rnn_step_threads(ks, p, blk, threads);
  const int64_t col_blocks = (H + 63) / 64;
  const bool by_rows = B >= step_threads;
  const int cell_threads =
      static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(step_threads, by_rows ? B : col_blocks)));

  // The recurrent product h_{t-1} * W_hh^T multiplies by the same W_hh at every step: pack it once per call
  // (fp16 widened on the way, bf16 in pairs) instead of once per step.
  GemmProblem rec = gates_product(p.dtype, nullptr, p.w_hh, nullptr, B, H, G);  // a, c set per step
  rec.accumulate = !gru;
  if (T > 1 && gemm_packs_b(ks, rec)) {
    void* packed = w_hh_buffer.reserve(static_cast<size_t>(packed_b_bytes(ks, rec, blk)));
    pack_b_all(ks, rec, blk, packed, threads);
    rec.b_packed = packed;
  }

  const void* h_prev = p.h0;
  for (int64_t t = 0; t < T; ++t) {
    float* z = gates + t * B * G;
    rec.a = h_prev;
    rec.c = gru ? gh : z;
    gemm(ks, rec, blk, step_threads);

    char* y_t = static_cast<char*>(p.y) + t * B * H * elem;
    ThreadPool::instance().run(cell_threads, [&](int tid) {
      int64_t r0 = 0, r1 = B, c0 = 0, c1 = H;
      if (by_rows) {
        r0 = B * tid / cell_threads;
        r1 = B * (tid + 1) / cell_threads;
      } else {
        c0 = std::min(H, col_blocks * tid / cell_threads * 64);
        c1 = std::min(H, col_blocks * (tid + 1) / cell_threads * 64);
      }
      if (r1 <= r0 || c1 <= c0) return;
      const int64_t rows = r1 - r0, cols = c1 - c0, at = r0 * H + c0;
      float* h32 = f16 ? nullptr : bf16 ? h_f32 + at : reinterpret_cast<float*>(y_t) + at;
      uint16_t* h16 = f16 ? reinterpret_cast<uint16_t*>(y_t) + at : nullptr;
      float* zr = z + r0 * G + c0;
      const int64_t step = t * B * H;
      switch (p.mode) {
        case RnnMode::lstm:
          if (save != nullptr) {  // c_t kept for every step, and tanh(c_t)
            const float* c_prev = t == 0 ? state + at : save->state + step - B * H + at;
            rnn.lstm(rows, cols, zr, G, H, c_prev, save->state + step + at, H, h32, h16, H, save->tanh_c + step + at);
          } else {
            rnn.lstm(rows, cols, zr, G, H, state + at, state + at, H, h32, h16, H, nullptr);
          }
          break;
        case RnnMode::gru:
          rnn.gru(rows, cols, zr, G, gh + r0 * G + c0, G, H, b_hn + c0, state + at, state + at, H, h32, h16, H,
                  save != nullptr ? save->state + step + at : nullptr, H);
          break;
        default:
          rnn.rnn(rows, cols, zr, G, p.mode == RnnMode::rnn_relu, h32, h16, H);
      }
      if (bf16) ks.gemm.store_bf16(h32, H, rows, cols, reinterpret_cast<uint16_t*>(y_t) + at, H);
    });
    h_prev = y_t;
  }

  std::memcpy(p.h_n, static_cast<const char*>(p.y) + (T - 1) * B * H * elem, static_cast<size_t>(B * H * elem));
  if (!lstm) return;
  const float* c_last = save != nullptr ? save->state + (T - 1) * B * H : state;
  if (f16 || bf16) {
    store_of(ks, p.dtype)(c_last, H, B, H, static_cast<uint16_t*>(p.c_n), H);
  } else {
    std::memcpy(p.c_n, c_last, sizeof(float) * B * H);
  }
}

}  // namespace opbench

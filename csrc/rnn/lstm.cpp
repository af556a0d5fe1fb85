// One-layer LSTM forward over the tiled GEMM and the ISA's fused cell (see lstm.hpp).
#include "opbench/lstm.hpp"

#include <algorithm>
#include <cstring>

#include "opbench/aligned.hpp"
#include "opbench/fp16.hpp"
#include "opbench/limits.hpp"
#include "opbench/thread_pool.hpp"

namespace opbench {

namespace {

float load(Dtype dt, const void* base, int64_t i) {
  return dt == Dtype::f16 ? half_to_float(static_cast<const uint16_t*>(base)[i]) : static_cast<const float*>(base)[i];
}

// Gate pre-activations z (m x g, fp32) += a (m x k) * w^T, w in PyTorch's layout (g x k): the shape of both
// the input projection and the recurrent product.
GemmProblem gates_product(Dtype dtype, const void* a, const void* w, float* z, int64_t m, int64_t k, int64_t g) {
  GemmProblem gp;
  gp.in_dtype = dtype;
  gp.out_dtype = Dtype::f32;
  gp.a = a;
  gp.b = w;
  gp.c = z;
  gp.m = m;
  gp.n = g;
  gp.k = k;
  gp.lda = k;
  gp.ldb = k;
  gp.ldc = g;
  gp.trans_b = true;
  gp.accumulate = true;
  return gp;
}

}  // namespace

int64_t lstm_workspace_bytes(const KernelSet& ks, const LstmProblem& p, const Blocking& blk, int threads) {
  using checked::add;
  using checked::mul;
  const int64_t G = mul(4, p.hidden, "4 * hidden"), TB = mul(p.seq_len, p.batch, "seq_len * batch");
  const int64_t gates = mul(mul(TB, G, "gates"), int64_t(sizeof(float)), "gates");
  const int64_t state = mul(mul(p.batch, p.hidden, "cell state"), int64_t(sizeof(float)), "cell state");
  const int64_t packed = mul(mul(add(G, 64, "4 * hidden"), add(p.hidden, 1024, "hidden"), "packed W_hh"),
                             int64_t(sizeof(float)), "packed W_hh");
  const GemmProblem input = gates_product(p.dtype, p.x, p.w_ih, nullptr, TB, p.input_size, G);
  const GemmProblem rec = gates_product(p.dtype, nullptr, p.w_hh, nullptr, p.batch, p.hidden, G);
  return add(add(add(gates, state, "lstm workspace"), packed, "lstm workspace"),
             std::max(gemm_workspace_bytes(ks, input, blk, threads), gemm_workspace_bytes(ks, rec, blk, threads)),
             "lstm workspace");
}

void lstm(const KernelSet& ks, const RnnKernels& rnn, const LstmProblem& p, const Blocking& blk, int threads) {
  static thread_local AlignedBuffer gates_buffer, state_buffer;
  const int64_t T = p.seq_len, B = p.batch, I = p.input_size, H = p.hidden, G = 4 * H;
  const bool f16 = p.dtype == Dtype::f16;
  const int64_t elem = f16 ? 2 : 4;
  float* gates = static_cast<float*>(gates_buffer.reserve(static_cast<size_t>(T * B * G) * sizeof(float)));
  float* c = static_cast<float*>(state_buffer.reserve(static_cast<size_t>(B * H) * sizeof(float)));

  // Gates of every step start as b_ih + b_hh; the input projection is accumulated onto them in one GEMM.
  for (int64_t j = 0; j < G; ++j) gates[j] = load(p.dtype, p.b_ih, j) + load(p.dtype, p.b_hh, j);
  for (int64_t row = 1; row < T * B; ++row) std::memcpy(gates + row * G, gates, sizeof(float) * G);
  gemm(ks, gates_product(p.dtype, p.x, p.w_ih, gates, T * B, I, G), blk, threads);

  for (int64_t i = 0; i < B * H; ++i) c[i] = load(p.dtype, p.c0, i);

  // Units are split between threads by rows when there are enough rows, else by 64-wide column blocks.
  const int64_t col_blocks = (H + 63) / 64;
  const bool by_rows = B >= threads;
  const int cell_threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, by_rows ? B : col_blocks)));

  // The recurrent product h_{t-1} * W_hh^T multiplies by the same W_hh at every step: pack it once per call
  // (fp16 widened on the way) instead of once per step.
  static thread_local AlignedBuffer w_hh_buffer;
  GemmProblem rec = gates_product(p.dtype, nullptr, p.w_hh, nullptr, B, H, G);  // a, c set per step
  if (T > 1 && gemm_packs_b(ks, rec)) {
    auto* packed = static_cast<float*>(
        w_hh_buffer.reserve(static_cast<size_t>(packed_b_floats(ks, rec, blk)) * sizeof(float)));
    pack_b_all(ks, rec, blk, packed, threads);
    rec.b_packed = packed;
  }

  const void* h_prev = p.h0;
  for (int64_t t = 0; t < T; ++t) {
    float* z = gates + t * B * G;
    rec.a = h_prev;
    rec.c = z;
    gemm(ks, rec, blk, threads);

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
      float* h32 = f16 ? nullptr : reinterpret_cast<float*>(y_t) + r0 * H + c0;
      uint16_t* h16 = f16 ? reinterpret_cast<uint16_t*>(y_t) + r0 * H + c0 : nullptr;
      rnn.lstm_cell(r1 - r0, c1 - c0, z + r0 * G + c0, G, H, c + r0 * H + c0, H, h32, h16, H);
    });
    h_prev = y_t;
  }

  std::memcpy(p.h_n, static_cast<const char*>(p.y) + (T - 1) * B * H * elem, static_cast<size_t>(B * H * elem));
  if (f16) {
    ks.gemm.store_f16(c, H, B, H, static_cast<uint16_t*>(p.c_n), H);
  } else {
    std::memcpy(p.c_n, c, sizeof(float) * B * H);
  }
}

}  // namespace opbench

// One-layer recurrent forward passes, sequence-first (x is T x B x I), PyTorch's layouts and gate orders:
// the Elman RNN (tanh or ReLU), the GRU (r, z, n) and the LSTM (i, f, g, o).
#pragma once

#include <cstdint>

#include "opbench/gemm.hpp"

namespace opbench {

enum class RnnMode { rnn_tanh, rnn_relu, gru, lstm };

// Gates per hidden unit: 1, 1, 3, 4 (the weights have gates * hidden rows).
int rnn_gates(RnnMode mode);

// What a forward pass leaves for its backward (fp32 arrays owned by the caller; rnn_saved_floats() says
// how large): the LSTM's activated gates i, f, g, o (T x B x 4H), c_t and tanh(c_t) (T x B x H each); the
// GRU's r, z, n (T x B x 3H) and q_t = W_hn h_{t-1} + b_hn (T x B x H). The Elman RNN needs only y.
struct RnnSaved {
  float* gates = nullptr;
  float* state = nullptr;
  float* tanh_c = nullptr;
};

struct RnnProblem {
  RnnMode mode = RnnMode::lstm;
  Dtype dtype = Dtype::f32;  // of every input and output; states (c, GRU's h) are carried in fp32 internally
  const void* x = nullptr;     // T x B x I
  const void* w_ih = nullptr;  // G x I, G = gates * H
  const void* w_hh = nullptr;  // G x H
  const void* b_ih = nullptr;  // G
  const void* b_hh = nullptr;  // G
  const void* h0 = nullptr;    // B x H
  const void* c0 = nullptr;    // B x H, LSTM only
  void* y = nullptr;           // T x B x H (h of every step)
  void* h_n = nullptr;         // B x H
  void* c_n = nullptr;         // B x H, LSTM only
  int64_t seq_len = 1, batch = 1, input_size = 1, hidden = 1;
  const RnnSaved* save = nullptr;  // a training forward: keep what the backward needs
};

// Floats of each RnnSaved array for this problem: {gates, state, tanh_c} (0 where the cell keeps none).
struct RnnSavedSizes {
  int64_t gates, state, tanh_c;
};
RnnSavedSizes rnn_saved_floats(const RnnProblem& p);

// The input projection of all steps is one GEMM (x * W_ih^T plus the biases into an fp32 gate buffer);
// each step adds h_{t-1} * W_hh^T with a second GEMM (kernel set ks, W_hh packed once per call), then the
// ISA's fused cell (rnn) applies the gates. The GRU's recurrent product goes to its own buffer, since its
// n gate multiplies it (plus b_hn) by r.
void rnn_forward(const KernelSet& ks, const RnnKernels& rnn, const RnnProblem& p, const Blocking& blk, int threads);

// The threads of each step's recurrent product and cell (the input projection runs on all `threads`): enough
// that each thread multiplies at least kStepFlopsPerThread a step, and that each thread's share of W_hh, read
// at every step, fits in a quarter of its L2; at most `threads`.
int rnn_step_threads(const KernelSet& ks, const RnnProblem& p, const Blocking& blk, int threads);

// An upper bound of the bytes rnn_forward() allocates as workspace (overflow-checked; std::invalid_argument
// when a size does not fit in 64 bits).
int64_t rnn_workspace_bytes(const KernelSet& ks, const RnnProblem& p, const Blocking& blk, int threads);

}  // namespace opbench

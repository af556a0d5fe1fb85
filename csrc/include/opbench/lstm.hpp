// One-layer LSTM forward, sequence-first (x is T x B x I), PyTorch gate order (i, f, g, o).
#pragma once

#include <cstdint>

#include "opbench/gemm.hpp"

namespace opbench {

struct LstmProblem {
  Dtype dtype = Dtype::f32;  // of every input and output; the cell state is carried in fp32 internally
  const void* x = nullptr;     // T x B x I
  const void* w_ih = nullptr;  // 4H x I
  const void* w_hh = nullptr;  // 4H x H
  const void* b_ih = nullptr;  // 4H
  const void* b_hh = nullptr;  // 4H
  const void* h0 = nullptr;    // B x H
  const void* c0 = nullptr;    // B x H
  void* y = nullptr;           // T x B x H (h of every step)
  void* h_n = nullptr;         // B x H
  void* c_n = nullptr;         // B x H
  int64_t seq_len = 1, batch = 1, input_size = 1, hidden = 1;
};

// The input projection of all steps is one GEMM (x * W_ih^T + b_ih + b_hh into an fp32 gate buffer);
// each step adds h_{t-1} * W_hh^T with a second GEMM (kernel set ks), then the ISA's fused cell (rnn) applies
// the gates.
void lstm(const KernelSet& ks, const RnnKernels& rnn, const LstmProblem& p, const Blocking& blk, int threads);

// An upper bound of the bytes lstm() allocates as workspace (overflow-checked; std::invalid_argument when a
// size does not fit in 64 bits).
int64_t lstm_workspace_bytes(const KernelSet& ks, const LstmProblem& p, const Blocking& blk, int threads);

}  // namespace opbench

// Backward passes (training): gradients of the inputs and the weights given an upstream gradient, on the
// same kernel sets and blocking as the forward passes.
#pragma once

#include <cstdint>

#include "opbench/gemm.hpp"

namespace opbench {

// C = A * B (A m x k, B k x n, row-major, contiguous): given dC (m x n), dA = dC * B^T (m x k) and
// dB = A^T * dC (k x n), two GEMMs on the blocked driver (B^T read through trans_b, A^T through trans_a).
// All five arrays share one dtype; fp16 accumulates in fp32 and is rounded once.
struct GemmBackwardProblem {
  Dtype dtype = Dtype::f32;
  const void* a = nullptr;
  const void* b = nullptr;
  const void* dc = nullptr;
  void* da = nullptr;
  void* db = nullptr;
  int64_t m = 1, n = 1, k = 1;
};

// The two products as GEMM problems: [0] computes dA, [1] dB.
GemmProblem gemm_backward_part(const GemmBackwardProblem& p, int which);

void gemm_backward(const KernelSet& ks, const GemmBackwardProblem& p, const Blocking& blk, int threads);

// An upper bound of the bytes gemm_backward() allocates as workspace (overflow-checked).
int64_t gemm_backward_workspace_bytes(const KernelSet& ks, const GemmBackwardProblem& p, const Blocking& blk,
                                      int threads);

}  // namespace opbench

// GEMM backward (see backward.hpp): two calls of the blocked driver with transposed operands.
#include <algorithm>

#include "opbench/backward.hpp"

namespace opbench {

GemmProblem gemm_backward_part(const GemmBackwardProblem& p, int which) {
  if (which == 0) {  // dA (m x k) = dC (m x n) * B^T: B (k x n) is B^T's transpose, read with trans_b
    return gemm_product(p.dtype, p.dtype, p.dc, p.n, false, p.b, p.n, true, p.da, p.k, p.m, p.k, p.n, false);
  }
  // dB (k x n) = A^T (k x m) * dC (m x n): A (m x k) read with trans_a
  return gemm_product(p.dtype, p.dtype, p.a, p.k, true, p.dc, p.n, false, p.db, p.n, p.k, p.n, p.m, false);
}

void gemm_backward(const KernelSet& ks, const GemmBackwardProblem& p, const Blocking& blk, int threads) {
  gemm(ks, gemm_backward_part(p, 0), blk, threads);
  gemm(ks, gemm_backward_part(p, 1), blk, threads);
}

int64_t gemm_backward_workspace_bytes(const KernelSet& ks, const GemmBackwardProblem& p, const Blocking& blk,
                                      int threads) {
  return std::max(gemm_workspace_bytes(ks, gemm_backward_part(p, 0), blk, threads),
                  gemm_workspace_bytes(ks, gemm_backward_part(p, 1), blk, threads));
}

}  // namespace opbench

// GEMM backward (see backward.hpp): two calls of the blocked driver with transposed operands.
#include <algorithm>

#include "opbench/backward.hpp"

namespace opbench {

GemmProblem gemm_backward_part(const GemmBackwardProblem& p, int which) {
  GemmProblem g;
  g.in_dtype = g.out_dtype = p.dtype;
  if (which == 0) {  // dA (m x k) = dC (m x n) * B^T: B (k x n) is B^T's transpose, read with trans_b
    g.a = p.dc;
    g.lda = p.n;
    g.b = p.b;
    g.ldb = p.n;
    g.trans_b = true;
    g.c = p.da;
    g.ldc = p.k;
    g.m = p.m;
    g.n = p.k;
    g.k = p.n;
  } else {  // dB (k x n) = A^T (k x m) * dC (m x n): A (m x k) read with trans_a
    g.a = p.a;
    g.lda = p.k;
    g.trans_a = true;
    g.b = p.dc;
    g.ldb = p.n;
    g.c = p.db;
    g.ldc = p.n;
    g.m = p.k;
    g.n = p.n;
    g.k = p.m;
  }
  return g;
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

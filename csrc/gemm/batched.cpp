// Batched GEMM: C_i = A_i B_i for i < batch, the products `stride` elements apart (attention's QK^T and WV
// products: batch x heads products of a few hundred rows each). Each product is one gemm() of the driver;
// what the threads split is chosen per problem: the batch, when there are products enough to go round and
// each is small (one product on one thread avoids the driver's barriers and shared packing), else each
// product in turn on all threads.
#include <algorithm>
#include <cstdint>

#include "opbench/gemm.hpp"
#include "opbench/thread_pool.hpp"

namespace opbench {

namespace {

int64_t itemsize(Dtype d) { return d == Dtype::f32 ? 4 : 2; }

GemmProblem product(const GemmProblem& p, const BatchStrides& s, int64_t i) {
  GemmProblem q = p;
  q.a = static_cast<const char*>(p.a) + i * s.a * itemsize(p.in_dtype);
  q.b = static_cast<const char*>(p.b) + i * s.b * itemsize(p.in_dtype);
  q.c = static_cast<char*>(p.c) + i * s.c * itemsize(p.out_dtype);
  return q;
}

}  // namespace

bool gemm_batch_split(const GemmProblem& p, const Blocking& blk, int64_t batch, int threads) {
  if (threads <= 1 || batch < 2) return false;
  const double flops = 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
  // A product too small for the driver's threads, a batch the threads divide evenly, or one long enough
  // that an uneven last share costs little.
  return flops < static_cast<double>(blk.parallel_flops) || batch % threads == 0 || batch >= 4 * threads;
}

void gemm_batched(const KernelSet& ks, const GemmProblem& p, const Blocking& blk, int64_t batch, BatchStrides s,
                  int threads) {
  if (!gemm_batch_split(p, blk, batch, threads)) {
    for (int64_t i = 0; i < batch; ++i) gemm(ks, product(p, s, i), blk, threads);
    return;
  }
  const int t = static_cast<int>(std::min<int64_t>(threads, batch));
  ThreadPool::instance().run(t, [&](int tid) {
    for (int64_t i = batch * tid / t; i < batch * (tid + 1) / t; ++i) gemm(ks, product(p, s, i), blk, 1);
  });
}

}  // namespace opbench

// Batched GEMM: C_i = A_i B_i for i < batch, the products `stride` elements apart (attention's QK^T and WV
// products: batch x heads products of a few hundred rows each). Each product is one gemm() of the driver;
// what the threads split is chosen per problem: the batch, when there are products enough to go round and
// each is small (one product on one thread avoids the driver's barriers and shared packing), else each
// product in turn on all threads.
#include <algorithm>
#include <cstdint>

#include "opbench/cpu.hpp"
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

// Asks for product i's A and B, and its C for writing, in L2 (a hint: nothing waits for it). Where the batch
// is larger than L3, a thread does so for its next product before this one: 1536 products of 128x128 by
// 128x64 ran 5-8% faster (Zen 4, 2 threads), and batches in cache 2-3% slower, so those do not.
void prefetch_operands(const GemmProblem& p, const BatchStrides& s, int64_t i) {
  const int64_t in = itemsize(p.in_dtype), out = itemsize(p.out_dtype);
  const char* a = static_cast<const char*>(p.a) + i * s.a * in;
  const char* b = static_cast<const char*>(p.b) + i * s.b * in;
  char* c = static_cast<char*>(p.c) + i * s.c * out;
  for (int64_t at = 0; at < s.a * in; at += 64) __builtin_prefetch(a + at, 0, 2);
  for (int64_t at = 0; at < s.b * in; at += 64) __builtin_prefetch(b + at, 0, 2);
  for (int64_t at = 0; at < s.c * out; at += 64) __builtin_prefetch(c + at, 1, 2);
}

bool beyond_l3(const GemmProblem& p, const BatchStrides& s, int64_t batch) {
  const double bytes = static_cast<double>(batch) *
                       static_cast<double>((s.a + s.b) * itemsize(p.in_dtype) + s.c * itemsize(p.out_dtype));
  return bytes > static_cast<double>(cpu_info().l3.size_bytes);
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
  const bool prefetch = beyond_l3(p, s, batch);
  ThreadPool::instance().run(t, [&](int tid) {
    const int64_t end = batch * (tid + 1) / t;
    for (int64_t i = batch * tid / t; i < end; ++i) {
      if (prefetch && i + 1 < end) prefetch_operands(p, s, i + 1);
      gemm(ks, product(p, s, i), blk, 1);
    }
  });
}

}  // namespace opbench

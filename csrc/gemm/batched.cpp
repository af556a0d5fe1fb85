// Batched GEMM: C_i = A_i B_i for i < batch, the products `stride` elements apart (attention's QK^T and WV
// products: batch x heads products of a few hundred rows each). What the threads share is chosen per problem
// (gemm_batch_rows): products too big for one thread's share run in turn on all threads (the driver's
// shared packing and barriers pay there); otherwise each product is cut into row blocks and the batch x
// blocks tasks are dealt out to the threads, each task one gemm() on its own thread, with no barrier. The
// cut is the one the cost model below finishes first: 12 products on 16 threads ran each product in turn on
// all 16 threads before, at 63 GFLOPS where torch ran 808 (Xeon, 16 threads, 128x128x64).
#include <algorithm>
#include <cstdint>
#include <limits>

#include "opbench/gemm.hpp"
#include "opbench/thread_pool.hpp"

namespace opbench {

namespace {

int64_t itemsize(Dtype d) { return d == Dtype::f32 ? 4 : 2; }

// Rows [r0, r1) of product i.
GemmProblem part(const GemmProblem& p, const BatchStrides& s, int64_t i, int64_t r0, int64_t r1) {
  GemmProblem q = p;
  const int64_t ia = itemsize(p.in_dtype), ic = itemsize(p.out_dtype);
  q.a = static_cast<const char*>(p.a) + (i * s.a + (p.trans_a ? r0 : r0 * p.lda)) * ia;
  q.b = static_cast<const char*>(p.b) + i * s.b * ia;
  q.c = static_cast<char*>(p.c) + (i * s.c + r0 * p.ldc) * ic;
  q.m = r1 - r0;
  return q;
}

// A product whose share per thread is past this many FLOPs runs on all threads in turn (about 0.1-0.3 ms of
// one core: the driver's barriers are a small part of that).
constexpr double kShareFlops = double(int64_t(1) << 25);
// A task's cost in multiply-adds: its rows, B packed once per task (about a multiply-add per element), and
// the call (about a microsecond).
constexpr double kCallMacs = 32768.0;

int64_t block_rows(int64_t m, int64_t chunks, int64_t mr) {
  const int64_t rows = (m + chunks - 1) / chunks;
  return std::min(m, (rows + mr - 1) / mr * mr);
}

}  // namespace

int64_t gemm_batch_rows(const GemmProblem& p, int64_t batch, int threads, int64_t mr) {
  if (threads <= 1 || batch < 1 || p.m < 1) return std::max<int64_t>(p.m, 1);
  const double macs = static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
  if (2.0 * macs / threads >= kShareFlops && batch < 4 * threads) return 0;
  mr = std::max<int64_t>(mr, 1);
  int64_t best = p.m;
  double best_cost = std::numeric_limits<double>::infinity();
  const int64_t most = std::min<int64_t>((p.m + mr - 1) / mr, 64);
  for (int64_t chunks = 1; chunks <= most; ++chunks) {
    const int64_t rows = block_rows(p.m, chunks, mr);
    const int64_t real = (p.m + rows - 1) / rows;  // blocks of `rows` cover m
    if (real != chunks) continue;                  // the same cut as a smaller count
    const int64_t tasks = batch * real;
    const double rounds = static_cast<double>((tasks + threads - 1) / threads);
    const double task = static_cast<double>(rows) * static_cast<double>(p.n) * static_cast<double>(p.k) +
                        static_cast<double>(p.k) * static_cast<double>(p.n) + kCallMacs;
    const double cost = rounds * task;
    if (cost < best_cost * 0.999) {
      best_cost = cost;
      best = rows;
    }
  }
  return best;
}

void gemm_batched(const KernelSet& ks, const GemmProblem& p, const Blocking& blk, int64_t batch, BatchStrides s,
                  int threads, int64_t rows) {
  if (rows <= 0) {
    for (int64_t i = 0; i < batch; ++i) gemm(ks, part(p, s, i, 0, p.m), blk, threads);
    return;
  }
  rows = std::min(rows, p.m);
  const int64_t blocks = (p.m + rows - 1) / rows;
  const int64_t tasks = batch * blocks;
  const int t = static_cast<int>(std::min<int64_t>(threads, tasks));
  ThreadPool::instance().run(t, [&](int tid) {
    // A thread's tasks are consecutive: the blocks of one product it holds run as one gemm().
    const int64_t lo = tasks * tid / t, hi = tasks * (tid + 1) / t;
    for (int64_t j = lo; j < hi;) {
      const int64_t i = j / blocks;
      const int64_t end = std::min(hi, (i + 1) * blocks);
      gemm(ks, part(p, s, i, (j % blocks) * rows, std::min(p.m, (end - i * blocks) * rows)), blk, 1);
      j = end;
    }
  });
}

}  // namespace opbench

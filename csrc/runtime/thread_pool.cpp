// Persistent worker threads for the GEMM and peak kernels (see thread_pool.hpp for the scheduling policy).
#include "opbench/thread_pool.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace opbench {

namespace {
// About half a millisecond of pause instructions: long enough to cover the gap between timed calls.
constexpr int kIdleSpins = 20000;
constexpr int kSpinsBeforeYield = 4000;
}  // namespace

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

ThreadPool& ThreadPool::instance() {
  // Leaked on purpose: joining threads during interpreter shutdown can deadlock.
  static ThreadPool* pool = new ThreadPool();
  return *pool;
}

ThreadPool::~ThreadPool() {
  publish(nullptr, 0, true);
  for (auto& t : workers_) t.join();
}

// Writes a job as a sequence lock's writer does (odd generation, the fields, the next even one), the last
// step under mu_: a worker checks the generation under mu_ before it sleeps, so it either sees this job or
// is asleep when notify_all() comes.
void ThreadPool::publish(const std::function<void(int)>* job, int active, bool stop) {
  const uint64_t gen = generation_.load(std::memory_order_relaxed);
  generation_.store(gen + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  job_.store(job, std::memory_order_relaxed);
  active_.store(active, std::memory_order_relaxed);
  stop_.store(stop, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.store(gen + 2, std::memory_order_release);
  }
  cv_.notify_all();
}

void ThreadPool::grow(int n_workers) {
  while (static_cast<int>(workers_.size()) < n_workers) {
    const int tid = static_cast<int>(workers_.size()) + 1;
    // The start generation is read here, before run() publishes the job: a thread that read it itself
    // could start late, see the new generation as already seen and sleep through its first job.
    const uint64_t start = generation_.load(std::memory_order_acquire);
    workers_.emplace_back([this, tid, start] { worker_loop(tid, start); });
#if defined(__linux__)
    pthread_setname_np(workers_.back().native_handle(), "opbench-pool");
#endif
  }
}

void ThreadPool::place(int n_workers) {
#if defined(__linux__)
  const int here = sched_getcpu();
  if (here < 0 || (here == placed_for_cpu_ && n_workers == placed_workers_)) return;
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;  // the calling thread's CPUs
  std::vector<int> others;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed) && c != here) others.push_back(c);
  }
  // More workers than other CPUs (threads > CPUs): the scheduler spreads them better than pins would.
  const bool pin = CPU_ISSET(here, &allowed) && n_workers <= static_cast<int>(others.size());
  for (int k = 0; k < static_cast<int>(workers_.size()); ++k) {
    cpu_set_t set = allowed;
    if (pin && k < n_workers) {
      CPU_ZERO(&set);
      CPU_SET(others[k], &set);
    }
    pthread_setaffinity_np(workers_[k].native_handle(), sizeof(set), &set);
  }
  placed_for_cpu_ = here;
  placed_workers_ = n_workers;
#else
  (void)n_workers;
#endif
}

void ThreadPool::worker_loop(int tid, uint64_t seen) {
  // A job is waiting when the generation is even and not the last one this worker took.
  auto fresh = [&](uint64_t gen) { return gen != seen && gen % 2 == 0; };
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int i = 0; i < kIdleSpins && !fresh(gen); ++i) {
      cpu_relax();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (!fresh(gen)) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return fresh(gen = generation_.load(std::memory_order_acquire)); });
    }
    const std::function<void(int)>* job = job_.load(std::memory_order_relaxed);
    const int active = active_.load(std::memory_order_relaxed);
    const bool stop = stop_.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    // A newer job was being written while these were read: read that one. (A worker the job needs always
    // reads its own: the next cannot be published before every one of its workers has finished.)
    if (generation_.load(std::memory_order_relaxed) != gen) continue;
    seen = gen;
    if (stop) return;
    if (tid < active && job != nullptr) {
      (*job)(tid);
      remaining_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
}

void ThreadPool::run(int n, const std::function<void(int)>& fn) {
  if (n <= 1) {
    fn(0);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  grow(n - 1);
  place(n - 1);
  remaining_.store(n - 1, std::memory_order_relaxed);
  publish(&fn, n, false);
  fn(0);
  for (int spins = 0; remaining_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < kSpinsBeforeYield) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
}

void SpinBarrier::wait() {
  const int gen = generation_.load(std::memory_order_acquire);
  if (count_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
    count_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    return;
  }
  for (int spins = 0; generation_.load(std::memory_order_acquire) == gen; ++spins) {
    if (spins < kSpinsBeforeYield) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace opbench

// A persistent pool that runs one parallel job at a time; workers spin briefly between jobs, then sleep,
// so back-to-back calls start fast and an idle pool does not steal cores from other libraries being timed.
// On Linux the workers ("opbench-pool") are pinned to CPUs other than the one the calling thread is on,
// re-placed when the caller moves: left to the scheduler, worker and caller sometimes shared one CPU of
// two for a whole process, and a 40 us convolution took 80 us to 1.1 ms there.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace opbench {

class ThreadPool {
 public:
  static ThreadPool& instance();

  // Runs fn(tid) for tid in [0, n); the calling thread is tid 0. Returns when every tid has finished.
  // fn must not throw. Calls from different threads are serialized.
  void run(int n, const std::function<void(int)>& fn);

  ~ThreadPool();

 private:
  ThreadPool() = default;
  void grow(int n_workers);
  void place(int n_workers);
  void worker_loop(int tid, uint64_t seen);

  void publish(const std::function<void(int)>* job, int active, bool stop);

  std::mutex run_mu_;  // one job at a time
  std::mutex mu_;      // taken only to sleep, and by publish() to wake the sleepers
  std::condition_variable cv_;
  std::vector<std::thread> workers_;
  // A sequence lock over the job: odd while publish() writes job_, active_ and stop_, even once they are a
  // job's. A worker takes a job without a lock (with one mutex, the 15 workers of a 16-thread job queued on
  // it at every start), and reads it again when the generation moved while it read.
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> remaining_{0};
  std::atomic<int> active_{0};
  std::atomic<const std::function<void(int)>*> job_{nullptr};
  std::atomic<bool> stop_{false};
  int placed_for_cpu_ = -1;  // the caller's CPU the workers were placed around (place())
  int placed_workers_ = 0;
};

// Sense-reversing barrier for the participants of one job: spins with pause, yields when oversubscribed.
class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}
  void wait();

 private:
  const int n_;
  std::atomic<int> count_{0};
  std::atomic<int> generation_{0};
};

// Pause hint for spin loops (portable).
void cpu_relax();

}  // namespace opbench

// Runs the FMA-throughput loops on several threads at once and reports the best GFLOP/s.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "opbench/cpu.hpp"
#include "opbench/isa.hpp"
#include "opbench/peak.hpp"
#include "opbench/thread_pool.hpp"

namespace opbench {

namespace {

using Loop = double (*)(int64_t);

struct LoopChoice {
  Loop loop;
  const char* kernel;
};

LoopChoice choose(const std::string& dtype, const std::string& isa_in) {
  const std::string isa = isa_in.empty() ? supported_isas().front() : isa_in;
  if (!isa_supported(isa)) throw std::invalid_argument("isa '" + isa + "' is not supported by this CPU");
  if (dtype == "fp32") {
    const PeakLoop& loop = isa_entry(isa).fma_f32;
    return {loop.run, loop.name};
  }
  if (dtype == "fp16") {
    if (const PeakLoop* loop = peak_loop(&IsaEntry::fma_f16)) return {loop->run, loop->name};
    throw std::invalid_argument("this CPU (or build) has no native fp16 FMA");
  }
  if (dtype == "bf16") {
    if (const PeakLoop* loop = peak_loop(&IsaEntry::dot_bf16)) return {loop->run, loop->name};
    throw std::invalid_argument("this CPU (or build) has no AVX512-BF16 dot product");
  }
  throw std::invalid_argument("unknown dtype '" + dtype + "' (expected fp32, fp16 or bf16)");
}

}  // namespace

bool native_fp16_fma_available() { return peak_loop(&IsaEntry::fma_f16) != nullptr; }

bool bf16_dot_available() { return peak_loop(&IsaEntry::dot_bf16) != nullptr; }

PeakMeasurement measure_fma_peak(const std::string& dtype, const std::string& isa, int threads, double min_time_s,
                                 int repeats) {
  const LoopChoice choice = choose(dtype, isa);
  threads = std::max(1, threads);
  using clock = std::chrono::steady_clock;

  // Calibrate on one thread: double the iteration count until one run lasts a tenth of min_time_s.
  int64_t iters = 1 << 14;
  for (;;) {
    const auto t0 = clock::now();
    choice.loop(iters);
    const double dt = std::chrono::duration<double>(clock::now() - t0).count();
    if (dt >= min_time_s / 10 || iters > (int64_t(1) << 40)) {
      iters = static_cast<int64_t>(iters * std::max(1.0, min_time_s / std::max(dt, 1e-9)));
      break;
    }
    iters *= 2;
  }

  double best = 0.0;
  std::vector<double> flops(threads);
  for (int r = 0; r < std::max(1, repeats); ++r) {
    SpinBarrier start(threads);
    const auto t0 = clock::now();
    ThreadPool::instance().run(threads, [&](int tid) {
      start.wait();
      flops[tid] = choice.loop(iters);
    });
    const double dt = std::chrono::duration<double>(clock::now() - t0).count();
    double total = 0.0;
    for (double f : flops) total += f;
    best = std::max(best, total / dt / 1e9);
  }
  return {best, choice.kernel};
}

double measure_triad_gbs(int threads, int64_t elements, int repeats) {
  threads = std::max(1, threads);
  std::vector<double> a(static_cast<size_t>(elements)), b(static_cast<size_t>(elements)), c(static_cast<size_t>(elements));
  auto slice = [&](int tid, int64_t& lo, int64_t& hi) {
    lo = elements * tid / threads;
    hi = elements * (tid + 1) / threads;
  };
  ThreadPool::instance().run(threads, [&](int tid) {
    int64_t lo, hi;
    slice(tid, lo, hi);
    for (int64_t i = lo; i < hi; ++i) {
      a[i] = 0.0;
      b[i] = 1.0;
      c[i] = 2.0;
    }
  });
  const double scalar = 3.0;
  double best = 0.0;
  using clock = std::chrono::steady_clock;
  for (int r = 0; r < std::max(1, repeats); ++r) {
    SpinBarrier start(threads);
    const auto t0 = clock::now();
    ThreadPool::instance().run(threads, [&](int tid) {
      start.wait();
      int64_t lo, hi;
      slice(tid, lo, hi);
      double* __restrict pa = a.data();
      const double* __restrict pb = b.data();
      const double* __restrict pc = c.data();
      for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + scalar * pc[i];
    });
    const double dt = std::chrono::duration<double>(clock::now() - t0).count();
    best = std::max(best, 24.0 * static_cast<double>(elements) / dt / 1e9);
  }
  volatile double sink = a[static_cast<size_t>(elements / 2)];
  (void)sink;
  return best;
}

double measure_handoff_ns(int64_t round_trips, int repeats) {
  struct alignas(64) Line {
    std::atomic<int64_t> value{0};
  };
  Line line;
  std::vector<double> blocks;
  using clock = std::chrono::steady_clock;
  // Spin with pause, then yield: a partner that cannot run (one CPU) still gets there, slowly.
  auto await = [](const std::atomic<int64_t>& v, int64_t want) {
    for (int spins = 0; v.load(std::memory_order_acquire) != want; ++spins) {
      if (spins < 100000) {
        cpu_relax();
      } else {
        std::this_thread::yield();
      }
    }
  };
  for (int r = 0; r < std::max(1, repeats); ++r) {
    line.value.store(0, std::memory_order_relaxed);
    double ns = 0.0;
    ThreadPool::instance().run(2, [&](int tid) {
      if (tid == 1) {
        for (int64_t i = 0; i <= round_trips; ++i) {
          await(line.value, 2 * i + 1);
          line.value.store(2 * i + 2, std::memory_order_release);
        }
        return;
      }
      // One round trip first, untimed: the worker may still be waking up.
      line.value.store(1, std::memory_order_release);
      await(line.value, 2);
      const auto t0 = clock::now();
      for (int64_t i = 1; i <= round_trips; ++i) {
        line.value.store(2 * i + 1, std::memory_order_release);
        await(line.value, 2 * i + 2);
      }
      ns = std::chrono::duration<double, std::nano>(clock::now() - t0).count() / static_cast<double>(round_trips);
    });
    blocks.push_back(ns);
  }
  std::sort(blocks.begin(), blocks.end());
  return blocks[blocks.size() / 2];
}

}  // namespace opbench

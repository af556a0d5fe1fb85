// FMA-throughput micro-kernels that measure the compute peak per dtype, ISA and thread count.
#pragma once

#include <cstdint>
#include <string>

namespace opbench {

// Each runs `iters` iterations of independent FMA chains on one thread and returns the FLOPs performed
// (one FMA = 2 FLOPs). Defined in one translation unit per ISA, compiled with that ISA's flags.
double fma_chains_f32_ref(int64_t iters);
double fma_chains_f32_avx2(int64_t iters);
double fma_chains_f32_avx512(int64_t iters);
double fma_chains_f16_avx512fp16(int64_t iters);  // only built when the compiler knows -mavx512fp16
double dot_chains_bf16_avx512bf16(int64_t iters);  // vdpbf16ps; only built when the compiler knows -mavx512bf16

struct PeakMeasurement {
  double gflops = 0.0;
  std::string kernel;  // which loop ran, e.g. "avx512 fp32 FMA, 16 chains"
};

// dtype "fp32", "fp16" (native fp16 FMA) or "bf16" (AVX512-BF16 dot products); throws std::invalid_argument
// where the CPU (or build) has no such unit.
// `isa` "" picks the best available. Runs `threads` threads at once; the best of `repeats` runs of at
// least `min_time_s` each.
PeakMeasurement measure_fma_peak(const std::string& dtype, const std::string& isa, int threads, double min_time_s,
                                 int repeats);

bool native_fp16_fma_available();
bool bf16_dot_available();

// STREAM-like triad a[i] = b[i] + s * c[i] over three float64 arrays of `elements` each, split between
// `threads` threads (each touches its own slice first, so pages land near the thread that uses them);
// best of `repeats` passes, counted as STREAM does: 24 bytes per element (reads of b and c, write of a).
double measure_triad_gbs(int threads, int64_t elements, int repeats);

// Round-trip time in nanoseconds of one cache line passed from the calling thread to the pool's first worker
// (on another CPU: thread_pool.hpp) and back: the median of `repeats` blocks of `round_trips`. This is the
// hand-off every parallel kernel pays at each join and each step of a recurrence. On a VM it reads ~50 ns
// while the two vCPUs sit on cores of one CCD and 400-1000 ns while the hypervisor has placed them apart;
// an LSTM ran 1.3-2x slower there while the FMA loop ran no slower. Needs two CPUs in the affinity mask.
double measure_handoff_ns(int64_t round_trips, int repeats);

}  // namespace opbench

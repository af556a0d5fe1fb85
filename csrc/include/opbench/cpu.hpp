// What the CPU is and has: ISA features (for run-time dispatch), brand string and cache geometry.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace opbench {

struct CacheLevel {
  int level = 0;
  int64_t size_bytes = 0;
  int ways = 0;
  int64_t sets = 0;
  int line_bytes = 0;
  int shared_by_cpus = 1;
};

struct CpuInfo {
  std::string vendor;
  std::string brand;
  bool sse2 = false, avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512fp16 = false, avx512bf16 = false, amx_bf16 = false, amx_tile = false;
  int logical_cpus = 1;
  // CPUID.1:EAX with the extended fields folded in (Intel SDM vol. 2A, CPUID; AMD APM vol. 3): what
  // tells a Zen 4 from a Zen 5 when both brand strings say "AMD EPYC".
  int family = 0, model = 0, stepping = 0;
  std::string hypervisor;  // CPUID 0x40000000 signature ("KVMKVMKVM", "Microsoft Hv", ...); empty on bare metal
  CacheLevel l1d, l2, l3;
  std::string cache_source;  // "sysfs", "sysconf" or "assumed"
};

const CpuInfo& cpu_info();

// Whether rows streamed from memory or L3 are prefetched ahead with prefetchnta (locality 0) rather than
// prefetcht0: the thin GEMM path's rows of A (thin.hpp). prefetchnta on Intel CPUs: a 2-vCPU Xeon (Emerald
// Rapids) streamed 4096x16x1024 2.3x and 7680x2x2560 4.6-5.0x slower than with prefetcht0 (A from L3);
// other vendors keep it (chosen on Zen 5, not measured against prefetcht0 there). Found once.
bool stream_prefetch_nta();

// Whether vector loads that split a cache line cost enough to copy an operand aligned first (Intel CPUs:
// the unpacked-B GEMM path, small.cpp, measured there). Found once.
bool split_loads_costly();

}  // namespace opbench

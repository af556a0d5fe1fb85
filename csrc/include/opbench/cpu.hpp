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


}  // namespace opbench

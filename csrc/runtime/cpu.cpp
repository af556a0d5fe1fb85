// CPU feature detection (cpuid + OS state via libgcc's __builtin_cpu_supports) and cache geometry
// (Linux sysfs first, then sysconf, then conservative assumptions, recording which was used).
#include "opbench/cpu.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace opbench {

namespace {

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (f) std::getline(f, s);
  return s;
}

int64_t parse_size(const std::string& s) {  // "48K", "1024K", "32M"
  if (s.empty()) return 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (end == nullptr) return 0;
  switch (*end) {
    case 'K': return v * 1024;
    case 'M': return v * 1024 * 1024;
    case 'G': return v * 1024LL * 1024 * 1024;
    default: return v;
  }
}

int count_cpu_list(const std::string& s) {  // "0-1,4,6-7"
  int count = 0;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ',')) {
    const auto dash = part.find('-');
    if (dash == std::string::npos) {
      if (!part.empty()) ++count;
    } else {
      count += std::stoi(part.substr(dash + 1)) - std::stoi(part.substr(0, dash)) + 1;
    }
  }
  return std::max(count, 1);
}

bool read_sysfs_caches(CpuInfo& info) {
  bool any = false;
  for (int idx = 0; idx < 8; ++idx) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(idx) + "/";
    const std::string level_s = read_line(dir + "level");
    if (level_s.empty()) break;
    const std::string type = read_line(dir + "type");
    if (type == "Instruction") continue;
    CacheLevel c;
    c.level = std::atoi(level_s.c_str());
    c.size_bytes = parse_size(read_line(dir + "size"));
    c.ways = std::atoi(read_line(dir + "ways_of_associativity").c_str());
    c.sets = std::atoll(read_line(dir + "number_of_sets").c_str());
    c.line_bytes = std::atoi(read_line(dir + "coherency_line_size").c_str());
    c.shared_by_cpus = count_cpu_list(read_line(dir + "shared_cpu_list"));
    if (c.size_bytes <= 0) continue;
    if (c.level == 1) info.l1d = c;
    if (c.level == 2) info.l2 = c;
    if (c.level == 3) info.l3 = c;
    any = true;
  }
  return any && info.l1d.size_bytes > 0 && info.l2.size_bytes > 0;
}

void read_sysconf_caches(CpuInfo& info) {
  auto level = [](int lvl, long size_name, long assoc_name, long line_name) {
    CacheLevel c;
    c.level = lvl;
    c.size_bytes = sysconf(size_name);
    c.ways = static_cast<int>(sysconf(assoc_name));
    c.line_bytes = static_cast<int>(sysconf(line_name));
    return c;
  };
  info.l1d = level(1, _SC_LEVEL1_DCACHE_SIZE, _SC_LEVEL1_DCACHE_ASSOC, _SC_LEVEL1_DCACHE_LINESIZE);
  info.l2 = level(2, _SC_LEVEL2_CACHE_SIZE, _SC_LEVEL2_CACHE_ASSOC, _SC_LEVEL2_CACHE_LINESIZE);
  info.l3 = level(3, _SC_LEVEL3_CACHE_SIZE, _SC_LEVEL3_CACHE_ASSOC, _SC_LEVEL3_CACHE_LINESIZE);
}

// Fill whatever is missing so the blocking model always has a geometry to work with.
void complete_cache(CacheLevel& c, int level, int64_t size, int ways) {
  c.level = level;
  if (c.size_bytes <= 0) c.size_bytes = size;
  if (c.ways <= 0) c.ways = ways;
  if (c.line_bytes <= 0) c.line_bytes = 64;
  if (c.sets <= 0) c.sets = c.size_bytes / (static_cast<int64_t>(c.ways) * c.line_bytes);
}

CpuInfo detect() {
  CpuInfo info;
  info.logical_cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  info.sse2 = __builtin_cpu_supports("sse2");
  info.avx = __builtin_cpu_supports("avx");
  info.avx2 = __builtin_cpu_supports("avx2");
  info.fma = __builtin_cpu_supports("fma");
  info.avx512f = __builtin_cpu_supports("avx512f");
  info.avx512bw = __builtin_cpu_supports("avx512bw");
  info.avx512vl = __builtin_cpu_supports("avx512vl");
  info.avx512dq = __builtin_cpu_supports("avx512dq");
  info.avx512bf16 = __builtin_cpu_supports("avx512bf16");
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  // F16C (CPUID.1:ECX[29]) is not among __builtin_cpu_supports names on every GCC; AVX state is checked above.
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
    info.f16c = info.avx && ((ecx >> 29) & 1u);
    const unsigned base_family = (eax >> 8) & 0xfu, base_model = (eax >> 4) & 0xfu;
    info.family = static_cast<int>(base_family == 0xfu ? base_family + ((eax >> 20) & 0xffu) : base_family);
    info.model = static_cast<int>(
        base_family == 0x6u || base_family == 0xfu ? base_model + (((eax >> 16) & 0xfu) << 4) : base_model);
    info.stepping = static_cast<int>(eax & 0xfu);
    if ((ecx >> 31) & 1u) {  // the hypervisor-present bit; its leaf names it
      unsigned a = 0, b = 0, c = 0, d = 0;
      __cpuid(0x40000000u, a, b, c, d);
      char sig[13] = {0};
      std::memcpy(sig, &b, 4);
      std::memcpy(sig + 4, &c, 4);
      std::memcpy(sig + 8, &d, 4);
      std::string h(sig);
      h.erase(h.find_last_not_of(std::string(" \0", 2)) + 1);
      info.hypervisor = h.empty() ? "unnamed" : h;
    }
  }
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    // AVX512-FP16: CPUID.(7,0):EDX[23]; AMX-BF16: EDX[22]; AMX-TILE: EDX[24]. Only meaningful when the OS
    // enabled the state (AVX-512: XCR0; AMX's tile data: the permission runtime/amx.cpp asks for).
    info.avx512fp16 = info.avx512bw && ((edx >> 23) & 1u);
    info.amx_bf16 = (edx >> 22) & 1u;
    info.amx_tile = (edx >> 24) & 1u;
  }
  char vendor[13] = {0};
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx)) {
    std::memcpy(vendor, &ebx, 4);
    std::memcpy(vendor + 4, &edx, 4);
    std::memcpy(vendor + 8, &ecx, 4);
    info.vendor = vendor;
  }
  unsigned max_ext = __get_cpuid_max(0x80000000u, nullptr);
  if (max_ext >= 0x80000004u) {
    char brand[49] = {0};
    for (unsigned i = 0; i < 3; ++i) {
      __get_cpuid(0x80000002u + i, &eax, &ebx, &ecx, &edx);
      std::memcpy(brand + 16 * i, &eax, 4);
      std::memcpy(brand + 16 * i + 4, &ebx, 4);
      std::memcpy(brand + 16 * i + 8, &ecx, 4);
      std::memcpy(brand + 16 * i + 12, &edx, 4);
    }
    std::string b(brand);
    b.erase(0, b.find_first_not_of(' '));
    b.erase(b.find_last_not_of(' ') + 1);
    info.brand = b;
  }
#endif
  if (read_sysfs_caches(info)) {
    info.cache_source = "sysfs";
  } else {
    read_sysconf_caches(info);
    info.cache_source = info.l1d.size_bytes > 0 ? "sysconf" : "assumed";
  }
  complete_cache(info.l1d, 1, 32 * 1024, 8);
  complete_cache(info.l2, 2, 256 * 1024, 4);
  complete_cache(info.l3, 3, 8 * 1024 * 1024, 16);
  return info;
}

}  // namespace

const CpuInfo& cpu_info() {
  static const CpuInfo info = detect();
  return info;
}


}  // namespace opbench

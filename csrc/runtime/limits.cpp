// The bounds and the allocation limit of limits.hpp.
#include "opbench/limits.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace opbench {

void check_range(int64_t value, int64_t lo, int64_t hi, const char* name) {
  if (value < lo || value > hi) {
    throw std::invalid_argument(std::string(name) + " must be between " + std::to_string(lo) + " and " +
                                std::to_string(hi) + ", got " + std::to_string(value));
  }
}

int64_t alloc_limit_bytes() {
  if (const char* env = std::getenv("OPBENCH_MAX_ALLOC_BYTES"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long long v = std::strtoll(env, &end, 10);
    if (end != env && *end == '\0' && v > 0) return v;
  }
  // The machine's memory, read once (sysconf(_SC_PHYS_PAGES) is a sysinfo() call: a tenth of a small GEMM's
  // plain call).
  static const int64_t physical = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : int64_t{1} << 40;
  }();
  return physical;
}

void check_alloc(int64_t bytes, const std::string& what) {
  const int64_t limit = alloc_limit_bytes();
  if (bytes > limit) {
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    char text[160];
    std::snprintf(text, sizeof text, " would allocate %.3g GiB, over the limit of %.3g GiB", bytes / kGiB,
                  limit / kGiB);
    throw std::invalid_argument(what + text + " (physical memory, or $OPBENCH_MAX_ALLOC_BYTES)");
  }
}

}  // namespace opbench

// Argument validation for every kernel entry point: overflow-checked 64-bit arithmetic, the documented bounds
// of each argument, and the one allocation limit. A violation throws std::invalid_argument naming the argument
// (pybind11 raises it as ValueError), always before any allocation or loop.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace opbench {

// Strides, paddings and dilations: far past any real network, small enough that every offset the conv
// kernels form stays in 32-bit fields (GatherRun) and every product in 64 bits.
constexpr int64_t kMaxConvParam = int64_t{1} << 24;
// Tile sizes: larger values are clamped to the problem anyway; this keeps the rounding arithmetic exact.
constexpr int64_t kMaxTile = (int64_t{1} << 31) - 1;
// Threads: each is a pool worker for the life of the process.
constexpr int kMaxThreads = 1024;

namespace checked {

inline int64_t mul(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw std::invalid_argument(std::string(what) + " overflows 64-bit arithmetic");
  return r;
}

inline int64_t add(int64_t a, int64_t b, const char* what) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) throw std::invalid_argument(std::string(what) + " overflows 64-bit arithmetic");
  return r;
}

}  // namespace checked

// `value` within [lo, hi], else std::invalid_argument "<name> must be between lo and hi, got value".
void check_range(int64_t value, int64_t lo, int64_t hi, const char* name);

// The most bytes one call may allocate (its output, when it allocates one, and its workspace):
// $OPBENCH_MAX_ALLOC_BYTES when set, else this machine's physical memory.
int64_t alloc_limit_bytes();

// Throws std::invalid_argument when `bytes` (what `what` would allocate) is over alloc_limit_bytes().
void check_alloc(int64_t bytes, const std::string& what);

}  // namespace opbench

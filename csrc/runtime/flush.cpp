// Cache flush for cold-cache timing (timed_loop.hpp).
#include <cstring>

#include "opbench/aligned.hpp"
#include "opbench/timed_loop.hpp"

namespace opbench {

void flush_cache(int64_t bytes) {
  static AlignedBuffer buffer;
  static int64_t size = 0;
  auto* data = static_cast<volatile unsigned char*>(buffer.reserve(static_cast<size_t>(bytes)));
  if (bytes > size) {
    std::memset(const_cast<unsigned char*>(data), 1, static_cast<size_t>(bytes));
    size = bytes;
  }
  for (int64_t i = 0; i < bytes; i += 64) data[i] = static_cast<unsigned char>(data[i] + 1);
}

}  // namespace opbench

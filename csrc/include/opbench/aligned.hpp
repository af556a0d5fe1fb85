// Grow-only, 4 KiB-aligned scratch buffers reused across calls (packing panels, fp32 accumulators).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

namespace opbench {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(ptr_); }

  // Returns a buffer of at least `bytes`; contents are unspecified after growth.
  void* reserve(std::size_t bytes) {
    if (bytes > capacity_) {
      constexpr std::size_t kAlign = 4096;
      const std::size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
      void* p = std::aligned_alloc(kAlign, rounded);
      if (p == nullptr) throw std::bad_alloc();
      std::free(ptr_);
      ptr_ = p;
      capacity_ = rounded;
    }
    return ptr_;
  }

 private:
  void* ptr_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace opbench

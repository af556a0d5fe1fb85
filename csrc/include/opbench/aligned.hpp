// Grow-only, 4 KiB-aligned scratch buffers reused across calls (packing panels, fp32 accumulators). Buffers of
// 2 MiB or more are 2 MiB-aligned and asked for transparent huge pages (MADV_HUGEPAGE; honoured where THP is
// "madvise" or "always"): with 4 KiB pages the physical pages behind a packed panel, which set L2's
// (physically indexed) conflicts, were chosen anew in each process, and a process that drew badly ran
// 3x3 conv at 7x7 with 512 channels ~25% slower (290 vs 370-385 GFLOPS on 2 Zen 5 cores, over six processes
// each; docs/benchmarks.md).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>
#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace opbench {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(ptr_); }

  // Returns a buffer of at least `bytes`; contents are unspecified after growth. `huge`: 2 MiB-aligned and
  // asked for huge pages whatever its size, so that what is laid out in it is physically contiguous too.
  void* reserve(std::size_t bytes, bool huge = false) {
    if (bytes > capacity_) {
      const std::size_t align = bytes >= kHugePage || huge ? kHugePage : 4096;
      const std::size_t rounded = (bytes + align - 1) / align * align;
      void* p = std::aligned_alloc(align, rounded);
      if (p == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
      if (align == kHugePage) madvise(p, rounded, MADV_HUGEPAGE);
#endif
      std::free(ptr_);
      ptr_ = p;
      capacity_ = rounded;
    }
    return ptr_;
  }

 private:
  static constexpr std::size_t kHugePage = std::size_t(2) << 20;
  void* ptr_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace opbench

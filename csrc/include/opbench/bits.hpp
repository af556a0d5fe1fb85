// A binary32's bits and back (std::bit_cast before C++20): what the portable format conversions
// (bf16.hpp, fp16.hpp) and the emulated fp16 rounding work on.
#pragma once

#include <cstdint>
#include <cstring>

namespace opbench {

inline uint32_t bits_of(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  return x;
}

inline float float_of(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace opbench

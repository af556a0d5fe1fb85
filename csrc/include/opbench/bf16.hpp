// bfloat16 <-> binary32: bf16 is the top half of an fp32 (8-bit exponent, 7 stored significand bits), so
// widening is a shift and narrowing rounds the low 16 bits away (to nearest, ties to even; NaN stays NaN).
#pragma once

#include <cstdint>

#include "opbench/bits.hpp"

namespace opbench {

inline float bf16_to_float(uint16_t h) { return float_of(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t x = bits_of(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // a quiet NaN
  // Adding 0x7fff plus the bit that will become the last kept one rounds to nearest, ties to even; a carry
  // bumps the exponent, and past the largest finite bf16 it lands on infinity, as it should.
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace opbench

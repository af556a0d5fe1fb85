// Portable IEEE binary16 <-> binary32 conversion (round-to-nearest-even), used where no F16C unit is assumed.
#pragma once

#include <cstdint>

#include "opbench/bits.hpp"

namespace opbench {

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {
      // Subnormal half: shift the significand up until its leading one reaches bit 10.
      int shifts = 0;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        ++shifts;
      }
      bits = sign | (static_cast<uint32_t>(113 - shifts) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  return float_of(bits);
}

inline uint16_t float_to_half(float f) {
  const uint32_t x = bits_of(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf stays inf; NaN stays a quiet NaN with its top payload bits
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? (0x200u | ((absx >> 13) & 0x3ffu)) : 0u));
  }
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (absx < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    if (absx <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25 rounds (ties to even) to zero
    const uint32_t e = absx >> 23;
    const uint32_t m = (absx & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // value / 2^-24 == m * 2^(e - 126)
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t q = (((absx >> 23) - 112u) << 10) | ((absx & 0x7fffffu) >> 13);
  const uint32_t rem = absx & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;  // a carry correctly bumps the exponent
  return static_cast<uint16_t>(sign | q);
}

// n values converted one by one with the portable routines above (tests check them bit for bit).
inline void halves_from_floats(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_half(src[i]);
}

inline void floats_from_halves(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(src[i]);
}

}  // namespace opbench

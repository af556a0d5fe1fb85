// The exact AMX-BF16 emulator (portable C++, baseline x86-64 flags): the tile operations the AMX kernel uses
// (ldtilecfg's shapes, tileloadd, tilestored, tilezero, tdpbf16ps) on eight tile registers in memory, run by
// the same kernel body as the real tiles (amx_body.hpp). Its kernel set is the reference one with these bf16
// kernels, the ISA "amx-emu" (runtime/isa.cpp): selected only by name (OPBENCH_ISA=amx-emu, Tiles(isa=...)),
// never by default, so every CI machine checks the AMX kernel's blocking, packing and edges.
#include <cmath>

#include "amx_body.hpp"
#include "opbench/isa.hpp"
#include "opbench/bf16.hpp"
#include "opbench/fp16.hpp"

namespace opbench {
namespace {

struct Cvt {
  static float widen(uint16_t h) { return half_to_float(h); }
};

// TDPBF16PS's arithmetic (Intel SDM vol. 2, TDPBF16PS): bf16 inputs with denormals read as zero; per row of
// the destination, two fp32 partial sums per column (the even and the odd element of each pair), each step a
// fused multiply-add rounded to nearest even with a denormal result flushed to zero; then the two partial sums
// added and the total added to the destination, both flushed likewise. MXCSR plays no part.
float daz(uint16_t h) {
  if ((h & 0x7f80u) == 0) h &= 0x8000u;
  return bf16_to_float(h);
}
float ftz(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }

// The instruction on tiles of 16 rows x 64 bytes (the only shape the kernel configures): c (+)= a . b. An
// Emerald Rapids' tiles gave the same bits on every input tests/test_amx.py tries (docs/benchmarks.md).
void tdpbf16ps_model(float (*c)[16], const uint16_t (*a)[32], const uint16_t (*b)[32]) {
  for (int m = 0; m < 16; ++m) {
    for (int n = 0; n < 16; ++n) {
      float even = 0.0f, odd = 0.0f;
      for (int k = 0; k < 16; ++k) {
        even = ftz(std::fma(daz(a[m][2 * k]), daz(b[k][2 * n]), even));
        odd = ftz(std::fma(daz(a[m][2 * k + 1]), daz(b[k][2 * n + 1]), odd));
      }
      c[m][n] = ftz(c[m][n] + ftz(even + odd));
    }
  }
}

}  // namespace

void tdpbf16ps_emulated(float* c, const uint16_t* a, const uint16_t* b) {
  tdpbf16ps_model(reinterpret_cast<float(*)[16]>(c), reinterpret_cast<const uint16_t(*)[32]>(a),
                  reinterpret_cast<const uint16_t(*)[32]>(b));
}

namespace {

struct EmulatedTiles {
  static constexpr void (*kBegin)() = nullptr;  // nothing to configure: every tile is 16 x 64 bytes
  static constexpr void (*kEnd)() = nullptr;
  alignas(64) unsigned char t[8][amx::kTileRows][amx::kTileBytes];
  // bf16 C: the finished tile rounded as every bf16 output is (to nearest even, NaNs kept quiet)
  static void round(const float* tile, int64_t ld, int m, int n, uint16_t* c, int64_t ldc) {
    kernels_ref().gemm.store_bf16(tile, ld, m, n, c, ldc);
  }
  static bool ready() { return true; }
  void configure() {}  // every tile is 16 x 64 bytes (amx::full_tiles)
  template <int T>
  void load(const void* p, int64_t stride) {
    for (int r = 0; r < amx::kTileRows; ++r) std::memcpy(t[T][r], static_cast<const char*>(p) + r * stride, amx::kTileBytes);
  }
  template <int T>
  void store(void* p, int64_t stride) {
    for (int r = 0; r < amx::kTileRows; ++r) std::memcpy(static_cast<char*>(p) + r * stride, t[T][r], amx::kTileBytes);
  }
  template <int T>
  void zero() {
    std::memset(t[T], 0, sizeof(t[T]));
  }
  template <int C, int A, int B>
  void dp() {
    tdpbf16ps_model(reinterpret_cast<float(*)[16]>(t[C]), reinterpret_cast<const uint16_t(*)[32]>(t[A]),
                    reinterpret_cast<const uint16_t(*)[32]>(t[B]));
  }
};

}  // namespace

const Bf16Kernels* kernels_bf16_amx_emu_shape(int v) {
  static const amx::Variants<EmulatedTiles, Cvt> all("amx-emu", "tdpbf16ps emulated exactly in C++");
  return all.at(v);
}

const Bf16Kernels& kernels_bf16_amx_emu() { return *kernels_bf16_amx_emu_shape(0); }

const KernelSet& kernels_amx_emu() {
  static const KernelSet ks = amx::renamed(kernels_ref(), "amx-emu");
  return ks;
}

}  // namespace opbench

// The AMX-BF16 kernels: amx_body.hpp's micro-kernel on the real tile registers, and the TDPBF16PS peak loop.
// Compiled with the AVX-512 flags plus -mamx-tile -mamx-bf16, only when the compiler knows them; run only
// where runtime/amx.cpp found the CPU's AMX-BF16 and the kernel's permission (ISA "amx", runtime/isa.cpp).
#include <immintrin.h>

#include "amx_body.hpp"
#include "opbench/isa.hpp"
#include "opbench/peak.hpp"

namespace opbench {
namespace {

struct Cvt {
  static float widen(uint16_t h) { return _cvtsh_ss(h); }
};

// The tile intrinsics take their tile numbers as literals (GCC pastes them into the instruction), so each
// tile's operations are spelled out once here.
template <int T>
struct Ops;
#define OPBENCH_TILE_OPS(T)                                                                  \
  template <>                                                                                \
  struct Ops<T> {                                                                            \
    static void load(const void* p, int64_t stride) { _tile_loadd(T, p, stride); }         \
    static void store(void* p, int64_t stride) { _tile_stored(T, p, stride); }             \
    static void zero() { _tile_zero(T); }                                                    \
  };
OPBENCH_TILE_OPS(0)
OPBENCH_TILE_OPS(1)
OPBENCH_TILE_OPS(2)
OPBENCH_TILE_OPS(3)
OPBENCH_TILE_OPS(4)
OPBENCH_TILE_OPS(5)
OPBENCH_TILE_OPS(6)
OPBENCH_TILE_OPS(7)
#undef OPBENCH_TILE_OPS

// TDPBF16PS on any three tiles: the intrinsic pastes its tile numbers into the instruction's text, so it takes
// only literals; "%c" prints a template's constant the same way (the same encoding, checked with objdump).
template <int C, int A, int B>
inline void dot() {
  __asm__ volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
}

// Whether this thread's tiles hold our configuration: set by begin, for one product's stretch of calls
// (blocked.cpp's Session); outside one another library (oneDNN in torch) may have loaded its own since.
thread_local bool t_ready = false;

void configure_tiles() {
  static const amx::TileConfig cfg = amx::full_tiles();
  _tile_loadconfig(&cfg);
}

struct RealTiles {
  // ldtilecfg once per thread per product (blocked.cpp's Session), the tiles marked ready until its end
  static constexpr void (*kBegin)() = [] {
    configure_tiles();
    t_ready = true;
  };
  static constexpr void (*kEnd)() = [] { t_ready = false; };
  // bf16 C: the finished tile rounded as every bf16 output is (to nearest even, NaNs kept quiet)
  static void round(const float* tile, int64_t ld, int m, int n, uint16_t* c, int64_t ldc) {
    kernels_avx512().gemm.store_bf16(tile, ld, m, n, c, ldc);
  }
  static bool ready() { return t_ready; }
  void configure() { configure_tiles(); }
  template <int T>
  void load(const void* p, int64_t stride) {
    Ops<T>::load(p, stride);
  }
  template <int T>
  void store(void* p, int64_t stride) {
    Ops<T>::store(p, stride);
  }
  template <int T>
  void zero() {
    Ops<T>::zero();
  }
  template <int C, int A, int B>
  void dp() {
    dot<C, A, B>();
  }
};

}  // namespace

const Bf16Kernels* kernels_bf16_amx_shape(int v) {
  static const amx::Variants<RealTiles, Cvt> all("amx", "tdpbf16ps into fp32");
  return all.at(v);
}

const Bf16Kernels& kernels_bf16_amx() { return *kernels_bf16_amx_shape(0); }

const KernelSet& kernels_amx() {
  static const KernelSet ks = amx::renamed(kernels_avx512(), "amx");
  return ks;
}

void tdpbf16ps_tiles(float* c, const uint16_t* a, const uint16_t* b) {
  configure_tiles();
  _tile_loadd(0, c, 64);
  _tile_loadd(4, a, 64);
  _tile_loadd(6, b, 64);
  _tile_dpbf16ps(0, 4, 6);
  _tile_stored(0, c, 64);
}

// TDPBF16PS throughput: six independent accumulator tiles fed by one A and one B tile of bf16 1.0 and 2^-15
// (the sums stay normal), 16 x 16 x 32 x 2 FLOP per instruction.
double dot_chains_bf16_amx(int64_t iters) {
  alignas(64) static uint16_t a[amx::kTileRows][32], b[amx::kTileRows][32];
  for (int r = 0; r < amx::kTileRows; ++r) {
    for (int j = 0; j < 32; ++j) {
      a[r][j] = 0x3f80;
      b[r][j] = 0x3800;
    }
  }
  alignas(64) float out[amx::kTileRows][16];
  configure_tiles();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  _tile_loadd(6, a, 64);
  _tile_loadd(7, b, 64);
  for (int64_t i = 0; i < iters; ++i) {
    _tile_dpbf16ps(0, 6, 7);
    _tile_dpbf16ps(1, 6, 7);
    _tile_dpbf16ps(2, 6, 7);
    _tile_dpbf16ps(3, 6, 7);
    _tile_dpbf16ps(4, 6, 7);
    _tile_dpbf16ps(5, 6, 7);
  }
  _tile_stored(0, out, 64);  // keeps the chains' results observable
  volatile float sink = out[0][0];
  (void)sink;
  _tile_release();
  return static_cast<double>(iters) * 6.0 * 16 * 16 * 32 * 2;
}

}  // namespace opbench

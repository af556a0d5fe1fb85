// AVX512-FP16 fp16-accumulating micro-kernel (gemm accumulate = fp16): a 14x64 register tile of halves
// (28 zmm accumulators of 32 lanes), vfmadd231ph with every FMA rounded to fp16, one K block (tile_k) per call;
// the block's sums are widened by vcvtph2psx and added to C in fp32. Panels stay fp16 (half the bytes of the
// fp32 ones). Compiled with the AVX-512 flags plus -mavx512fp16, only when the compiler knows it; called only on a
// CPU that reports AVX512-FP16 (runtime/isa.cpp, f16acc_kernels).
#include <immintrin.h>

#include "opbench/kernel_set.hpp"
#include "pack.hpp"

namespace opbench {
namespace {

constexpr int kMR = 14;
constexpr int kNV = 2;  // zmm per row: 2 x 32 halves
constexpr int kNR = kNV * 32;

// The packing templates' conversion policy (unused by the fp16 packers, which copy halves).
struct Cvt {
  static float widen(uint16_t h) { return _cvtsh_ss(h); }
};

void ukernel(int64_t kc, const uint16_t* __restrict ap, const uint16_t* __restrict bp, float* __restrict c,
             int64_t ldc, bool accumulate, int m, int n) {
  __m512h acc[kMR][kNV];
#pragma GCC unroll 14
  for (int i = 0; i < kMR; ++i) {
#pragma GCC unroll 2
    for (int j = 0; j < kNV; ++j) acc[i][j] = _mm512_setzero_ph();
  }
#pragma GCC unroll 2
  for (int64_t p = 0; p < kc; ++p) {
    __m512h b[kNV];
#pragma GCC unroll 2
    for (int j = 0; j < kNV; ++j) b[j] = _mm512_load_ph(bp + j * 32);
#pragma GCC unroll 14
    for (int i = 0; i < kMR; ++i) {
      const __m512h a = _mm512_castsi512_ph(_mm512_set1_epi16(static_cast<short>(ap[i])));
#pragma GCC unroll 2
      for (int j = 0; j < kNV; ++j) acc[i][j] = _mm512_fmadd_ph(a, b[j], acc[i][j]);
    }
    ap += kMR;
    bp += kNR;
  }
  // Each 32-lane fp16 accumulator becomes two 16-lane fp32 vectors, added to C (masked at the edges).
  for (int i = 0; i < kMR && i < m; ++i) {
#pragma GCC unroll 2
    for (int j = 0; j < kNV; ++j) {
      const __m512i bits = _mm512_castph_si512(acc[i][j]);
      const __m512 halves[2] = {_mm512_cvtxph_ps(_mm256_castsi256_ph(_mm512_castsi512_si256(bits))),
                                _mm512_cvtxph_ps(_mm256_castsi256_ph(_mm512_extracti64x4_epi64(bits, 1)))};
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const int col = j * 32 + h * 16;
        const __mmask16 mask = packing::lanes_mask<Cvt>(n - col);
        float* cp = c + i * ldc + col;
        const __m512 v = accumulate ? _mm512_add_ps(halves[h], _mm512_maskz_loadu_ps(mask, cp)) : halves[h];
        _mm512_mask_storeu_ps(cp, mask, v);
      }
    }
  }
}

using P = packing::Packers<kMR, kNR, Cvt>;

const F16AccKernels kAvx512Fp16 = {"avx512fp16", "AVX512-FP16 14x64 fp16 accumulation per tile_k block (vfmadd231ph)",
                                   kMR, kNR, ukernel, P::a_h, P::b_h, P::bt_h};

}  // namespace

const F16AccKernels& kernels_f16acc_avx512fp16() { return kAvx512Fp16; }

}  // namespace opbench

// Portable reference micro-kernel (plain C++, baseline x86-64 flags): the correctness yardstick for the
// SIMD kernels and the fallback on CPUs without AVX2+FMA+F16C.
#include <cmath>

#include "opbench/fp16.hpp"
#include "opbench/kernel_set.hpp"
#include "make_kernel_set.hpp"

namespace opbench {
namespace {

constexpr int kMR = 4;
constexpr int kNR = 8;

struct Cvt {
  static float widen(uint16_t h) { return half_to_float(h); }
  static void widen_row(const uint16_t* src, float* dst, int64_t n) {
    for (int64_t j = 0; j < n; ++j) dst[j] = half_to_float(src[j]);
  }
  static void narrow_row(const float* src, uint16_t* dst, int64_t n) {
    for (int64_t j = 0; j < n; ++j) dst[j] = float_to_half(src[j]);
  }
};

// C[0:m, 0:n] (+)= a finished register tile.
void store_tile(const float (&acc)[kMR][kNR], float* c, int64_t ldc, bool accumulate, int m, int n) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];
  }
}

// One body for both B sources: packed (b_off == nullptr: row p at b + p * kNR) and rows read in place.
void ukernel_body(int64_t kc, const float* __restrict ap, const float* __restrict b, const int64_t* b_off,
                  float* __restrict c, int64_t ldc, bool accumulate, int m, int n) {
  float acc[kMR][kNR] = {};
  for (int64_t p = 0; p < kc; ++p) {
    const float* row = b_off != nullptr ? b + b_off[p] : b + p * kNR;
    for (int i = 0; i < kMR; ++i) {
      const float a = ap[p * kMR + i];
      for (int j = 0; j < kNR; ++j) acc[i][j] += a * row[j];
    }
  }
  store_tile(acc, c, ldc, accumulate, m, n);
}

void ukernel(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, bool accumulate, int m, int n) {
  ukernel_body(kc, ap, bp, nullptr, c, ldc, accumulate, m, n);
}

void ukernel_rows(int64_t kc, const float* ap, const float* b, const int64_t* b_off, float* c, int64_t ldc,
                  bool accumulate, int m, int n) {
  ukernel_body(kc, ap, b, b_off, c, ldc, accumulate, m, n);
}

// A's rows in place: step p's m values at a + a_off[p] (only those m are read), B packed.
void ukernel_a_rows(int64_t kc, const float* a, const int64_t* a_off, const float* bp, float* c, int64_t ldc,
                    bool accumulate, int m, int n) {
  float acc[kMR][kNR] = {};
  for (int64_t p = 0; p < kc; ++p) {
    const float* row = bp + p * kNR;
    for (int i = 0; i < m; ++i) {
      const float v = a[a_off[p] + i];
      for (int j = 0; j < kNR; ++j) acc[i][j] += v * row[j];
    }
  }
  store_tile(acc, c, ldc, accumulate, m, n);
}

// a*b + c rounded once to fp16 (round to nearest even), as a fused fp16 FMA computes it. For fp16 a, b, c the
// product is exact in fp64 and so is the sum, unless c exceeds the product by 2^31 or more (then the product
// lies far below c's last fp16 bit and the answer is c either way). Rounding that to fp32 by round-to-odd
// and then to fp16 rounds once: fp32 carries more than two bits beyond fp16's 11.
float fma_f16(float a, float b, float c) {
  const double exact = static_cast<double>(a) * static_cast<double>(b) + static_cast<double>(c);
  float f = static_cast<float>(exact);
  if (static_cast<double>(f) != exact) {
    uint32_t bits = bits_of(f);
    if (std::fabs(static_cast<double>(f)) > std::fabs(exact)) bits -= 1u;  // toward zero, then set the odd bit
    f = float_of(bits | 1u);
  }
  return half_to_float(float_to_half(f));
}

// The fp16-accumulating micro-kernel, emulated: accumulators hold fp16 values (in floats), each FMA rounded to
// fp16; the block's sums are added to C in fp32.
void ukernel_f16acc(int64_t kc, const uint16_t* ap, const uint16_t* bp, float* c, int64_t ldc, bool accumulate, int m,
                    int n) {
  float acc[kMR][kNR] = {};
  for (int64_t p = 0; p < kc; ++p) {
    float b[kNR];
    for (int j = 0; j < kNR; ++j) b[j] = half_to_float(bp[p * kNR + j]);
    for (int i = 0; i < kMR; ++i) {
      const float a = half_to_float(ap[p * kMR + i]);
      for (int j = 0; j < kNR; ++j) acc[i][j] = fma_f16(a, b[j], acc[i][j]);
    }
  }
  store_tile(acc, c, ldc, accumulate, m, n);
}

using P = packing::Packers<kMR, kNR, Cvt>;

constexpr KernelSet kRef =
    make_kernel_set<kMR, kNR, Cvt, 4>("ref", "portable C++ 4x8 (no FMA)", ukernel, ukernel_rows,
                                      ukernel_a_rows, MicroPanelHome::l1);

const F16AccKernels kF16AccRef = {"ref", "portable emulation of fp16 accumulation (each FMA rounded once to fp16), 4x8",
                                  kMR, kNR, ukernel_f16acc, P::a_h, P::b_h, P::bt_h};

}  // namespace

const KernelSet& kernels_ref() { return kRef; }
const F16AccKernels& f16acc_ref() { return kF16AccRef; }

}  // namespace opbench

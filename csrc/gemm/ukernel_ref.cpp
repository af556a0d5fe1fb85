// Portable reference micro-kernel (plain C++, baseline x86-64 flags): the correctness yardstick for the
// SIMD kernels and the fallback on CPUs without AVX2+FMA+F16C.
#include "opbench/fp16.hpp"
#include "opbench/kernel_set.hpp"
#include "../rnn/cells.hpp"
#include "pack.hpp"
#include "thin.hpp"

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

void ukernel(int64_t kc, const float* __restrict ap, const float* __restrict bp, float* __restrict c, int64_t ldc,
             bool accumulate, int m, int n) {
  float acc[kMR][kNR] = {};
  for (int64_t p = 0; p < kc; ++p) {
    for (int i = 0; i < kMR; ++i) {
      const float a = ap[p * kMR + i];
      for (int j = 0; j < kNR; ++j) acc[i][j] += a * bp[p * kNR + j];
    }
  }
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];
  }
}

using P = packing::Packers<kMR, kNR, Cvt>;
using T = thin::Thin<4, Cvt>;

const KernelSet kRef = {"ref", "portable C++ 4x8 (no FMA)", kMR, kNR, ukernel,
                        P::a_f32, P::a_f16, P::b_f32, P::b_f16, P::bt_f32, P::bt_f16, P::c_f16, lstm_cell_ref,
                        nullptr, T::f32};

}  // namespace

const KernelSet& kernels_ref() { return kRef; }

}  // namespace opbench

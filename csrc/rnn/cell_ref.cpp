// Portable LSTM cell: libm exp/tanh, one unit at a time (baseline x86-64 flags).
#include <cmath>

#include "cells.hpp"
#include "opbench/fp16.hpp"

namespace opbench {

namespace {
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

void lstm_cell_ref(int64_t rows, int64_t cols, const float* z, int64_t ldz, int64_t gate_stride, float* c,
                   int64_t ldc, float* h32, uint16_t* h16, int64_t ldh) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* zr = z + r * ldz;
    float* cr = c + r * ldc;
    for (int64_t j = 0; j < cols; ++j) {
      const float i = sigmoid(zr[j]);
      const float f = sigmoid(zr[gate_stride + j]);
      const float g = std::tanh(zr[2 * gate_stride + j]);
      const float o = sigmoid(zr[3 * gate_stride + j]);
      const float cn = f * cr[j] + i * g;
      cr[j] = cn;
      const float h = o * std::tanh(cn);
      if (h32 != nullptr) {
        h32[r * ldh + j] = h;
      } else {
        h16[r * ldh + j] = float_to_half(h);
      }
    }
  }
}

}  // namespace opbench

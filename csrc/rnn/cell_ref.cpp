// Portable recurrent cells: libm exp/tanh, one unit at a time (baseline x86-64 flags).
#include <cmath>

#include "cell_body.hpp"
#include "opbench/rnn_cells.hpp"
#include "opbench/fp16.hpp"

namespace opbench {

namespace {

struct Scalar {
  using T = float;
  static constexpr int W = 1;
  static T load(const float* p, int) { return *p; }
  static void store(float* p, T v, int) { *p = v; }
  static void store_f16(uint16_t* p, T v, int) { *p = float_to_half(v); }
  static T add(T a, T b) { return a + b; }
  static T sub(T a, T b) { return a - b; }
  static T mul(T a, T b) { return a * b; }
  static T fmadd(T a, T b, T c) { return a * b + c; }
  static T sigmoid(T x) { return 1.0f / (1.0f + std::exp(-x)); }
  static T tanh(T x) { return std::tanh(x); }
  static T relu(T x) { return x < 0.0f ? 0.0f : x; }  // NaN < 0 is false: NaN stays NaN
};

}  // namespace

OPBENCH_DEFINE_CELLS(ref, Scalar)

}  // namespace opbench

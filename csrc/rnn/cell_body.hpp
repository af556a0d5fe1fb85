// The recurrent cells written once over a vector type V, instantiated by each ISA's cell unit
// (cell_<isa>.cpp, compiled with that ISA's flags) with its own V. V provides, for W lanes of fp32:
//   load(p, n) / store(p, v, n) / store_f16(p, v, n): the first n <= W lanes (the rest read as 0, not written)
//   set1, add, sub, mul, fmadd(a, b, c) = a * b + c, sigmoid, tanh, relu (NaN stays NaN in all three)
// The contracts are the RnnKernels ones in opbench/kernel_set.hpp.
#pragma once

#include <cstdint>

namespace opbench::cells {

// h (fp32 or fp16) for lanes [j, j + n) of one row.
template <class V>
inline void put_h(typename V::T h, float* h32, uint16_t* h16, int64_t j, int n) {
  if (h32 != nullptr) {
    V::store(h32 + j, h, n);
  } else {
    V::store_f16(h16 + j, h, n);
  }
}

template <class V>
void lstm(int64_t rows, int64_t cols, float* z, int64_t ldz, int64_t gs, const float* c_prev, float* c_next,
          int64_t ldc, float* h32, uint16_t* h16, int64_t ldh, float* save_tc) {
  for (int64_t r = 0; r < rows; ++r) {
    float* zr = z + r * ldz;
    const float* cp = c_prev + r * ldc;
    float* cn = c_next + r * ldc;
    float* hr32 = h32 != nullptr ? h32 + r * ldh : nullptr;
    uint16_t* hr16 = h16 != nullptr ? h16 + r * ldh : nullptr;
    for (int64_t j = 0; j < cols; j += V::W) {
      const int n = cols - j >= V::W ? V::W : static_cast<int>(cols - j);
      const auto i = V::sigmoid(V::load(zr + j, n));
      const auto f = V::sigmoid(V::load(zr + gs + j, n));
      const auto g = V::tanh(V::load(zr + 2 * gs + j, n));
      const auto o = V::sigmoid(V::load(zr + 3 * gs + j, n));
      const auto c = V::fmadd(f, V::load(cp + j, n), V::mul(i, g));
      V::store(cn + j, c, n);
      const auto tc = V::tanh(c);
      put_h<V>(V::mul(o, tc), hr32, hr16, j, n);
      if (save_tc != nullptr) {  // the activated gates and tanh(c), for the backward pass
        V::store(save_tc + r * ldc + j, tc, n);
        V::store(zr + j, i, n);
        V::store(zr + gs + j, f, n);
        V::store(zr + 2 * gs + j, g, n);
        V::store(zr + 3 * gs + j, o, n);
      }
    }
  }
}

template <class V>
void gru(int64_t rows, int64_t cols, float* gx, int64_t ldgx, const float* gh, int64_t ldgh, int64_t gs,
         const float* b_hn, const float* h_prev, float* h_next, int64_t lds, float* h32, uint16_t* h16,
         int64_t ldh, float* save_hn, int64_t ld_save) {
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = gx + r * ldgx;
    const float* hr = gh + r * ldgh;
    const float* hp = h_prev + r * lds;
    float* hn = h_next + r * lds;
    float* hr32 = h32 != nullptr ? h32 + r * ldh : nullptr;
    uint16_t* hr16 = h16 != nullptr ? h16 + r * ldh : nullptr;
    for (int64_t j = 0; j < cols; j += V::W) {
      const int n = cols - j >= V::W ? V::W : static_cast<int>(cols - j);
      const auto rg = V::sigmoid(V::add(V::load(xr + j, n), V::load(hr + j, n)));
      const auto zg = V::sigmoid(V::add(V::load(xr + gs + j, n), V::load(hr + gs + j, n)));
      const auto q = V::add(V::load(hr + 2 * gs + j, n), V::load(b_hn + j, n));  // W_hn h + b_hn
      const auto ng = V::tanh(V::fmadd(rg, q, V::load(xr + 2 * gs + j, n)));
      const auto h = V::fmadd(zg, V::sub(V::load(hp + j, n), ng), ng);  // (1 - z) n + z h
      V::store(hn + j, h, n);
      put_h<V>(h, hr32, hr16, j, n);
      if (save_hn != nullptr) {
        V::store(xr + j, rg, n);
        V::store(xr + gs + j, zg, n);
        V::store(xr + 2 * gs + j, ng, n);
        V::store(save_hn + r * ld_save + j, q, n);
      }
    }
  }
}

template <class V>
void rnn(int64_t rows, int64_t cols, const float* z, int64_t ldz, bool relu, float* h32, uint16_t* h16,
         int64_t ldh) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* zr = z + r * ldz;
    float* hr32 = h32 != nullptr ? h32 + r * ldh : nullptr;
    uint16_t* hr16 = h16 != nullptr ? h16 + r * ldh : nullptr;
    for (int64_t j = 0; j < cols; j += V::W) {
      const int n = cols - j >= V::W ? V::W : static_cast<int>(cols - j);
      const auto v = V::load(zr + j, n);
      put_h<V>(relu ? V::relu(v) : V::tanh(v), hr32, hr16, j, n);
    }
  }
}

}  // namespace opbench::cells

// Defines the three cells of one ISA from its vector type (inside namespace opbench).
#define OPBENCH_DEFINE_CELLS(SUFFIX, V)                                                                          \
  void lstm_cell_##SUFFIX(int64_t rows, int64_t cols, float* z, int64_t ldz, int64_t gs, const float* c_prev,  \
                          float* c_next, int64_t ldc, float* h32, uint16_t* h16, int64_t ldh, float* save_tc) { \
    cells::lstm<V>(rows, cols, z, ldz, gs, c_prev, c_next, ldc, h32, h16, ldh, save_tc);                       \
  }                                                                                                            \
  void gru_cell_##SUFFIX(int64_t rows, int64_t cols, float* gx, int64_t ldgx, const float* gh, int64_t ldgh,   \
                         int64_t gs, const float* b_hn, const float* h_prev, float* h_next, int64_t lds,       \
                         float* h32, uint16_t* h16, int64_t ldh, float* save_hn, int64_t ld_save) {            \
    cells::gru<V>(rows, cols, gx, ldgx, gh, ldgh, gs, b_hn, h_prev, h_next, lds, h32, h16, ldh, save_hn,       \
                  ld_save);                                                                                    \
  }                                                                                                            \
  void rnn_cell_##SUFFIX(int64_t rows, int64_t cols, const float* z, int64_t ldz, bool relu, float* h32,       \
                         uint16_t* h16, int64_t ldh) {                                                         \
    cells::rnn<V>(rows, cols, z, ldz, relu, h32, h16, ldh);                                                    \
  }

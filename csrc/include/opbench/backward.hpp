// Backward passes (training): gradients of the inputs and the weights given an upstream gradient, on the
// same kernel sets and blocking as the forward passes.
#pragma once

#include <cstdint>

#include "opbench/aligned.hpp"
#include "opbench/conv.hpp"
#include "opbench/gemm.hpp"
#include "opbench/rnn.hpp"

namespace opbench {

// What the backward drivers share: they compute in fp32 whatever the arrays' dtype.
// An fp32 view of an input: the array itself, or an fp16 one widened into `buf` by the kernel set's own
// converter (nullptr stays nullptr).
inline const float* f32_view(const KernelSet& ks, AlignedBuffer& buf, Dtype dtype, const void* src, int64_t n) {
  if (src == nullptr || dtype == Dtype::f32) return static_cast<const float*>(src);
  float* dst = static_cast<float*>(buf.reserve(static_cast<size_t>(n) * sizeof(float)));
  ks.gemm.widen_f16(static_cast<const uint16_t*>(src), dst, n);
  return dst;
}

// Where an fp32 result is computed: the output itself, or `buf`, rounded into the fp16 output by f32_finish.
inline float* f32_out(AlignedBuffer& buf, Dtype dtype, void* out, int64_t n) {
  if (dtype == Dtype::f32) return static_cast<float*>(out);
  return static_cast<float*>(buf.reserve(static_cast<size_t>(n) * sizeof(float)));
}

inline void f32_finish(const KernelSet& ks, Dtype dtype, const float* src, void* out, int64_t rows, int64_t cols) {
  if (dtype == Dtype::f16) ks.gemm.store_f16(src, cols, rows, cols, static_cast<uint16_t*>(out), cols);
}

// An fp32 product C (+)= op(A) op(B) on the blocked GEMM.
inline GemmProblem f32_product(const float* a, int64_t lda, bool trans_a, const float* b, int64_t ldb, bool trans_b,
                               float* c, int64_t ldc, int64_t m, int64_t n, int64_t k, bool accumulate) {
  return gemm_product(Dtype::f32, Dtype::f32, a, lda, trans_a, b, ldb, trans_b, c, ldc, m, n, k, accumulate);
}

// C = A * B (A m x k, B k x n, row-major, contiguous): given dC (m x n), dA = dC * B^T (m x k) and
// dB = A^T * dC (k x n), two GEMMs on the blocked driver (B^T read through trans_b, A^T through trans_a).
// All five arrays share one dtype; fp16 accumulates in fp32 and is rounded once.
struct GemmBackwardProblem {
  Dtype dtype = Dtype::f32;
  const void* a = nullptr;
  const void* b = nullptr;
  const void* dc = nullptr;
  void* da = nullptr;
  void* db = nullptr;
  int64_t m = 1, n = 1, k = 1;
};

// The two products as GEMM problems: [0] computes dA, [1] dB.
GemmProblem gemm_backward_part(const GemmBackwardProblem& p, int which);

void gemm_backward(const KernelSet& ks, const GemmBackwardProblem& p, const Blocking& blk, int threads);

// An upper bound of the bytes gemm_backward() allocates as workspace (overflow-checked).
int64_t gemm_backward_workspace_bytes(const KernelSet& ks, const GemmBackwardProblem& p, const Blocking& blk,
                                      int threads);

// Conv2d (geometry and x, w as ConvProblem; its y unused): given dY (n x k x P x Q), dX (n x c x h x w) and
// dW (k x c/groups x r x s). Per image and group, a block of `pixel_block` output pixels at a time:
//   dW_g += dY_g[:, block] * T^T          T = the im2col rows of the block, gathered from x (CRS x block)
//   T = W_g^T * dY_g[:, block]; dX_g += col2im(T)
// with T a bounded tile (never the whole im2col matrix), both products on the blocked GEMM (W_g^T read
// through trans_a, T^T through trans_b). fp16 arrays are widened to fp32 once and the gradients rounded once.
struct ConvBackwardProblem {
  ConvProblem conv;
  const void* dy = nullptr;
  void* dx = nullptr;
  void* dw = nullptr;
  int64_t pixel_block = 0;  // output pixels per block (tile_n); 0: conv2d_backward_pixel_block()
};

// The default pixel block: a tile of CRS x block floats within about half of L2 (at least 16, at most
// P*Q); a given one is clamped to [1, P*Q].
int64_t conv2d_backward_pixel_block(const ConvProblem& p, int64_t given = 0);

// Depthwise convolutions (conv2d_is_depthwise) take direct loops over planes instead
// (csrc/conv/depthwise_backward.cpp), where the tiles do not apply.
void conv2d_backward(const KernelSet& ks, const ConvBackwardProblem& p, const Blocking& blk, int threads);

// Which way conv2d_backward computes p's gradients, in words (the plan's tiles()["path"]).
const char* conv2d_backward_path(const ConvProblem& p);

// An upper bound of the bytes conv2d_backward() allocates as workspace (overflow-checked).
int64_t conv2d_backward_workspace_bytes(const KernelSet& ks, const ConvBackwardProblem& p, const Blocking& blk,
                                        int threads);

// The recurrent layers (RnnMode), backpropagation through time over what a training forward saved: given
// dY (T x B x H), dh_n (and dc_n for the LSTM), the gradients of x, both weights, both biases and the
// initial states. Each step's pre-activation gradients (dZ, B x G) come from the saved gates by an
// element-wise pass, the recurrent gradient dh_{t-1} = dZ W_hh is one GEMM per step, and the weight and
// input gradients are three GEMMs over all steps at once: dW_hh = dZ^T [h0; y[:-1]], dW_ih = dZ^T x,
// dx = dZ W_ih (dZ^T read through trans_a). The GRU's input and recurrent sides differ in their n gate
// (dGx, dGh). fp16 arrays are widened once per call and the gradients rounded once.
struct RnnBackwardProblem {
  RnnProblem fwd;  // inputs and the forward's y; its dims and mode
  RnnSaved saved;  // what the training forward saved
  const void* dy = nullptr;    // T x B x H
  const void* dh_n = nullptr;  // B x H
  const void* dc_n = nullptr;  // B x H, LSTM only
  void* dx = nullptr;          // T x B x I
  void* dw_ih = nullptr;       // G x I
  void* dw_hh = nullptr;       // G x H
  void* db_ih = nullptr;       // G
  void* db_hh = nullptr;       // G
  void* dh0 = nullptr;         // B x H
  void* dc0 = nullptr;         // B x H, LSTM only
};

void rnn_backward(const KernelSet& ks, const RnnBackwardProblem& p, const Blocking& blk, int threads);

// An upper bound of the bytes rnn_backward() allocates as workspace (overflow-checked).
int64_t rnn_backward_workspace_bytes(const KernelSet& ks, const RnnBackwardProblem& p, const Blocking& blk,
                                     int threads);

}  // namespace opbench

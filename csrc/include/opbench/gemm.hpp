// The blocked GEMM driver: C = A * B for row-major fp32 or fp16 matrices on any ISA's kernel set.
#pragma once

#include <cstdint>
#include <string>

#include "opbench/blocking.hpp"
#include "opbench/kernel_set.hpp"

namespace opbench {

enum class Dtype { f32, f16, bf16 };  // bf16: the forward GEMM, conv2d and recurrent layers

// What the products of one K block are summed in: fp32 (always for fp32 inputs), or for fp16 inputs, on
// request, fp16 (each tile_k block summed in fp16 by an fp16-accumulating kernel, the blocks in fp32).
enum class Accumulation { f32, f16 };

struct GemmProblem {
  Dtype in_dtype = Dtype::f32;   // of a and b (fp16 is widened to fp32 while packing; bf16 is packed in pairs
                                 // for the bf16 kernels, bf16_kernels() in isa.hpp, which sum in fp32)
  Dtype out_dtype = Dtype::f32;  // of c (fp16 and bf16 are rounded once, after all of K is summed in fp32)
  const void* a = nullptr;       // m x k row-major, leading dimension lda (elements), or with trans_a its
                                 // transpose: k x m row-major
  const void* b = nullptr;       // k x n row-major (ldb), or with trans_b its transpose: n x k row-major
  void* c = nullptr;             // m x n, row-major, leading dimension ldc
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  bool trans_a = false;     // a holds A^T (a backward pass's X^T * dY); not with fp16 accumulation
  bool trans_b = false;     // b holds B^T (PyTorch's weight layout: out_features x in_features)
  bool accumulate = false;  // C += A*B instead of C = A*B; fp32 output only
  // B already packed by pack_b_all() for the same kernel set, blocking and B (b is then not read): for
  // callers that multiply by one B many times, like the LSTM's recurrent weights at every step.
  const void* b_packed = nullptr;  // fp32 panels, or bf16 pairs for bf16 inputs
  Accumulation accumulation = Accumulation::f32;  // f16: fp16 inputs only, b_packed unused
};

// A product C (+)= op(A) op(B) for gemm(): a and b in `in`, c in `out`, leading dimensions in elements.
inline GemmProblem gemm_product(Dtype in, Dtype out, const void* a, int64_t lda, bool trans_a, const void* b,
                                int64_t ldb, bool trans_b, void* c, int64_t ldc, int64_t m, int64_t n, int64_t k,
                                bool accumulate) {
  GemmProblem g;
  g.in_dtype = in;
  g.out_dtype = out;
  g.a = a;
  g.lda = lda;
  g.trans_a = trans_a;
  g.b = b;
  g.ldb = ldb;
  g.trans_b = trans_b;
  g.c = c;
  g.ldc = ldc;
  g.m = m;
  g.n = n;
  g.k = k;
  g.accumulate = accumulate;
  return g;
}

// Fill zero fields of `requested` from the analytical model for this kernel set; clamp nothing.
Blocking resolve_blocking(const KernelSet& ks, Blocking requested);
// The same for a GEMM of `dtype`: bf16 packs k in pairs, which take the bytes of one fp32 k, so a K block
// from the model holds twice the k (a given tile_k is kept).
Blocking resolve_blocking(const KernelSet& ks, Blocking requested, Dtype dtype);

// Whether bf16 products (of at least bf16_on_fp32_min_rows) run on this kernel set's fp32 register tile, bf16
// widened as it is packed, instead of its bf16 kernels: where the bf16 kernels are the portable pairs (no
// bf16 unit in the CPU or the set), or where the micro-architecture table says this core's fp32 FMAs outrun
// its AVX512-BF16 dot products (microarch.hpp, bf16_on_fp32_units) and the bf16 kernels are those (AMX is
// kept). The set must have the bf16 packers (AVX-512's and AVX2's). bf16_on_fp32 says it for one product
// (blocked.cpp: fewer rows keep the bf16 kernels).
bool bf16_on_fp32_units(const KernelSet& ks);
// A kernel set's conversions of a 16-bit dtype (fp16, bf16) to fp32 and back; nullptr for fp32.
inline WidenF16 widen_of(const KernelSet& ks, Dtype dtype) {
  return dtype == Dtype::bf16 ? ks.gemm.widen_bf16 : dtype == Dtype::f16 ? ks.gemm.widen_f16 : nullptr;
}
inline StoreF16 store_of(const KernelSet& ks, Dtype dtype) {
  return dtype == Dtype::bf16 ? ks.gemm.store_bf16 : dtype == Dtype::f16 ? ks.gemm.store_f16 : nullptr;
}
// The fewest rows of A (a thread's) from which the few-rows path packs fp32 B four micro-panels at a time on
// register tile `tile` instead of reading it in place (0: never; small.cpp, kPackGroup).
int64_t b_group_rows(const KernelSet& tile);
// No bf16 unit at all (the set's bf16 kernels are the portable pairs) and the bf16 packers: bf16 convolutions
// then run conv2d's fp32 ways with bf16 widened as it is read (conv2d.cpp, conv_bf16_widened).
bool bf16_without_unit(const KernelSet& ks);
bool bf16_on_fp32(const KernelSet& ks, const GemmProblem& p);
int64_t bf16_on_fp32_min_rows(const KernelSet& ks);

// The kernel set whose register tile the blocked path uses for n columns: ks, or its narrow variant when
// that pads n at least a quarter less.
const KernelSet& tile_kernels(const KernelSet& ks, int64_t n);

// Runs on `threads` threads (the calling thread included). Requires m, n, k >= 1 and all blocking fields >= 1.
void gemm(const KernelSet& ks, const GemmProblem& p, const Blocking& blk, int threads);

// Which of gemm()'s paths runs this problem (csrc/gemm/README.md, "Paths by shape"), for provenance.
std::string gemm_path(const KernelSet& ks, const GemmProblem& p, const Blocking& blk);

// The blocking gemm() runs this problem with: blk, with a bf16 K block from the model cut into blocks alike in
// size that the kernel reads A in place for (blocked.cpp, bf16_k_blocks). The plan's tiles report it.
Blocking problem_blocking(const KernelSet& ks, const GemmProblem& p, const Blocking& blk);

// The N block (tile_n) of the blocked path for this problem and register tile width nr: tile_n as given, or
// the model's, narrowed when C is revisited by several K blocks so that one N block of C fits in L3.
// elem_bytes: of B's packed panels (4, or 2 for bf16 pairs).
int64_t gemm_block_n(const GemmProblem& p, const Blocking& blk, int64_t nr, int64_t elem_bytes = 4);

// An upper bound of the bytes gemm() allocates as workspace for this problem (overflow-checked: throws
// std::invalid_argument when a size does not fit in 64 bits).
int64_t gemm_workspace_bytes(const KernelSet& ks, const GemmProblem& p, const Blocking& blk, int threads);

// Packing B once for many products: whether the driver would use packed B panels for this problem (not on
// the N <= 4 path), how many bytes pack_b_all() writes (fp32 panels, or bf16 pairs for bf16 inputs), and the
// packing itself (on `threads` threads; dst 64-byte aligned).
bool gemm_packs_b(const KernelSet& ks, const GemmProblem& p);

// Batched products (csrc/gemm/batched.cpp): C_i = A_i B_i for i < batch, with p the first product and the
// operands of product i at a + i * a, b + i * b and c + i * c elements. gemm_batch_rows says how the threads
// share them: 0, each product in turn on all threads; else each product cut into blocks of that many rows
// (m: whole products) and the blocks dealt out to the threads, one gemm() each on one thread. mr is the
// register tile's rows (blocks are whole tiles).
struct BatchStrides {
  int64_t a, b, c;
};
int64_t gemm_batch_rows(const GemmProblem& p, int64_t batch, int threads, int64_t mr);
// A batched GEMM's products read B in place (the few-rows path) up to this many rows of A by default, not the
// single GEMM's unpacked_rows: attention's products (M = 16 to 512, K or N = 64) ran 10-40% faster packing B
// (Zen 4, 2 threads, 96 products), and M = 8 10% slower.
constexpr int64_t kBatchedSmallM = 8;
void gemm_batched(const KernelSet& ks, const GemmProblem& p, const Blocking& blk, int64_t batch, BatchStrides s,
                  int threads, int64_t rows);
int64_t packed_b_bytes(const KernelSet& ks, const GemmProblem& p, const Blocking& blk);
void pack_b_all(const KernelSet& ks, const GemmProblem& p, const Blocking& blk, void* dst, int threads);

}  // namespace opbench

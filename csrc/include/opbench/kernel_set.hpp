// The contract between the blocking loops and one ISA's micro-kernel and packing routines (see csrc/gemm/README.md).
#pragma once

#include <cstdint>

namespace opbench {

// C[0:m, 0:n] (+)= Ap * Bp for one MR x NR register tile. Ap is an MR-row micro-panel packed k-major
// (kc x MR, 64-byte aligned), Bp an NR-column micro-panel packed k-major (kc x NR, 64-byte aligned);
// both are zero-padded, so the kernel always computes the full tile. Only C[0:m, 0:n] is written; with
// accumulate == false C is never read. C is row-major with leading dimension ldc and need not be aligned.
using UkernelF32 = void (*)(int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, bool accumulate,
                            int m, int n);
// The same register tile with B read in place instead of packed: row p of the NR-column micro-panel is the
// NR floats at b + b_off[p] (any alignment; all NR are read even when n < NR, so they must be readable).
// conv2d's implicit GEMM for stride-1 convolutions: B's rows are shifted windows of the padded image.
using UkernelRowsF32 = void (*)(int64_t kc, const float* ap, const float* b, const int64_t* b_off, float* c,
                                int64_t ldc, bool accumulate, int m, int n);
// The same register tile with A read in place instead of packed (conv2d_pixels.cpp at stride 1, where a
// micro-panel's output pixels are consecutive in the padded image): step p broadcasts the m floats at
// a + a_off[p] (any alignment), and B is a packed micro-panel as for UkernelF32.
using UkernelARowsF32 = void (*)(int64_t kc, const float* a, const int64_t* a_off, const float* bp, float* c,
                                 int64_t ldc, bool accumulate, int m, int n);
// The same register tile with A read in place from a row-major matrix: row i of the tile is at a + i * lda
// (any alignment; rows past m - 1 are never read), and B is a packed micro-panel as for UkernelF32.
using UkernelAF32 = void (*)(int64_t kc, const float* a, int64_t lda, const float* bp, float* c, int64_t ldc,
                             bool accumulate, int m, int n);
// UkernelAF32 with B's rows read in place as well (row p of the micro-panel: the NR floats at b + p * ldb, all
// readable) and written to the packed micro-panel bp_out (kc x NR, 64-byte aligned) as they are used: the
// first row tile against a panel packs it in the shadow of its FMAs, the next ones read bp_out.
using UkernelAPackBF32 = void (*)(int64_t kc, const float* a, int64_t lda, const float* b, int64_t ldb,
                                  float* bp_out, float* c, int64_t ldc, bool accumulate, int m, int n);
// Pack rows [0, m) x columns [0, k) of a row-major matrix into ceil(m / MR) consecutive MR-row micro-panels.
using PackAF32 = void (*)(const float* a, int64_t lda, int64_t m, int64_t k, float* dst);
using PackAF16 = void (*)(const uint16_t* a, int64_t lda, int64_t m, int64_t k, float* dst);
// The same micro-panels read from A^T (k x m row-major, leading dimension ldat): reads run along m.
using PackAtF32 = void (*)(const float* at, int64_t ldat, int64_t m, int64_t k, float* dst);
using PackAtF16 = void (*)(const uint16_t* at, int64_t ldat, int64_t m, int64_t k, float* dst);
// Pack rows [0, k) x columns [0, n) (n <= NR) of a row-major matrix into one NR-column micro-panel.
using PackBF32 = void (*)(const float* b, int64_t ldb, int64_t k, int64_t n, float* dst);
// `panels` whole NR-column micro-panels of rows [0, k) of row-major B, read a row at a time (its panels * NR
// floats as one run) into panel l at dst + l * k * NR; each row's floats `ahead` columns on are prefetched
// (0: none). small.cpp's few-rows path, where a panel at a time split a misaligned row's lines between calls.
using PackBPanelsF32 = void (*)(const float* b, int64_t ldb, int64_t k, int64_t panels, float* dst, int64_t ahead);
using PackBF16 = void (*)(const uint16_t* b, int64_t ldb, int64_t k, int64_t n, float* dst);
// The same micro-panel read from B^T (n x k row-major, leading dimension ldbt), e.g. PyTorch weights.
using PackBtF32 = void (*)(const float* bt, int64_t ldbt, int64_t k, int64_t n, float* dst);
using PackBtF16 = void (*)(const uint16_t* bt, int64_t ldbt, int64_t k, int64_t n, float* dst);
// The same with row p of the panel written at dst + row_dst[p] (conv2d_pixels: W^T in filter-tap-major K).
// They return whether any value read was NaN or Inf (conv2d_pixels.cpp skips the filter taps that read
// padding only when none is: 0 times a NaN or Inf weight is NaN, as in the float64 reference).
using PackBtRowsF32 = bool (*)(const float* bt, int64_t ldbt, int64_t k, int64_t n, const int64_t* row_dst,
                               float* dst);
using PackBtRowsF16 = bool (*)(const uint16_t* bt, int64_t ldbt, int64_t k, int64_t n, const int64_t* row_dst,
                               float* dst);
// dst[j * ldd + i] = src[i * lds + j] for an m x n block of 2-byte values (any leading dimensions).
using TransposeH = void (*)(const uint16_t* src, int64_t lds, int64_t m, int64_t n, uint16_t* dst, int64_t ldd);
// Widen n contiguous fp16 values to fp32.
using WidenF16 = void (*)(const uint16_t* src, float* dst, int64_t n);
// Round an m x n block of fp32 values to fp16 (round to nearest even).
using StoreF16 = void (*)(const float* src, int64_t lds, int64_t m, int64_t n, uint16_t* dst, int64_t ldd);
// The recurrent cells, for `rows` x `cols` units (a row is a batch row, leading dimensions ld*); gate
// pre-activations are fp32, each gate's block `gs` floats after the previous one, in PyTorch's order.
// h goes to h32 (fp32) if not null, else to h16 (fp16, rounded to nearest). State in and out may alias.
// LSTM (z: i, f, g o): c_next = sigmoid(z_f) * c_prev + sigmoid(z_i) * tanh(z_g); h = sigmoid(z_o) * tanh(c_next).
//   save_tc not null: the activated gates overwrite z and tanh(c_next) goes to save_tc (leading dimension
//   ldc): what the backward pass needs.
using LstmCell = void (*)(int64_t rows, int64_t cols, float* z, int64_t ldz, int64_t gs, const float* c_prev,
                          float* c_next, int64_t ldc, float* h32, uint16_t* h16, int64_t ldh, float* save_tc);
// GRU (gx = x W_ih^T + b_ih + [b_hr, b_hz, 0]: r, z, n; gh = h W_hh^T without bias):
//   r = sigmoid(gx_r + gh_r), z = sigmoid(gx_z + gh_z), n = tanh(gx_n + r * (gh_n + b_hn)),
//   h_next = (1 - z) * n + z * h_prev, with h_prev and h_next the fp32 state (leading dimension lds).
//   save_hn not null: r, z, n overwrite gx and gh_n + b_hn goes to save_hn (leading dimension ld_save).
using GruCell = void (*)(int64_t rows, int64_t cols, float* gx, int64_t ldgx, const float* gh, int64_t ldgh,
                         int64_t gs, const float* b_hn, const float* h_prev, float* h_next, int64_t lds, float* h32,
                         uint16_t* h16, int64_t ldh, float* save_hn, int64_t ld_save);
// Elman RNN (z = x W_ih^T + b_ih + h W_hh^T + b_hh): h = tanh(z), or max(z, 0) when relu.
using RnnCell = void (*)(int64_t rows, int64_t cols, const float* z, int64_t ldz, bool relu, float* h32,
                         uint16_t* h16, int64_t ldh);

// For each row i < m (m <= thin::kMaxStreamRows): acc[i ld + 0:nb) += sum over r < thin::kStreamGroup of
// a[i kStreamGroup + r] * rows[r][0:nb): the few-rows path streaming rows of B (csrc/gemm/thin.hpp).
using RowsAxpyF32 = void (*)(int64_t nb, int m, const float* a, const float* const* rows, float* acc, int64_t ld);
// The same with fp16 rows of B, widened in registers as they are loaded (B is read once, at half the bytes).
using RowsAxpyF16 = void (*)(int64_t nb, int m, const float* a, const uint16_t* const* rows, float* acc, int64_t ld);
// Rows [0, m) of C (+)= A * B for n <= thin::kMaxN columns, A unpacked (fp32, or fp16 when a_f16), B given
// as bp in the thin layout below for the kernel set's thin_lanes, its groups ldbp floats apart (thin::width
// when packed; B's own ldb when it is read in place, which the layout allows when group == 1 and N == width).
// C is fp32 row-major; with accumulate == false it is never read.
using ThinF32 = void (*)(int64_t m, int n, int64_t k, const void* a, bool a_f16, int64_t lda, const float* bp,
                         int64_t ldbp, float* c, int64_t ldc, bool accumulate);

// The thin path's B layout (csrc/gemm/thin.hpp): N is padded to a power of two np <= kMaxN, and each vector
// of `lanes` floats holds group(lanes, np) consecutive rows of B interleaved, so that one broadcast of that
// many consecutive elements of a row of A multiplies all of them: B[q][j] sits at
// (q / g) * width(lanes, np) + j * g + q % g, with zeros for j >= N and for q >= K up to the next whole group.
// For N = 1 this is B's column itself (g = lanes).
namespace thin {
constexpr int kMaxN = 32;
// With vectors of 16 lanes (AVX-512) the thin path also takes 48 and 64 columns of an fp32 B read in place
// that fills at most a quarter of L2 (small.cpp, wide_thin): 8 x 3- and 6 x 4-vector tiles, A and B in place.
constexpr int kMaxWideN = 64;
constexpr int max_n(int lanes) { return lanes >= 16 ? kMaxWideN : kMaxN; }
constexpr int kMaxStreamRows = 8;  // rows of A the rows_axpy kernel takes at once
constexpr int kMaxStreamM = 32;    // rows of A the streaming path takes (kMaxStreamRows per rows_axpy call)
constexpr int kStreamGroup = 8;    // rows of B it adds per pass over the accumulators
constexpr int padded_n(int64_t n) {
  return n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : n <= 8 ? 8 : n <= 16 ? 16 : n <= 32 ? 32 : n <= 48 ? 48 : 64;
}
constexpr int group(int lanes, int np) { return np >= lanes ? 1 : lanes / np; }
constexpr int width(int lanes, int np) { return np * group(lanes, np); }
constexpr int64_t packed_floats(int lanes, int64_t n, int64_t k) {
  const int np = padded_n(n), g = group(lanes, np);
  return (k + g - 1) / g * width(lanes, np);
}
}  // namespace thin

// One run of a gathered micro-panel row (PackBGatherF32): panel columns [col, col + len) take
// row[off + i * step] for i < len; step == 0 fills them with zeros instead.
struct GatherRun {
  int32_t col;
  int32_t len;
  int32_t step;
  int64_t off;
};
// Pack one NR-column micro-panel of kc rows without materialising B: row p of the panel reads from
// base + row_off[p] at the runs' offsets, and the runs cover columns [0, NR). This is implicit im2col:
// conv2d's B rows are (channel, filter row, filter column) windows of the padded image, its columns output
// pixels, so a run is a stretch of one output row (contiguous in the input when stride_w == 1).
using PackBGatherF32 = void (*)(int64_t kc, const float* base, const int64_t* row_off, const GatherRun* runs,
                                int nruns, float* dst);

// FP16 accumulation (gemm with accumulate = fp16, opt-in): A and B panels stay fp16 (packed k-major like the
// fp32 ones, MR x kc and kc x NR halves), and the micro-kernel sums one K block (tile_k) in fp16 registers, every
// FMA rounded to fp16, then widens that partial sum and adds it to C in fp32 (C = block when !accumulate). So
// the fp16 error grows with tile_k, not with K, and the K blocks are summed in fp32.
using UkernelF16Acc = void (*)(int64_t kc, const uint16_t* ap, const uint16_t* bp, float* c, int64_t ldc,
                               bool accumulate, int m, int n);
using PackAH = void (*)(const uint16_t* a, int64_t lda, int64_t m, int64_t k, uint16_t* dst);
using PackBH = void (*)(const uint16_t* b, int64_t ldb, int64_t k, int64_t n, uint16_t* dst);

// bf16 inputs (gemm): A's and B's panels hold bf16 pairs along k, the layout of AVX512-BF16's vdpbf16ps (and
// of VNNI). A's MR-row micro-panel is ceil(kc / 2) x MR x 2 halves, row i's elements 2p and 2p + 1 side by side
// at pair p (AMX's pack_a and ukernel agree on another layout of the same size: amx_body.hpp's tile rows);
// B's NR-column micro-panel ceil(kc / 2) x NR x 2 (64-byte aligned); an odd kc is padded with a zero. The
// micro-kernel sums the products (exact in fp32) in fp32 and adds the tile to C (C = tile when !accumulate),
// writing only C[0:m, 0:n]. The block sums are fp32, so the error is fp32 accumulation's.
using UkernelBf16 = UkernelF16Acc;
// The same tile with A read in place: rows [0, m) of row-major bf16 A from a, lda halves apart, k from a's
// column on (an odd kc reads the last pair's first half alone). Only the m rows are read.
using UkernelBf16A = void (*)(int64_t kc, const uint16_t* a, int64_t lda, const uint16_t* bp, float* c, int64_t ldc,
                              bool accumulate, int m, int n);
// ukernel_a writing its tile rounded to bf16 into bf16 C, never accumulating: for a product whose K is one
// block, no fp32 workspace and no second pass over C. Rounds to nearest even as GemmKernels::store_bf16 does
// (vcvtne2ps2bf16 flushes subnormal sums, but vdpbf16ps never leaves one in its accumulators).
using UkernelBf16ARound = void (*)(int64_t kc, const uint16_t* a, int64_t lda, const uint16_t* bp, uint16_t* c,
                                   int64_t ldc, int m, int n);
// The same rounding from packed A (pack_a's micro-panel).
using UkernelBf16Round = void (*)(int64_t kc, const uint16_t* ap, const uint16_t* bp, uint16_t* c, int64_t ldc, int m,
                                  int n);

struct Bf16Kernels {
  const char* isa;          // "avx512bf16", or the kernel set's own ISA for the portable pairs kernel
  const char* description;
  int mr;
  int nr;
  UkernelBf16 ukernel;
  PackAH pack_a;   // from row-major A (m x k)
  PackBH pack_b;   // from row-major B (k x n)
  PackBH pack_bt;  // from B^T (n x k row-major)
  UkernelBf16A ukernel_a = nullptr;  // A read in place (the pairs layout is A's own rows); null: pack A
  UkernelBf16ARound ukernel_a_round = nullptr;  // the same, rounding into bf16 C; null: through fp32
  UkernelBf16Round ukernel_round = nullptr;     // packed A rounding into bf16 C; null: through fp32
  // > 0: ukernel_a takes every K block, and A is read in place up to this N and packed past it (AMX: packing
  // pays once A's rows serve three column panels); 0: in place up to a K block of 1024 (blocked.cpp).
  int64_t a_in_place_max_n = 0;
  int64_t kc = 0;                 // the K block in place of the blocking model's (0: the model's)
  // Called by each thread around its calls in one product (blocked.cpp; nullptr: none). AMX: begin loads the
  // tile configuration once and marks the thread's tiles ready, end unmarks them; a call outside such a
  // stretch (conv, another library's tiles since) configures its own.
  void (*begin)() = nullptr;
  void (*end)() = nullptr;
};

struct F16AccKernels {
  const char* isa;          // "avx512fp16", or "ref" (a portable emulation, for studying the error)
  const char* description;
  int mr;
  int nr;
  UkernelF16Acc ukernel;
  PackAH pack_a;
  PackBH pack_b;
  PackBH pack_bt;  // from B^T (n x k row-major)
};

// Where the B micro-panel (kc x nr) lives while the A micro-panels stream past it, for the blocking model
// (analytical_blocking in blocking.hpp). l1: Low et al.'s placement, kept by the few-rows path and conv2d's
// implicit GEMMs; the blocked path's K block still takes a sixteenth of L2 (fewer passes over C, blocking.cpp).
// l2: for register tiles whose two operand streams need little bandwidth per FMA (AVX-512 14x32: 46 floats
// per 448 flops), so that L2 can feed both; a deeper kc then halves the passes over C and the packing calls
// per FMA (BLIS's Skylake-X and Zen 4 sgemm kernels are likewise "_l2" kernels with kc 384 / 480). Measured
// on Zen 5, 2048^3: kc 512 at 201 GFLOPS vs kc 216 at 166 (1 thread); the model now gives such a tile two
// ways of L2 (kc 1024), see blocking.cpp.
enum class MicroPanelHome { l1, l2 };

// The GEMM part of a kernel set: the register-tile micro-kernel, packing from every layout and dtype, the
// few-columns path and the conversions.
struct GemmKernels {
  UkernelF32 ukernel;
  UkernelAF32 ukernel_a;  // A read in place (the blocked loops, microarch's f32_a_in_place_max_k); null: none
  UkernelAPackBF32 ukernel_a_pack_b;  // ukernel_a packing B on the way (small.cpp): set with ukernel_a
  // bf16 widened to fp32 panels (a 16-bit shift) for the fp32 micro-kernel (microarch's bf16_on_fp32_units);
  // null: bf16 runs only the Bf16Kernels
  PackAF16 pack_a_bf16;
  PackAtF16 pack_at_bf16;
  PackBF16 pack_b_bf16;
  PackBtF16 pack_bt_bf16;
  const char* bf16_widened;  // the register tile's description when it runs bf16 so
  PackAF32 pack_a_f32;
  PackAF16 pack_a_f16;
  PackAtF32 pack_at_f32;
  PackAtF16 pack_at_f16;
  PackBF32 pack_b_f32;
  PackBPanelsF32 pack_b_panels_f32;
  PackBF16 pack_b_f16;
  PackBtF32 pack_bt_f32;
  PackBtF16 pack_bt_f16;
  StoreF16 store_f16;
  StoreF16 store_bf16;  // the same rounding to bf16
  TransposeH transpose_halves;
  ThinF32 thin;  // the few-columns path (csrc/gemm/thin.hpp)
  RowsAxpyF32 rows_axpy;  // the few-rows path's inner loop (csrc/gemm/thin.hpp)
  RowsAxpyF16 rows_axpy_f16;
  WidenF16 widen_f16;
  WidenF16 widen_bf16;  // bf16 values as fp32 (exact)
};

// One output row of a depthwise convolution: out[0:n] = sum over t < taps of w[t] * src[t][0:n] (the filter
// taps' shifted input rows; csrc/conv/depthwise.cpp). out must not overlap a source.
using DepthwiseRowF32 = void (*)(int64_t n, int taps, const float* w, const float* const* src, float* out);
// 3x3 taps at stride 1 and dilation 1: `rows` output rows of n, row i = sum over r, s < 3 of w[3 r + s] *
// in[(i + r) ld_in + j + s] (out rows ld_out apart; out must not overlap in).
using Depthwise3x3F32 = void (*)(int64_t n, int64_t rows, const float* w, const float* in, int64_t ld_in, float* out,
                                 int64_t ld_out);
// A whole fp32 plane straight from the input, no padded copy: y (p x q, rows q apart) = the 3x3 filter wt
// at dilation 1 and stride 1 or 2 over x (h x w, rows w apart) zero-padded by pad_h / pad_w. AVX-512 only
// (masked loads give the padding); nullptr in kernel sets without it.
using DepthwisePlaneF32 = void (*)(const float* x, int64_t h, int64_t w, int64_t pad_h, int64_t pad_w, int stride,
                                   const float* wt, float* y, int64_t p, int64_t q);
// The depthwise weight gradient's sums: acc[t] += sum over i < rows, j < n of g[i ldg + j] * src[t][i ld + j]
// (dY's rows against filter tap t's shifted input rows; csrc/conv/depthwise_backward.cpp). Reads no element
// past n in a row.
using DepthwiseDotF32 = void (*)(int64_t rows, int64_t n, int taps, const float* g, int64_t ldg,
                                 const float* const* src, int64_t ld, float* acc);
// The weight gradient at stride 1 (csrc/conv/conv2d_weights.cpp): out[i][0:NR] += sum over images and p < np
// of x[img x_image + off[i] + p] * bt[img bt_image + p NR + 0:NR] for rows i < nrows (out's rows ldo apart),
// bt an NR-column panel of pack_bt's layout. Reads x[off[i] + p] for exactly those p.
using WeightRowsF32 = void (*)(int64_t np, int64_t images, const float* x, int64_t x_image, const int64_t* off,
                               int64_t nrows, const float* bt, int64_t bt_image, float* out, int64_t ldo);
// Deal a row to `stride` phases: phases[f][j] = row[j * stride + f] for j < n (row holds stride * n floats).
using DepthwiseSplitF32 = void (*)(const float* row, int64_t n, int stride, float* const* phases);
// Its inverse, the phases dealt back into a row: row[j * stride + f] = phases[f][j] for j < n.
using DepthwiseMergeF32 = void (*)(const float* const* phases, int64_t n, int stride, float* row);

// A block of C stored transposed: element (i, j) of `rows` <= 16 rows by `cols` <= 16 columns (c, ldc apart)
// goes to y[j * ldy + i] (conv2d_pixels writes its pixels x channels C block into Y's channel rows).
using StoreTransposedF32 = void (*)(const float* c, int64_t ldc, int rows, int cols, float* y, int64_t ldy);
// The same for 16 rows with non-temporal stores, each of y's rows one whole cache line (y and ldy multiples
// of 64 bytes), for a Y of more than half the last-level cache; the caller fences before Y is read.
using StreamTransposedF32 = void (*)(const float* c, int64_t ldc, int cols, float* y, int64_t ldy);

// The convolution part: the same register tile with B's rows read in place, B gathered from an image, and
// the depthwise convolution's row kernel.
struct ConvKernels {
  UkernelRowsF32 ukernel_rows;
  // ukernel_rows without prefetching the next micro-panel's part of B's rows (nullptr: none; AVX2 has one)
  UkernelRowsF32 ukernel_rows_quiet;
  UkernelARowsF32 ukernel_a_rows;
  PackBGatherF32 pack_b_gather;  // conv2d's implicit im2col
  PackBGatherF32 pack_a_gather;  // the same into an MR-row micro-panel of A (output pixels as rows)
  PackBtRowsF32 pack_wt_f32;     // W^T's NR-column panels, rows placed by a table (output pixels as rows)
  PackBtRowsF16 pack_wt_f16;
  StoreTransposedF32 store_transposed;  // C blocks into Y (output pixels as rows)
  StreamTransposedF32 stream_transposed;  // nullptr: none (AVX2 has one)
  DepthwiseRowF32 depthwise_row;
  Depthwise3x3F32 depthwise_3x3;
  DepthwiseSplitF32 depthwise_split;
  DepthwiseMergeF32 depthwise_merge;  // the depthwise backward's dX rows from their phases
  DepthwiseDotF32 depthwise_dot;
  DepthwisePlaneF32 depthwise_plane;  // nullptr: the padded-copy kernels above take every depthwise conv
  WeightRowsF32 weight_rows;          // dW^T's rows from the image in place and dY's panels (stride 1)
};

// One ISA's register tile and what runs on it (built by make_kernel_set<> in csrc/gemm/make_kernel_set.hpp).
struct KernelSet {
  const char* isa;          // "avx512", "avx2" or "ref"
  const char* description;  // what the micro-kernel is, for provenance
  int mr;
  int nr;
  int thin_lanes;  // the lanes of the thin path's vectors, which fix its B layout (thin::group)
  MicroPanelHome b_panel_home;  // which cache the blocking model keeps B's micro-panel in (blocking.hpp)
  // Optional: the same ISA with a narrower register tile (same MR, smaller NR) that the GEMM driver switches
  // to when it wastes fewer padded FMAs on the problem's N (skinny GEMMs). nullptr when there is none.
  const KernelSet* narrow;
  GemmKernels gemm;
  ConvKernels conv;
  // bf16 GEMM in the pairs layout, on a portable kernel compiled with this unit's flags (csrc/gemm/pack_pairs.hpp);
  // isa.cpp's bf16_kernels() prefers the AVX512-BF16 one where the CPU has it.
  Bf16Kernels bf16;
};

// The recurrent part, one per ISA and independent of the register tile (csrc/rnn/cell_<isa>.cpp).
struct RnnKernels {  // fused gate activations, vectorised for the ISA
  LstmCell lstm;
  GruCell gru;
  RnnCell rnn;
};

// The fp16-accumulating kernels: the emulation beside the reference kernel set, and the AVX512-FP16 ones
// (nullptr when the compiler could not build them). isa.cpp decides which a kernel set may use.
const F16AccKernels& f16acc_ref();
const F16AccKernels* f16acc_avx512fp16();
// The AVX512-BF16 (vdpbf16ps) bf16 kernels; nullptr when the compiler could not build them.
const Bf16Kernels* bf16_avx512bf16();

// One per ISA translation unit; each is compiled with its own -m flags and may only be called after the
// ISA table (opbench/isa.hpp) said the CPU runs it. isa.cpp is the only place that chooses among them.
const KernelSet& kernels_ref();
const KernelSet& kernels_avx2();
const KernelSet& kernels_avx512();
// The AMX rows' kernel sets (the AVX-512 one, the reference one, renamed) and their bf16 kernels: AMX-BF16
// tiles (ukernel_amx.cpp; only when the compiler knows -mamx-bf16) and their exact emulation
// (ukernel_amx_emu.cpp).
const KernelSet& kernels_amx();
const KernelSet& kernels_amx_emu();
const Bf16Kernels& kernels_bf16_amx();
const Bf16Kernels& kernels_bf16_amx_emu();
// The AMX tile space's layout kAmxShapes[v] (opbench/isa.hpp) on the tiles and on the emulator; nullptr for
// a v outside it.
const Bf16Kernels* kernels_bf16_amx_shape(int v);
const Bf16Kernels* kernels_bf16_amx_emu_shape(int v);

}  // namespace opbench

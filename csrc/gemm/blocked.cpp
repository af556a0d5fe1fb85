// The BLIS five-loop GEMM over a kernel set: jc (nc) -> pc (kc, pack B) -> ic (mc, pack A) -> jr (NR) ->
// ir (MR) -> micro-kernel. Threads split the rows and the NR-panels of each B panel between them.
#include <algorithm>
#include <numeric>
#include <type_traits>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "opbench/aligned.hpp"
#include "opbench/limits.hpp"
#include "opbench/fp16.hpp"
#include "opbench/gemm.hpp"
#include "opbench/thread_pool.hpp"
#include "opbench/isa.hpp"
#include "opbench/microarch.hpp"
#include "small.hpp"
#include "split.hpp"

namespace opbench {

namespace {

// Scratch reused across calls from the same calling thread: reallocating (and page-faulting) megabytes of
// panels on every call would dominate small problems.
struct Workspace {
  AlignedBuffer b_panel;  // kc x round_up(nc, NR), shared by all threads
  AlignedBuffer a_blocks;  // per thread: round_up(mc, MR) x kc
  AlignedBuffer c_f32;     // fp16 output only: m x nc fp32 accumulator
};

Workspace& thread_workspace() {
  static thread_local Workspace ws;
  return ws;
}

}  // namespace

// The path thresholds' defaults (measured on 2 Zen 5 cores, docs/benchmarks.md, issue 17). B is read in place
// (small.cpp) while a thread's packed A block for one of that path's K blocks (rows x unpacked_kc) fits the
// L2 ways the cache model leaves to A: up to Blocking::unpacked_rows (blocking.cpp; 448 on Zen 5). Measured
// with in-place B from 2 to 448 rows (and at 1024-2048 squares and BERT shapes) it was never slower than
// packing and 1.3-1.8x faster for M = 2-128; beyond that A would have to be blocked as well, which is the
// blocked path. Under 2^17 FLOPs (a 40^3 product) a second thread costs more than its share: 32^3 ran at
// 112 GFLOPS on one thread and 105 on two, 16^3 at 46 and 15.
constexpr int64_t kParallelFlops = int64_t(1) << 17;
// Up to 8 rows of A, streaming B's rows (each vector of B loaded once for all rows, the rows of C in L1)
// beat reading 32-column pieces of 64 rows of B in place: on 2 Zen 5 cores 2x4096x4096 went from 31 to 60
// GFLOPS, 4x4096x4096 66 -> 94-118, 8x4096x4096 123 -> 164-268, 4x1024x1024 105-142 -> 186-205
// (docs/benchmarks.md, issue 17's fourth session). A B that fits in half of L2 is read faster in place:
// 8x256x256 ran at 164-171 GFLOPS streamed and 170-220 in place, 5x64x64 at 83-85 and 106-109. Past 8 rows
// (passes of 8 over each group of B's rows, the accumulators in L2) streaming had won only while the
// unpacked path split its loads of a numpy B over two cache lines; aligned (small.cpp, aligning_columns),
// in place / streamed, one process: 16x4096x4096 135 / 113 on one core and 241 / 186 on two, 14x8192x8192
// 132 / 133 and 237 / 223, 10x4096x4096 118 / 110 and 251 / 212; with a line-aligned B the streamed rows
// were slower still (16 rows: 139 / 117). Only 9 rows of a numpy B streamed faster (106 / 97). So the
// default stops at 8 rows (the micro-architecture table's stream_m, microarch.cpp [Z1]; on Emerald Rapids
// [E4] did not decide); the passes stay for a given stream_m (up to 32, for the tuner).

// With 8-lane vectors (AVX2: 16 registers) the streamed rows hold one vector of accumulators per row and
// broadcast every weight from memory, while the 6x16 register tile reads each of B's rows once per 6 rows,
// and wastes a part of its FMAs below 6. In place / streamed time on the Zen 4 guest without AVX-512, one
// core: 2-3 rows 1.02-1.11 (x4096x4096); 4-5 rows 0.66-1.49 (x1000x1000 to x4096x4096, no pattern); 6 rows
// 0.72-1.15 (0.72 and 0.78 at x4096x4096 and x1000x1000); 8 rows 0.55-0.99, 0.57 at x4096x4096 (two cores
// 0.58, 8x8192x8192 0.60). So 8-lane sets stream up to 5 rows.
constexpr int64_t kNarrowStreamM = 5;

Blocking resolve_blocking(const KernelSet& ks, Blocking requested) {
  const Blocking model = analytical_blocking(cpu_info(), ks.mr, ks.nr, sizeof(float), ks.b_panel_home);
  if (requested.mc <= 0) requested.mc = model.mc;
  if (requested.nc <= 0) {
    requested.nc = model.nc;
    requested.nc_from_model = true;
  }
  if (requested.kc <= 0) {
    requested.kc = model.kc;
    requested.kc_from_model = true;
  }
  if (requested.small_m < 0) {
    requested.small_m = model.unpacked_rows;
    requested.aliased_small_m = model.unpacked_aliased_rows;
  } else {
    requested.aliased_small_m = requested.small_m;
  }
  if (requested.stream_m < 0) {
    requested.stream_m = ks.thin_lanes < 16 ? std::min(microarch().stream_m, kNarrowStreamM) : microarch().stream_m;
    requested.stream_min_b_bytes = cpu_info().l2.size_bytes / 2;
  }
  requested.aliased_row_bytes = model.aliased_row_bytes;
  requested.unpacked_kc = model.unpacked_kc;
  requested.few_tiles_kc = model.few_tiles_kc;
  requested.implicit_kc = model.implicit_kc;
  requested.implicit_mc = model.implicit_mc;
  if (requested.parallel_flops < 0) requested.parallel_flops = kParallelFlops;
  return requested;
}

namespace {

// The bf16 kernels are the portable pairs: no bf16 unit in the CPU or the kernel set.
bool bf16_portable(const KernelSet& ks) { return &bf16_kernels(ks) == &ks.bf16; }

}  // namespace

bool bf16_without_unit(const KernelSet& ks) { return ks.gemm.pack_a_bf16 != nullptr && bf16_portable(ks); }

bool bf16_on_fp32_units(const KernelSet& ks) {
  if (ks.gemm.pack_a_bf16 == nullptr) return false;
  // The portable pairs widen each pair in the inner loop; the fp32 tile widens each element once, as it is
  // packed: 6-10x faster with AVX2 on Zen 4 (docs/benchmarks.md).
  if (bf16_portable(ks)) return true;
  return microarch().bf16_on_fp32_units && std::strcmp(bf16_kernels(ks).isa, "avx512bf16") == 0;
}

// bf16 products of fewer rows keep the AVX512-BF16 kernels where bf16_on_fp32_units: they use each element of B
// once or a few times, and B widened as it is packed is twice the bytes of its pairs. On the Emerald Rapids
// guest, one core, builds interleaved, widened / pairs: 1x4096x4096 1.50, 4x4096x1024 1.27, 8x4096x1024 1.10,
// 12x4096x4096 1.02; 16x4096x1024 0.93, 16x1024x4096 0.86, 32x4096x1024 0.81, 64x4096x1024 0.73. The portable
// pairs lose at every size (12x4096x4096 on Zen 4 with AVX2: 0.16).
constexpr int64_t kBf16OnFp32MinRows = 16;

int64_t bf16_on_fp32_min_rows(const KernelSet& ks) { return bf16_portable(ks) ? 1 : kBf16OnFp32MinRows; }

bool bf16_on_fp32(const KernelSet& ks, const GemmProblem& p) {
  return p.in_dtype == Dtype::bf16 && p.accumulation != Accumulation::f16 && bf16_on_fp32_units(ks) &&
         p.m >= bf16_on_fp32_min_rows(ks);
}

namespace {

// bf16 packed in pairs for the bf16 kernels (every other product, bf16 widened included, packs fp32 panels)
bool bf16_pairs(const KernelSet& ks, const GemmProblem& p) { return p.in_dtype == Dtype::bf16 && !bf16_on_fp32(ks, p); }

}  // namespace

Blocking resolve_blocking(const KernelSet& ks, Blocking requested, Dtype dtype) {
  Blocking blk = resolve_blocking(ks, requested);
  if (dtype == Dtype::bf16 && blk.kc_from_model) {
    // a bf16 pair takes the bytes of one fp32 k; a kernel may name its own K block (AMX: amx_body.hpp)
    const Bf16Kernels& bk = bf16_kernels(ks, blk);
    blk.kc = bk.kc > 0 ? bk.kc : blk.kc * 2;
  }
  return blk;
}

namespace {

// A narrower register tile of the same ISA pays off when it pads N at least a quarter less (N <= 16 on
// AVX-512: 16 instead of 32 columns, twice the useful FMAs per instruction).
bool prefer_narrow(const KernelSet& ks, int64_t n) {
  return ks.narrow != nullptr && 4 * round_up(n, ks.narrow->nr) <= 3 * round_up(n, ks.nr);
}

// Panel rows of K = k split in blocks of kc, each block's k rounded up to a whole panel row of `step` k (1
// for fp32 panels, 2 for bf16 pairs).
int64_t packed_depth(int64_t k, int64_t kc, int64_t step) {
  return k / kc * round_up(kc, step) + round_up(k % kc, step);
}

// Where the (jc, pc) block of B starts in a pack_b_all() buffer (elements): blocks in loop order, each
// depth(kb) x round_up(nb, NR) (every block but the last of a loop is full).
int64_t packed_offset(int64_t jc, int64_t pc, int64_t nb, int64_t k, int64_t nc, int64_t kc, int64_t nr,
                      int64_t step) {
  return (jc / nc) * packed_depth(k, kc, step) * round_up(nc, nr) + pc / kc * round_up(kc, step) * round_up(nb, nr);
}

// One packing call on A or B as the caller stored it: fp16, bf16 or fp32 (`dt`), from element `offset` of
// `base`, by the kernel set's packer for that format (as is or transposed, chosen by the caller).
template <class F16, class F32>
void pack_stored(Dtype dt, const void* base, int64_t offset, F16 f16, F16 bf16, F32 f32, int64_t ld, int64_t rows,
                 int64_t cols, float* dst) {
  if (dt == Dtype::f16 || dt == Dtype::bf16) {
    (dt == Dtype::f16 ? f16 : bf16)(static_cast<const uint16_t*>(base) + offset, ld, rows, cols, dst);
  } else {
    f32(static_cast<const float*>(base) + offset, ld, rows, cols, dst);
  }
}

// Where element (pc, col) of B is in p.b (elements), B given as is or as B^T.
int64_t b_offset(const GemmProblem& p, int64_t pc, int64_t col) { return p.trans_b ? col * p.ldb + pc : pc * p.ldb + col; }

// One NR-column micro-panel of B: columns [col, col + cols) and rows [pc, pc + kb).
void pack_b_panel(const KernelSet& ks, const GemmProblem& p, int64_t pc, int64_t kb, int64_t col, int64_t cols,
                  float* dst) {
  pack_stored(p.in_dtype, p.b, b_offset(p, pc, col), p.trans_b ? ks.gemm.pack_bt_f16 : ks.gemm.pack_b_f16,
              p.trans_b ? ks.gemm.pack_bt_bf16 : ks.gemm.pack_b_bf16,
              p.trans_b ? ks.gemm.pack_bt_f32 : ks.gemm.pack_b_f32, p.ldb, kb, cols, dst);
}

}  // namespace

namespace {

// nc, or N cut into blocks of at most `fit` columns (whole NR panels) alike in size, when nc is wider.
int64_t equal_blocks(int64_t n, int64_t nc, int64_t fit, int64_t nr) {
  if (nc <= fit) return nc;
  return std::min(nc, round_up(ceil_div(n, ceil_div(n, fit)), nr));
}

}  // namespace

// The model sizes nc for B's packed block alone (kc x nc in the L3 ways the A blocks leave: 7168 on Zen 5,
// 28 MB of 32). Two things narrow it when it comes from the model, in equal blocks:
// - B's block gets at most a quarter of L3. Zen's L3 is filled by what L2 evicts, and the C tiles written
//   and the rows of A read for packing pass through it beside B. One Zen 5 core, one process (GFLOPS,
//   model / 2048): 4096x4096x1024 245 / 266, 1024x4096x4096 231 / 250, 1024x3072x768 248 / 256 (1536);
//   two cores: 482 / 490, 418 / 428, 441 / 453. nc 1024-1536 were as fast on one core, 1024 slower on two.
// - Each K block is a pass over the N block's C (M x nc): with M x nc past L3, every pass after the first read
//   C back from memory. 4096^3 on one Zen 5 core 244 -> 257 (nc 1024-2048 alike; on two cores 1024 lost
//   5%, 2048 is level).
// L3 is what the micro-architecture table counts on (a guest sees its host socket's whole L3: microarch.cpp
// [E5]).
int64_t gemm_block_n(const GemmProblem& p, const Blocking& blk, int64_t nr, int64_t elem_bytes) {
  const int64_t nc = std::min(blk.nc, p.n);
  if (!blk.nc_from_model) return nc;
  const int64_t l3 = l3_counted_bytes(cpu_info()), kb = std::min(blk.kc, p.k);
  int64_t fit = l3 / 4 / std::max<int64_t>(1, kb * elem_bytes);
  if (p.k > blk.kc) fit = std::min(fit, l3 / std::max<int64_t>(1, p.m * 4));
  fit = std::max(8 * nr, fit / nr * nr);
  return equal_blocks(p.n, nc, fit, nr);
}

const KernelSet& tile_kernels(const KernelSet& ks, int64_t n) { return prefer_narrow(ks, n) ? *ks.narrow : ks; }

namespace {

// bf16 A read in place by the micro-kernel instead of packed in pairs (Bf16Kernels::ukernel_a): each row tile
// of A is read once (the blocked loops take the row tiles outside, see there), so packing it only cost. Rows
// of a long K block are the exception: a micro-panel of 14 rows read in place is 14 streams, and past 1024 of
// K (28 KiB of A per tile, more than L1 keeps) the packed, contiguous panel was faster. Builds interleaved in
// one process, one Zen 4 core (in place / packed): attention's QK 128x128x64 1.04-1.08x, WV 128x64x128
// 1.15x, 384x64x384 1.16x (in cache) and 1.13x (from memory: the kernel prefetches A's rows, without which it
// was 0.88x), 1000x100x1000 1.07x; 512x128x2048 0.87x, 4096x64x4096 0.98x past the K limit. It took N <= 256
// only while the column panels were the outer loop (2048x256x2048 0.59x then); with the row tiles outside,
// and the kernel rounding bf16 output itself, N no longer matters (384x384x64 1.19x, 8192x1024x128 1.28x,
// 1000^3 1.04x, 2048x256x2048 1.01x, 31x997x61 1.20x).
// ... and not where A's rows alias in L1: `rows` rows `row_bytes` apart, each at its current line, fall in
// fewer sets than they need ways (a stride of 4 KiB or a multiple puts all 14 in one set of an 8- or 12-way
// L1), and every step of the kernel missed L1. On the 2-vCPU Zen 4 guest (AVX512-BF16, L1d 32 KiB 8-way), two
// threads, A read in place with K blocks of 1024 / the same A with rows 64 bytes further apart / A packed
// in one K block (the build before this rule), GFLOPS: 128x1000x2048 165 / 334 / 267, 1024x1024x2048 190 /
// 306, 2048^3 187 / 289 / 405, 16x1024x4096 136 / 166 / 202.
bool a_rows_alias_in_l1(int64_t row_bytes, int64_t rows) {
  const CacheLevel& l1 = cpu_info().l1d;
  const int64_t span = l1.sets * l1.line_bytes;  // the bytes one way of L1 holds
  if (span <= 0 || l1.ways <= 1 || row_bytes <= 0) return false;
  const int64_t sets_reached = span / std::max<int64_t>(std::gcd(row_bytes, span), l1.line_bytes);
  return ceil_div(rows, sets_reached) > l1.ways - 1;  // (a way left for B's panel and C)
}

bool bf16_a_rows_alias(const GemmProblem& p, int64_t mr) {
  return a_rows_alias_in_l1(p.lda * int64_t(sizeof(uint16_t)), mr);
}

constexpr int64_t kBf16InPlaceMaxK = 1024;
bool a_in_place_bf16(const GemmProblem& p, const Blocking& blk, int64_t mr) {
  return !p.trans_a && std::min(blk.kc, p.k) <= kBf16InPlaceMaxK && !bf16_a_rows_alias(p, mr);
}

// A K block the model sized (bf16: twice the fp32 model's kc, 4096 on Zen and Intel) is cut, past
// kBf16InPlaceMaxK, into blocks of at most that alike in size, so that the kernels that read A in place do:
// ResNet-50's 3x3 convs put K = 9 x C through here (4608 went as 4096 + 512, all of A packed). On the
// 2-vCPU Emerald Rapids guest, two threads, ours / torch's oneDNN in one process, default / K blocks of at
// most 1024: 7^2 512->512 0.82-0.83 / 0.88, 14^2 256->256 0.86 / 0.88, 28^2 128->128 (K 1152) 0.91-0.97 /
// 0.94-1.01, the strided ones 0.87-0.92 / 0.89-0.99; BERT's K 3072 and 2048^3 within 2% either way.
Blocking bf16_k_blocks(const Bf16Kernels& k, const GemmProblem& p, Blocking blk) {
  if (blk.kc_from_model && k.kc == 0 && k.ukernel_a != nullptr && k.a_in_place_max_n == 0 && !p.trans_a &&
      std::min(blk.kc, p.k) > kBf16InPlaceMaxK && !bf16_a_rows_alias(p, k.mr)) {
    blk.kc = round_up(ceil_div(p.k, ceil_div(p.k, kBf16InPlaceMaxK)), 2);
  }
  return blk;
}

}  // namespace

// fp32 A read in place (GemmKernels::ukernel_a) where the micro-architecture table says so, for a K block of
// at most its f32_a_in_place_max_k and at most kF32InPlaceMaxN columns: packing A costs 0.3-0.7 cycles a
// float per K block, a tenth or more of the time when N is a few hundred, and nothing worth saving past a
// few thousand, where the row tiles' passes over B's block cost more (57x4097x129 on one Emerald Rapids
// core, in place / packed: 0.93). Measured: microarch.cpp [E7].
constexpr int64_t kF32InPlaceMaxN = 2048;

bool f32_a_in_place(const KernelSet& ks, const GemmProblem& p, const Blocking& blk) {
  const int64_t max_k = microarch().f32_a_in_place_max_k;
  return ks.gemm.ukernel_a != nullptr && p.in_dtype == Dtype::f32 && !p.trans_a && max_k > 0 &&
         std::min(blk.kc, p.k) <= max_k && p.n <= kF32InPlaceMaxN;
}

namespace {

// A register tile's kernels as the blocked loops see them: packed panels of Elem, a micro-kernel that adds
// into fp32 C, and where B was packed ahead of time (if it was).
struct F32Tile {
  using Elem = float;
  static constexpr int64_t kStep = 1;  // k per panel row
  const KernelSet& ks;
  int64_t mr() const { return ks.mr; }
  int64_t nr() const { return ks.nr; }
  int64_t depth(int64_t kb) const { return kb; }  // panel rows for kb of K
  void pack_a(const GemmProblem& p, int64_t row, int64_t pc, int64_t mb, int64_t kb, float* dst) const {
    const int64_t at = p.trans_a ? pc * p.lda + row : row * p.lda + pc;
    pack_stored(p.in_dtype, p.a, at, p.trans_a ? ks.gemm.pack_at_f16 : ks.gemm.pack_a_f16,
                p.trans_a ? ks.gemm.pack_at_bf16 : ks.gemm.pack_a_bf16,
                p.trans_a ? ks.gemm.pack_at_f32 : ks.gemm.pack_a_f32, p.lda, mb, kb, dst);
  }
  void pack_b(const GemmProblem& p, int64_t pc, int64_t kb, int64_t col, int64_t cols, float* dst) const {
    pack_b_panel(ks, p, pc, kb, col, cols, dst);
  }
  void ukernel(int64_t kb, const float* a, const float* b, float* c, int64_t ldc, bool acc, int m, int n) const {
    ks.gemm.ukernel(kb, a, b, c, ldc, acc, m, n);
  }
  const float* prepacked(const GemmProblem& p) const { return static_cast<const float*>(p.b_packed); }
  bool a_in_place(const GemmProblem& p, const Blocking& blk) const { return f32_a_in_place(ks, p, blk); }
  void ukernel_a(int64_t kb, const float* a, int64_t lda, const float* b, float* c, int64_t ldc, bool acc, int m,
                 int n) const {
    ks.gemm.ukernel_a(kb, a, lda, b, c, ldc, acc, m, n);
  }
  bool rounds_in_kernel(const GemmProblem&, int64_t, bool) const { return false; }
  void ukernel_a_round(int64_t, const float*, int64_t, const float*, uint16_t*, int64_t, int, int) const {}
  void ukernel_round(int64_t, const float*, const float*, uint16_t*, int64_t, int, int) const {}
  struct Session {  // nothing to set up per thread
    explicit Session(const F32Tile&) {}
  };
};

// Panels of halves for a kernel table with pack_a, pack_b, pack_bt and ukernel on uint16_t panels (inputs are
// 2-byte). A panel row holds kKStep of k: a panel of kb of K has kb rounded up to kKStep rows of k.
// - F16AccTile: fp16 panels for the fp16-accumulating micro-kernel, one k per row (never packed ahead).
// - Bf16Tile: bf16 panels in pairs for the bf16 kernels, so ceil(kb / 2) rows of twice the halves; B may be
//   packed ahead of time (pack_b_all).
template <class Kernels, int64_t kKStep>
struct HalvesTile {
  using Elem = uint16_t;
  static constexpr int64_t kStep = kKStep;
  const Kernels& k;
  int64_t mr() const { return k.mr; }
  int64_t nr() const { return k.nr; }
  int64_t depth(int64_t kb) const { return round_up(kb, kKStep); }
  void pack_a(const GemmProblem& p, int64_t row, int64_t pc, int64_t mb, int64_t kb, uint16_t* dst) const {
    k.pack_a(static_cast<const uint16_t*>(p.a) + row * p.lda + pc, p.lda, mb, kb, dst);
  }
  void pack_b(const GemmProblem& p, int64_t pc, int64_t kb, int64_t col, int64_t cols, uint16_t* dst) const {
    (p.trans_b ? k.pack_bt : k.pack_b)(static_cast<const uint16_t*>(p.b) + b_offset(p, pc, col), p.ldb, kb, cols, dst);
  }
  void ukernel(int64_t kb, const uint16_t* a, const uint16_t* b, float* c, int64_t ldc, bool acc, int m, int n) const {
    k.ukernel(kb, a, b, c, ldc, acc, m, n);
  }
  const uint16_t* prepacked(const GemmProblem& p) const { return static_cast<const uint16_t*>(p.b_packed); }
  // bf16 pairs are A's own rows: a kernel that reads A in place needs no packed A (a_in_place_bf16).
  bool a_in_place(const GemmProblem& p, const Blocking& blk) const {
    if constexpr (std::is_same_v<Kernels, Bf16Kernels>) {
      if (k.ukernel_a == nullptr || p.trans_a) return false;
      return k.a_in_place_max_n > 0 ? p.n <= k.a_in_place_max_n : a_in_place_bf16(p, blk, k.mr);
    } else {
      return false;
    }
  }
  void ukernel_a(int64_t kb, const uint16_t* a, int64_t lda, const uint16_t* b, float* c, int64_t ldc, bool acc, int m,
                 int n) const {
    if constexpr (std::is_same_v<Kernels, Bf16Kernels>) k.ukernel_a(kb, a, lda, b, c, ldc, acc, m, n);
  }
  // bf16 output that K's one block gives whole (nothing to accumulate into) is rounded by the kernel as it
  // leaves the registers, where the kernel for A in place or packed (`in_place`) can.
  bool rounds_in_kernel(const GemmProblem& p, int64_t kc, bool in_place) const {
    if constexpr (std::is_same_v<Kernels, Bf16Kernels>) {
      const bool can = in_place ? k.ukernel_a_round != nullptr : k.ukernel_round != nullptr;
      return can && p.out_dtype == Dtype::bf16 && !p.accumulate && kc >= p.k;
    } else {
      return false;
    }
  }
  void ukernel_a_round(int64_t kb, const uint16_t* a, int64_t lda, const uint16_t* b, uint16_t* c, int64_t ldc, int m,
                       int n) const {
    if constexpr (std::is_same_v<Kernels, Bf16Kernels>) k.ukernel_a_round(kb, a, lda, b, c, ldc, m, n);
  }
  void ukernel_round(int64_t kb, const uint16_t* a, const uint16_t* b, uint16_t* c, int64_t ldc, int m, int n) const {
    if constexpr (std::is_same_v<Kernels, Bf16Kernels>) k.ukernel_round(kb, a, b, c, ldc, m, n);
  }
  // A thread's stretch of micro-kernel calls in one product: the kernels' begin and end around it, where they
  // have them (AMX configures its tiles once there instead of at every call: Bf16Kernels::begin).
  struct Session {
    const Kernels& k;
    explicit Session(const HalvesTile& t) : k(t.k) {
      if constexpr (std::is_same_v<Kernels, Bf16Kernels>) {
        if (k.begin != nullptr) k.begin();
      }
    }
    ~Session() {
      if constexpr (std::is_same_v<Kernels, Bf16Kernels>) {
        if (k.end != nullptr) k.end();
      }
    }
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;
  };
};
using F16AccTile = HalvesTile<F16AccKernels, 1>;
using Bf16Tile = HalvesTile<Bf16Kernels, 2>;

// The N block of the blocked loops for this tile (B's packed panels take sizeof(Elem) bytes per element).
template <class Tile>
int64_t tile_block_n(const Tile& tile, const GemmProblem& p, const Blocking& blk) {
  return gemm_block_n(p, blk, tile.nr(), sizeof(typename Tile::Elem));
}

// The N block when fp32 A is read in place: every row tile reads all of B's block again, so the block fits in
// half of L2, in equal blocks (57x4097x129 with B's 2 MB block in L3 ran at 0.80 of packed A; in half of L2,
// 0.93, and the rule's N limit then left it packed). bf16 keeps the model's block, as measured on AMX.
template <class Tile>
int64_t in_place_block_n(const Tile& tile, const GemmProblem& p, const Blocking& blk) {
  const int64_t nc = tile_block_n(tile, p, blk);
  if constexpr (!std::is_same_v<Tile, F32Tile>) return nc;
  const int64_t NR = tile.nr(), kb = std::min(blk.kc, p.k);
  const int64_t fit = std::max(NR, cpu_info().l2.size_bytes / 2 / (kb * int64_t(sizeof(float))) / NR * NR);
  return equal_blocks(p.n, nc, fit, NR);
}

// Elements of B packed whole (pack_b_all): every (jc, pc) block, in the blocked loops' order.
template <class Tile>
int64_t packed_b_elems(const Tile& tile, const GemmProblem& p, const Blocking& blk) {
  const int64_t NR = tile.nr(), nc = tile_block_n(tile, p, blk), kc = std::min(blk.kc, p.k);
  const int64_t cols = p.n / nc * round_up(nc, NR) + (p.n % nc ? round_up(p.n % nc, NR) : 0);
  return packed_depth(p.k, kc, Tile::kStep) * cols;
}

template <class Tile>
void pack_b_whole(const Tile& tile, const GemmProblem& p, const Blocking& blk, typename Tile::Elem* dst, int threads) {
  const int64_t NR = tile.nr(), nc = tile_block_n(tile, p, blk), kc = std::min(blk.kc, p.k);
  const int64_t panels = ceil_div(p.n, NR) * ceil_div(p.k, kc);  // (an upper bound with ragged nc blocks)
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, panels)));
  ThreadPool::instance().run(threads, [&](int tid) {
    int64_t item = 0;  // micro-panels dealt round-robin
    for (int64_t jc = 0; jc < p.n; jc += nc) {
      const int64_t nb = std::min(nc, p.n - jc);
      for (int64_t pc = 0; pc < p.k; pc += kc) {
        const int64_t kb = std::min(kc, p.k - pc), kd = tile.depth(kb);
        auto* block = dst + packed_offset(jc, pc, nb, p.k, nc, kc, NR, Tile::kStep);
        for (int64_t q = 0; q * NR < nb; ++q, ++item) {
          if (item % threads != tid) continue;
          tile.pack_b(p, pc, kb, jc + q * NR, std::min(NR, nb - q * NR), block + q * kd * NR);
        }
      }
    }
  });
}

// Rows of B a thread packs at a time across its micro-panels (below): even, so that a chunk starts on a pair;
// the fewer for a B past half of L2.
constexpr int64_t kPackRows = 8;
constexpr int64_t kPackRowsInL2 = 64;

// The blocked loops over one register tile (see the file comment). `ks` rounds fp16 and bf16 output.
template <class Tile>
void blocked(const Tile& tile, const KernelSet& ks, const GemmProblem& p, const Blocking& blk, int threads) {
  using Elem = typename Tile::Elem;
  const int64_t MR = tile.mr(), NR = tile.nr();
  const int64_t mc = std::min(blk.mc, p.m);
  const int64_t kc = std::min(blk.kc, p.k);
  const bool a_in_place = tile.a_in_place(p, blk);
  // (B packed ahead of time keeps the block it was packed in: packed_offset)
  const int64_t nc =
      a_in_place && p.b_packed == nullptr ? in_place_block_n(tile, p, blk) : tile_block_n(tile, p, blk);

  const int64_t row_panels = ceil_div(p.m, MR);
  const int64_t col_panels = ceil_div(nc, NR);
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, row_panels * col_panels)));
  int tm = 1, tn = 1;
  split::choose_grid(threads, row_panels, col_panels, p.n >= 2 * p.m, tm, tn);

  Workspace& ws = thread_workspace();
  const int64_t b_elems = tile.depth(kc) * round_up(nc, NR);
  // Rows per thread are MR-aligned shares of M, processed mc rows (rounded up to MR) at a time.
  const int64_t a_rows = std::min(round_up(mc, MR), ceil_div(row_panels, tm) * MR);
  const int64_t a_stride = round_up(a_rows * tile.depth(kc), 1024);  // 4 KiB apart: no false sharing between threads
  const Elem* prepacked = tile.prepacked(p);
  const bool rounds = tile.rounds_in_kernel(p, kc, a_in_place);
  // fp16 or bf16 output goes through an fp32 workspace, unless the kernel rounds it
  const bool f16 = p.out_dtype != Dtype::f32 && !rounds;
  Elem* b_panel = prepacked != nullptr ? nullptr : static_cast<Elem*>(ws.b_panel.reserve(b_elems * sizeof(Elem)));
  Elem* a_blocks = static_cast<Elem*>(ws.a_blocks.reserve(a_stride * threads * sizeof(Elem)));
  const int64_t c32_ld = round_up(nc, 16);
  float* c32 = f16 ? static_cast<float*>(ws.c_f32.reserve(p.m * c32_ld * sizeof(float))) : nullptr;
  // B's rows packed at a time across a thread's micro-panels (the loop below says why)
  const int64_t b_source_bytes = p.k * p.n * (p.in_dtype == Dtype::f32 ? 4 : 2);
  const int64_t pack_rows = b_source_bytes <= cpu_info().l2.size_bytes / 2 ? kPackRowsInL2 : kPackRows;

  SpinBarrier barrier(threads);
  auto body = [&](int tid) {
    const typename Tile::Session session(tile);
    const int ti = tid / tn, tj = tid % tn;
    int64_t m_lo, m_hi;
    split::share_steps(p.m, MR, tm, ti, m_lo, m_hi);
    Elem* a_pack = a_blocks + a_stride * tid;

    for (int64_t jc = 0; jc < p.n; jc += nc) {
      const int64_t nb = std::min(nc, p.n - jc);
      const int64_t panels = ceil_div(nb, NR);
      int64_t q_lo, q_hi;
      split::share(panels, tn, tj, q_lo, q_hi);
      float* c_base = f16 ? c32 : static_cast<float*>(p.c) + jc;
      const int64_t c_ld = f16 ? c32_ld : p.ldc;

      for (int64_t pc = 0; pc < p.k; pc += kc) {
        const int64_t kb = std::min(kc, p.k - pc), kd = tile.depth(kb);
        const Elem* b_block =
            prepacked != nullptr ? prepacked + packed_offset(jc, pc, nb, p.k, nc, kc, NR, Tile::kStep) : b_panel;
        if (prepacked == nullptr) {
          // All threads pack this B panel together, one NR-column micro-panel at a time.
          int64_t pk_lo, pk_hi;
          split::share(panels, threads, tid, pk_lo, pk_hi);
          // B's rows are ldb apart: a thread packs its micro-panels kPackRows rows at a time across all of
          // them, so that each row of B is read as one run over its columns instead of once per micro-panel
          // (a page per row per panel; 4096^3 on 2 Zen 5 cores: 454 -> 469 GFLOPS, 4, 16 and 64 rows
          // alike). 8 rows, not 64, against a B from memory on the Zen 3 guest (builds interleaved, B on a
          // line / 16 bytes past one, new / old time, one core and two): 256x8192x2048 0.91-0.97,
          // 192-256 x 4096 x 4096 0.96-1.00, 256x4096x1024 0.95-0.97, 1024x4096x1024 0.99 (and on the Zen 4
          // guest, B from L3, 64 rows took 1.01-1.03x the time at 448x1024x1024, 1024^3 and 512x2048x1024).
          // But a B within half of L2 packed 8 rows at a time paid a call per chunk and panel: on one Zen 4
          // core (bf16, AVX512-BF16) 1.11x the time at 64^3, 1.05x at 96^3, 1.02-1.03x at 128^3-192^3; it
          // takes 64 (pack_rows, above). B^T is read along k anyway.
          const int64_t rows_step = p.trans_b ? kb : pack_rows;
          for (int64_t r0 = 0; r0 < kb; r0 += rows_step) {
            const int64_t rows = std::min(rows_step, kb - r0);
            for (int64_t q = pk_lo; q < pk_hi; ++q) {
              tile.pack_b(p, pc + r0, rows, jc + q * NR, std::min(NR, nb - q * NR), b_panel + q * kd * NR + r0 * NR);
            }
          }
          barrier.wait();
        }

        for (int64_t ic = m_lo; ic < m_hi; ic += mc) {
          const int64_t mb = std::min(mc, m_hi - ic);
          // A's rows for this block: read in place by ukernel_a, or packed into micro-panels for ukernel.
          const Elem* a_rows_in_place = a_in_place ? static_cast<const Elem*>(p.a) + ic * p.lda + pc : nullptr;
          if (!a_in_place) tile.pack_a(p, ic, pc, mb, kb, a_pack);
          const bool acc = p.accumulate || pc > 0;
          const int64_t row_tiles = ceil_div(mb, MR);
          // fp32 A in place: tiles of rows alike in size (split::EvenTiles, as gemm_unpacked_b's): each row tile
          // reads all of B's block again, and 57 rows as 4 x 14 and 1 read it five times for 57 rows' work.
          const bool even_tiles = a_in_place && std::is_same_v<Tile, F32Tile>;
          const split::EvenTiles even(mb, row_tiles);
          auto run_tile = [&](int64_t r, int64_t q) {
            const int64_t r0 = even_tiles ? even.first_row(r) : r * MR;
            const int m_valid = static_cast<int>(even_tiles ? even.rows(r) : std::min(MR, mb - r0));
            const int n_valid = static_cast<int>(std::min(NR, nb - q * NR));
            const Elem* bp = b_block + q * kd * NR;
            if (rounds) {
              uint16_t* c_tile = static_cast<uint16_t*>(p.c) + (ic + r0) * p.ldc + jc + q * NR;
              if (a_in_place) {
                tile.ukernel_a_round(kb, a_rows_in_place + r0 * p.lda, p.lda, bp, c_tile, p.ldc, m_valid, n_valid);
              } else {
                tile.ukernel_round(kb, a_pack + r * MR * kd, bp, c_tile, p.ldc, m_valid, n_valid);
              }
              return;
            }
            float* c_tile = c_base + (ic + r0) * c_ld + q * NR;
            if (a_in_place) {
              tile.ukernel_a(kb, a_rows_in_place + r0 * p.lda, p.lda, bp, c_tile, c_ld, acc, m_valid, n_valid);
            } else {
              tile.ukernel(kb, a_pack + r * MR * kd, bp, c_tile, c_ld, acc, m_valid, n_valid);
            }
          };
          if (a_in_place) {
            // Row tile outside: A read in place is MR strided rows, each row tile read once, from wherever A
            // is, and kept in L1 while B's packed panels stream past from L2; C's rows are written whole, one
            // after the other. (Column panel outside read A's rows again for every panel; bf16 on one Zen 4
            // core, builds interleaved, with A in place at any N: 384x384x64 1.19x, 8192x1024x128 1.28x,
            // 1000^3 1.04x, 2048x256x2048 1.01x.) fp32 with packed A gained 1.10x on 16 products 384x384x64
            // in this order, but lost 0.97x on 64x2048x64 and moved the rest by +-2%: it keeps the order below.
            for (int64_t r = 0; r < row_tiles; ++r) {
              for (int64_t q = q_lo; q < q_hi; ++q) run_tile(r, q);
            }
          } else {
            // Packed A: B's micro-panel stays in L1 while A's packed micro-panels stream past from L2, the
            // order that reads the fewest bytes from L2 (A's tile is MR rows, B's NR columns, and MR < NR).
            for (int64_t q = q_lo; q < q_hi; ++q) {
              for (int64_t r = 0; r < row_tiles; ++r) run_tile(r, q);
            }
          }
        }
        if (prepacked == nullptr) barrier.wait();  // nobody may repack B while another thread still reads it
      }

      if (f16 && m_hi > m_lo && q_hi > q_lo) {
        const int64_t col0 = q_lo * NR, cols = std::min(nb, q_hi * NR) - col0;
        store_of(ks, p.out_dtype)(c32 + m_lo * c32_ld + col0, c32_ld, m_hi - m_lo, cols,
                                  static_cast<uint16_t*>(p.c) + m_lo * p.ldc + jc + col0, p.ldc);
      }
    }
  };
  ThreadPool::instance().run(threads, body);
}

}  // namespace

void gemm(const KernelSet& ks, const GemmProblem& p, const Blocking& blk, int threads) {
  if (threads > 1 && static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k) * 2.0 <
                         static_cast<double>(blk.parallel_flops)) {
    threads = 1;
  }
  if (p.accumulation == Accumulation::f16) {
    if (p.trans_a) throw std::invalid_argument("fp16 accumulation takes A as is, not transposed");
    // Validated by the caller: fp16 inputs, B not prepacked. Throws if this kernel set has no such kernels.
    blocked(F16AccTile{f16acc_kernels(ks)}, ks, p, blk, threads);
    return;
  }
  if (p.in_dtype == Dtype::bf16) {
    // Validated by the caller: A as is, fp32 accumulation. Every shape takes the blocked loops (the
    // small-shape paths read fp32 or fp16); B may be packed ahead (pack_b_all). Where this core's fp32 FMAs
    // outrun its bf16 dot products, bf16 is widened as it is packed and runs the fp32 register tile.
    const Blocking run = problem_blocking(ks, p, blk);
    if (bf16_on_fp32(ks, p)) {
      blocked(F32Tile{tile_kernels(ks, p.n)}, ks, p, run, threads);
    } else {
      blocked(Bf16Tile{bf16_kernels(ks, run)}, ks, p, run, threads);
    }
    return;
  }
  if (small_gemm(ks, p, blk, threads)) return;
  if (prefer_narrow(ks, p.n)) {
    gemm(*ks.narrow, p, blk, threads);
    return;
  }
  blocked(F32Tile{ks}, ks, p, blk, threads);
}

Blocking problem_blocking(const KernelSet& ks, const GemmProblem& p, const Blocking& blk) {
  if (bf16_on_fp32(ks, p)) {
    // the fp32 tile's K block: the model's, which resolve_blocking doubled for the pairs (their kernels' own
    // block is kept); then taken as given, so that a caller passing this on keeps it
    Blocking f = blk;
    if (f.kc_from_model && bf16_kernels(ks).kc == 0) f.kc = std::max<int64_t>(1, f.kc / 2);
    f.kc_from_model = false;
    return f;
  }
  return bf16_pairs(ks, p) ? bf16_k_blocks(bf16_kernels(ks, blk), p, blk) : blk;
}

bool gemm_packs_b(const KernelSet& ks, const GemmProblem& p) {
  return p.in_dtype == Dtype::bf16 || !small_never_packs_b(ks, p);
}

int64_t packed_b_bytes(const KernelSet& ks, const GemmProblem& p, const Blocking& blk) {
  const Blocking run = problem_blocking(ks, p, blk);
  if (bf16_pairs(ks, p)) return packed_b_elems(Bf16Tile{bf16_kernels(ks, run)}, p, run) * 2;
  return packed_b_elems(F32Tile{tile_kernels(ks, p.n)}, p, run) * 4;
}

void pack_b_all(const KernelSet& ks, const GemmProblem& p, const Blocking& blk, void* dst, int threads) {
  const Blocking run = problem_blocking(ks, p, blk);
  if (bf16_pairs(ks, p)) {
    pack_b_whole(Bf16Tile{bf16_kernels(ks, run)}, p, run, static_cast<uint16_t*>(dst), threads);
  } else {
    pack_b_whole(F32Tile{tile_kernels(ks, p.n)}, p, run, static_cast<float*>(dst), threads);
  }
}

std::string gemm_path(const KernelSet& ks, const GemmProblem& p, const Blocking& blk) {
  if (p.accumulation == Accumulation::f16) return "blocked, fp16 accumulation";
  const Blocking run = problem_blocking(ks, p, blk);
  if (bf16_pairs(ks, p)) {
    const Bf16Tile tile{bf16_kernels(ks, run)};
    const bool in_place = tile.a_in_place(p, run);
    const std::string a = std::string(in_place ? ", A read in place" : "") +
                          (tile.rounds_in_kernel(p, std::min(run.kc, p.k), in_place) ? ", C rounded in the kernel" : "");
    return p.b_packed != nullptr ? "blocked, bf16 pairs" + a + ", B packed once" : "blocked, bf16 pairs" + a;
  }
  const bool widened = p.in_dtype == Dtype::bf16;  // (the small-shape paths read fp32 or fp16)
  if (const char* small = widened ? nullptr : small_path(ks, p, blk)) return small;
  const KernelSet& tk = tile_kernels(ks, p.n);
  return std::string("blocked") + (widened ? ", bf16 widened onto the fp32 tile" : "") +
         (f32_a_in_place(tk, p, run) ? ", A read in place" : "") + (p.b_packed != nullptr ? ", B packed once" : "") +
         (&tk != &ks ? " (narrow tile)" : "");
}

int64_t gemm_workspace_bytes(const KernelSet& ks, const GemmProblem& p, const Blocking& blk, int threads) {
  using checked::add;
  using checked::mul;
  // An upper bound over every path (thin, narrow, blocked, fp16 accumulation), tiles clamped to the problem
  // as the drivers clamp them: packed B panel, per-thread A blocks, the fp32 accumulator of fp16 output,
  // and the small-shape paths' scratch (small.cpp).
  // (bf16: the bf16 kernels' register tile too, up to 64 x 16 and 16 x 64 in the AMX tile space)
  const Bf16Kernels* bk = p.in_dtype == Dtype::bf16 ? &bf16_kernels(ks, blk) : nullptr;
  const int64_t MR = std::max({ks.mr, ks.narrow != nullptr ? ks.narrow->mr : 0, bk != nullptr ? bk->mr : 0}) + 16;
  const int64_t NR = std::max({ks.nr, ks.narrow != nullptr ? ks.narrow->nr : 0, bk != nullptr ? bk->nr : 0}) + 64;
  // (+1: bf16 panels pad an odd K block to a pair.)
  const int64_t mc = std::min(blk.mc, p.m), nc = std::min(blk.nc, p.n), kc = std::min(blk.kc, p.k) + 1;
  const int64_t b_panel = mul(kc, add(nc, NR, "tile_n"), "packed B panel");
  const int64_t a_blocks = mul(add(mul(add(mc, MR, "tile_m"), kc, "packed A block"), 1024, "packed A block"),
                               threads, "packed A blocks");
  const int64_t c32 = p.out_dtype != Dtype::f32 ? mul(p.m, add(nc, 16, "tile_n"), "fp32 accumulator") : 0;
  const int64_t small = small_workspace_floats(ks, p, blk, threads);
  const int64_t floats = add(add(add(b_panel, a_blocks, "gemm workspace"), c32, "gemm workspace"), small, "gemm workspace");
  return mul(floats, int64_t(sizeof(float)), "gemm workspace");
}

}  // namespace opbench

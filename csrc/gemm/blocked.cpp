// The BLIS five-loop GEMM over a kernel set: jc (nc) -> pc (kc, pack B) -> ic (mc, pack A) -> jr (NR) ->
// ir (MR) -> micro-kernel. Threads split the rows and the NR-panels of each B panel between them.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "opbench/aligned.hpp"
#include "opbench/limits.hpp"
#include "opbench/fp16.hpp"
#include "opbench/gemm.hpp"
#include "opbench/thread_pool.hpp"
#include "opbench/isa.hpp"

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

// Split `threads` into a grid tm x tn over (MR-row panels of M) x (NR-column panels of one B panel) that
// minimises the padded micro-tiles of the busiest thread; ties prefer more row groups. Splitting columns
// repeats A packing, but each thread then reads only the B micro-panels it packed itself (in its own L2);
// charging the repeated packing (tried: a cost of NR columns per row) made 256^3 to 512^3 on 2 Zen 5 cores
// 10-25% slower, because row splits read half of B from the other core.
void choose_grid(int threads, int64_t row_panels, int64_t col_panels, int& tm, int& tn) {
  int64_t best = -1;
  tm = 1;
  tn = 1;
  for (int t_m = threads; t_m >= 1; --t_m) {
    if (threads % t_m != 0) continue;
    const int t_n = threads / t_m;
    const int64_t work = ceil_div(row_panels, t_m) * ceil_div(col_panels, t_n);
    if (best < 0 || work < best) {
      best = work;
      tm = t_m;
      tn = t_n;
    }
  }
}

// Half-open range [lo, hi) of `parts` near-equal shares of `total` items for share `idx`.
void share(int64_t total, int parts, int idx, int64_t& lo, int64_t& hi) {
  const int64_t base = total / parts, extra = total % parts;
  lo = idx * base + std::min<int64_t>(idx, extra);
  hi = lo + base + (idx < extra ? 1 : 0);
}

}  // namespace

Blocking resolve_blocking(const KernelSet& ks, Blocking requested) {
  const Blocking model = analytical_blocking(cpu_info(), ks.mr, ks.nr, sizeof(float), ks.b_panel_home);
  if (requested.mc <= 0) requested.mc = model.mc;
  if (requested.nc <= 0) requested.nc = model.nc;
  if (requested.kc <= 0) requested.kc = model.kc;
  return requested;
}

namespace {

constexpr int64_t kThinMaxN = 4;  // ThinF32's limit (kernel_set.hpp)

// N <= 4: dot products over unpacked rows of A (kernel_set.hpp, ThinF32). B^T is gathered into fp32 once;
// threads take contiguous shares of the rows, in multiples of 16.
void gemm_thin(const KernelSet& ks, const GemmProblem& p, int threads) {
  Workspace& ws = thread_workspace();
  const bool f16_in = p.in_dtype == Dtype::f16, f16_out = p.out_dtype == Dtype::f16;
  float* bt = static_cast<float*>(ws.b_panel.reserve(p.n * p.k * sizeof(float)));
  for (int64_t j = 0; j < p.n; ++j) {
    for (int64_t q = 0; q < p.k; ++q) {
      const int64_t at = p.trans_b ? j * p.ldb + q : q * p.ldb + j;
      bt[j * p.k + q] = f16_in ? half_to_float(static_cast<const uint16_t*>(p.b)[at]) : static_cast<const float*>(p.b)[at];
    }
  }
  float* c32 = f16_out ? static_cast<float*>(ws.c_f32.reserve(p.m * p.n * sizeof(float))) : static_cast<float*>(p.c);
  const int64_t ldc32 = f16_out ? p.n : p.ldc;
  const int64_t elem = f16_in ? 2 : 4;
  const int64_t chunks = ceil_div(p.m, 16);
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, chunks)));
  ThreadPool::instance().run(threads, [&](int tid) {
    int64_t lo, hi;
    share(chunks, threads, tid, lo, hi);
    lo *= 16;
    hi = std::min(p.m, hi * 16);
    if (hi <= lo) return;
    ks.gemm.thin(hi - lo, static_cast<int>(p.n), p.k, static_cast<const char*>(p.a) + lo * p.lda * elem, f16_in, p.lda,
            bt, c32 + lo * ldc32, ldc32, p.accumulate);
    if (f16_out) {
      ks.gemm.store_f16(c32 + lo * ldc32, ldc32, hi - lo, p.n, static_cast<uint16_t*>(p.c) + lo * p.ldc, p.ldc);
    }
  });
}

// M = 1 (a GEMV: one row of A against all of B): B is streamed once from memory, never packed, and the
// row of C, a column block of at most kRowBlock floats per thread, stays in L1 while every row of B adds
// into it. Threads split the columns in blocks of 16, and a problem under kRowParallelFloats of B runs on
// one thread (waking a second costs more than its share). B^T (trans_b) is the N = 1 case transposed:
// C^T = B^T a^T, dot products over B^T's rows on the thin path.
constexpr int64_t kRowBlock = 2048;
constexpr int64_t kRowGroup = 8;
constexpr int64_t kRowParallelFloats = 1 << 16;

void gemm_row(const KernelSet& ks, const GemmProblem& p, int threads) {
  const bool f16_in = p.in_dtype == Dtype::f16, f16_out = p.out_dtype == Dtype::f16;
  const int64_t chunks = ceil_div(p.n, 16);
  if (p.n * p.k < kRowParallelFloats) threads = 1;
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, chunks)));
  ThreadPool::instance().run(threads, [&](int tid) {
    static thread_local AlignedBuffer acc_buffer, wide_buffer;
    int64_t lo, hi;
    share(chunks, threads, tid, lo, hi);
    lo *= 16;
    hi = std::min(p.n, hi * 16);
    for (int64_t j0 = lo; j0 < hi; j0 += kRowBlock) {
      const int64_t nb = std::min(kRowBlock, hi - j0);
      float* acc = static_cast<float*>(acc_buffer.reserve(static_cast<size_t>(kRowBlock) * sizeof(float)));
      float* wide = f16_in ? static_cast<float*>(wide_buffer.reserve(
                                 static_cast<size_t>(kRowGroup * kRowBlock) * sizeof(float)))
                           : nullptr;
      if (p.accumulate) {
        std::memcpy(acc, static_cast<const float*>(p.c) + j0, static_cast<size_t>(nb) * sizeof(float));
      } else {
        std::fill(acc, acc + nb, 0.0f);
      }
      // Rows of B in groups of kRowGroup: the accumulator is read and written once per group, not per row.
      for (int64_t q0 = 0; q0 < p.k; q0 += kRowGroup) {
        const int64_t g = std::min(kRowGroup, p.k - q0);
        float a[kRowGroup] = {};
        const float* rows[kRowGroup];
        for (int64_t r = 0; r < kRowGroup; ++r) {
          const int64_t q = q0 + std::min(r, g - 1);  // rows past a short group are not read
          const int64_t at = q * (p.trans_a ? p.lda : 1);
          if (r < g) {
            a[r] = f16_in ? half_to_float(static_cast<const uint16_t*>(p.a)[at]) : static_cast<const float*>(p.a)[at];
          }
          if (f16_in) {
            if (r < g) ks.gemm.widen_f16(static_cast<const uint16_t*>(p.b) + q * p.ldb + j0, wide + r * kRowBlock, nb);
            rows[r] = wide + std::min(r, g - 1) * kRowBlock;
          } else {
            rows[r] = static_cast<const float*>(p.b) + q * p.ldb + j0;
          }
        }
        ks.gemm.row_axpy(nb, static_cast<int>(g), a, rows, acc);
      }
      if (f16_out) {
        ks.gemm.store_f16(acc, nb, 1, nb, static_cast<uint16_t*>(p.c) + j0, nb);
      } else {
        std::memcpy(static_cast<float*>(p.c) + j0, acc, static_cast<size_t>(nb) * sizeof(float));
      }
    }
  });
}

// A narrower register tile of the same ISA pays off when it pads N at least a quarter less (N <= 16 on
// AVX-512: 16 instead of 32 columns, twice the useful FMAs per instruction).
bool prefer_narrow(const KernelSet& ks, int64_t n) {
  return ks.narrow != nullptr && 4 * round_up(n, ks.narrow->nr) <= 3 * round_up(n, ks.nr);
}

// Where the (jc, pc) block of B starts in a pack_b_all() buffer: blocks in loop order, each kb x
// round_up(nb, NR) floats (every block but the last of a loop is full).
int64_t packed_offset(int64_t jc, int64_t pc, int64_t nb, int64_t k, int64_t nc, int64_t nr) {
  return (jc / nc) * k * round_up(nc, nr) + pc * round_up(nb, nr);
}

// Where element (pc, col) of B is in p.b (elements), B given as is or as B^T.
int64_t b_offset(const GemmProblem& p, int64_t pc, int64_t col) { return p.trans_b ? col * p.ldb + pc : pc * p.ldb + col; }

// One NR-column micro-panel of B: columns [col, col + cols) and rows [pc, pc + kb).
void pack_b_panel(const KernelSet& ks, const GemmProblem& p, int64_t pc, int64_t kb, int64_t col, int64_t cols,
                  float* dst) {
  const int64_t offset = b_offset(p, pc, col);
  if (p.in_dtype == Dtype::f16) {
    const auto* src = static_cast<const uint16_t*>(p.b) + offset;
    (p.trans_b ? ks.gemm.pack_bt_f16 : ks.gemm.pack_b_f16)(src, p.ldb, kb, cols, dst);
  } else {
    const auto* src = static_cast<const float*>(p.b) + offset;
    (p.trans_b ? ks.gemm.pack_bt_f32 : ks.gemm.pack_b_f32)(src, p.ldb, kb, cols, dst);
  }
}

}  // namespace

const KernelSet& tile_kernels(const KernelSet& ks, int64_t n) { return prefer_narrow(ks, n) ? *ks.narrow : ks; }

// The thin path reads rows of A in place, so A^T always takes the blocked path.
// One row of A (M = 1) streams B without packing it (gemm_row, or the thin path over B^T's rows).
bool row_path(const GemmProblem& p) { return p.m == 1 && !(p.trans_a && p.trans_b); }

bool gemm_packs_b(const KernelSet& ks, const GemmProblem& p) {
  return !(p.n <= kThinMaxN && ks.gemm.thin != nullptr && !p.trans_a) && !row_path(p);
}

int64_t packed_b_floats(const KernelSet& ks, const GemmProblem& p, const Blocking& blk) {
  const KernelSet& tk = tile_kernels(ks, p.n);
  const int64_t nc = std::min(blk.nc, p.n);
  return p.k * (p.n / nc * round_up(nc, tk.nr) + (p.n % nc ? round_up(p.n % nc, tk.nr) : 0));
}

void pack_b_all(const KernelSet& ks, const GemmProblem& p, const Blocking& blk, float* dst, int threads) {
  const KernelSet& tk = tile_kernels(ks, p.n);
  const int64_t NR = tk.nr, nc = std::min(blk.nc, p.n), kc = std::min(blk.kc, p.k);
  const int64_t panels = ceil_div(p.n, NR) * ceil_div(p.k, kc);  // (an upper bound with ragged nc blocks)
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, panels)));
  ThreadPool::instance().run(threads, [&](int tid) {
    int64_t item = 0;  // micro-panels dealt round-robin
    for (int64_t jc = 0; jc < p.n; jc += nc) {
      const int64_t nb = std::min(nc, p.n - jc);
      for (int64_t pc = 0; pc < p.k; pc += kc) {
        const int64_t kb = std::min(kc, p.k - pc);
        float* block = dst + packed_offset(jc, pc, nb, p.k, nc, NR);
        for (int64_t q = 0; q * NR < nb; ++q, ++item) {
          if (item % threads != tid) continue;
          pack_b_panel(tk, p, pc, kb, jc + q * NR, std::min(NR, nb - q * NR), block + q * kb * NR);
        }
      }
    }
  });
}

namespace {

// A register tile's kernels as the blocked loops see them: packed panels of Elem, a micro-kernel that adds
// into fp32 C, and where B was packed ahead of time (if it was).
struct F32Tile {
  using Elem = float;
  const KernelSet& ks;
  int64_t mr() const { return ks.mr; }
  int64_t nr() const { return ks.nr; }
  void pack_a(const GemmProblem& p, int64_t row, int64_t pc, int64_t mb, int64_t kb, float* dst) const {
    const int64_t at = p.trans_a ? pc * p.lda + row : row * p.lda + pc;
    if (p.in_dtype == Dtype::f16) {
      const auto* src = static_cast<const uint16_t*>(p.a) + at;
      (p.trans_a ? ks.gemm.pack_at_f16 : ks.gemm.pack_a_f16)(src, p.lda, mb, kb, dst);
    } else {
      const auto* src = static_cast<const float*>(p.a) + at;
      (p.trans_a ? ks.gemm.pack_at_f32 : ks.gemm.pack_a_f32)(src, p.lda, mb, kb, dst);
    }
  }
  void pack_b(const GemmProblem& p, int64_t pc, int64_t kb, int64_t col, int64_t cols, float* dst) const {
    pack_b_panel(ks, p, pc, kb, col, cols, dst);
  }
  void ukernel(int64_t kb, const float* a, const float* b, float* c, int64_t ldc, bool acc, int m, int n) const {
    ks.gemm.ukernel(kb, a, b, c, ldc, acc, m, n);
  }
  const float* prepacked(const GemmProblem& p) const { return p.b_packed; }
};

// fp16 panels for the fp16-accumulating micro-kernel (inputs are fp16; nothing is packed ahead of time).
struct F16AccTile {
  using Elem = uint16_t;
  const F16AccKernels& k;
  int64_t mr() const { return k.mr; }
  int64_t nr() const { return k.nr; }
  void pack_a(const GemmProblem& p, int64_t row, int64_t pc, int64_t mb, int64_t kb, uint16_t* dst) const {
    k.pack_a(static_cast<const uint16_t*>(p.a) + row * p.lda + pc, p.lda, mb, kb, dst);
  }
  void pack_b(const GemmProblem& p, int64_t pc, int64_t kb, int64_t col, int64_t cols, uint16_t* dst) const {
    (p.trans_b ? k.pack_bt : k.pack_b)(static_cast<const uint16_t*>(p.b) + b_offset(p, pc, col), p.ldb, kb, cols, dst);
  }
  void ukernel(int64_t kb, const uint16_t* a, const uint16_t* b, float* c, int64_t ldc, bool acc, int m, int n) const {
    k.ukernel(kb, a, b, c, ldc, acc, m, n);
  }
  const uint16_t* prepacked(const GemmProblem&) const { return nullptr; }
};

// The blocked loops over one register tile (see the file comment). `ks` rounds fp16 output.
template <class Tile>
void blocked(const Tile& tile, const KernelSet& ks, const GemmProblem& p, const Blocking& blk, int threads) {
  using Elem = typename Tile::Elem;
  const int64_t MR = tile.mr(), NR = tile.nr();
  const int64_t mc = std::min(blk.mc, p.m);
  const int64_t nc = std::min(blk.nc, p.n);
  const int64_t kc = std::min(blk.kc, p.k);
  const bool f16 = p.out_dtype == Dtype::f16;  // output goes through an fp32 workspace

  const int64_t row_panels = ceil_div(p.m, MR);
  const int64_t col_panels = ceil_div(nc, NR);
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, row_panels * col_panels)));
  int tm = 1, tn = 1;
  choose_grid(threads, row_panels, col_panels, tm, tn);

  Workspace& ws = thread_workspace();
  const int64_t b_elems = kc * round_up(nc, NR);
  // Rows per thread are MR-aligned shares of M, processed mc rows (rounded up to MR) at a time.
  const int64_t a_rows = std::min(round_up(mc, MR), ceil_div(row_panels, tm) * MR);
  const int64_t a_stride = round_up(a_rows * kc, 1024);  // 4 KiB apart: no false sharing between threads
  const Elem* prepacked = tile.prepacked(p);
  Elem* b_panel = prepacked != nullptr ? nullptr : static_cast<Elem*>(ws.b_panel.reserve(b_elems * sizeof(Elem)));
  Elem* a_blocks = static_cast<Elem*>(ws.a_blocks.reserve(a_stride * threads * sizeof(Elem)));
  const int64_t c32_ld = round_up(nc, 16);
  float* c32 = f16 ? static_cast<float*>(ws.c_f32.reserve(p.m * c32_ld * sizeof(float))) : nullptr;

  SpinBarrier barrier(threads);
  auto body = [&](int tid) {
    const int ti = tid / tn, tj = tid % tn;
    int64_t rp_lo, rp_hi;
    share(row_panels, tm, ti, rp_lo, rp_hi);
    const int64_t m_lo = rp_lo * MR, m_hi = std::min(p.m, rp_hi * MR);
    Elem* a_pack = a_blocks + a_stride * tid;

    for (int64_t jc = 0; jc < p.n; jc += nc) {
      const int64_t nb = std::min(nc, p.n - jc);
      const int64_t panels = ceil_div(nb, NR);
      int64_t q_lo, q_hi;
      share(panels, tn, tj, q_lo, q_hi);
      float* c_base = f16 ? c32 : static_cast<float*>(p.c) + jc;
      const int64_t c_ld = f16 ? c32_ld : p.ldc;

      for (int64_t pc = 0; pc < p.k; pc += kc) {
        const int64_t kb = std::min(kc, p.k - pc);
        const Elem* b_block = prepacked != nullptr ? prepacked + packed_offset(jc, pc, nb, p.k, nc, NR) : b_panel;
        if (prepacked == nullptr) {
          // All threads pack this B panel together, one NR-column micro-panel at a time.
          int64_t pk_lo, pk_hi;
          share(panels, threads, tid, pk_lo, pk_hi);
          for (int64_t q = pk_lo; q < pk_hi; ++q) {
            tile.pack_b(p, pc, kb, jc + q * NR, std::min(NR, nb - q * NR), b_panel + q * kb * NR);
          }
          barrier.wait();
        }

        for (int64_t ic = m_lo; ic < m_hi; ic += mc) {
          const int64_t mb = std::min(mc, m_hi - ic);
          tile.pack_a(p, ic, pc, mb, kb, a_pack);
          for (int64_t q = q_lo; q < q_hi; ++q) {
            const int n_valid = static_cast<int>(std::min(NR, nb - q * NR));
            const Elem* bp = b_block + q * kb * NR;
            for (int64_t r = 0; r * MR < mb; ++r) {
              const int m_valid = static_cast<int>(std::min(MR, mb - r * MR));
              tile.ukernel(kb, a_pack + r * MR * kb, bp, c_base + (ic + r * MR) * c_ld + q * NR, c_ld,
                           p.accumulate || pc > 0, m_valid, n_valid);
            }
          }
        }
        if (prepacked == nullptr) barrier.wait();  // nobody may repack B while another thread still reads it
      }

      if (f16 && m_hi > m_lo && q_hi > q_lo) {
        const int64_t col0 = q_lo * NR, cols = std::min(nb, q_hi * NR) - col0;
        ks.gemm.store_f16(c32 + m_lo * c32_ld + col0, c32_ld, m_hi - m_lo, cols,
                     static_cast<uint16_t*>(p.c) + m_lo * p.ldc + jc + col0, p.ldc);
      }
    }
  };
  ThreadPool::instance().run(threads, body);
}

}  // namespace

void gemm(const KernelSet& ks, const GemmProblem& p, const Blocking& blk, int threads) {
  if (p.accumulation == Accumulation::f16) {
    if (p.trans_a) throw std::invalid_argument("fp16 accumulation takes A as is, not transposed");
    // Validated by the caller: fp16 inputs, B not prepacked. Throws if this kernel set has no such kernels.
    blocked(F16AccTile{f16acc_kernels(ks)}, ks, p, blk, threads);
    return;
  }
  if (row_path(p) && p.b_packed == nullptr) {
    if (!p.trans_b) {
      gemm_row(ks, p, threads);
      return;
    }
    GemmProblem t = p;  // C^T (n x 1) = B^T (n x k) a^T (k x 1): the thin path over B^T's rows
    t.a = p.b;
    t.lda = p.ldb;
    t.b = p.a;
    t.ldb = 1;
    t.trans_b = false;
    t.m = p.n;
    t.n = 1;
    t.ldc = 1;
    gemm_thin(ks, t, threads);
    return;
  }
  if (!gemm_packs_b(ks, p)) {
    gemm_thin(ks, p, threads);
    return;
  }
  if (prefer_narrow(ks, p.n)) {
    gemm(*ks.narrow, p, blk, threads);
    return;
  }
  blocked(F32Tile{ks}, ks, p, blk, threads);
}

int64_t gemm_workspace_bytes(const KernelSet& ks, const GemmProblem& p, const Blocking& blk, int threads) {
  using checked::add;
  using checked::mul;
  // An upper bound over every path (thin, narrow, blocked, fp16 accumulation), tiles clamped to the problem
  // as the drivers clamp them: packed B panel, per-thread A blocks, the fp32 accumulator of fp16 output,
  // and the thin path's gathered B^T.
  const int64_t MR = std::max(ks.mr, ks.narrow != nullptr ? ks.narrow->mr : 0) + 16;
  const int64_t NR = std::max(ks.nr, ks.narrow != nullptr ? ks.narrow->nr : 0) + 64;
  const int64_t mc = std::min(blk.mc, p.m), nc = std::min(blk.nc, p.n), kc = std::min(blk.kc, p.k);
  const int64_t b_panel = mul(kc, add(nc, NR, "tile_n"), "packed B panel");
  const int64_t a_blocks = mul(add(mul(add(mc, MR, "tile_m"), kc, "packed A block"), 1024, "packed A block"),
                               threads, "packed A blocks");
  const int64_t c32 = p.out_dtype == Dtype::f16 ? mul(p.m, add(nc, 16, "tile_n"), "fp32 accumulator") : 0;
  const int64_t thin = p.n <= kThinMaxN ? mul(p.n, p.k, "B^T") : 0;
  const int64_t row = p.m == 1 ? add(p.k, mul((kRowGroup + 1) * kRowBlock, threads, "row blocks"), "row path") : 0;
  const int64_t floats = add(add(add(b_panel, a_blocks, "gemm workspace"), add(c32, thin, "gemm workspace"), "gemm workspace"),
                             row, "gemm workspace");
  return mul(floats, int64_t(sizeof(float)), "gemm workspace");
}

}  // namespace opbench

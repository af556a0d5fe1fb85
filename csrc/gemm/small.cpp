// GEMMs whose operands are used too few times to pay for packing them (csrc/gemm/README.md, "Paths by
// shape"): few rows of A (gemm_rows: B streamed into L1 or L2 accumulators), at most thin::kMaxN columns of B
// (gemm_thin: A streamed in place against a B that stays in cache), and few rows of A (gemm_unpacked_b: the
// blocked loops with B read in place by the register tile's rows micro-kernel instead of packed).
#include "small.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "opbench/aligned.hpp"
#include "opbench/cpu.hpp"
#include "opbench/fp16.hpp"
#include "opbench/limits.hpp"
#include "opbench/microarch.hpp"
#include "opbench/thread_pool.hpp"
#include "split.hpp"

namespace opbench {

namespace {

// Rows [q_lo, q_hi) of B (whole groups, or up to K) into the thin layout at bp (thin::group g, width w):
// columns past N and rows past K stay zero.
template <class T>
void pack_thin_rows(const T* b, int64_t ldb, bool trans_b, int64_t n, int64_t k, int g, int w, int64_t q_lo,
                    int64_t q_hi, float* bp) {
  auto value = [](T v) {
    if constexpr (sizeof(T) == 2) {
      return half_to_float(v);
    } else {
      return v;
    }
  };
  std::fill(bp + q_lo / g * w, bp + ceil_div(q_hi, g) * w, 0.0f);
  const int64_t q_end = std::min(q_hi, k);
  if (trans_b) {  // B^T is n x k: each row of it is one column of B
    for (int64_t j = 0; j < n; ++j) {
      const T* src = b + j * ldb;
      for (int64_t q = q_lo; q < q_end; ++q) bp[q / g * w + j * g + q % g] = value(src[q]);
    }
    return;
  }
  for (int64_t q = q_lo; q < q_end; ++q) {
    const T* src = b + q * ldb;
    float* dst = bp + q / g * w + q % g;
    for (int64_t j = 0; j < n; ++j) dst[j * g] = value(src[j]);
  }
}

// Whether B's own rows already are the thin layout (fp32, not transposed, N == one group's width: 16 or 32
// columns on AVX-512), so that the thin kernel reads them in place.
bool thin_b_in_place(const KernelSet& ks, const GemmProblem& p) {
  const int np = thin::padded_n(p.n);
  return thin::group(ks.thin_lanes, np) == 1 && p.n == thin::width(ks.thin_lanes, np) &&
         p.in_dtype == Dtype::f32 && !p.trans_b;
}

// N <= thin::kMaxN, A row-major: A streamed in place (kernel_set.hpp, ThinF32). B is read in place
// (thin_b_in_place), or else packed into the thin layout by all the threads, each a share of its rows, and
// then shared. Threads take contiguous shares of the rows of A, in multiples of kThinRowStep (8, so that 16
// rows still use two threads).
constexpr int64_t kThinRowStep = 8;

void gemm_thin(const KernelSet& ks, const GemmProblem& p, int threads) {
  static thread_local AlignedBuffer bp_buffer, c_buffer;
  const bool f16_in = p.in_dtype == Dtype::f16, f16_out = p.out_dtype == Dtype::f16;
  const int np = thin::padded_n(p.n), g = thin::group(ks.thin_lanes, np), w = thin::width(ks.thin_lanes, np);
  const bool in_place = thin_b_in_place(ks, p);
  const int64_t packed = in_place ? 0 : thin::packed_floats(ks.thin_lanes, p.n, p.k);
  float* bp = in_place ? nullptr : static_cast<float*>(bp_buffer.reserve(static_cast<size_t>(packed) * sizeof(float)));
  float* c32 = f16_out ? static_cast<float*>(c_buffer.reserve(p.m * p.n * sizeof(float))) : static_cast<float*>(p.c);
  const int64_t ldc32 = f16_out ? p.n : p.ldc;
  const int64_t elem = f16_in ? 2 : 4;
  const int64_t chunks = ceil_div(p.m, kThinRowStep);
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, chunks)));
  SpinBarrier packed_b(threads);
  ThreadPool::instance().run(threads, [&](int tid) {
    int64_t lo, hi;
    split::share_steps(p.k, 16, threads, tid, lo, hi);  // 16: a whole number of groups for every g
    if (!in_place && hi > lo) {
      if (f16_in) {
        pack_thin_rows(static_cast<const uint16_t*>(p.b), p.ldb, p.trans_b, p.n, p.k, g, w, lo, hi, bp);
      } else {
        pack_thin_rows(static_cast<const float*>(p.b), p.ldb, p.trans_b, p.n, p.k, g, w, lo, hi, bp);
      }
    }
    if (!in_place) packed_b.wait();
    split::share_steps(p.m, kThinRowStep, threads, tid, lo, hi);
    if (hi <= lo) return;
    ks.gemm.thin(hi - lo, static_cast<int>(p.n), p.k, static_cast<const char*>(p.a) + lo * p.lda * elem, f16_in, p.lda,
                 in_place ? static_cast<const float*>(p.b) : bp, in_place ? p.ldb : w, c32 + lo * ldc32, ldc32,
                 p.accumulate);
    if (f16_out) {
      ks.gemm.store_f16(c32 + lo * ldc32, ldc32, hi - lo, p.n, static_cast<uint16_t*>(p.c) + lo * p.ldc, p.ldc);
    }
  });
}

// Few rows of A streaming B (M = 1, a GEMV, and 2 <= M <= stream_m; by default up to 8 rows and B past half
// of L2): B is read once, in place and row after row, never packed, and the M rows of C, a column block of
// at most kStreamFloats / M floats each per thread, stay in L1 (in L2 past 8 rows or with B past half of L3:
// stream_block) while every row of B adds into them (thin::kStreamGroup rows at a time, each vector of B
// loaded once per 8 rows of A). Threads split the columns in blocks of 16 (a GEMV: B's rows, splits_k).
// B's rows are read as long runs, one prefetch stream per row of the group; the unpacked-B loops read
// 32-column pieces of 64 rows at a time, which drew 17 GB/s of B on one Zen 5 core at 2x4096x4096, where
// the rows draw 33-37. B^T (trans_b) at M = 1 is the N = 1 case transposed: C^T = B^T a^T, dot products
// over B^T's rows on the thin path.
// B's size in bytes.
int64_t b_bytes(const GemmProblem& p) { return p.k * p.n * (p.in_dtype == Dtype::f16 ? 2 : 4); }
// Whether a B of this many bytes comes from memory on every call: past half of L3.
bool from_memory(int64_t bytes) { return bytes >= cpu_info().l3.size_bytes / 2; }

constexpr int64_t kStreamFloats = 4096;  // floats of C per thread in L1 (16 KiB) ...
constexpr int64_t kRowBlock = 2048;      // ... in rows of at most this many (a GEMV's block, as measured)
constexpr int64_t kStreamL2Floats = 65536;  // floats of C per thread in L2 (stream_block)
constexpr int64_t kRowGroup = thin::kStreamGroup;

// Past kMaxStreamRows rows the accumulators move to L2 (kStreamL2Floats, 256 KiB per thread) so that B's
// rows are still read in long runs: at 16x4096x4096 on one Zen 5 core a 16 KiB block (256 columns per row)
// ran at 96-107 GFLOPS and a 256 KiB one at 116-120. So do 2-8 rows once B outgrows half of L3, where B
// comes from memory and runs of 512-2048 floats left the prefetchers too little to follow (and a B aligned
// to a line, as torch allocates it, lost a third at 8x4096x4096 to one split across lines). In alternating
// processes, numpy B / line-aligned B, L1 -> L2 block: on one Zen 5 core 8x8192x8192 78 / 57 -> 91 / 82,
// 5x2048x2048 110 / 125 -> 140 / 150, 3x4096x4096 38 -> 41; on two 8x8192x8192 112 / 100 -> 147 / 135,
// 5x2048x2048 176 -> 220-270, 3x4096x4096 66 -> 78. With B in L3 the L1 block stays ahead (4x1024x1024
// 139-156 against 116 on one core, 216 against 190 on two). One row (a GEMV) too: its rows of C then span
// whole rows of B (up to 65536 columns), so B is read as one stream from start to end instead of runs of 8 KB
// ldb apart. B's GB/s, alternating processes, one Zen 5 core: 1x8192x8192 33.5 -> 43.4, 1x4096x4096 42 -> 47,
// 1x16384x2048 37 -> 46, 1x5000x5000 37 -> 43; two cores 48 -> 51-52, 67 -> 67-70, 52 -> 60, 56 -> 60;
// 1x1024x16384 (rows of 1024 columns either way) 38 -> 37 on one, 46 -> 47 on two.
int64_t stream_block(int64_t m, int64_t b_bytes) {
  if (m > thin::kMaxStreamRows || from_memory(b_bytes)) return std::max<int64_t>(16, kStreamL2Floats / m / 16 * 16);
  return std::max<int64_t>(16, std::min(kRowBlock, kStreamFloats / m / 16 * 16));
}

// Whether every row of an fp32 B starts on a 64-byte line.
bool b_rows_aligned(const GemmProblem& p) {
  return reinterpret_cast<std::uintptr_t>(p.b) % 64 == 0 && (p.ldb * int64_t(sizeof(float))) % 64 == 0;
}

// A thread copies a misaligned B (microarch().split_loads_costly) from this many tiles of rows
// (gemm_unpacked_b).
constexpr int64_t kCopyTiles = 4;

// Columns before B's rows reach a 64-byte boundary, when every row is misaligned alike (0 otherwise). A row
// of the rows kernel is NR floats loaded as vectors; a numpy array's data starts 16 bytes into a cache line,
// so each of those loads was split over two lines: the unpacked path takes these columns as a narrower first
// micro-panel, and the others start aligned (32x4096x4096 on one Zen 5 core: 143 -> 171 GFLOPS; 128 rows
// 202 -> 220; measured against the same B copied to an aligned address).
// Only for panels of whole lines (NR a multiple of 16 floats), so that the first panel is the narrower one.
int64_t aligning_columns(const float* b, int64_t ldb, int64_t nr) {
  constexpr int64_t kLine = 64;
  const auto address = reinterpret_cast<std::uintptr_t>(b);
  const int64_t f = sizeof(float);
  if (address % f != 0 || (ldb * f) % kLine != 0 || (nr * f) % kLine != 0) return 0;
  return static_cast<int64_t>((kLine - address % kLine) % kLine / sizeof(float));
}

// Rows [k_lo, k_hi) of B times the matching columns of the m rows of A, for columns [j_lo, j_hi) of C: into
// `out` (fp32, row i at out + i ldo, from column j_lo), or added to it when `add`.
void rows_range(const KernelSet& ks, const GemmProblem& p, int64_t k_lo, int64_t k_hi, int64_t j_lo, int64_t j_hi,
                float* out, int64_t ldo, bool add) {
  static thread_local AlignedBuffer acc_buffer;
  const bool f16_in = p.in_dtype == Dtype::f16;
  const int64_t m = p.m, block = stream_block(m, b_bytes(p));
  float* acc = static_cast<float*>(acc_buffer.reserve(static_cast<size_t>(m * block) * sizeof(float)));
  float a[thin::kMaxStreamM * kRowGroup];
  // One row of A (a GEMV) takes the columns before B's rows reach a line boundary as a block of their own, so
  // that the other blocks load B aligned: 1x4096x4096 with a numpy B on one Zen 5 core, 3-11% faster in
  // alternating processes. Not for more rows: 8x4096x4096 ran at 64 GFLOPS aligned and 114 split, and B
  // copied to an aligned address was as slow (the split loads touch the next line early, which helps the
  // prefetch of 8 rows' streams; 2 rows alike either way).
  const int64_t head = !f16_in && m == 1 ? aligning_columns(static_cast<const float*>(p.b) + j_lo, p.ldb, 16) : 0;
  for (int64_t j0 = j_lo, nb = 0; j0 < j_hi; j0 += nb) {
    nb = std::min(j0 == j_lo && head > 0 ? head : block, j_hi - j0);
    for (int64_t i = 0; i < m; ++i) {
      float* dst = out + i * ldo + (j0 - j_lo);
      if (add) {
        std::memcpy(acc + i * block, dst, static_cast<size_t>(nb) * sizeof(float));
      } else {
        std::fill(acc + i * block, acc + i * block + nb, 0.0f);
      }
    }
    for (int64_t q0 = k_lo; q0 < k_hi; q0 += kRowGroup) {
      const int64_t g = std::min(kRowGroup, k_hi - q0);
      const float* rows[kRowGroup];
      const uint16_t* rows_f16[kRowGroup];
      for (int64_t r = 0; r < kRowGroup; ++r) {
        const int64_t q = q0 + std::min(r, g - 1);  // a short group repeats its last row with weight 0
        for (int64_t i = 0; i < m; ++i) {
          const int64_t at = p.trans_a ? q * p.lda + i : i * p.lda + q;
          a[i * kRowGroup + r] =
              r >= g ? 0.0f
                     : (f16_in ? half_to_float(static_cast<const uint16_t*>(p.a)[at]) : static_cast<const float*>(p.a)[at]);
        }
        // fp16 rows are widened in registers as rows_axpy_f16 loads them: widened into an fp32 buffer first
        // and read back, 1x8192x8192 streamed B at 11-15 GB/s on one Zen 5 core.
        if (f16_in) {
          rows_f16[r] = static_cast<const uint16_t*>(p.b) + q * p.ldb + j0;
        } else {
          rows[r] = static_cast<const float*>(p.b) + q * p.ldb + j0;
        }
      }
      // kMaxStreamRows rows of A per call: the first reads this group of B's rows from memory, the others
      // from L1.
      for (int64_t i0 = 0; i0 < m; i0 += thin::kMaxStreamRows) {
        const int rows_now = static_cast<int>(std::min<int64_t>(thin::kMaxStreamRows, m - i0));
        if (f16_in) {
          ks.gemm.rows_axpy_f16(nb, rows_now, a + i0 * kRowGroup, rows_f16, acc + i0 * block, block);
        } else {
          ks.gemm.rows_axpy(nb, rows_now, a + i0 * kRowGroup, rows, acc + i0 * block, block);
        }
      }
    }
    for (int64_t i = 0; i < m; ++i) {
      std::memcpy(out + i * ldo + (j0 - j_lo), acc + i * block, static_cast<size_t>(nb) * sizeof(float));
    }
  }
}

// A GEMV (M = 1) on several threads splits B's rows (K) among them, each reading one run of whole rows, and
// sums the threads' rows of C after, where each thread gets at least kSplitKRows rows of B and K is at least
// a thread's share of the columns; it split the columns before, each thread reading its share of every row.
// Zen 3 guest, two cores, builds interleaved (benchmarks/ab_builds.py, 7 rounds), new / old time:
// 1x4096x4096 0.93, 1x8192x8192 0.92, 1x5000x5000 0.85, 1x2048x16384 0.79, 1x1000x2048 0.76, 1x1024x1024
// 0.83, 1x512x512 0.81, 1x256x4096 0.65; split where K is less than N / threads: 1x16384x2048 1.02,
// 1x4096x256 1.15, so those keep the columns split.
constexpr int64_t kSplitKRows = 64;
bool splits_k(const GemmProblem& p, int threads) {
  return p.m == 1 && threads > 1 && p.out_dtype != Dtype::f16 && p.k >= kSplitKRows * threads &&
         p.k * threads >= p.n;
}

void gemm_rows(const KernelSet& ks, const GemmProblem& p, int threads) {
  static thread_local AlignedBuffer out_buffer;
  const bool f16_out = p.out_dtype == Dtype::f16;  // then summed in fp32 first, rounded once
  float* out = f16_out ? static_cast<float*>(out_buffer.reserve(static_cast<size_t>(p.m * p.n) * sizeof(float)))
                       : static_cast<float*>(p.c);
  const int64_t ldo = f16_out ? p.n : p.ldc;  // (accumulate is fp32 output only)
  if (splits_k(p, threads)) {
    // each thread's share of B's rows into its own row of sums (the first thread's into C), then each
    // thread adds the others' rows into its share of C's columns
    static thread_local AlignedBuffer part_buffer;
    float* part = static_cast<float*>(part_buffer.reserve(static_cast<size_t>((threads - 1) * p.n) * sizeof(float)));
    SpinBarrier summed(threads);
    ThreadPool::instance().run(threads, [&](int tid) {
      int64_t lo, hi;
      split::share_steps(p.k, kRowGroup, threads, tid, lo, hi);
      if (tid == 0) {
        rows_range(ks, p, lo, hi, 0, p.n, out, ldo, p.accumulate);
      } else {
        rows_range(ks, p, lo, hi, 0, p.n, part + (tid - 1) * p.n, p.n, false);
      }
      summed.wait();
      split::share_steps(p.n, 16, threads, tid, lo, hi);
      for (int t = 1; t < threads; ++t) {
        const float* src = part + (t - 1) * p.n;
        for (int64_t j = lo; j < hi; ++j) out[j] += src[j];
      }
    });
    return;
  }
  const int64_t chunks = ceil_div(p.n, 16);
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, chunks)));
  ThreadPool::instance().run(threads, [&](int tid) {
    int64_t lo, hi;
    split::share_steps(p.n, 16, threads, tid, lo, hi);
    if (hi > lo) rows_range(ks, p, 0, p.k, lo, hi, out + lo, ldo, p.accumulate);
  });
  if (f16_out) ks.gemm.store_f16(out, ldo, p.m, p.n, static_cast<uint16_t*>(p.c), p.ldc);
}

// Few rows of A (M <= small_m): every element of B is used by only a few register tiles, so packing B
// (reading it, writing a panel, reading that again) costs more than it saves. The blocked loops run with
// B read in place by the register tile's rows micro-kernel (row p of a micro-panel at b + (pc + p) * ldb +
// col) and A packed per K block (it is small). Threads split the columns, each reading only its share of
// B, with no barrier; rows are split only when there are fewer column panels than threads. A thread's rows
// are cut into equal register tiles (16 rows: two of 8, not 14 + 2). fp16 B is widened a micro-panel at a
// time, as it is packed, and multiplied by the packed kernel; fp16 C is summed in an fp32 block and rounded
// once. In fp32 the micro-panel that would read past B's last column is packed (the rows kernel reads all NR
// floats of a row), and on Intel CPUs every panel of a misaligned B (below).
//
// B's rows are scattered (ldb apart), so the hardware prefetchers see one stream per row of the K block:
// each micro-panel's rows are prefetched kPrefetchPanels panels ahead, and when each thread has a single
// tile of rows (B used once) the K block is kStreamKc rows deep instead of the cache model's (M = 8 x 4096
// x 4096 on 2 Zen 5 cores: 103 -> 144 GFLOPS, docs/benchmarks.md).
constexpr int64_t kPrefetchPanels = 4;
constexpr int64_t kStreamKc = 64;
// Up to this many tiles of rows per thread take the cache model's few_tiles_kc (blocking.cpp).
constexpr int64_t kFewTiles = 3;
// A tile whose micro-panel rows are one cache line (AVX2's 6x16) packs B kPackGroup micro-panels at a time
// where a thread has at least kCopyTiles tiles of rows, on CPUs whose split loads cost (microarch.cpp: Zen 3-4,
// Intel), a row's kPackGroup * NR floats read as one run and the rows kPackAhead groups on prefetched. Read
// in place, a B whose rows are 4 KiB-multiples apart kept none of a panel in L1 between its row tiles (every
// row in one set), and a misaligned B packed a panel at a time fetched each row's shared line twice. A C++
// harness of this loop on one Zen 4 core (AVX2 tile, 36 rows, GFLOPS): x2048x128 (B in L3) in place 61,
// panel by panel 73 (B aligned) / 66 (16 bytes past a line), 4 panels 77 / 76; x1024x1024 66, 71 / 60, 75 /
// 71; x4096x4096 (B from memory) 62, 65 / 54, 63 / 62 with the prefetch (58 without). 8 and 16 panels ran
// 1-10% slower than 4. Not measured on Intel (its rows take a_in_place first where B's block fits).
// Builds interleaved (benchmarks/ab_builds.py), one Zen 4 core, B 16 bytes past a line, new / old time:
// 24-32 x4096x4096 0.84, 32x1024x1024 0.77, 32x2048x128 0.75, 48x2048x2048 0.88 and 64x4096x1024 0.92 (both
// blocked before: rows 16 KiB apart alias in L1), 96x1024x1024 0.95, 126x1000x2048 0.98.
constexpr int64_t kPackGroup = 4;
constexpr int64_t kPackAhead = 2;
// ... but a B on a cache line from memory (past half of L3) stays in place for up to this many rows: with B
// on a line, 24x4096x4096 ran 1.12 and 32x4096x4096 1.02 packed in groups; 32x1024x1024 0.87, 32x2048x128 0.88,
// 48x2048x2048 0.89 (blocked before) and 64x1000x1000 0.97.
constexpr int64_t kAlignedInPlaceRows = 32;
// A thread with up to kFewTiles tiles of rows reads an fp32 B from memory (past half of L3) in K blocks of
// kFewTilesStreamKc rows where its share of each of B's rows is long (microarch().few_tiles_stream_row_bytes;
// Zen 3 only, microarch.cpp [Z6]): fewer of B's rows in flight at once than the cache model's few_tiles_kc
// (168 on the AVX2 tile), each read as a longer run. 32 rows against kStreamKc's 64: 0.80-0.94 of the time
// at 8x8192x8192, 10x5000x5000, 12x8192x2048 and 16x4096x1024, 1.00-1.03 at 8-16 x 4096 x 4096.
constexpr int64_t kFewTilesStreamKc = 32;
bool few_tiles_stream_kc(const GemmProblem& p, int64_t thread_cols) {
  const int64_t from = microarch().few_tiles_stream_row_bytes;
  return from > 0 && p.in_dtype == Dtype::f32 && !p.trans_b && thread_cols * int64_t(sizeof(float)) >= from &&
         from_memory(b_bytes(p));
}

}  // namespace

int64_t b_group_rows(const KernelSet& tile) {
  return few_rows_packs_b_groups(tile.nr) ? kCopyTiles * tile.mr : 0;
}

namespace {

// Whether the few-rows path packs this fp32 B in groups of micro-panels for a thread's `rows` rows of A
// (b_group_rows, kAlignedInPlaceRows) on register tile `tile`.
bool packs_b_groups(const KernelSet& tile, const GemmProblem& p, int64_t rows) {
  const int64_t from = b_group_rows(tile);
  if (p.in_dtype != Dtype::f32 || p.trans_b || from == 0 || rows < from) return false;
  return !(b_rows_aligned(p) && from_memory(b_bytes(p)) && rows <= kAlignedInPlaceRows);
}

void gemm_unpacked_b(const KernelSet& ks_main, const GemmProblem& p, const Blocking& blk, int threads) {
  const KernelSet& ks = tile_kernels(ks_main, p.n);
  const int64_t MR = ks.mr, NR = ks.nr;
  const bool f16_in = p.in_dtype == Dtype::f16, f16_out = p.out_dtype == Dtype::f16;
  const int64_t row_panels = ceil_div(p.m, MR), col_panels = ceil_div(p.n, NR);
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, row_panels * col_panels)));
  int tm = 1, tn = threads;
  if (col_panels < threads) split::choose_grid(threads, row_panels, col_panels, p.n >= 2 * p.m, tm, tn);
  const int64_t most_rows = std::min(p.m, ceil_div(row_panels, tm) * MR);
  const int64_t most_cols = std::min(p.n, ceil_div(col_panels, tn) * NR);
  const int64_t nc = std::max(NR, std::min(round_up(blk.nc, NR), round_up(p.n, NR)));
  const bool long_runs = few_tiles_stream_kc(p, std::min(most_cols, nc));
  const int64_t model_kc = most_rows <= MR              ? kStreamKc
                           : most_rows > kFewTiles * MR ? blk.unpacked_kc
                           : long_runs                  ? kFewTilesStreamKc
                                                        : blk.few_tiles_kc;
  const int64_t kc = std::min(p.k, !blk.kc_from_model ? blk.kc : std::max<int64_t>(8, model_kc));
  const int64_t prefetch_ahead = kPrefetchPanels * NR;
  // On Intel CPUs, Zen 3 and Zen 4 ([Z2], [Z3]: 0.64-0.86 of the time at 48^3-112^3) a B whose rows do
  // not start on a cache line is packed a micro-panel at a time (as the panel past B's end is) when a thread
  // has at least kCopyTiles tiles of rows to read it: the rows kernel's unaligned loads split lines there,
  // and the aligning head panel (below) adds a narrow panel to every few. On the 2-vCPU Xeon EMR, one
  // thread, B 16 bytes past a line / on a line: 96^3 96 / 133 GFLOPS, 128^3 107 / 133, 64x256x256 125 /
  // 146, 128x1000x2048 97 / 122 (torch 150-168). On Zen 4's AVX-512 tile only while a thread's share of B
  // fits in half of L2 (split_loads_pack_max_l2, [Z7]): past it the copy lost to the rows read in place.
  // fp16 B is widened the same way, a micro-panel at a time into L1: widened a K block at a time into a
  // row-major fp32 block (K block x the thread's columns: 8 MiB at 1024 x 2048) it came from memory
  // (16-64 x 1024-4096 x 1024 ran at 0.46-0.60x torch's fp16 on one Xeon EMR core).
  const double pack_max_l2 = microarch().split_loads_pack_max_l2;
  const bool pack_panels =
      f16_in || (microarch().split_loads_costly && !b_rows_aligned(p) && most_rows >= kCopyTiles * MR &&
                 (pack_max_l2 <= 0 || static_cast<double>(p.k * most_cols) * sizeof(float) <=
                                          pack_max_l2 * static_cast<double>(cpu_info().l2.size_bytes)));
  const bool pack_groups = packs_b_groups(ks, p, most_rows);
  // Where the kernel set reads fp32 A in place (f32_a_in_place) and a thread has at least kCopyTiles tiles of
  // rows, it packs all its panels of a K block first, while they fit in half of L2, and then reads each tile
  // of A's rows in place against them (row tiles outside): no packed A, and B packed once per thread even
  // where its rows are aligned and could be read in place (microarch.cpp [E7]: 0.81-0.95 of the time).
  const bool a_in_place = !f16_in && most_rows >= kCopyTiles * MR && f32_a_in_place(ks, p, blk) &&
                          kc * round_up(most_cols, NR) * int64_t(sizeof(float)) <= cpu_info().l2.size_bytes / 2;

  ThreadPool::instance().run(threads, [&](int tid) {
    static thread_local AlignedBuffer a_buffer, c_buffer, off_buffer, edge_buffer;
    int64_t m_lo, m_hi, n_lo, n_hi;
    split::share_steps(p.m, MR, tm, tid / tn, m_lo, m_hi);
    split::share_steps(p.n, NR, tn, tid % tn, n_lo, n_hi);
    if (m_hi <= m_lo || n_hi <= n_lo) return;
    const int64_t rows = m_hi - m_lo;
    const int64_t tiles = ceil_div(rows, MR);
    const split::EvenTiles even(rows, tiles);  // tiles of rows alike in size
    auto tile_rows = [&](int64_t t, int64_t& r0, int64_t& nrows) {
      r0 = even.first_row(t);
      nrows = even.rows(t);
    };
    const size_t a_bytes = static_cast<size_t>(tiles * MR * kc) * sizeof(float);
    auto* a_pack = a_in_place ? nullptr : static_cast<float*>(a_buffer.reserve(a_bytes));
    auto* offs = static_cast<int64_t*>(off_buffer.reserve(static_cast<size_t>(kc) * sizeof(int64_t)));
    for (int64_t q = 0; q < kc; ++q) offs[q] = q * p.ldb;  // B's rows, read in place
    const int64_t edge_cols = a_in_place ? round_up(std::min(nc, n_hi - n_lo), NR) : pack_groups ? kPackGroup * NR : NR;
    float* edge = static_cast<float*>(edge_buffer.reserve(static_cast<size_t>(kc * edge_cols) * sizeof(float)));
    float* c32 = f16_out ? static_cast<float*>(c_buffer.reserve(static_cast<size_t>(rows * nc) * sizeof(float))) : nullptr;

    for (int64_t jc = n_lo; jc < n_hi; jc += nc) {
      const int64_t nb = std::min(nc, n_hi - jc);
      float* c = f16_out ? c32 : static_cast<float*>(p.c) + m_lo * p.ldc + jc;
      const int64_t ldc = f16_out ? nc : p.ldc;
      for (int64_t pc = 0; pc < p.k; pc += kc) {
        const int64_t kb = std::min(kc, p.k - pc);
        const bool acc = p.accumulate || pc > 0;
        if (a_in_place) {
          const float* b = static_cast<const float*>(p.b) + pc * p.ldb + jc;
          // Whole panels are packed by the first row tile's kernel as it reads them (ukernel_a_pack_b), a
          // narrower last one beforehand. One Emerald Rapids core, builds interleaved (9 rounds), time with /
          // without: 96^3-256^3 0.945-0.963, 128x1000x2048 0.98; two cores 128^3 0.96-0.99, 160^3 0.95.
          const int64_t whole = nb / NR * NR;
          if (whole < nb) ks.gemm.pack_b_f32(b + whole, p.ldb, kb, nb - whole, edge + whole * kb);
          for (int64_t t = 0; t < tiles; ++t) {
            int64_t r0, nrows;
            tile_rows(t, r0, nrows);
            const float* a = static_cast<const float*>(p.a) + (m_lo + r0) * p.lda + pc;
            for (int64_t j = 0; j < nb; j += NR) {
              const int m_valid = static_cast<int>(nrows), n_valid = static_cast<int>(std::min(NR, nb - j));
              if (t == 0 && j < whole) {
                ks.gemm.ukernel_a_pack_b(kb, a, p.lda, b + j, p.ldb, edge + j * kb, c + r0 * ldc + j, ldc, acc,
                                         m_valid, n_valid);
              } else {
                ks.gemm.ukernel_a(kb, a, p.lda, edge + j * kb, c + r0 * ldc + j, ldc, acc, m_valid, n_valid);
              }
            }
          }
          continue;
        }
        for (int64_t t = 0; t < tiles; ++t) {  // each tile of rows into its own MR-row micro-panel
          int64_t r0, nrows;
          tile_rows(t, r0, nrows);
          r0 += m_lo;
          const int64_t at = p.trans_a ? pc * p.lda + r0 : r0 * p.lda + pc;
          float* dst = a_pack + t * MR * kb;
          if (f16_in) {
            const auto* src = static_cast<const uint16_t*>(p.a) + at;
            (p.trans_a ? ks.gemm.pack_at_f16 : ks.gemm.pack_a_f16)(src, p.lda, nrows, kb, dst);
          } else {
            const auto* src = static_cast<const float*>(p.a) + at;
            (p.trans_a ? ks.gemm.pack_at_f32 : ks.gemm.pack_a_f32)(src, p.lda, nrows, kb, dst);
          }
        }
        // fp32 B in place (fp16 B is only read through pack_b_f16 below)
        const float* b = f16_in ? nullptr : static_cast<const float*>(p.b) + pc * p.ldb + jc;
        if (pack_groups) {
          for (int64_t j0 = 0; j0 < nb; j0 += kPackGroup * NR) {
            const int64_t width = std::min(kPackGroup * NR, nb - j0), whole = width / NR;
            const int64_t ahead = kPackAhead * kPackGroup * NR;
            if (whole > 0) {
              ks.gemm.pack_b_panels_f32(b + j0, p.ldb, kb, whole, edge, jc + j0 + ahead + width <= p.n ? ahead : 0);
            }
            if (width > whole * NR) {
              ks.gemm.pack_b_f32(b + j0 + whole * NR, p.ldb, kb, width - whole * NR, edge + whole * kb * NR);
            }
            for (int64_t l = 0; l * NR < width; ++l) {
              const int n_valid = static_cast<int>(std::min(NR, width - l * NR));
              for (int64_t t = 0; t < tiles; ++t) {
                int64_t r0, nrows;
                tile_rows(t, r0, nrows);
                ks.gemm.ukernel(kb, a_pack + t * MR * kb, edge + l * kb * NR, c + r0 * ldc + j0 + l * NR, ldc, acc,
                                static_cast<int>(nrows), n_valid);
              }
            }
          }
          continue;
        }
        const int64_t head = pack_panels ? 0 : aligning_columns(static_cast<const float*>(p.b) + jc, p.ldb, NR);
        for (int64_t j = 0, width = 0; j < nb; j += width) {
          width = std::min(j == 0 && head > 0 ? head : NR, nb - j);
          const int n_valid = static_cast<int>(width);
          // packed: fp16, misaligned rows (pack_panels), or B's last row would be read past its end
          const bool past_end = pack_panels || jc + j + NR > p.n;
          if (f16_in) {
            ks.gemm.pack_b_f16(static_cast<const uint16_t*>(p.b) + pc * p.ldb + jc + j, p.ldb, kb, n_valid, edge);
          } else if (past_end) {
            ks.gemm.pack_b_f32(b + j, p.ldb, kb, n_valid, edge);
          } else if (jc + j + prefetch_ahead < p.n) {
            for (int64_t q = 0; q < kb; ++q) {  // this panel's rows, kPrefetchPanels panels ahead
              const float* ahead = b + q * p.ldb + j + prefetch_ahead;
              for (int64_t line = 0; line < NR; line += 16) __builtin_prefetch(ahead + line, 0, 1);
            }
          }
          for (int64_t t = 0; t < tiles; ++t) {
            int64_t r0, nrows;
            tile_rows(t, r0, nrows);
            const int m_valid = static_cast<int>(nrows);
            float* c_tile = c + r0 * ldc + j;
            const float* ap = a_pack + t * MR * kb;
            if (past_end) {
              ks.gemm.ukernel(kb, ap, edge, c_tile, ldc, acc, m_valid, n_valid);
            } else {
              ks.conv.ukernel_rows(kb, ap, b + j, offs, c_tile, ldc, acc, m_valid, n_valid);
            }
          }
        }
      }
      if (f16_out) ks.gemm.store_f16(c32, nc, rows, nb, static_cast<uint16_t*>(p.c) + m_lo * p.ldc + jc, p.ldc);
    }
  });
}

// One row of A (any N): B streamed, or B^T's rows dotted with it on the thin path.
bool one_row(const GemmProblem& p) { return p.m == 1 && !(p.trans_a && p.trans_b); }

// One row of A, or 2 <= M <= stream_m rows against more columns than the thin path takes.
bool row_path(const GemmProblem& p, const Blocking& blk) {
  if (p.m == 1) return one_row(p);
  return p.m <= std::min<int64_t>(blk.stream_m, thin::kMaxStreamM) && !p.trans_b && p.n > thin::kMaxN &&
         b_bytes(p) >= blk.stream_min_b_bytes;
}

// 48 or 64 columns (thin::kMaxWideN, vectors of 16 lanes) of an fp32 B that is its own thin layout (read in
// place, thin_b_in_place) and fills at most a quarter of L2, where each pass of R = 8 or 6 rows of A reads it
// again (a larger B is the blocked path's, which blocks K). Against the blocked path (14x32 tile, A and B
// packed), in one process, builds interleaved, on one Zen 4 core: 4096x48x1024 1.46x, 33x48x200 1.54x,
// 8x64x256 1.51x, 2048x64x1024 1.30x, attention's WV products 128x64x128 1.20x (12 of them, in L2) and
// 1.09x (96), 384x64x384 1.05x; on two cores 2048x64x1024 1.74x. Where B had to be packed into the layout
// first (N = 33-63 but 48) the blocked path was faster as often as not (20x50x100 at 0.57x, 1000x40x300
// 1.18x), and fp16 A, widened here in chunks, ran 12 WV products at 0.76x.
bool wide_thin(const KernelSet& ks, const GemmProblem& p) {
  return p.n <= thin::max_n(ks.thin_lanes) && thin_b_in_place(ks, p) &&
         p.k * p.n * int64_t(sizeof(float)) <= cpu_info().l2.size_bytes / 4;
}

bool thin_path(const KernelSet& ks, const GemmProblem& p) {
  if (ks.gemm.thin == nullptr || p.trans_a) return false;
  if (p.n <= thin::kMaxN) return true;
  return wide_thin(ks, p);
}

}  // namespace

bool small_never_packs_b(const KernelSet& ks, const GemmProblem& p) { return thin_path(ks, p) || one_row(p); }

namespace {

// B read in place (M <= small_m; rows a multiple of aliased_row_bytes apart: M <= aliased_small_m,
// blocking.cpp, unless B is packed in groups, which no stride aliases).
bool unpacked_b(const KernelSet& ks, const GemmProblem& p, const Blocking& blk) {
  if (p.trans_b) return false;
  const int64_t row_bytes = p.ldb * (p.in_dtype == Dtype::f32 ? 4 : 2);
  const bool aliased = !packs_b_groups(tile_kernels(ks, p.n), p, p.m) && row_bytes % blk.aliased_row_bytes == 0 &&
                       blk.aliased_small_m >= 0;
  return p.m <= (aliased ? std::min(blk.small_m, blk.aliased_small_m) : blk.small_m);
}

}  // namespace

const char* small_path(const KernelSet& ks, const GemmProblem& p, const Blocking& blk) {
  if (p.b_packed != nullptr || p.accumulation != Accumulation::f32) return nullptr;
  if (row_path(p, blk)) {
    if (p.m > 1) return "rows (M <= stream_m: B streamed row by row)";
    return p.trans_b ? "thin (one row of A: dot products over B^T's rows)" : "row (one row of A: B streamed)";
  }
  if (thin_path(ks, p)) {
    return thin_b_in_place(ks, p) ? "thin (few columns: A streamed, B read in place)"
                                  : "thin (few columns: A streamed, B packed once)";
  }
  if (unpacked_b(ks, p, blk)) {
    static_assert(kPackGroup == 4, "the path's name counts the micro-panels");
    const bool groups = packs_b_groups(tile_kernels(ks, p.n), p, p.m);
    return groups ? "unpacked B (M <= small_m: B packed 4 micro-panels at a time)"
                  : "unpacked B (M <= small_m: B read in place)";
  }
  return nullptr;
}

bool small_gemm(const KernelSet& ks, const GemmProblem& p, const Blocking& blk, int threads) {
  if (small_path(ks, p, blk) == nullptr) return false;
  if (row_path(p, blk)) {
    if (!p.trans_b) {
      gemm_rows(ks, p, threads);
      return true;
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
  } else if (thin_path(ks, p)) {
    gemm_thin(ks, p, threads);
  } else {
    gemm_unpacked_b(ks, p, blk, threads);
  }
  return true;
}

int64_t small_workspace_floats(const KernelSet& ks, const GemmProblem& p, const Blocking& blk, int threads) {
  using checked::add;
  using checked::mul;
  const int64_t MR = std::max(ks.mr, ks.narrow != nullptr ? ks.narrow->mr : 0);
  const int64_t NR = std::max(ks.nr, ks.narrow != nullptr ? ks.narrow->nr : 0);
  const int64_t kc = std::min(blk.kc, p.k);
  const int64_t thin =
      p.n <= thin::max_n(ks.thin_lanes) ? add(thin::packed_floats(ks.thin_lanes, p.n, p.k), mul(p.m, p.n, "C"), "thin path") : 0;
  // The rows path: each thread's fp16 B rows widened (kRowGroup x its block) and its accumulators; fp16 C
  // is summed in an M x N fp32 buffer, and a GEMV split by B's rows sums threads - 1 rows of its own.
  const int64_t sums = splits_k(p, threads) ? mul(threads - 1, p.n, "GEMV sums") : mul(p.m, p.n, "C");
  const int64_t row = p.m <= thin::kMaxStreamM
                          ? add(mul(mul(kRowGroup + p.m, stream_block(p.m, b_bytes(p)), "row blocks"), threads, "row blocks"),
                                sums, "row blocks")
                          : 0;
  int64_t unpacked = 0;
  if (p.m <= blk.small_m) {
    const int64_t nc = add(std::min(blk.nc, p.n), NR, "tile_n");
    // B's panels: one (and its edge), or all of a thread's that fit in half of L2 (A read in place)
    const int64_t b_panels = std::max(mul(kc, NR + 2, "B edge"), cpu_info().l2.size_bytes / 8);
    const int64_t per_thread = add(add(mul(add(p.m, MR, "rows"), kc, "packed A"), b_panels, "scratch"),
                                   mul(p.m, nc, "fp32 C block"), "scratch");
    unpacked = mul(per_thread, threads, "unpacked-B scratch");
  }
  return add(add(thin, row, "gemm workspace"), unpacked, "gemm workspace");
}

}  // namespace opbench

// The analytical cache-blocking model (Low et al., TOMS 2016), stated as formulas over cache geometry.
#include "opbench/blocking.hpp"
#include "opbench/microarch.hpp"

#include <algorithm>

namespace opbench {

namespace {
int64_t round_down(int64_t x, int64_t multiple) { return std::max(multiple, x / multiple * multiple); }

// An L1-fed register tile (AVX2's 6x16) re-reads B's micro-panel from L1 for every row tile. Read in place,
// the panel's rows sit where B's stride puts them: rows a multiple of 2^j lines apart fall in sets / 2^j of
// L1's sets, and once its kc rows outnumber those sets' ways (one left for A and C) every row tile reads the
// panel from L2 again. B's rows a multiple of the smallest such stride apart count as aliased. Packing B
// costs one pass over the panel per K block, which a few row tiles already repay. On the Zen 4 guest
// without AVX-512 (L1d 32 KiB 8-way, kc 168), one core, unpacked / blocked time: strides of 256 B to 4 KiB
// (64^3-1024^3, 256x1024x1024) 1.09-1.39 from 64 rows, 0.96-1.04 at 24-48; other strides 0.79-0.93 at 16-128
// rows (x1000x1000), 0.98-1.14 at 192-1000 rows; docs/benchmarks.md.
constexpr int64_t kL1HomeUnpackedRows = 128;
constexpr int64_t kL1HomeAliasedRows = 32;
// Where the few-rows path packs B four micro-panels at a time instead (small.cpp's b_group_rows: split loads
// cost, a micro-panel row one line), it stays ahead of the blocked path up to 168 rows. One core of the Zen 4
// guest, interleaved in one process, GFLOPS blocked / few rows: fp32 128x1000x2048 74.8 / 79.6, 160x4096x1024
// 74.7 / 77.8, 128^3 76.6 / 77.7; fp16 (widened a panel at a time) 128x1000x2048 70.2 / 73.4, 160x4096x1024
// 73.1 / 76.3, 144x1024x1024 78.4 / 78.2; past 168 rows no longer (fp32 192x1024x1024 79.4 / 79.9,
// 256x1024x1024 80.8 / 79.2, 192^3 84.9 / 82.9).
constexpr int64_t kL1HomeGroupedRows = 168;

void l1_home_unpacked_limits(const CacheLevel& l1, int mr, int nr, int elem_bytes, Blocking& b) {
  const int64_t panel_lines = ceil_div(int64_t(nr) * elem_bytes, l1.line_bytes) * b.unpacked_kc;
  int64_t stride_lines = 1;
  while (stride_lines < l1.sets && (l1.sets / (stride_lines * 2)) * std::max(1, l1.ways - 1) >= panel_lines) {
    stride_lines *= 2;
  }
  b.aliased_row_bytes = stride_lines * 2 * l1.line_bytes;
  const bool grouped = elem_bytes == int(sizeof(float)) && few_rows_packs_b_groups(nr);
  b.unpacked_rows = std::min(b.unpacked_rows, round_down(grouped ? kL1HomeGroupedRows : kL1HomeUnpackedRows, mr));
  b.unpacked_aliased_rows = std::min(b.unpacked_rows, kL1HomeAliasedRows);
}

}  // namespace

bool few_rows_packs_b_groups(int nr) { return microarch().split_loads_costly && nr * int(sizeof(float)) == 64; }

Blocking analytical_blocking(const CpuInfo& cpu, int mr, int nr, int elem_bytes, MicroPanelHome home) {
  const CacheLevel& l1 = cpu.l1d;
  const CacheLevel& l2 = cpu.l2;
  const CacheLevel& l3 = cpu.l3;
  Blocking b;

  // L1: the B micro-panel (kc x nr) stays resident while A micro-panels (mr x kc) stream through; one way
  // is left for C. The A micro-panel gets C_Ar = floor((W1 - 1) / (1 + nr/mr)) ways:
  // kc = C_Ar * sets * line / (mr * S). The few-rows path of an L1-fed tile keeps this depth (below).
  const int64_t car = std::max<int64_t>(1, static_cast<int64_t>((l1.ways - 1) / (1.0 + double(nr) / mr)));
  const int64_t l1_kc = round_down(car * l1.sets * l1.line_bytes / (int64_t(mr) * elem_bytes), 8);
  b.few_tiles_kc = l1_kc;

  // The blocked path's K block is deeper than L1: each K block is a pass over C, which for large M x N comes
  // from memory, so the B micro-panel is kept in L2 and read from there by every row tile. A register tile fed
  // from L2 (MicroPanelHome::l2) gives it two ways, kc = 2 * sets * line / (nr * S) (4096^3 on 2 Zen 5 cores,
  // with the A block below: 0.88 -> 0.97 of TensorFlow's oneDNN, measured side by side; docs/benchmarks.md).
  // An L1-fed tile (AVX2's 6x16: 16 floats of B and 6 of A a step, which L1 had fed) gives it a sixteenth of
  // L2, kc = L2 / 16 / (nr * S): on the Zen 4 guest without AVX-512 (L2 1 MiB 8-way), one process,
  // interleaved, GFLOPS with L1's kc 168 (mc 1170) / kc 1024 (mc 108): 2048^3 83.0 / 86.3 on one core and
  // 160.8 / 171.9 on two; 1024x768x3072 81.2 / 84.2 and 158.2 / 163.1; 1024x3072x768 81.7 / 84.7 and 158.4 /
  // 167.4. One way (kc 2048, mc 48) ran 0.99-1.04 of kc 168 on two cores; mc 168-222 at kc 1024 1-3% below
  // 108 (docs/benchmarks.md, issue 41).
  const int64_t l2_way = l2.sets * l2.line_bytes;
  const int64_t panel_bytes = home == MicroPanelHome::l2 ? 2 * l2_way : l2.size_bytes / 16;
  b.kc = round_down(panel_bytes / (int64_t(nr) * elem_bytes), 8);

  // L2: the packed A block (mc x kc) stays resident; the B micro-panel streaming through takes
  // C_Br = ceil(nr * kc * S / (sets * line)) ways and one way is left for C. The C tiles (mc x nc of them per
  // sweep, far more than L2) stream through L2 beside the A block, so the A block gets half of the ways left
  // instead of all of them: mc = floor(C_Ac / 2) * sets * line / (kc * S) (84 instead of 196 at kc 1024 on
  // Zen 5: 2-4% faster at 2048^3-4096^3 and BERT shapes, 56-112 measured alike; 96 on the Zen 4 guest's AVX2
  // tile).
  // Rows of an A block of depth kc in the L2 ways left beside a B micro-panel of that depth and C's way: all
  // of them, or half.
  const auto a_block_rows = [&](int64_t kc, bool half) {
    const int64_t left = std::max<int64_t>(1, l2.ways - 1 - ceil_div(int64_t(nr) * kc * elem_bytes, l2_way));
    return round_down((half ? std::max<int64_t>(1, left / 2) : left) * l2_way / (kc * elem_bytes), mr);
  };
  b.mc = a_block_rows(b.kc, true);

  // conv2d's implicit GEMMs on an L1-fed tile read the B micro-panel from the image in place, or gathered,
  // again for every row tile: they keep L1's depth and the A block in all the L2 ways left beside that
  // panel. With the blocked path's kc 1024 and mc 96, on one Zen 4 core, the 1x1 1024 -> 256 at 14x14 read in
  // place and the strided 3x3s (28x28 256 ch, 56x56 128 ch) gathered ran 1.12-1.16x slower.
  b.implicit_kc = b.kc;
  b.implicit_mc = b.mc;
  if (home == MicroPanelHome::l1) {
    b.implicit_kc = l1_kc;
    b.implicit_mc = a_block_rows(l1_kc, false);
  }

  // The few-rows path (B read in place, small.cpp) blocks only K: its K block is the L1 model's kc, or one
  // way of L2 for an L2-fed tile (at two ways, with B's rows prefetched four panels ahead beside a whole
  // A block, 256-448 x 4096 x 4096 ran 7-16% slower on 2 Zen 5 cores), and it is taken while a thread's A
  // block at that depth fits the L2 ways left beside the B micro-panel and C's way.
  // When a thread has only a few tiles of rows (thin B reuse), the B micro-panel read in place by the first
  // tile is re-read by the others from L1 only at the L1 model's depth (216 on Zen 5; at one way of L2, 512,
  // it was 64 KB and they read it from L2): 24 and 32 x 4096 x 4096 on one Zen 5 core ran 5-7% faster,
  // 48-128 rows alike or slower (small.cpp, kFewTiles).
  b.unpacked_kc = home == MicroPanelHome::l2 ? round_down(l2_way / (int64_t(nr) * elem_bytes), 8) : l1_kc;
  b.unpacked_rows = a_block_rows(b.unpacked_kc, false);
  // A B read in place whose rows are a multiple of 4 KiB apart (N = 1024, 3072, 4096 floats) fills a few L1
  // sets: on some cores fewer rows of A read it in place (the micro-architecture table, microarch.cpp [E3]).
  const int64_t aliased = microarch_choices(cpu).aliased_rows;
  b.unpacked_aliased_rows = aliased > 0 ? std::min<int64_t>(aliased, b.unpacked_rows) : b.unpacked_rows;
  if (home == MicroPanelHome::l1) l1_home_unpacked_limits(l1, mr, nr, elem_bytes, b);

  // L3: the packed B panel (kc x nc) stays resident; the A blocks of the cores sharing this L3 take
  // C_Ac3 = ceil(cores * mc * kc * S / (sets * line)) ways, one way is left for C.
  const int64_t l3_way = l3.sets * l3.line_bytes;
  const int64_t cores = std::max(1, l3.shared_by_cpus);
  const int64_t cac3 = ceil_div(cores * b.mc * b.kc * elem_bytes, l3_way);
  const int64_t cbc = std::max<int64_t>(1, l3.ways - 1 - cac3);
  b.nc = round_down(cbc * l3_way / (b.kc * elem_bytes), nr);
  return b;
}

}  // namespace opbench

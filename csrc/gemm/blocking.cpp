// The analytical cache-blocking model (Low et al., TOMS 2016), stated as formulas over cache geometry.
#include "opbench/blocking.hpp"

#include <algorithm>

namespace opbench {

namespace {
int64_t round_down(int64_t x, int64_t multiple) { return std::max(multiple, x / multiple * multiple); }
}  // namespace

Blocking analytical_blocking(const CpuInfo& cpu, int mr, int nr, int elem_bytes, MicroPanelHome home) {
  const CacheLevel& l1 = cpu.l1d;
  const CacheLevel& l2 = cpu.l2;
  const CacheLevel& l3 = cpu.l3;
  Blocking b;

  // L1: the B micro-panel (kc x nr) stays resident while A micro-panels (mr x kc) stream through; one way
  // is left for C. The A micro-panel gets C_Ar = floor((W1 - 1) / (1 + nr/mr)) ways:
  // kc = C_Ar * sets * line / (mr * S).
  const int64_t car = std::max<int64_t>(1, static_cast<int64_t>((l1.ways - 1) / (1.0 + double(nr) / mr)));
  b.kc = round_down(car * l1.sets * l1.line_bytes / (int64_t(mr) * elem_bytes), 8);

  // Or, for a register tile fed from L2 (MicroPanelHome::l2), the B micro-panel takes one way of L2:
  // kc = sets * line / (nr * S).
  const int64_t l2_way = l2.sets * l2.line_bytes;
  if (home == MicroPanelHome::l2) b.kc = round_down(l2_way / (int64_t(nr) * elem_bytes), 8);

  // L2: the packed A block (mc x kc) stays resident; the B micro-panel streaming through takes
  // C_Br = ceil(nr * kc * S / (sets * line)) ways and one way is left for C: mc = C_Ac * sets * line / (kc * S).
  const int64_t cbr = ceil_div(int64_t(nr) * b.kc * elem_bytes, l2_way);
  const int64_t cac = std::max<int64_t>(1, l2.ways - 1 - cbr);
  b.mc = round_down(cac * l2_way / (b.kc * elem_bytes), mr);

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

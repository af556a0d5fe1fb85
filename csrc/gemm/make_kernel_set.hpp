// Builds one ISA's KernelSet from its parts: a translation unit names its register tile (MR x NR), its
// conversion policy (Cvt, see pack.hpp), the lanes of its N <= 4 path and its two micro-kernels; the
// packing and conversion entry points are instantiated here, inside that unit and with its -m flags.
#pragma once

#include "opbench/kernel_set.hpp"
#include "depthwise_row.hpp"
#include "pack.hpp"
#include "pack_pairs.hpp"
#include "thin.hpp"
#include "weight_rows.hpp"

namespace opbench {

template <int MR, int NR, class Cvt, int ThinLanes>
constexpr KernelSet make_kernel_set(const char* isa, const char* description, UkernelF32 ukernel,
                                    UkernelRowsF32 ukernel_rows, UkernelARowsF32 ukernel_a_rows,
                                    MicroPanelHome b_panel_home,
                                    const KernelSet* narrow = nullptr) {
  using P = packing::Packers<MR, NR, Cvt>;
  KernelSet ks{};
  ks.isa = isa;
  ks.description = description;
  ks.mr = MR;
  ks.nr = NR;
  ks.thin_lanes = ThinLanes;
  ks.b_panel_home = b_panel_home;
  ks.narrow = narrow;
  ks.gemm.ukernel = ukernel;
  ks.gemm.pack_a_f32 = P::a_f32;
  ks.gemm.pack_a_f16 = P::a_f16;
  ks.gemm.pack_at_f32 = P::at_f32;
  ks.gemm.pack_at_f16 = P::at_f16;
  ks.gemm.pack_b_f32 = P::b_f32;
  ks.gemm.pack_b_panels_f32 = P::b_panels_f32;
  ks.gemm.pack_b_f16 = P::b_f16;
  ks.gemm.pack_bt_f32 = P::bt_f32;
  ks.gemm.pack_bt_f16 = P::bt_f16;
  ks.gemm.store_f16 = P::c_f16;
  ks.gemm.store_bf16 = packing::store_bf16<Cvt>;
  ks.gemm.transpose_halves = packing::transpose_halves<Cvt>;
  ks.gemm.thin = thin::Thin<ThinLanes, Cvt>::f32;
  ks.gemm.rows_axpy = thin::rows_axpy<ThinLanes, Cvt, float>;
  ks.gemm.rows_axpy_f16 = thin::rows_axpy<ThinLanes, Cvt, uint16_t>;
  ks.gemm.widen_f16 = Cvt::widen_row;
  ks.gemm.widen_bf16 = packing::widen_bf16<Cvt>;
  ks.conv.ukernel_rows = ukernel_rows;
  ks.conv.ukernel_a_rows = ukernel_a_rows;
  ks.conv.pack_b_gather = P::b_gather;
  ks.conv.pack_a_gather = P::a_gather;
  ks.conv.pack_wt_f32 = P::bt_rows_f32;
  ks.conv.pack_wt_f16 = P::bt_rows_f16;
  ks.conv.store_transposed = P::store_transposed;
#if defined(__AVX2__) && !defined(__AVX512F__)
  ks.conv.stream_transposed = packing::stream_transposed<Cvt>;
#else
  ks.conv.stream_transposed = nullptr;
#endif
  ks.conv.depthwise_row = depthwise::row<Cvt>;
  ks.conv.depthwise_3x3 = depthwise::rows3x3<Cvt>;
  ks.conv.depthwise_split = depthwise::split<Cvt>;
  ks.conv.depthwise_merge = depthwise::merge<Cvt>;
  ks.conv.depthwise_dot = depthwise::dot<ThinLanes>;
  ks.conv.depthwise_plane = depthwise::kPlane;
  ks.conv.weight_rows = weights::rows<ThinLanes, NR>;
  ks.bf16 = packing::make_bf16_kernels<4, 16, Cvt>(
      isa, "portable 4x16 bf16 pairs, products summed in fp32 (no AVX512-BF16 kernel for this kernel set or CPU)");
  return ks;
}

// bf16 sources widened to fp32 panels (packing::WidensBf16) with the unit's own bf16 conversions
// (pack_pairs.hpp): the fp32 micro-kernel then runs bf16 products (gemm.hpp's bf16_on_fp32_units).
template <class Cvt>
struct CvtBf16 {
  static constexpr bool kBf16 = true;
  static float widen(uint16_t h) { return bf16_to_float(h); }
  static void widen_row(const uint16_t* src, float* dst, int64_t n) { packing::widen_bf16<Cvt>(src, dst, n); }
};

// A register tile's bf16 packers (GemmKernels::pack_*_bf16): the fp16 packers' code with CvtBf16.
template <int MR, int NR, class Cvt>
constexpr KernelSet with_bf16_widened(KernelSet ks, const char* description) {
  using P = packing::Packers<MR, NR, CvtBf16<Cvt>>;
  ks.gemm.bf16_widened = description;
  ks.gemm.pack_a_bf16 = P::a_f16;
  ks.gemm.pack_at_bf16 = P::at_f16;
  ks.gemm.pack_b_bf16 = P::b_f16;
  ks.gemm.pack_bt_bf16 = P::bt_f16;
  return ks;
}

}  // namespace opbench

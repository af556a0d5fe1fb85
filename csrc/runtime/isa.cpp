// The ISA table (opbench/isa.hpp) and run-time dispatch on it.
#include "opbench/isa.hpp"

#include <cstdlib>
#include <stdexcept>

#include "opbench/blocking.hpp"
#include "opbench/rnn_cells.hpp"
#include "opbench/peak.hpp"

namespace opbench {

#ifdef OPBENCH_HAVE_AVX512FP16
const F16AccKernels& kernels_f16acc_avx512fp16();  // ukernel_avx512fp16.cpp
const F16AccKernels* f16acc_avx512fp16() { return &kernels_f16acc_avx512fp16(); }
#else
const F16AccKernels* f16acc_avx512fp16() { return nullptr; }
#endif

#ifdef OPBENCH_HAVE_AVX512BF16
const Bf16Kernels& kernels_bf16_avx512bf16();  // ukernel_avx512bf16.cpp
const Bf16Kernels* bf16_avx512bf16() { return &kernels_bf16_avx512bf16(); }
#else
const Bf16Kernels* bf16_avx512bf16() { return nullptr; }
#endif

#ifdef OPBENCH_HAVE_AVX512FP16
constexpr double (*kFmaF16)(int64_t) = fma_chains_f16_avx512fp16;
#else
constexpr double (*kFmaF16)(int64_t) = nullptr;
#endif
#ifdef OPBENCH_HAVE_AVX512BF16
constexpr double (*kDotBf16)(int64_t) = dot_chains_bf16_avx512bf16;
#else
constexpr double (*kDotBf16)(int64_t) = nullptr;
#endif

#ifdef OPBENCH_HAVE_AMX
double dot_chains_bf16_amx(int64_t iters);  // ukernel_amx.cpp
constexpr double (*kDotAmx)(int64_t) = dot_chains_bf16_amx;
const KernelSet& amx_kernels() { return kernels_amx(); }
const Bf16Kernels* bf16_amx() { return &kernels_bf16_amx(); }
const Bf16Kernels* bf16_amx_shape(int v) { return kernels_bf16_amx_shape(v); }
#else
const Bf16Kernels* bf16_amx() { return nullptr; }
const Bf16Kernels* bf16_amx_shape(int) { return nullptr; }
constexpr double (*kDotAmx)(int64_t) = nullptr;
const KernelSet& amx_kernels() { return kernels_avx512(); }  // never asked: the row is never supported
#endif

bool avx512_kernels_run(const CpuInfo& c) { return c.avx512f && c.avx512bw && c.avx512vl && c.avx512dq && c.f16c; }

namespace {

bool always(const CpuInfo&) { return true; }
bool has_amx(const CpuInfo&) { return amx_unavailable().empty(); }
const Bf16Kernels* bf16_amx_emu() { return &kernels_bf16_amx_emu(); }
bool has_avx512fp16(const CpuInfo& c) { return c.avx512fp16; }
bool has_avx512bf16(const CpuInfo& c) { return c.avx512bf16; }
const F16AccKernels* f16acc_emulated() { return &f16acc_ref(); }
constexpr PeakLoop kNoLoop{nullptr, "", always};
// Columns two rows share: "amx" is AVX-512's kernel set, "amx-emu" the reference one.
constexpr RnnKernels kAvx512Cells{lstm_cell_avx512, gru_cell_avx512, rnn_cell_avx512};
constexpr RnnKernels kRefCells{lstm_cell_ref, gru_cell_ref, rnn_cell_ref};
constexpr PeakLoop kAvx512Fma{fma_chains_f32_avx512, "avx512 fp32 FMA (zmm), 16 chains", always};
constexpr PeakLoop kRefFma{fma_chains_f32_ref, "portable fp32 multiply+add, 32 chains", always};
constexpr PeakLoop kAvx512Fp16Fma{kFmaF16, "avx512fp16 FMA (zmm, 32 lanes), 16 chains", has_avx512fp16};

}  // namespace

const std::vector<IsaEntry>& isa_table() {
  static const std::vector<IsaEntry> table = {
      // AVX-512's kernel set with AMX-BF16 bf16 kernels (ukernel_amx.cpp).
      {"amx",
       has_amx,
       amx_kernels,
       kAvx512Cells,
       kAvx512Fma,
       {f16acc_avx512fp16, has_avx512fp16},
       {bf16_amx, has_amx},
       kAvx512Fp16Fma,
       {kDotAmx, "amx-bf16 tile dot product (tdpbf16ps, 16x16x32), 6 chains", has_amx},
       amx_unavailable,
       false,
       bf16_amx_shape},
      {"avx512",
       avx512_kernels_run,
       kernels_avx512,
       kAvx512Cells,
       kAvx512Fma,
       {f16acc_avx512fp16, has_avx512fp16},
       {bf16_avx512bf16, has_avx512bf16},
       kAvx512Fp16Fma,
       {kDotBf16, "avx512bf16 dot product (vdpbf16ps, zmm), 16 chains", has_avx512bf16}},
      {"avx2",
       [](const CpuInfo& c) { return c.avx2 && c.fma && c.f16c; },
       kernels_avx2,
       {lstm_cell_avx2, gru_cell_avx2, rnn_cell_avx2},
       {fma_chains_f32_avx2, "avx2 fp32 FMA (ymm), 12 chains", always},
       {nullptr, always},
       {nullptr, always},
       kNoLoop,
       kNoLoop},
      {"ref",
       always,
       kernels_ref,
       kRefCells,
       kRefFma,
       {f16acc_emulated, always},
       {nullptr, always},
       kNoLoop,
       kNoLoop},
      // The reference kernel set with the AMX-BF16 kernels on the exact tile emulator (ukernel_amx_emu.cpp).
      {"amx-emu",
       always,
       kernels_amx_emu,
       kRefCells,
       kRefFma,
       {f16acc_emulated, always},
       {bf16_amx_emu, always},
       kNoLoop,
       kNoLoop,
       nullptr,
       true,
       kernels_bf16_amx_emu_shape},
  };
  return table;
}

const PeakLoop* peak_loop(PeakLoop IsaEntry::*column) {
  for (const IsaEntry& e : isa_table()) {
    const PeakLoop& loop = e.*column;
    if (loop.run != nullptr && !e.emulated && e.supported(cpu_info()) && loop.runs(cpu_info())) return &loop;
  }
  return nullptr;
}

const IsaEntry& isa_entry(const std::string& isa) {
  const auto& table = isa_table();
  std::string names;
  for (size_t i = 0; i < table.size(); ++i) {
    if (isa == table[i].name) return table[i];
    names += std::string(i == 0 ? "" : (i + 1 == table.size() ? " or " : ", ")) + table[i].name;
  }
  throw std::invalid_argument("unknown isa '" + isa + "' (expected " + names + ")");
}

bool isa_supported(const std::string& isa) {
  for (const IsaEntry& e : isa_table()) {
    if (isa == e.name) return e.supported(cpu_info());
  }
  return false;
}

std::vector<std::string> supported_isas() {
  std::vector<std::string> out;
  for (const IsaEntry& e : isa_table()) {
    if (!e.emulated && e.supported(cpu_info())) out.emplace_back(e.name);
  }
  return out;
}

const KernelSet& kernels_for(const std::string& isa) {
  const IsaEntry& e = isa_entry(isa);
  if (!e.supported(cpu_info())) {
    const std::string why = e.unavailable != nullptr ? ": " + e.unavailable() : "";
    throw std::invalid_argument("isa '" + isa + "' is not supported by this CPU" + why);
  }
  return e.kernels();
}

const KernelSet& default_kernels() {
  const char* forced = std::getenv("OPBENCH_ISA");
  if (forced != nullptr && *forced != '\0') return kernels_for(forced);
  static const std::string best = supported_isas().front();  // the CPU's: found once
  return kernels_for(best);
}

const RnnKernels& rnn_kernels(const KernelSet& ks) { return isa_entry(ks.isa).rnn; }

const F16AccKernels& f16acc_kernels(const KernelSet& ks) {
  const IsaEntry& e = isa_entry(ks.isa);
  const F16AccKernels* k = e.f16acc.kernels != nullptr ? e.f16acc.kernels() : nullptr;
  if (k != nullptr && e.f16acc.runs(cpu_info())) return *k;
  std::string why = "accumulate='fp16' needs AVX512-FP16 ";
  if (e.f16acc.kernels == nullptr) {
    why += std::string("kernels, which kernel set '") + ks.isa + "' has none of";
  } else if (k == nullptr) {
    why += "kernels, which this build's compiler could not produce (-mavx512fp16)";
  } else {
    why += "instructions, which this CPU lacks";
  }
  throw std::invalid_argument(why + "; Tiles(isa='ref') (--isa ref) emulates fp16 accumulation (slowly) to study its error");
}

const Bf16Kernels& bf16_kernels(const KernelSet& ks) {
  const IsaEntry& e = isa_entry(ks.isa);
  const Bf16Kernels* fast = e.bf16.kernels != nullptr ? e.bf16.kernels() : nullptr;
  return fast != nullptr && e.bf16.runs(cpu_info()) ? *fast : ks.bf16;
}

const Bf16Kernels& bf16_kernels(const KernelSet& ks, const Blocking& blk) {
  if (blk.bf16_shape < 0) return bf16_kernels(ks);
  const IsaEntry& e = isa_entry(ks.isa);
  const Bf16Kernels* k = e.bf16_shape != nullptr && e.bf16.runs(cpu_info()) ? e.bf16_shape(blk.bf16_shape) : nullptr;
  if (k == nullptr) {
    throw std::invalid_argument(std::string("amx_rows, amx_cols and amx_ksteps choose an AMX tile layout: they need "
                                            "isa 'amx' or 'amx-emu', not '") + ks.isa + "'");
  }
  return *k;
}

std::string bf16_fast_unavailable(const KernelSet& ks) {
  const IsaEntry& e = isa_entry(ks.isa);
  if (e.bf16.kernels == nullptr) return std::string("kernel set '") + ks.isa + "' has no AVX512-BF16 kernel";
  if (e.bf16.kernels() == nullptr) return "this build's compiler could not produce AVX512-BF16 code (-mavx512bf16)";
  if (!e.bf16.runs(cpu_info())) return "this CPU lacks AVX512-BF16";
  return "";
}

}  // namespace opbench

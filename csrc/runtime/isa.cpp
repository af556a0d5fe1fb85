// The ISA table (opbench/isa.hpp) and run-time dispatch on it.
#include "opbench/isa.hpp"

#include <cstdlib>
#include <stdexcept>

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

const std::vector<IsaEntry>& isa_table() {
  static const std::vector<IsaEntry> table = {
      {"avx512",
       [](const CpuInfo& c) { return c.avx512f && c.avx512bw && c.avx512vl && c.avx512dq && c.f16c; },
       kernels_avx512, {lstm_cell_avx512, gru_cell_avx512, rnn_cell_avx512}, fma_chains_f32_avx512, "avx512 fp32 FMA (zmm), 16 chains"},
      {"avx2", [](const CpuInfo& c) { return c.avx2 && c.fma && c.f16c; }, kernels_avx2, {lstm_cell_avx2, gru_cell_avx2, rnn_cell_avx2},
       fma_chains_f32_avx2, "avx2 fp32 FMA (ymm), 12 chains"},
      {"ref", [](const CpuInfo&) { return true; }, kernels_ref, {lstm_cell_ref, gru_cell_ref, rnn_cell_ref}, fma_chains_f32_ref,
       "portable fp32 multiply+add, 32 chains"},
  };
  return table;
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
    if (e.supported(cpu_info())) out.emplace_back(e.name);
  }
  return out;
}

const KernelSet& kernels_for(const std::string& isa) {
  const IsaEntry& e = isa_entry(isa);
  if (!e.supported(cpu_info())) throw std::invalid_argument("isa '" + isa + "' is not supported by this CPU");
  return e.kernels();
}

const KernelSet& default_kernels() {
  const char* forced = std::getenv("OPBENCH_ISA");
  if (forced != nullptr && *forced != '\0') return kernels_for(forced);
  return kernels_for(supported_isas().front());
}

const RnnKernels& rnn_kernels(const KernelSet& ks) { return isa_entry(ks.isa).rnn; }

const F16AccKernels& f16acc_kernels(const KernelSet& ks) {
  const std::string isa = ks.isa;
  if (isa == "ref") return f16acc_ref();
  const F16AccKernels* fast = f16acc_avx512fp16();
  if (isa == "avx512" && fast != nullptr && cpu_info().avx512fp16) return *fast;
  std::string why = "accumulate='fp16' needs AVX512-FP16 ";
  if (isa != "avx512") {
    why += "kernels, which kernel set '" + isa + "' has none of";
  } else if (fast == nullptr) {
    why += "kernels, which this build's compiler could not produce (-mavx512fp16)";
  } else {
    why += "instructions, which this CPU lacks";
  }
  throw std::invalid_argument(why + "; Tiles(isa='ref') (--isa ref) emulates fp16 accumulation (slowly) to study its error");
}

const Bf16Kernels& bf16_kernels(const KernelSet& ks) {
  const Bf16Kernels* fast = bf16_avx512bf16();
  if (std::string(ks.isa) == "avx512" && fast != nullptr && cpu_info().avx512bf16) return *fast;
  return ks.bf16;
}

std::string bf16_fast_unavailable(const KernelSet& ks) {
  if (std::string(ks.isa) != "avx512") return std::string("kernel set '") + ks.isa + "' has no AVX512-BF16 kernel";
  if (bf16_avx512bf16() == nullptr) return "this build's compiler could not produce AVX512-BF16 code (-mavx512bf16)";
  if (!cpu_info().avx512bf16) return "this CPU lacks AVX512-BF16";
  return "";
}

}  // namespace opbench

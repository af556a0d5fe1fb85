// Kernel-set selection by ISA (run-time dispatch on cpu_info()).
#include "ukernel_table.hpp"

#include <cstdlib>
#include <stdexcept>

#include "opbench/cpu.hpp"

namespace opbench {

#ifdef OPBENCH_HAVE_AVX512FP16
const F16AccKernels& kernels_f16acc_avx512fp16();  // ukernel_avx512fp16.cpp
const F16AccKernels* f16acc_avx512fp16() { return &kernels_f16acc_avx512fp16(); }
#else
const F16AccKernels* f16acc_avx512fp16() { return nullptr; }
#endif

const KernelSet& kernels_for(const std::string& isa) {
  if (isa != "avx512" && isa != "avx2" && isa != "ref") {
    throw std::invalid_argument("unknown isa '" + isa + "' (expected avx512, avx2 or ref)");
  }
  if (!isa_supported(isa)) throw std::invalid_argument("isa '" + isa + "' is not supported by this CPU");
  if (isa == "avx512") return kernels_avx512();
  if (isa == "avx2") return kernels_avx2();
  return kernels_ref();
}

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
  throw std::invalid_argument(why + "; isa='ref' emulates fp16 accumulation (slowly) to study its error");
}

const KernelSet& default_kernels() {
  const char* forced = std::getenv("OPBENCH_ISA");
  if (forced != nullptr && *forced != '\0') return kernels_for(forced);
  return kernels_for(supported_isas().front());
}

}  // namespace opbench

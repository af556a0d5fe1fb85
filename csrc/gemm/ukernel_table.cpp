// Kernel-set selection by ISA (run-time dispatch on cpu_info()).
#include "ukernel_table.hpp"

#include <cstdlib>
#include <stdexcept>

#include "opbench/cpu.hpp"

namespace opbench {

const KernelSet& kernels_for(const std::string& isa) {
  if (isa != "avx512" && isa != "avx2" && isa != "ref") {
    throw std::invalid_argument("unknown isa '" + isa + "' (expected avx512, avx2 or ref)");
  }
  if (!isa_supported(isa)) throw std::invalid_argument("isa '" + isa + "' is not supported by this CPU");
  if (isa == "avx512") return kernels_avx512();
  if (isa == "avx2") return kernels_avx2();
  return kernels_ref();
}

const KernelSet& default_kernels() {
  const char* forced = std::getenv("OPBENCH_ISA");
  if (forced != nullptr && *forced != '\0') return kernels_for(forced);
  return kernels_for(supported_isas().front());
}

}  // namespace opbench

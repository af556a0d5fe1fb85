// The one place that binds an ISA name to its kernel set and picks the best one this CPU can run.
#pragma once

#include <string>

#include "opbench/kernel_set.hpp"

namespace opbench {

// The best kernel set this CPU supports, unless the OPBENCH_ISA environment variable names another.
const KernelSet& default_kernels();

// The kernel set for "avx512", "avx2" or "ref"; throws std::invalid_argument if the name is unknown or
// the CPU cannot run it.
const KernelSet& kernels_for(const std::string& isa);

// The fp16-accumulating kernels to use beside kernel set `ks`: AVX512-FP16 ones for "avx512" on a CPU that
// has AVX512-FP16, the emulation for "ref"; throws std::invalid_argument naming what is missing otherwise.
const F16AccKernels& f16acc_kernels(const KernelSet& ks);

}  // namespace opbench

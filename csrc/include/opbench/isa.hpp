// The one table of ISAs (after BLIS's cntx_init). Each row says what an ISA needs from the CPU and what it
// brings: the GEMM and conv kernel set (register tile, narrow tile, panel home: make_kernel_set<>), the RNN,
// GRU and LSTM cells and the fp32 FMA-throughput loop. CPU dispatch, the kernel lookup, the peak loops and kernel_info()
// all read it, so a new ISA is one row in csrc/runtime/isa.cpp (docs/architecture.md, "A new ISA").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "opbench/cpu.hpp"
#include "opbench/kernel_set.hpp"

namespace opbench {

struct IsaEntry {
  const char* name;                      // "avx512", "avx2", "ref": what OPBENCH_ISA and isa= take
  bool (*supported)(const CpuInfo& c);   // the CPU features (and OS state) the kernels need
  const KernelSet& (*kernels)();         // GEMM and conv
  RnnKernels rnn;                        // the RNN, GRU and LSTM cells
  double (*fma_f32)(int64_t iters);      // the fp32 FMA peak loop (peak.hpp)
  const char* fma_f32_name;              // what that loop is, for provenance
};

// Every ISA this build knows, best first.
const std::vector<IsaEntry>& isa_table();

// The row for `isa`; throws std::invalid_argument naming the known ones when there is none.
const IsaEntry& isa_entry(const std::string& isa);

// Whether this CPU runs the ISA, and the ISAs it runs, best first.
bool isa_supported(const std::string& isa);
std::vector<std::string> supported_isas();

// The best kernel set this CPU supports, unless the OPBENCH_ISA environment variable names another.
const KernelSet& default_kernels();

// The kernel set for a known ISA; throws std::invalid_argument if the name is unknown or the CPU cannot
// run it.
const KernelSet& kernels_for(const std::string& isa);

// The RNN kernels of the ISA of kernel set `ks`.
const RnnKernels& rnn_kernels(const KernelSet& ks);

// The fp16-accumulating kernels to use beside kernel set `ks`: AVX512-FP16 ones for "avx512" on a CPU that
// has AVX512-FP16, the emulation for "ref"; throws std::invalid_argument naming what is missing otherwise.
const F16AccKernels& f16acc_kernels(const KernelSet& ks);

// The bf16 GEMM kernels to use beside kernel set `ks`: the AVX512-BF16 ones for "avx512" on a CPU that has
// AVX512-BF16, else the kernel set's portable pairs kernel; and why the AVX512-BF16 ones are not used
// ("" when they are).
const Bf16Kernels& bf16_kernels(const KernelSet& ks);
std::string bf16_fast_unavailable(const KernelSet& ks);

}  // namespace opbench

// The one table of ISAs (after BLIS's cntx_init). Each row says what an ISA needs from the CPU and what it
// brings: the GEMM and conv kernel set (register tile, narrow tile, panel home: make_kernel_set<>), the RNN,
// GRU and LSTM cells, the fp16-accumulating and bf16 dot-product kernels beside them, and the peak loops
// (fp32 FMA, fp16 FMA, bf16 dot product). CPU dispatch, the kernel lookup, the peak loops and kernel_info()
// all read it, so a new ISA is one row in csrc/runtime/isa.cpp (docs/architecture.md, "A new ISA").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "opbench/cpu.hpp"
#include "opbench/kernel_set.hpp"

namespace opbench {

struct Blocking;  // opbench/blocking.hpp

// A throughput loop for the peak (peak.hpp): `run` runs iters iterations of independent chains on one thread
// and returns the FLOPs; nullptr where this build has none (the compiler lacked the flags). `runs`: whether
// this CPU executes it.
struct PeakLoop {
  double (*run)(int64_t iters);
  const char* name;
  bool (*runs)(const CpuInfo& c);
};

// Kernels an ISA brings beside its kernel set. `kernels` is nullptr where the ISA has none of them at all;
// it returns nullptr where this build has none (the compiler lacked the flags). `runs`: whether this CPU
// executes them.
template <class K>
struct Beside {
  const K* (*kernels)();
  bool (*runs)(const CpuInfo& c);
};

struct IsaEntry {
  const char* name;                      // "avx512", "avx2", "ref": what OPBENCH_ISA and isa= take
  bool (*supported)(const CpuInfo& c);   // the CPU features (and OS state) the kernels need
  const KernelSet& (*kernels)();         // GEMM and conv
  RnnKernels rnn;                        // the RNN, GRU and LSTM cells
  PeakLoop fma_f32;                      // the fp32 FMA peak loop
  Beside<F16AccKernels> f16acc;          // accumulate='fp16' (AVX512-FP16's, or ref's exact emulation)
  Beside<Bf16Kernels> bf16;              // dot-product bf16 kernels, preferred to the set's portable ones
  PeakLoop fma_f16;                      // the native fp16 FMA loop (the fp16 unit's peak)
  PeakLoop dot_bf16;                     // the bf16 dot-product loop (the bf16 unit's peak)
  // Why this CPU or build cannot run the row, where `supported` alone would not say (AMX); nullptr: none.
  const std::string& (*unavailable)() = nullptr;
  // An emulation (amx-emu): run only when named (OPBENCH_ISA, isa=), never among supported_isas().
  bool emulated = false;
  // The bf16 kernels of the AMX tile space's layout kAmxShapes[v] (nullptr for any v: the row has no tile
  // space), for a Blocking's bf16_shape.
  const Bf16Kernels* (*bf16_shape)(int v) = nullptr;
};

// The AMX tile space's micro-kernel layouts (csrc/gemm/amx_body.hpp, Layout): rows x cols accumulator tiles
// of 16 x 16 fp32 (one to four; B's tile reused by `rows` row tiles, A's by `cols` column tiles), with the
// operand tiles of `ksteps` K steps of 32 loaded before their products. The first is the default.
struct AmxShape {
  int rows;
  int cols;
  int ksteps;
};
constexpr AmxShape kAmxShapes[] = {{2, 2, 1}, {1, 1, 1}, {1, 2, 1}, {2, 1, 1}, {1, 3, 1}, {3, 1, 1},
                                   {1, 4, 1}, {4, 1, 1}, {1, 1, 2}, {1, 2, 2}, {2, 1, 2}};
constexpr int kAmxShapeCount = static_cast<int>(sizeof(kAmxShapes) / sizeof(kAmxShapes[0]));
// The index of that layout in kAmxShapes, or -1 (runtime/amx.cpp); the layouts listed, as "RxC" or "RxCkK".
int amx_shape_index(int rows, int cols, int ksteps);
std::string amx_shape_names();
// "AMX-BF16 32x32 (2x2 tiles of 16x16), <how>" and its variants' texts.
std::string amx_shape_description(const AmxShape& s, const char* how);

// "" when the AMX-BF16 kernels may run in this process, else why not (runtime/amx.cpp; the first call asks
// Linux for the tile state).
const std::string& amx_unavailable();
// Whether the CPU has what the AVX-512 kernel set needs (F, BW, VL, DQ and F16C): the "avx512" row's
// condition, which "amx" (AVX-512's set) needs too.
bool avx512_kernels_run(const CpuInfo& c);
// One TDPBF16PS on 16 x 16 fp32 c, 16 x 32 bf16 a and 16 pair-rows x 16 columns x 2 bf16 b (row-major), on the
// exact emulator (ukernel_amx_emu.cpp) or the CPU's tiles (ukernel_amx.cpp; only where amx_unavailable() is
// "", and built: else it throws std::invalid_argument).
void tdpbf16ps_emulated(float* c, const uint16_t* a, const uint16_t* b);
void tdpbf16ps_tiles(float* c, const uint16_t* a, const uint16_t* b);

// Every ISA this build knows, best first.
const std::vector<IsaEntry>& isa_table();

// The row for `isa`; throws std::invalid_argument naming the known ones when there is none.
const IsaEntry& isa_entry(const std::string& isa);

// Whether this CPU runs the ISA, and the ISAs it runs, best first (emulations are run only when named).
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
// AVX512-BF16, AMX-BF16 tiles for "amx" (emulated for "amx-emu"), else the kernel set's portable pairs
// kernel; and why the unit's own kernels are not used ("" when they are).
const Bf16Kernels& bf16_kernels(const KernelSet& ks);
// The same, for a blocking that may name a layout of the AMX tile space (Blocking::bf16_shape >= 0: the
// set's row must have one, else std::invalid_argument says so).
const Bf16Kernels& bf16_kernels(const KernelSet& ks, const Blocking& blk);
std::string bf16_fast_unavailable(const KernelSet& ks);

// The first row's loop (best first) of that column that this build has and this CPU runs, or nullptr: the
// fp16 and bf16 units' peaks do not depend on the kernel set asked for.
const PeakLoop* peak_loop(PeakLoop IsaEntry::*column);

}  // namespace opbench

// Whether the AMX-BF16 kernels may run in this process: the CPU's AMX-TILE and AMX-BF16 (CPUID), a build
// with the kernels, and Linux's permission for the tile data state, which a process must ask for once
// before its first tile instruction (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), Linux 5.16+;
// without it the first tile instruction faults). Asked at most once, on first use.
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "opbench/cpu.hpp"
#include "opbench/isa.hpp"

namespace opbench {

const std::string& amx_unavailable() {
  static const std::string why = []() -> std::string {
    const CpuInfo& c = cpu_info();
    if (!c.amx_bf16 || !c.amx_tile) return "this CPU lacks AMX-BF16";
    if (!avx512_kernels_run(c)) return "this CPU lacks AVX-512";
#ifndef OPBENCH_HAVE_AMX
    return "this build's compiler could not produce AMX code (-mamx-tile -mamx-bf16)";
#elif defined(__linux__) && defined(SYS_arch_prctl)
    constexpr long kArchReqXcompPerm = 0x1023;  // asm/prctl.h
    constexpr long kXfeatureXtiledata = 18;     // the tile data state component
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
      return std::string("Linux refused the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM: ") + std::strerror(errno) +
             ")";
    }
    return "";
#else
    return "AMX needs Linux's permission request (arch_prctl ARCH_REQ_XCOMP_PERM), which this OS lacks";
#endif
  }();
  return why;
}

int amx_shape_index(int rows, int cols, int ksteps) {
  for (int v = 0; v < kAmxShapeCount; ++v) {
    const AmxShape& s = kAmxShapes[v];
    if (s.rows == rows && s.cols == cols && s.ksteps == ksteps) return v;
  }
  return -1;
}

std::string amx_shape_names() {
  std::string out;
  for (int v = 0; v < kAmxShapeCount; ++v) {
    const AmxShape& s = kAmxShapes[v];
    out += (v ? ", " : "") + std::to_string(s.rows) + "x" + std::to_string(s.cols) +
           (s.ksteps > 1 ? "k" + std::to_string(s.ksteps) : "");
  }
  return out;
}

std::string amx_shape_description(const AmxShape& s, const char* how) {
  const std::string tile = std::to_string(16 * s.rows) + "x" + std::to_string(16 * s.cols);
  std::string layout = std::to_string(s.rows) + "x" + std::to_string(s.cols) + " tiles of 16x16";
  if (s.rows > 2) layout += ", B kept, A streamed";
  if (s.cols > 2) layout += ", A kept, B streamed";
  if (s.ksteps > 1) layout += ", " + std::to_string(s.ksteps) + " K steps a load";
  return "AMX-BF16 " + tile + " (" + layout + "), " + how;
}

#ifndef OPBENCH_HAVE_AMX
void tdpbf16ps_tiles(float*, const uint16_t*, const uint16_t*) {
  throw std::invalid_argument("AMX is not available: " + amx_unavailable());
}
#endif

}  // namespace opbench

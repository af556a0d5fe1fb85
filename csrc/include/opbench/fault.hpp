// Fault injection for the tuner's isolation tests: environment variables name a tiling that must crash,
// hang or give a wrong answer, so tests can prove that a real SIGSEGV, a real hang past the time limit and
// a real wrong result each end as a failed trial and never stop a study.
//
//   OPBENCH_FAULT_CRASH=MxNxK   a GEMM (or conv2d) with tile_m=M, tile_n=N, tile_k=K writes through a null pointer
//   OPBENCH_FAULT_HANG=MxNxK    ... never returns
//   OPBENCH_FAULT_WRONG=MxNxK   ... returns C (conv2d: Y) with its first element off by one
//   OPBENCH_FAULT_SLOW=MxNxK    ... sleeps 2 ms before every call (a tiling that is surely slower)
//
// Several tilings may be given, separated by commas. Only a build configured with
// -DOPBENCH_FAULT_INJECTION=ON (CI's test build) reads these variables: in a default build every function
// below is an empty inline and fault.cpp is not compiled, so no user's kernel can be made to fail by them.
#pragma once

#include <cstdint>

namespace opbench {

enum class Fault { none, crash, hang, wrong, slow };

#ifdef OPBENCH_FAULT_INJECTION
constexpr bool kFaultInjection = true;

// The fault the environment assigns to this requested tiling (values as given, before any default).
Fault injected_fault(int64_t tile_m, int64_t tile_n, int64_t tile_k);

// Performs a crash or a hang; returns for none and wrong; sleeps for slow (call it before every GEMM).
void trigger(Fault fault);

// For Fault::wrong: adds one to the first element of an output (fp32, or fp16 when f16).
void corrupt(Fault fault, void* first, bool half);  // half: a 2-byte (fp16 or bf16) output
#else
constexpr bool kFaultInjection = false;

inline Fault injected_fault(int64_t, int64_t, int64_t) { return Fault::none; }
inline void trigger(Fault) {}
inline void corrupt(Fault, void*, bool) {}
#endif

}  // namespace opbench

// The GEMM paths for operands used too few times to pay for packing (small.cpp): one row of A, at most
// thin::kMaxN (32) columns of B, and few rows of A (B read in place). The blocked driver (blocked.cpp) asks small_gemm()
// first. Generic translation units only.
#pragma once

#include <cstdint>

#include "opbench/gemm.hpp"

namespace opbench {

// The small-shape path that takes this problem (what it is, for provenance), or nullptr.
const char* small_path(const KernelSet& ks, const GemmProblem& p, const Blocking& blk);

// Runs the problem on a small-shape path and returns true, or returns false (the blocked path's turn).
bool small_gemm(const KernelSet& ks, const GemmProblem& p, const Blocking& blk, int threads);

// Whether a small-shape path takes this problem without ever packing B (one row of A; few columns).
bool small_never_packs_b(const KernelSet& ks, const GemmProblem& p);

// Whether the blocked loops read this fp32 problem's A in place (GemmKernels::ukernel_a; blocked.cpp).
bool f32_a_in_place(const KernelSet& ks, const GemmProblem& p, const Blocking& blk);

// The floats small_gemm's paths may allocate for this problem (an upper bound, overflow-checked).
int64_t small_workspace_floats(const KernelSet& ks, const GemmProblem& p, const Blocking& blk, int threads);

}  // namespace opbench

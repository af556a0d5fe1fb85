// LSTM cell kernels, one per ISA (signature: LstmCell in opbench/kernel_set.hpp); each is defined in its own
// translation unit compiled with that ISA's flags and reached only through the ISA's KernelSet.
#pragma once

#include <cstdint>

namespace opbench {

void lstm_cell_ref(int64_t rows, int64_t cols, const float* z, int64_t ldz, int64_t gate_stride, float* c,
                   int64_t ldc, float* h32, uint16_t* h16, int64_t ldh);
void lstm_cell_avx2(int64_t rows, int64_t cols, const float* z, int64_t ldz, int64_t gate_stride, float* c,
                    int64_t ldc, float* h32, uint16_t* h16, int64_t ldh);
void lstm_cell_avx512(int64_t rows, int64_t cols, const float* z, int64_t ldz, int64_t gate_stride, float* c,
                      int64_t ldc, float* h32, uint16_t* h16, int64_t ldh);

}  // namespace opbench

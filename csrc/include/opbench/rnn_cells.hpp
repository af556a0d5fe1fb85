// The recurrent cells, one set per ISA (signatures: LstmCell, GruCell, RnnCell in opbench/kernel_set.hpp),
// written once in cell_body.hpp and instantiated in cell_<isa>.cpp with that ISA's flags; reached only
// through the ISA table's RnnKernels.
#pragma once

#include <cstdint>

namespace opbench {

#define OPBENCH_DECLARE_CELLS(SUFFIX)                                                                          \
  void lstm_cell_##SUFFIX(int64_t rows, int64_t cols, float* z, int64_t ldz, int64_t gs, const float* c_prev,  \
                          float* c_next, int64_t ldc, float* h32, uint16_t* h16, int64_t ldh, float* save_tc);  \
  void gru_cell_##SUFFIX(int64_t rows, int64_t cols, float* gx, int64_t ldgx, const float* gh, int64_t ldgh,   \
                         int64_t gs, const float* b_hn, const float* h_prev, float* h_next, int64_t lds,       \
                         float* h32, uint16_t* h16, int64_t ldh, float* save_hn, int64_t ld_save);             \
  void rnn_cell_##SUFFIX(int64_t rows, int64_t cols, const float* z, int64_t ldz, bool relu, float* h32,       \
                         uint16_t* h16, int64_t ldh);

OPBENCH_DECLARE_CELLS(ref)
OPBENCH_DECLARE_CELLS(avx2)
OPBENCH_DECLARE_CELLS(avx512)

#undef OPBENCH_DECLARE_CELLS

}  // namespace opbench

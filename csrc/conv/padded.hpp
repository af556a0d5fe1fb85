// The zero-padded fp32 copy of a convolution's input that both implicit-GEMM orientations read
// (csrc/conv/conv2d.cpp: pixels as columns; conv2d_pixels.cpp: pixels as rows).
#pragma once

#include <cstdint>

#include "opbench/aligned.hpp"
#include "opbench/conv.hpp"

namespace opbench {

// N x C planes of Hp = padded_h() rows of Wp = padded_w() floats, then `slack` zeros (what a micro-panel
// may read past the last plane), written by `threads` threads into `buffer`.
float* padded_input(const KernelSet& ks, const ConvProblem& p, int64_t slack, int threads, AlignedBuffer& buffer);

// The GEMM columns per image of conv2d.cpp's orientation (pixels as columns): P rows of the padded width on
// the stride-1 path, which reads B in place, else the P * Q pixels.
int64_t pixel_columns(const ConvProblem& p);

// Offsets within a group's planes of its im2col rows: in W's order (input channel, filter row, filter column),
// or filter column major (filter column, filter row, input channel: conv2d_pixels.cpp's K).
enum class TapOrder { channel_major, filter_column_major };
void tap_offsets(const ConvProblem& p, int64_t* row_off, TapOrder order = TapOrder::channel_major);
// The same for another layout of the input: channel c's plane `plane` floats after the group's first, and
// tap (r, s) tap_off[r * S + s] floats into it (phase_tap_offsets' in the stride phases).
void tap_offsets(const ConvProblem& p, int64_t* row_off, TapOrder order, int64_t plane, const int64_t* tap_off);

}  // namespace opbench

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

// The GEMM columns per image of conv2d.cpp's orientation (pixels as columns) as the model runs it on a tile nr
// wide: P rows of the padded width where B is read in place, else the P * Q pixels.
int64_t pixel_columns(const ConvProblem& p, int64_t nr);

// A gathered B micro-panel serves the kernel's rows, up to this many of them (every row block of a unit).
constexpr double kColumnsGatherReuse = 96.0;

// What gathering B costs the columns way per FMA, as a share of it: the micro-architecture table's
// strided_gather_cost per element over the rows that reuse it.
double columns_gather_share(const ConvProblem& p);

// At stride 1 the columns read B in place over the padded width: Wp - Q columns of every output row are
// computed and dropped. Where the tiles (nr wide) that saves by gathering are a larger share of the work than
// kColumnsGatherMargin times gathering's (columns_gather_share), the model gathers instead. On the Zen 3
// guest (strided_gather_cost 4, microarch.cpp [Z4]), 3x3 padding-1 convs, builds interleaved in one
// process (benchmarks/ab_builds.py, 9 rounds), gathered / in-place time on one core and two: batch 8 14x14
// 256 ch (saves 7.1% against a share of 4.2%) 0.89 and 0.95, batch 4 0.96 and 0.98; batch 8 28x28 128 ch
// (7.5% against 4.2%) 0.96 and 0.98; but batch 4 28x28 64 ch (7.5% against 6.3%: its B panels serve only 64
// rows) 1.07 and 1.06, which the margin of 1.5 keeps in place, as it does 56x56 64 ch (3.4%); 7x7 (the
// tiles save nothing: 49 and 63 columns are both four tiles of 16) 1.04 and 1.03 before the tiles were
// counted. On Zen 4's AVX2 tile (cost 20) in place ran level or ahead (tuning/choices/conv_paths.json), and
// its share of 21% keeps it there.
constexpr double kColumnsGatherMargin = 1.5;
bool columns_gather_at_stride1(const ConvProblem& p, int64_t nr);

// Offsets within a group's planes of its im2col rows: in W's order (input channel, filter row, filter column),
// or filter column major (filter column, filter row, input channel: conv2d_pixels.cpp's K).
enum class TapOrder { channel_major, filter_column_major };
void tap_offsets(const ConvProblem& p, int64_t* row_off, TapOrder order = TapOrder::channel_major);
// The same for another layout of the input: channel c's plane `plane` floats after the group's first, and
// tap (r, s) tap_off[r * S + s] floats into it (phase_tap_offsets' in the stride phases).
void tap_offsets(const ConvProblem& p, int64_t* row_off, TapOrder order, int64_t plane, const int64_t* tap_off);

}  // namespace opbench

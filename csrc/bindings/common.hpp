// What every binding unit shares: argument checks that raise ValueError naming the argument, output
// allocation, and the prepared call (Plan) bound as _core.Plan. No math here.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif

#include "opbench/conv.hpp"
#include "opbench/fault.hpp"
#include "opbench/gemm.hpp"
#include "opbench/isa.hpp"
#include "opbench/limits.hpp"
#include "opbench/rnn.hpp"
#include "opbench/timed_loop.hpp"

namespace opbench::bind {

namespace py = pybind11;

// time_* loops: the timer asks for enough calls to fill a sample; more is a hang, not a measurement.
constexpr int64_t kMaxLoops = 10'000'000;

inline void check_loops(int64_t loops) { check_range(loops, 1, kMaxLoops, "loops"); }

inline int64_t array_bytes(const std::vector<int64_t>& shape, int64_t itemsize, const char* what) {
  int64_t n = itemsize;
  for (int64_t d : shape) n = checked::mul(n, d, what);
  return n;
}

struct Matrix {
  Dtype dtype;
  void* data;
  int64_t rows, cols, ld;  // ld in elements
  int64_t itemsize;
};

inline std::string shape_str(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

// An array's element type: float32, float16, and bf16 (ml_dtypes.bfloat16, a numpy dtype of kind 'V' named
// "bfloat16") only where allow_bf16 (the forward GEMM and recurrent layers); native byte order.
inline Dtype array_dtype(const py::array& a, const char* name, bool allow_bf16) {
  // (the dtype's name only where its kind does not decide: str(dtype) runs numpy's Python, about 2 us)
  const py::dtype dt = a.dtype();
  Dtype dtype;
  if (dt.kind() == 'f' && dt.itemsize() == 4) {
    dtype = Dtype::f32;
  } else if (dt.kind() == 'f' && dt.itemsize() == 2) {
    dtype = Dtype::f16;
  } else if (const std::string dt_name = py::str(dt).cast<std::string>();
             allow_bf16 && dt_name == "bfloat16" && dt.itemsize() == 2) {
    dtype = Dtype::bf16;
  } else {
    throw py::value_error(std::string(name) + " has unsupported dtype " + dt_name +
                          (allow_bf16 ? " (expected float32, float16 or bfloat16)" : " (expected float32 or float16)"));
  }
  if (dt.byteorder() == '>') {
    throw py::value_error(std::string(name) + " is big-endian; convert it to native byte order");
  }
  return dtype;
}

inline Matrix matrix(const py::array& a, const char* name, bool allow_bf16 = false) {
  if (a.ndim() != 2) {
    throw py::value_error(std::string(name) + " must be a 2-D array, got " + std::to_string(a.ndim()) +
                          "-D with shape " + shape_str(a));
  }
  const py::dtype dt = a.dtype();
  const Dtype dtype = array_dtype(a, name, allow_bf16);
  if (a.shape(0) < 1 || a.shape(1) < 1) {
    throw py::value_error(std::string(name) + " must have at least one row and one column, got shape " + shape_str(a));
  }
  const int64_t item = dt.itemsize();
  if (a.strides(1) != item || a.strides(0) % item != 0 || a.strides(0) < a.shape(1) * item) {
    throw py::value_error(std::string(name) + " must be row-major with contiguous rows (C-contiguous), got strides (" +
                          std::to_string(a.strides(0)) + ", " + std::to_string(a.strides(1)) + ")");
  }
  return {dtype, const_cast<void*>(a.data()), a.shape(0), a.shape(1), a.strides(0) / item, item};
}

inline bool overlaps(const Matrix& x, const Matrix& y) {
  const auto* x0 = static_cast<const char*>(x.data);
  const auto* x1 = x0 + ((x.rows - 1) * x.ld + x.cols) * x.itemsize;
  const auto* y0 = static_cast<const char*>(y.data);
  const auto* y1 = y0 + ((y.rows - 1) * y.ld + y.cols) * y.itemsize;
  return x0 < y1 && y0 < x1;
}

// A C-contiguous array of `ndim` dimensions, float32 or float16, every dimension >= 1.
struct Tensor {
  Dtype dtype;
  void* data;
  std::vector<int64_t> shape;
  int64_t itemsize;
};

inline Tensor tensor(const py::array& a, const char* name, int ndim, bool allow_bf16 = false) {
  if (a.ndim() != ndim) {
    throw py::value_error(std::string(name) + " must be a " + std::to_string(ndim) + "-D array, got " +
                          std::to_string(a.ndim()) + "-D with shape " + shape_str(a));
  }
  const py::dtype dt = a.dtype();
  const Dtype dtype = array_dtype(a, name, allow_bf16);
  std::vector<int64_t> shape(a.shape(), a.shape() + ndim);
  for (int64_t d : shape) {
    if (d < 1) throw py::value_error(std::string(name) + " has an empty dimension: shape " + shape_str(a));
  }
  if (!(a.flags() & py::array::c_style)) throw py::value_error(std::string(name) + " must be C-contiguous");
  return {dtype, const_cast<void*>(a.data()), shape, dt.itemsize()};
}

inline void expect_shape(const Tensor& t, const py::array& a, const char* name, const std::vector<int64_t>& want,
                  const std::string& why) {
  if (t.shape != want) {
    std::string w = "(";
    for (size_t i = 0; i < want.size(); ++i) w += (i ? ", " : "") + std::to_string(want[i]);
    w += want.size() == 1 ? ",)" : ")";
    throw py::value_error(std::string(name) + " has shape " + shape_str(a) + ", expected " + w + " (" + why + ")");
  }
}

inline void expect_dtype(const Tensor& t, const Tensor& ref, const char* name, const char* ref_name) {
  if (t.dtype != ref.dtype) {
    throw py::value_error(std::string(name) + " must have the dtype of " + ref_name);
  }
}

// A new C-contiguous output whose data starts on a cache line (a view into a slightly larger array): numpy
// aligns only to 16 bytes, and a register tile's stores into a C that starts 16 bytes into a line are split
// over two lines each (4096^3 on one Zen 5 core: 259 GFLOPS into numpy's C, 264 into a line-aligned one).
inline py::array new_output(const py::dtype& dt, const std::vector<int64_t>& shape) {
  constexpr int64_t kLine = 64;
  const auto item = static_cast<int64_t>(dt.itemsize());
  int64_t count = 1;
  for (const int64_t d : shape) count *= d;
  py::array flat(dt, std::vector<int64_t>{count + kLine / item});
  const auto addr = reinterpret_cast<uintptr_t>(flat.mutable_data());
  const int64_t skip = static_cast<int64_t>((kLine - addr % kLine) % kLine);
  std::vector<int64_t> strides(shape.size());
  int64_t stride = item;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return py::array(dt, shape, strides, static_cast<char*>(flat.mutable_data()) + skip, flat);
}

inline py::array output_like(const py::array& like, const std::vector<int64_t>& shape, std::optional<py::array> out,
                      const char* name, Dtype dtype) {
  if (!out) return new_output(like.dtype(), shape);
  const Tensor t = tensor(*out, name, static_cast<int>(shape.size()), dtype == Dtype::bf16);
  if (t.dtype != dtype) throw py::value_error(std::string(name) + " must have the input dtype");
  expect_shape(t, *out, name, shape, "the operator's output shape");
  if (!out->writeable()) throw py::value_error(std::string(name) + " is read-only");
  return *out;
}

inline int64_t tile_value(const std::optional<int64_t>& v, const char* name) {
  if (!v) return 0;  // 0 = derive from the cache model
  if (*v < 1) throw py::value_error(std::string(name) + " must be >= 1, got " + std::to_string(*v));
  check_range(*v, 1, kMaxTile, name);
  return *v;
}

// Unknown or unsupported ISA names throw std::invalid_argument, which pybind11 raises as ValueError.
inline const KernelSet& kernel_set(const std::string& isa) { return isa.empty() ? default_kernels() : kernels_for(isa); }

inline void check_threads(int64_t threads) {
  if (threads < 1) throw py::value_error("threads must be >= 1, got " + std::to_string(threads));
  if (threads > kMaxThreads) {
    throw py::value_error("threads must be <= " + std::to_string(kMaxThreads) + ", got " + std::to_string(threads));
  }
}

// How a kernel runs (the Python facade's opbench.tiles.Tiles, bound as _core.Tiles): the cache-blocking
// sizes (0: from the cache model), threads and the kernel set's name ("": this CPU's best or $OPBENCH_ISA).
// Built only by make_tiles, which checks every value, so the plans read it as it is.
struct Tiles {
  int64_t m = 0, n = 0, k = 0;
  int64_t threads = 1;
  std::string isa;
  int bf16_shape = -1;  // the AMX tile space's layout of bf16 inputs (Blocking::bf16_shape; -1: the default)

  const KernelSet& kernels() const { return kernel_set(isa); }
  // The tiles as asked for, for a problem of `dtype`: a layout is refused for anything but bf16 inputs.
  Blocking requested(Dtype dtype) const {
    if (bf16_shape >= 0 && dtype != Dtype::bf16) {
      throw py::value_error("amx_rows, amx_cols and amx_ksteps choose the AMX tile layout of bf16 inputs");
    }
    Blocking r{m, n, k};
    r.bf16_shape = bf16_shape;
    return r;
  }
  Blocking blocking(const KernelSet& ks, Dtype dtype = Dtype::f32) const {
    return resolve_blocking(ks, requested(dtype), dtype);
  }
};

// The CPUs the calling thread may run on (its affinity; os.sched_getaffinity(0) in Python), the default
// thread count, as a syscall without Python's set of CPU numbers.
inline int64_t affinity_threads() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  return std::max<int64_t>(1, std::thread::hardware_concurrency());
}

// The AMX tile space's layout named by amx_rows x amx_cols accumulator tiles and amx_ksteps K steps a load (each
// not given takes the default layout's): its index in kAmxShapes, -1 when none is given.
inline int amx_shape(std::optional<int64_t> rows, std::optional<int64_t> cols, std::optional<int64_t> ksteps) {
  if (!rows && !cols && !ksteps) return -1;
  const AmxShape d = kAmxShapes[0];
  const int64_t r = rows.value_or(d.rows), c = cols.value_or(d.cols), k = ksteps.value_or(d.ksteps);
  const bool small = r >= 1 && r <= 4 && c >= 1 && c <= 4 && k >= 1 && k <= 4;
  const int v = small ? amx_shape_index(static_cast<int>(r), static_cast<int>(c), static_cast<int>(k)) : -1;
  if (v < 0) {
    throw py::value_error("amx_rows x amx_cols = " + std::to_string(r) + "x" + std::to_string(c) + " with amx_ksteps " +
                          std::to_string(k) + " is not a layout of the AMX tile space (rows x cols, kK for K steps a " +
                          "load: " + amx_shape_names() + ")");
  }
  return v;
}

inline Tiles make_tiles(std::optional<int64_t> m, std::optional<int64_t> n, std::optional<int64_t> k, int64_t threads,
                        std::string isa, std::optional<int64_t> amx_rows, std::optional<int64_t> amx_cols,
                        std::optional<int64_t> amx_ksteps) {
  check_threads(threads);
  return {tile_value(m, "tile_m"), tile_value(n, "tile_n"), tile_value(k, "tile_k"), threads, std::move(isa),
          amx_shape(amx_rows, amx_cols, amx_ksteps)};
}

using Pair = std::pair<int64_t, int64_t>;
using Padding = std::array<int64_t, 4>;  // top, bottom, left, right

// One call of a kernel, validated and with its outputs allocated, bound to Python as _core.Plan: run(loops)
// times `loops` calls inside C++ with the GIL released, output() makes one call and returns the outputs,
// tiles() says what runs. The bindings only check arguments and fill problems; the kernels do the work.
struct Plan {
  py::tuple keep;              // the inputs and outputs: the problem holds raw pointers into them
  py::object result;           // what output() returns: an array, or (y, (h_n, c_n))
  std::function<void()> call;  // one call of the kernel (run with the GIL released)
  // isa, kernel, mr, nr and the tiles used: built when asked (plan.tiles()), not on every user's call
  std::function<py::dict()> tiles;
  py::dict saved;              // a backward plan's training forward: its outputs and saved activations
  Fault fault = Fault::none;   // test builds only (fault.hpp)
  void* first_out = nullptr;   // where Fault::wrong corrupts the answer
  bool f16_out = false;  // a 2-byte output: fp16 or bf16

  double run(int64_t loops) {
    check_loops(loops);
    py::gil_scoped_release release;
    trigger(fault);
    return time_loop(loops, [&] {
      if (fault == Fault::slow) trigger(fault);
      call();
    });
  }

  py::object output() {
    {
      py::gil_scoped_release release;
      trigger(fault);
      call();
    }
    corrupt(fault, first_out, f16_out);
    return result;
  }
};

inline py::dict tile_dict(const char* isa, const char* kernel, int mr, int nr, const Blocking& blk) {
  py::dict d;
  d["isa"] = isa;
  d["kernel"] = kernel;
  d["mr"] = mr;
  d["nr"] = nr;
  d["tile_m"] = blk.mc;
  d["tile_n"] = blk.nc;
  d["tile_k"] = blk.kc;
  return d;
}

// Where a plan runs the bf16 kernels of a row with an AMX tile space: the layout that runs (tiles.AMX_KEYS).
inline void add_amx_layout(py::dict& d, const KernelSet& ks, const Blocking& blk) {
  if (isa_entry(ks.isa).bf16_shape == nullptr) return;
  const AmxShape& s = kAmxShapes[blk.bf16_shape < 0 ? 0 : blk.bf16_shape];
  d["amx_rows"] = s.rows;
  d["amx_cols"] = s.cols;
  d["amx_ksteps"] = s.ksteps;
}

// A conv2d problem's geometry from x (N x C x H x W) and w (K x C/groups x R x S), validated (ValueError
// naming what is wrong); its data pointers are left for the caller.
inline ConvProblem conv_problem(const Tensor& tx, const Tensor& tw, const py::array& w, Pair stride, Padding padding,
                                Pair dilation, int64_t groups) {
  expect_dtype(tw, tx, "w", "x");
  ConvProblem p;
  p.dtype = tx.dtype;
  p.n = tx.shape[0];
  p.c = tx.shape[1];
  p.h = tx.shape[2];
  p.w_in = tx.shape[3];
  p.k = tw.shape[0];
  p.r = tw.shape[2];
  p.s = tw.shape[3];
  p.stride_h = stride.first;
  p.stride_w = stride.second;
  p.pad_h = padding[0];
  p.pad_h_end = padding[1];
  p.pad_w = padding[2];
  p.pad_w_end = padding[3];
  p.dil_h = dilation.first;
  p.dil_w = dilation.second;
  p.groups = groups;
  validate_conv2d(p);  // every parameter bounded, the output non-empty, every size within 64 bits
  if (tw.shape[1] != p.c / groups) {
    throw py::value_error("w has shape " + shape_str(w) + ": its dimension 1 must be input channels / groups = " +
                          std::to_string(p.c / groups));
  }
  return p;
}

inline RnnMode rnn_mode(const std::string& cell) {
  if (cell == "rnn_tanh") return RnnMode::rnn_tanh;
  if (cell == "rnn_relu") return RnnMode::rnn_relu;
  if (cell == "gru") return RnnMode::gru;
  if (cell == "lstm") return RnnMode::lstm;
  throw py::value_error("unknown cell '" + cell + "' (expected rnn_tanh, rnn_relu, gru or lstm)");
}

// A recurrent layer's problem from torch-layout arrays (ValueError naming what is wrong): the cell's
// mode, dims, dtype and input pointers (c0 for the LSTM only); outputs are the caller's.
inline RnnProblem rnn_problem(const std::string& cell, const py::array& x, const py::array& w_ih,
                              const py::array& w_hh, const py::array& b_ih, const py::array& b_hh,
                              const py::array& h0, const std::optional<py::array>& c0, bool allow_bf16 = false) {
  const RnnMode mode = rnn_mode(cell);
  const bool lstm = mode == RnnMode::lstm;
  if (lstm != c0.has_value()) {
    throw py::value_error(lstm ? "the LSTM needs c0 (batch x hidden)" : "c0 is the LSTM's cell state; a " + cell +
                                                                             " cell has none");
  }
  const bool bf = allow_bf16;
  const Tensor tx = tensor(x, "x", 3, bf), twi = tensor(w_ih, "w_ih", 2, bf), twh = tensor(w_hh, "w_hh", 2, bf);
  const Tensor tbi = tensor(b_ih, "b_ih", 1, bf), tbh = tensor(b_hh, "b_hh", 1, bf);
  const Tensor th = tensor(h0, "h0", 2, bf);
  const int64_t T = tx.shape[0], B = tx.shape[1], I = tx.shape[2], gates = rnn_gates(mode);
  const std::string order = lstm ? "i, f, g, o" : mode == RnnMode::gru ? "r, z, n" : "";
  const std::string G_text = gates == 1 ? "hidden" : std::to_string(gates) + " * hidden";
  if (twh.shape[0] % gates != 0) {
    throw py::value_error("w_hh has shape " + shape_str(w_hh) + ": dimension 0 must be " + G_text +
                          (order.empty() ? "" : " (gates " + order + ")"));
  }
  const int64_t H = twh.shape[0] / gates, G = twh.shape[0];
  expect_shape(twh, w_hh, "w_hh", {G, H}, G_text + " x hidden");
  expect_shape(twi, w_ih, "w_ih", {G, I}, G_text + " x input_size, input_size = x.shape[2]");
  expect_shape(tbi, b_ih, "b_ih", {G}, G_text);
  expect_shape(tbh, b_hh, "b_hh", {G}, G_text);
  expect_shape(th, h0, "h0", {B, H}, "batch x hidden, batch = x.shape[1]");
  for (auto [t, name] : {std::pair{&twi, "w_ih"}, {&twh, "w_hh"}, {&tbi, "b_ih"}, {&tbh, "b_hh"}, {&th, "h0"}}) {
    expect_dtype(*t, tx, name, "x");
  }
  std::optional<Tensor> tc;
  if (lstm) {
    tc = tensor(*c0, "c0", 2, bf);
    expect_shape(*tc, *c0, "c0", {B, H}, "batch x hidden");
    expect_dtype(*tc, tx, "c0", "x");
  }
  RnnProblem p;
  p.mode = mode;
  p.dtype = tx.dtype;
  p.seq_len = T;
  p.batch = B;
  p.input_size = I;
  p.hidden = H;
  p.x = tx.data;
  p.w_ih = twi.data;
  p.w_hh = twh.data;
  p.b_ih = tbi.data;
  p.b_hh = tbh.data;
  p.h0 = th.data;
  p.c0 = lstm ? tc->data : nullptr;
  return p;
}

// The training (backward-pass) entry points, defined in train.cpp and added to the module by module.cpp.
void define_training(py::module_& m);

}  // namespace opbench::bind

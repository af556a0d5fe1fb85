// opbench._core: argument checks, GIL release and error translation around the C++ kernels; no math here.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"
#include "opbench/conv.hpp"
#include "opbench/cpu.hpp"
#include "opbench/fault.hpp"
#include "opbench/fp16.hpp"
#include "opbench/gemm.hpp"
#include "opbench/isa.hpp"
#include "opbench/limits.hpp"
#include "opbench/microarch.hpp"
#include "opbench/rnn.hpp"
#include "opbench/peak.hpp"
#include "opbench/timed_loop.hpp"

namespace py = pybind11;
using namespace pybind11::literals;
using namespace opbench;

namespace {

using namespace opbench::bind;


Plan conv_plan(const py::array& x, const py::array& w, std::optional<py::array> out, Pair stride, Padding padding,
               Pair dilation, int64_t groups, const Tiles& tiles, const std::string& conv_path) {
  const Tensor tx = tensor(x, "x", 4, true), tw = tensor(w, "w", 4, true);
  ConvProblem p = conv_problem(tx, tw, w, stride, padding, dilation, groups);
  const KernelSet& ks = tiles.kernels();
  const ConvPlan conv =
      plan_conv2d(ks, p, tiles.requested(p.dtype), static_cast<int>(tiles.threads), conv_path_choice(conv_path));
  const std::vector<int64_t> y_shape{p.n, p.k, p.out_h(), p.out_w()};
  const int64_t y_bytes = out ? 0 : array_bytes(y_shape, tx.itemsize, "output size");
  check_alloc(checked::add(conv.workspace_bytes, y_bytes, "conv2d"), "conv2d");
  py::array y = output_like(x, y_shape, std::move(out), "out", p.dtype);
  p.x = tx.data;
  p.w = tw.data;
  p.y = y.mutable_data();
  Plan plan;
  plan.keep = py::make_tuple(x, w, y);
  plan.result = y;
  plan.call = [&ks, p, conv] { conv2d(ks, p, conv); };
  plan.fault = injected_fault(conv.blocking.mc, conv.blocking.nc, conv.blocking.kc);  // test builds (fault.hpp)
  plan.first_out = p.y;
  plan.f16_out = p.dtype != Dtype::f32;
  plan.tiles = [&ks, conv, dtype = p.dtype] {
    py::dict d = tile_dict(ks.isa, conv.kernel, conv.mr, conv.nr, conv.blocking);
    d["gemm_m"] = conv.gemm.m;
    d["gemm_n"] = conv.gemm.n;
    d["gemm_k"] = conv.gemm.k;
    d["path"] = conv.describe(dtype);
    d["conv_path"] = conv.choice_name();
    if (conv.bf16_gemm()) add_amx_layout(d, ks, conv.blocking);  // the depthwise loops have no tile layout
    return d;
  };
  return plan;
}

Plan rnn_plan(const std::string& cell, const py::array& x, const py::array& w_ih, const py::array& w_hh,
              const py::array& b_ih, const py::array& b_hh, const py::array& h0, std::optional<py::array> c0,
              std::optional<py::array> y, std::optional<py::array> h_n, std::optional<py::array> c_n,
              const Tiles& tiles) {
  RnnProblem p = rnn_problem(cell, x, w_ih, w_hh, b_ih, b_hh, h0, c0, true);
  const bool lstm = p.mode == RnnMode::lstm;
  const Tensor tx = tensor(x, "x", 3, true);
  const int64_t T = p.seq_len, B = p.batch, H = p.hidden;
  if (!lstm && c_n) throw py::value_error("c_n is the LSTM's final cell state; a " + cell + " cell has none");
  const int64_t threads = tiles.threads;
  const KernelSet& ks = tiles.kernels();
  const bool bf16_in = p.dtype == Dtype::bf16;
  const Blocking blk = tiles.blocking(ks, p.dtype);
  const int64_t item = tx.itemsize;
  const int64_t outputs = checked::add(y ? 0 : array_bytes({T, B, H}, item, "y size"),
                                       (h_n ? 0 : B * H * item) + (c_n || !lstm ? 0 : B * H * item), "outputs");
  check_alloc(checked::add(rnn_workspace_bytes(ks, p, blk, threads), outputs, cell.c_str()), cell.c_str());
  py::array ay = output_like(x, {T, B, H}, std::move(y), "y", p.dtype);
  py::array ah = output_like(x, {B, H}, std::move(h_n), "h_n", p.dtype);
  p.y = ay.mutable_data();
  p.h_n = ah.mutable_data();
  Plan plan;
  if (lstm) {
    py::array ac = output_like(x, {B, H}, std::move(c_n), "c_n", p.dtype);
    p.c_n = ac.mutable_data();
    plan.keep = py::make_tuple(x, w_ih, w_hh, b_ih, b_hh, h0, *c0, ay, ah, ac);
    plan.result = py::make_tuple(ay, py::make_tuple(ah, ac));
  } else {
    plan.keep = py::make_tuple(x, w_ih, w_hh, b_ih, b_hh, h0, ay, ah);
    plan.result = py::make_tuple(ay, ah);
  }
  const RnnKernels& rnn = rnn_kernels(ks);
  plan.call = [&ks, &rnn, p, blk, threads] { rnn_forward(ks, rnn, p, blk, static_cast<int>(threads)); };
  GemmProblem projection;  // x's projection, T x B rows: the product the tiles describe
  projection.in_dtype = p.dtype;
  projection.m = T * B;
  const int step_threads = rnn_step_threads(ks, p, blk, static_cast<int>(threads));
  plan.tiles = [&ks, bf16_in, blk, projection, step_threads] {
    py::dict d;
    if (!bf16_in) {
      d = tile_dict(ks.isa, ks.description, ks.mr, ks.nr, blk);
    } else if (bf16_on_fp32(ks, projection)) {
      d = tile_dict(ks.isa, ks.gemm.bf16_widened, ks.mr, ks.nr, blk);
    } else {
      const Bf16Kernels& bk = bf16_kernels(ks, blk);
      d = tile_dict(ks.isa, bk.description, bk.mr, bk.nr, blk);
      add_amx_layout(d, ks, blk);
    }
    d["step_threads"] = step_threads;
    return d;
  };
  return plan;
}

// A GEMM operand: a matrix (batch 0), or a C-contiguous stack of `batch` matrices (batch x rows x cols).
struct Operand {
  Matrix m;
  int64_t batch;
  Matrix whole() const { return {m.dtype, m.data, std::max<int64_t>(batch, 1) * m.rows, m.cols, m.ld, m.itemsize}; }
};

Operand operand(const py::array& x, const char* name) {
  if (x.ndim() != 2 && x.ndim() != 3) {
    throw py::value_error(std::string(name) + " must be a 2-D array or a 3-D stack of them, got " +
                          std::to_string(x.ndim()) + "-D with shape " + shape_str(x));
  }
  if (x.ndim() == 2) return {matrix(x, name, true), 0};
  const Tensor t = tensor(x, name, 3, true);
  return {{t.dtype, t.data, t.shape[1], t.shape[2], t.shape[2], t.itemsize}, t.shape[0]};
}

Plan gemm_plan(const py::array& a, const py::array& b, std::optional<py::array> out, const Tiles& tiles,
               const std::string& accumulate, std::optional<int64_t> small_m,
               std::optional<int64_t> parallel_flops, std::optional<int64_t> stream_m) {
  const Operand oa = operand(a, "a"), ob = operand(b, "b");
  const Matrix &ma = oa.m, &mb = ob.m;
  const int64_t batch = oa.batch;
  if (oa.batch != ob.batch) {
    throw py::value_error("a is " + shape_str(a) + " and b is " + shape_str(b) +
                          ": both 2-D, or both 3-D with the same batch (batch x m x k and batch x k x n)");
  }
  if (ma.dtype != mb.dtype) {
    throw py::value_error("a and b must have the same dtype, got " + py::str(a.dtype()).cast<std::string>() + " and " +
                          py::str(b.dtype()).cast<std::string>());
  }
  if (ma.cols != mb.rows) {
    throw py::value_error("inner dimensions differ: a is " + shape_str(a) + " and b is " + shape_str(b) +
                          (batch ? " (a.shape[2] must equal b.shape[1])" : " (a.shape[1] must equal b.shape[0])"));
  }
  const int64_t threads = tiles.threads;
  const KernelSet& ks = tiles.kernels();
  if (accumulate != "fp32" && accumulate != "fp16") {
    throw py::value_error("accumulate must be 'fp32' or 'fp16', got '" + accumulate + "'");
  }
  const bool f16_acc = accumulate == "fp16";
  const F16AccKernels* f16 = nullptr;
  if (f16_acc) {
    if (ma.dtype != Dtype::f16) {
      throw py::value_error("accumulate='fp16' needs float16 inputs, got " + py::str(a.dtype()).cast<std::string>());
    }
    f16 = &f16acc_kernels(ks);  // throws (ValueError) when this CPU or kernel set has none
  }
  const bool bf16_in = ma.dtype == Dtype::bf16;
  // bf16 runs the bf16 kernels, or the fp32 register tile where they are slower (gemm.hpp, bf16_on_fp32)
  GemmProblem rows;
  rows.in_dtype = ma.dtype;
  rows.m = ma.rows;
  const Bf16Kernels* bf16 = bf16_in && !bf16_on_fp32(ks, rows) ? &bf16_kernels(ks) : nullptr;
  // Untuned tiles come from the model of the register tile that runs (the narrow one for few columns).
  const KernelSet& tk = tile_kernels(ks, mb.cols);
  Blocking blocking = tiles.blocking(bf16 ? ks : tk, ma.dtype);  // bf16 runs the set's own bf16 kernels
  if (blocking.bf16_shape >= 0) bf16 = &bf16_kernels(ks, blocking);  // (a set without the tile space: ValueError)
  if (small_m) {
    check_range(*small_m, 0, kMaxTile, "small_m");
    blocking.small_m = blocking.aliased_small_m = *small_m;
  } else if (batch) {
    blocking.small_m = std::min(blocking.small_m, kBatchedSmallM);  // resolved: the model's unpacked_rows
    blocking.aliased_small_m = std::min(blocking.aliased_small_m, kBatchedSmallM);
  }
  if (parallel_flops) {
    check_range(*parallel_flops, 0, std::numeric_limits<int64_t>::max(), "parallel_flops");
    blocking.parallel_flops = *parallel_flops;
  }
  if (stream_m) {
    check_range(*stream_m, 0, thin::kMaxStreamM, "stream_m");
    blocking.stream_m = *stream_m;
    blocking.stream_min_b_bytes = 0;  // a given stream_m: any size of B
  }

  GemmProblem p;
  p.in_dtype = p.out_dtype = ma.dtype;
  p.m = ma.rows;
  p.n = mb.cols;
  p.k = ma.cols;
  p.accumulation = f16_acc ? Accumulation::f16 : Accumulation::f32;
  const std::vector<int64_t> c_shape = batch ? std::vector<int64_t>{batch, p.m, p.n} : std::vector<int64_t>{p.m, p.n};
  const int64_t c_bytes = out ? 0 : array_bytes(c_shape, ma.itemsize, "output size");
  const int64_t tile_rows = f16 ? f16->mr : bf16 ? bf16->mr : tk.mr;
  const int64_t batch_rows = batch ? gemm_batch_rows(p, batch, static_cast<int>(threads), tile_rows) : 0;
  const bool split = batch_rows > 0;
  const int64_t workspace = split ? checked::mul(gemm_workspace_bytes(ks, p, blocking, 1), threads, "gemm workspace")
                                  : gemm_workspace_bytes(ks, p, blocking, threads);
  check_alloc(checked::add(workspace, c_bytes, "gemm"), "gemm");

  py::array result;
  if (batch) {
    result = output_like(a, c_shape, std::move(out), "out", ma.dtype);
    const Operand oc = operand(result, "out");
    if (overlaps(oc.whole(), oa.whole()) || overlaps(oc.whole(), ob.whole())) {
      throw py::value_error("out must not overlap a or b");
    }
  } else if (out) {
    result = *out;
    const Matrix mc = matrix(result, "out", true);
    if (mc.dtype != ma.dtype) throw py::value_error("out must have the dtype of a and b");
    if (mc.rows != ma.rows || mc.cols != mb.cols) {
      throw py::value_error("out has shape " + shape_str(result) + ", expected (" + std::to_string(ma.rows) + ", " +
                            std::to_string(mb.cols) + ")");
    }
    if (!result.writeable()) throw py::value_error("out is read-only");
    if (overlaps(mc, ma) || overlaps(mc, mb)) throw py::value_error("out must not overlap a or b");
  } else {
    result = new_output(a.dtype(), {ma.rows, mb.cols});
  }
  const Matrix mc = operand(result, "out").m;
  p.a = ma.data;
  p.b = mb.data;
  p.c = mc.data;
  p.lda = ma.ld;
  p.ldb = mb.ld;
  p.ldc = mc.ld;
  Plan plan;
  plan.keep = py::make_tuple(a, b, result);
  plan.result = result;
  if (batch) {
    const BatchStrides strides{p.m * p.k, p.k * p.n, p.m * p.n};
    plan.call = [&ks, p, blocking, batch, strides, threads, batch_rows] {
      gemm_batched(ks, p, blocking, batch, strides, static_cast<int>(threads), batch_rows);
    };
  } else {
    plan.call = [&ks, p, blocking, threads] { gemm(ks, p, blocking, static_cast<int>(threads)); };
  }
  plan.tiles = [&ks, &tk, f16, blocking, p, batch, split, threads, batch_rows] {
    GemmProblem one_task = p;  // what one thread's gemm() multiplies
    if (split) one_task.m = std::min(p.m, batch_rows);
    // bf16: the bf16 kernels, or the fp32 tile where this product is widened onto it (bf16_on_fp32)
    const bool widened = bf16_on_fp32(ks, one_task);
    const Bf16Kernels* bf16 = p.in_dtype == Dtype::bf16 && !widened ? &bf16_kernels(ks, blocking) : nullptr;
    py::dict d = f16    ? tile_dict(ks.isa, f16->description, f16->mr, f16->nr, blocking)
                 : bf16 ? tile_dict(ks.isa, bf16->description, bf16->mr, bf16->nr, blocking)
                        : tile_dict(ks.isa, widened ? tk.gemm.bf16_widened : tk.description, tk.mr, tk.nr, blocking);
    d["small_m"] = blocking.small_m;
    d["parallel_flops"] = blocking.parallel_flops;
    d["stream_m"] = blocking.stream_m;
    if (bf16 != nullptr) add_amx_layout(d, ks, blocking);
    const std::string path = gemm_path(ks, one_task, blocking);
    d["path"] = !batch ? path
                : !split ? "batched, each product on all threads: " + path
                : threads <= 1 ? "batched, one product after another: " + path
                : batch_rows >= p.m
                    ? "batched, whole products dealt out to the threads: " + path
                    : "batched, blocks of " + std::to_string(batch_rows) +
                          " rows of each product dealt out to the threads: " + path;
    if (batch) d["batch_rows"] = batch_rows;
    if (path.rfind("blocked", 0) == 0) {
      const Blocking run = problem_blocking(ks, one_task, blocking);
      d["tile_k"] = run.kc;
      d["tile_n"] = gemm_block_n(p, run, f16 ? f16->nr : bf16 ? bf16->nr : tk.nr, bf16 ? 2 : 4);
    }
    return d;
  };
  plan.fault = injected_fault(blocking.mc, blocking.nc, blocking.kc);
  plan.first_out = p.c;
  plan.f16_out = p.out_dtype != Dtype::f32;
  return plan;
}

py::dict cache_dict(const CacheLevel& c) {
  return py::dict("size_bytes"_a = c.size_bytes, "ways"_a = c.ways, "sets"_a = c.sets,
                  "line_bytes"_a = c.line_bytes, "shared_by_cpus"_a = c.shared_by_cpus);
}

// What names a micro-kernel (a KernelSet's, or its fp16-accumulating or bf16 one) in kernel_dict, added to d.
template <class Kernels>
py::dict kernel_named(const Kernels& k, py::dict d = py::dict()) {
  d["isa"] = k.isa;
  d["description"] = k.description;
  d["mr"] = k.mr;
  d["nr"] = k.nr;
  return d;
}

py::dict kernel_dict(const KernelSet& ks) {
  const Blocking blk = resolve_blocking(ks, Blocking{});
  py::dict d = kernel_named(ks);
  d["tile_m"] = blk.mc;
  d["tile_n"] = blk.nc;
  d["tile_k"] = blk.kc;
  // conv2d's implicit GEMMs' defaults (blocking.hpp: an L1-fed tile keeps L1's depth there)
  d["implicit_tile_m"] = blk.implicit_mc;
  d["implicit_tile_k"] = blk.implicit_kc;
  d["small_m"] = blk.small_m;
  d["aliased_small_m"] = blk.aliased_small_m;  // small_m for a B whose rows alias in L1 (blocking.hpp)
  d["aliased_row_bytes"] = blk.aliased_row_bytes;  // B's rows a multiple of this many bytes apart alias
  d["b_group_rows"] = b_group_rows(ks);  // from these rows the few-rows path packs B in groups (0: never)
  d["parallel_flops"] = blk.parallel_flops;
  d["stream_m"] = blk.stream_m;
  d["thin_max_n"] = thin::max_n(ks.thin_lanes);  // the few-columns path's widest N (small.cpp, thin_path)
  d["stream_m_max"] = thin::kMaxStreamM;
  // the micro-architecture table's row for this CPU (microarch.cpp), and where its choices were measured
  d["microarch"] = microarch().name;
  d["microarch_measured"] = microarch().measured;
  d["l3_counted_bytes"] = l3_counted_bytes(cpu_info());  // the L3 the blocking counts on (microarch.cpp)
  d["packed_ahead_steps"] = microarch().packed_ahead_steps;  // the AVX-512 kernel's prefetch distance
  // fp32 A read in place by the blocked loops up to this K block (0: always packed; microarch.cpp)
  d["f32_a_in_place_max_k"] = ks.gemm.ukernel_a != nullptr ? microarch().f32_a_in_place_max_k : 0;
  py::dict f16acc;  // accumulate='fp16': the kernels it would run, or why it cannot run here
  try {
    const F16AccKernels& k = f16acc_kernels(ks);
    f16acc["available"] = true;
    kernel_named(k, f16acc);
  } catch (const std::invalid_argument& e) {
    f16acc["available"] = false;
    f16acc["reason"] = e.what();
  }
  d["fp16_accumulate"] = f16acc;
  // bf16 inputs: the kernels they run on, and why not the AVX512-BF16 ones where they are not used
  py::dict bf16 = kernel_named(bf16_kernels(ks));
  const std::string why_not = bf16_fast_unavailable(ks);
  bf16["dot_product_unit"] = why_not.empty();
  bf16["reason"] = why_not;
  // products of at least fp32_units_min_rows rows run on the fp32 register tile instead, bf16 widened in
  // packing, where this core's fp32 FMAs outrun its dot products (gemm.hpp, bf16_on_fp32)
  const bool on_fp32 = bf16_on_fp32_units(ks);
  bf16["fp32_units"] = on_fp32;
  bf16["fp32_units_min_rows"] = bf16_on_fp32_min_rows(ks);
  bf16["fp32_tile"] = on_fp32 ? ks.gemm.bf16_widened : "";
  d["bf16"] = bf16;
  return d;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "opbench C++ kernels: tiled GEMM, FMA-throughput peaks, cache flush, CPU detection";

  // module_local: another build of this module can be loaded beside it (benchmarks/ab_builds.py) without its
  // Plan type clashing with this one in pybind11's global registry.
  py::class_<Plan>(m, "Plan", py::module_local(),
                   "One prepared call of a kernel: inputs checked, outputs allocated, tiles chosen.")
      .def("run", &Plan::run, py::arg("loops"),
           "Call the kernel `loops` times back to back in C++ (GIL released); return the elapsed seconds.")
      .def("output", &Plan::output, "Call the kernel once and return its outputs (the plan's own arrays).")
      .def("last", [](const Plan& p) { return p.result; },
           "The outputs as the last call (timed or not) left them, without calling (the plan's own arrays).")
      .def("tiles", [](const Plan& p) { return p.tiles(); },
           "What runs: isa, kernel, mr, nr, and tile_m / tile_n / tile_k as used (given or from the model).")
      .def("saved", [](const Plan& p) { return p.saved; },
           "A recurrent backward plan's training forward, run once when prepared: y, h_n (c_n) and the "
           "fp32 activations kept for BPTT (gates, state, tanh_c); empty for other plans.");
  py::class_<Tiles>(m, "Tiles", py::module_local(),
                    "How a kernel runs: tile sizes (0: from the cache model), threads, kernel set ('': default), "
                    "the AMX tile layout of bf16 products (None: default).")
      .def(py::init(&make_tiles), py::arg("m") = py::none(), py::arg("n") = py::none(), py::arg("k") = py::none(),
           py::arg("threads") = 1, py::arg("isa") = "", py::arg("amx_rows") = py::none(),
           py::arg("amx_cols") = py::none(), py::arg("amx_ksteps") = py::none())
      .def_readonly("m", &Tiles::m)
      .def_readonly("n", &Tiles::n)
      .def_readonly("k", &Tiles::k)
      .def_readonly("threads", &Tiles::threads)
      .def_readonly("isa", &Tiles::isa);
  m.attr("fault_injection") = kFaultInjection;
  m.attr("stream_m_max") = thin::kMaxStreamM;
  py::list shapes;  // the AMX tile space's layouts (amx_rows, amx_cols, amx_ksteps), the default first
  for (const AmxShape& s : kAmxShapes) shapes.append(py::make_tuple(s.rows, s.cols, s.ksteps));
  m.attr("amx_shapes") = py::tuple(shapes);

  m.def(
      "gemm_now",
      [](const py::array& a, const py::array& b, std::optional<py::array> out) {
        // kernels.gemm(a, b[, out=])'s plain call: the default tiles on the CPUs this thread may use now, prepared
        // and called at once (no plan object, no Python between them): 3.7 -> 2.0 us at 8x8x8 beside torch.mm's
        // 1.3; with out, 3.1 -> 1.6 beside torch.mm(out=)'s 1.2 (the same checks, in C++).
        Plan plan = gemm_plan(a, b, std::move(out), Tiles{0, 0, 0, affinity_threads(), "", -1}, "fp32", std::nullopt,
                              std::nullopt, std::nullopt);
        return plan.output();
      },
      py::arg("a"), py::arg("b"), py::arg("out") = py::none(),
      "prepare_gemm(a, b, out, tiles=<every default on this thread's CPUs>).output() in one call.");

  m.def("prepare_gemm", &gemm_plan, py::arg("a"), py::arg("b"), py::arg("out") = py::none(),
        py::arg("tiles") = Tiles{}, py::arg("accumulate") = "fp32", py::arg("small_m") = py::none(),
        py::arg("parallel_flops") = py::none(), py::arg("stream_m") = py::none());

  m.def("prepare_conv2d", &conv_plan, py::arg("x"), py::arg("w"), py::arg("out") = py::none(),
        py::arg("stride") = Pair{1, 1}, py::arg("padding") = Padding{0, 0, 0, 0}, py::arg("dilation") = Pair{1, 1},
        py::arg("groups") = 1, py::arg("tiles") = Tiles{}, py::arg("conv_path") = "model");
  m.attr("conv_path_names") = conv_path_names();

  define_training(m);

  m.def("prepare_rnn", &rnn_plan, py::arg("cell"), py::arg("x"), py::arg("w_ih"), py::arg("w_hh"),
        py::arg("b_ih"), py::arg("b_hh"), py::arg("h0"), py::arg("c0") = py::none(), py::arg("y") = py::none(),
        py::arg("h_n") = py::none(), py::arg("c_n") = py::none(), py::arg("tiles") = Tiles{});

  m.def(
      "kernel_info",
      [](const std::string& isa, int64_t n) {
        const KernelSet& ks = kernel_set(isa);
        return kernel_dict(n > 0 ? tile_kernels(ks, n) : ks);
      },
      py::arg("isa") = "", py::arg("n") = 0,
      "Micro-kernel shape and model-derived default tiles of a kernel set; with n > 0, of the register tile a "
      "GEMM with n columns runs.");

  m.def(
      "known_isas",
      [] {
        std::vector<std::string> names;
        for (const IsaEntry& e : isa_table()) names.emplace_back(e.name);
        return names;
      },
      "Every kernel set this build knows, best first (isa_table(), whatever this CPU runs).");

  m.def("cpu_info", [] {
    const CpuInfo& c = cpu_info();
    const py::dict features("sse2"_a = c.sse2, "avx"_a = c.avx, "avx2"_a = c.avx2, "fma"_a = c.fma, "f16c"_a = c.f16c,
                            "avx512f"_a = c.avx512f, "avx512bw"_a = c.avx512bw, "avx512vl"_a = c.avx512vl,
                            "avx512dq"_a = c.avx512dq, "avx512fp16"_a = c.avx512fp16,
                            "avx512bf16"_a = c.avx512bf16, "amx_bf16"_a = c.amx_bf16,
                            "amx_tile"_a = c.amx_tile);
    const py::dict caches("l1d"_a = cache_dict(c.l1d), "l2"_a = cache_dict(c.l2), "l3"_a = cache_dict(c.l3));
    return py::dict("vendor"_a = c.vendor, "brand"_a = c.brand, "logical_cpus"_a = c.logical_cpus,
                    "family"_a = c.family, "model"_a = c.model, "stepping"_a = c.stepping,
                    "hypervisor"_a = c.hypervisor, "features"_a = features, "caches"_a = caches,
                    "cache_source"_a = c.cache_source, "isas"_a = supported_isas(),
                    "native_fp16_fma"_a = native_fp16_fma_available(), "bf16_dot"_a = bf16_dot_available(),
                    "amx_unavailable"_a = amx_unavailable());
  });

  m.def(
      "amx_tile_dot",
      [](py::array_t<float, py::array::c_style> c, py::array_t<uint16_t, py::array::c_style> a,
         py::array_t<uint16_t, py::array::c_style> b, bool emulated) {
        auto shaped = [](const py::array& x, py::ssize_t rows, py::ssize_t cols, const char* name) {
          if (x.ndim() != 2 || x.shape(0) != rows || x.shape(1) != cols) {
            throw py::value_error(std::string(name) + " must be " + std::to_string(rows) + " x " + std::to_string(cols));
          }
        };
        shaped(c, 16, 16, "c");
        shaped(a, 16, 32, "a");
        shaped(b, 16, 32, "b");
        if (!emulated && !amx_unavailable().empty()) throw py::value_error("AMX is not available: " + amx_unavailable());
        py::array_t<float> out({16, 16});
        std::memcpy(out.mutable_data(), c.data(), 16 * 16 * sizeof(float));
        (emulated ? tdpbf16ps_emulated : tdpbf16ps_tiles)(out.mutable_data(), a.data(), b.data());
        return out;
      },
      py::arg("c"), py::arg("a"), py::arg("b"), py::arg("emulated"),
      "One TDPBF16PS on 16 x 16 tiles: c (fp32) + a (bf16 bits, 16 x 32) . b (bf16 pair-rows, 16 x 32), on the "
      "emulator or on the CPU's AMX tiles (runtime/amx.cpp); tests compare the two bit for bit.");

  m.def(
      "fma_peak",
      [](const std::string& dtype, const std::string& isa, int64_t threads, double min_time_s, int64_t repeats) {
        check_threads(threads);
        check_range(repeats, 1, 100, "repeats");
        if (!(min_time_s > 0 && min_time_s <= 10)) throw py::value_error("min_time_s must be in (0, 10] seconds");
        // std::invalid_argument (no such ISA, no native fp16) becomes ValueError once the GIL is back.
        PeakMeasurement r;
        {
          py::gil_scoped_release release;
          r = measure_fma_peak(dtype, isa, threads, min_time_s, repeats);
        }
        return py::make_tuple(r.gflops, r.kernel);
      },
      py::arg("dtype"), py::arg("isa") = "", py::arg("threads") = 1, py::arg("min_time_s") = 0.1,
      py::arg("repeats") = 3, "Best GFLOP/s of an FMA-throughput loop run on `threads` threads at once.");

  m.def(
      "stream_triad",
      [](int64_t threads, int64_t elements, int64_t repeats) {
        check_threads(threads);
        check_range(repeats, 1, 100, "repeats");
        if (elements < 1) throw py::value_error("elements must be >= 1");
        check_alloc(checked::mul(elements, 3 * int64_t(sizeof(double)), "elements"), "stream_triad");
        py::gil_scoped_release release;
        return measure_triad_gbs(threads, elements, repeats);
      },
      py::arg("threads") = 1, py::arg("elements") = 1 << 24, py::arg("repeats") = 5,
      "Best GB/s of a STREAM-like triad (24 bytes per element) on `threads` threads.");

  m.def(
      "handoff_ns",
      [](int64_t round_trips, int64_t repeats) {
        check_range(round_trips, 1, 10000000, "round_trips");
        check_range(repeats, 1, 100, "repeats");
        py::gil_scoped_release release;
        return measure_handoff_ns(round_trips, static_cast<int>(repeats));
      },
      py::arg("round_trips") = 2000, py::arg("repeats") = 3,
      "Median round-trip time (ns) of a cache line between the caller and the pool's first worker, which "
      "runs on another CPU where the affinity mask has one.");

  m.def(
      "flush_cache",
      [](int64_t bytes) {
        if (bytes < 64) throw py::value_error("bytes must be >= 64");
        check_alloc(bytes, "flush_cache");
        py::gil_scoped_release release;
        flush_cache(bytes);
      },
      py::arg("bytes"));

  // Exposed so tests can check the portable conversions (used by the reference kernel) bit for bit.
  m.def("f32_to_f16_bits", [](py::array_t<float, py::array::c_style | py::array::forcecast> x) {
    py::array_t<uint16_t> out(x.size());
    halves_from_floats(x.data(), out.mutable_data(), x.size());
    return out;
  });
  m.def("f16_bits_to_f32", [](py::array_t<uint16_t, py::array::c_style | py::array::forcecast> x) {
    py::array_t<float> out(x.size());
    floats_from_halves(x.data(), out.mutable_data(), x.size());
    return out;
  });
}

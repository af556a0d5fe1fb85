// opbench._core: argument checks, GIL release and error translation around the C++ kernels; no math here.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "../gemm/ukernel_table.hpp"
#include "opbench/cpu.hpp"
#include "opbench/fp16.hpp"
#include "opbench/gemm.hpp"
#include "opbench/peak.hpp"

namespace py = pybind11;
using namespace opbench;

namespace {

// Each thread is a pool worker for the life of the process; far past the core count they only thrash.
constexpr int kMaxThreads = 1024;

struct Matrix {
  Dtype dtype;
  void* data;
  int64_t rows, cols, ld;  // ld in elements
  int64_t itemsize;
};

std::string shape_str(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

Matrix matrix(const py::array& a, const char* name) {
  if (a.ndim() != 2) {
    throw py::value_error(std::string(name) + " must be a 2-D array, got " + std::to_string(a.ndim()) +
                          "-D with shape " + shape_str(a));
  }
  const py::dtype dt = a.dtype();
  const std::string dt_name = py::str(dt).cast<std::string>();
  Dtype dtype;
  if (dt.kind() == 'f' && dt.itemsize() == 4) {
    dtype = Dtype::f32;
  } else if (dt.kind() == 'f' && dt.itemsize() == 2) {
    dtype = Dtype::f16;
  } else {
    throw py::value_error(std::string(name) + " has unsupported dtype " + dt_name + " (expected float32 or float16)");
  }
  const char order = dt.attr("byteorder").cast<std::string>()[0];
  if (order == '>') throw py::value_error(std::string(name) + " is big-endian; convert it to native byte order");
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

bool overlaps(const Matrix& x, const Matrix& y) {
  const auto* x0 = static_cast<const char*>(x.data);
  const auto* x1 = x0 + ((x.rows - 1) * x.ld + x.cols) * x.itemsize;
  const auto* y0 = static_cast<const char*>(y.data);
  const auto* y1 = y0 + ((y.rows - 1) * y.ld + y.cols) * y.itemsize;
  return x0 < y1 && y0 < x1;
}

int64_t tile_value(const std::optional<int64_t>& v, const char* name) {
  if (!v) return 0;  // 0 = derive from the cache model
  if (*v < 1) throw py::value_error(std::string(name) + " must be >= 1, got " + std::to_string(*v));
  return *v;
}

// Unknown or unsupported ISA names throw std::invalid_argument, which pybind11 raises as ValueError.
const KernelSet& kernel_set(const std::string& isa) { return isa.empty() ? default_kernels() : kernels_for(isa); }

struct Prepared {
  const KernelSet* ks;
  GemmProblem problem;
  Blocking blocking;
  int threads;
  py::array out;
};

Prepared prepare(const py::array& a, const py::array& b, std::optional<py::array> out, std::optional<int64_t> tile_m,
                 std::optional<int64_t> tile_n, std::optional<int64_t> tile_k, int threads, const std::string& isa) {
  const Matrix ma = matrix(a, "a"), mb = matrix(b, "b");
  if (ma.dtype != mb.dtype) {
    throw py::value_error("a and b must have the same dtype, got " + py::str(a.dtype()).cast<std::string>() + " and " +
                          py::str(b.dtype()).cast<std::string>());
  }
  if (ma.cols != mb.rows) {
    throw py::value_error("inner dimensions differ: a is " + shape_str(a) + " and b is " + shape_str(b) +
                          " (a.shape[1] must equal b.shape[0])");
  }
  if (threads < 1) throw py::value_error("threads must be >= 1, got " + std::to_string(threads));
  if (threads > kMaxThreads) {
    throw py::value_error("threads must be <= " + std::to_string(kMaxThreads) + ", got " + std::to_string(threads));
  }
  Blocking requested{tile_value(tile_m, "tile_m"), tile_value(tile_n, "tile_n"), tile_value(tile_k, "tile_k")};
  const KernelSet& ks = kernel_set(isa);

  py::array result;
  if (out) {
    result = *out;
    const Matrix mc = matrix(result, "out");
    if (mc.dtype != ma.dtype) throw py::value_error("out must have the dtype of a and b");
    if (mc.rows != ma.rows || mc.cols != mb.cols) {
      throw py::value_error("out has shape " + shape_str(result) + ", expected (" + std::to_string(ma.rows) + ", " +
                            std::to_string(mb.cols) + ")");
    }
    if (!result.writeable()) throw py::value_error("out is read-only");
    if (overlaps(mc, ma) || overlaps(mc, mb)) throw py::value_error("out must not overlap a or b");
  } else {
    result = py::array(a.dtype(), {ma.rows, mb.cols});
  }
  const Matrix mc = matrix(result, "out");
  GemmProblem p;
  p.dtype = ma.dtype;
  p.a = ma.data;
  p.b = mb.data;
  p.c = mc.data;
  p.m = ma.rows;
  p.n = mb.cols;
  p.k = ma.cols;
  p.lda = ma.ld;
  p.ldb = mb.ld;
  p.ldc = mc.ld;
  return {&ks, p, resolve_blocking(ks, requested), threads, result};
}

py::dict cache_dict(const CacheLevel& c) {
  py::dict d;
  d["size_bytes"] = c.size_bytes;
  d["ways"] = c.ways;
  d["sets"] = c.sets;
  d["line_bytes"] = c.line_bytes;
  d["shared_by_cpus"] = c.shared_by_cpus;
  return d;
}

py::dict kernel_dict(const KernelSet& ks) {
  const Blocking blk = resolve_blocking(ks, Blocking{});
  py::dict d;
  d["isa"] = ks.isa;
  d["description"] = ks.description;
  d["mr"] = ks.mr;
  d["nr"] = ks.nr;
  d["tile_m"] = blk.mc;
  d["tile_n"] = blk.nc;
  d["tile_k"] = blk.kc;
  return d;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "opbench C++ kernels: tiled GEMM, FMA-throughput peaks, cache flush, CPU detection";

  m.def(
      "gemm",
      [](const py::array& a, const py::array& b, std::optional<py::array> out, std::optional<int64_t> tile_m,
         std::optional<int64_t> tile_n, std::optional<int64_t> tile_k, int threads, const std::string& isa) {
        Prepared pr = prepare(a, b, std::move(out), tile_m, tile_n, tile_k, threads, isa);
        {
          py::gil_scoped_release release;
          gemm(*pr.ks, pr.problem, pr.blocking, pr.threads);
        }
        return pr.out;
      },
      py::arg("a"), py::arg("b"), py::arg("out") = py::none(), py::arg("tile_m") = py::none(),
      py::arg("tile_n") = py::none(), py::arg("tile_k") = py::none(), py::arg("threads") = 1, py::arg("isa") = "");

  m.def(
      "time_gemm",
      [](const py::array& a, const py::array& b, const py::array& out, std::optional<int64_t> tile_m,
         std::optional<int64_t> tile_n, std::optional<int64_t> tile_k, int threads, const std::string& isa,
         int64_t loops) {
        if (loops < 1) throw py::value_error("loops must be >= 1, got " + std::to_string(loops));
        Prepared pr = prepare(a, b, out, tile_m, tile_n, tile_k, threads, isa);
        py::gil_scoped_release release;
        return time_gemm(*pr.ks, pr.problem, pr.blocking, pr.threads, loops);
      },
      py::arg("a"), py::arg("b"), py::arg("out"), py::arg("tile_m") = py::none(), py::arg("tile_n") = py::none(),
      py::arg("tile_k") = py::none(), py::arg("threads") = 1, py::arg("isa") = "", py::arg("loops") = 1,
      "Run gemm `loops` times back to back in C++ and return the elapsed seconds.");

  m.def(
      "kernel_info",
      [](const std::string& isa) { return kernel_dict(kernel_set(isa)); }, py::arg("isa") = "",
      "Micro-kernel shape and model-derived default tiles of a kernel set.");

  m.def("cpu_info", [] {
    const CpuInfo& c = cpu_info();
    py::dict d;
    d["vendor"] = c.vendor;
    d["brand"] = c.brand;
    d["logical_cpus"] = c.logical_cpus;
    py::dict f;
    f["sse2"] = c.sse2;
    f["avx"] = c.avx;
    f["avx2"] = c.avx2;
    f["fma"] = c.fma;
    f["f16c"] = c.f16c;
    f["avx512f"] = c.avx512f;
    f["avx512bw"] = c.avx512bw;
    f["avx512vl"] = c.avx512vl;
    f["avx512dq"] = c.avx512dq;
    f["avx512fp16"] = c.avx512fp16;
    f["avx512bf16"] = c.avx512bf16;
    f["amx_bf16"] = c.amx_bf16;
    d["features"] = f;
    py::dict caches;
    caches["l1d"] = cache_dict(c.l1d);
    caches["l2"] = cache_dict(c.l2);
    caches["l3"] = cache_dict(c.l3);
    d["caches"] = caches;
    d["cache_source"] = c.cache_source;
    d["isas"] = supported_isas();
    d["native_fp16_fma"] = native_fp16_fma_available();
    return d;
  });

  m.def(
      "fma_peak",
      [](const std::string& dtype, const std::string& isa, int threads, double min_time_s, int repeats) {
        if (threads < 1 || threads > kMaxThreads) {
          throw py::value_error("threads must be between 1 and " + std::to_string(kMaxThreads));
        }
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
      "flush_cache",
      [](int64_t bytes) {
        if (bytes < 64) throw py::value_error("bytes must be >= 64");
        py::gil_scoped_release release;
        flush_cache(bytes);
      },
      py::arg("bytes"));

  // Exposed so tests can check the portable conversions (used by the reference kernel) bit for bit.
  m.def("f32_to_f16_bits", [](py::array_t<float, py::array::c_style | py::array::forcecast> x) {
    py::array_t<uint16_t> out(x.size());
    auto* o = out.mutable_data();
    const float* src = x.data();
    for (py::ssize_t i = 0; i < x.size(); ++i) o[i] = float_to_half(src[i]);
    return out;
  });
  m.def("f16_bits_to_f32", [](py::array_t<uint16_t, py::array::c_style | py::array::forcecast> x) {
    py::array_t<float> out(x.size());
    auto* o = out.mutable_data();
    const uint16_t* src = x.data();
    for (py::ssize_t i = 0; i < x.size(); ++i) o[i] = half_to_float(src[i]);
    return out;
  });
}

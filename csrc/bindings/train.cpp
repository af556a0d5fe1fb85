// opbench._core's backward passes: argument checks and prepared calls (Plan) around backward.hpp.
#include <optional>
#include <vector>
#include <string>

#include "common.hpp"
#include "opbench/backward.hpp"

namespace opbench::bind {

namespace {

// A gradient output: the caller's array (checked: shape, dtype, writable, not overlapping an input) or
// a new one.
py::array gradient_out(std::optional<py::array> given, const char* name, const Matrix& like, int64_t rows,
                       int64_t cols, const py::array& dtype_of, std::initializer_list<const Matrix*> inputs) {
  if (!given) return py::array(dtype_of.dtype(), {rows, cols});
  const Matrix g = matrix(*given, name);
  if (g.dtype != like.dtype) throw py::value_error(std::string(name) + " must have the dtype of a");
  if (g.rows != rows || g.cols != cols || g.ld != cols) {
    throw py::value_error(std::string(name) + " has shape " + shape_str(*given) + ", expected (" +
                          std::to_string(rows) + ", " + std::to_string(cols) + "), C-contiguous");
  }
  if (!given->writeable()) throw py::value_error(std::string(name) + " is read-only");
  for (const Matrix* in : inputs) {
    if (overlaps(g, *in)) throw py::value_error(std::string(name) + " must not overlap an input");
  }
  return *given;
}

Plan gemm_backward_plan(const py::array& a, const py::array& b, const py::array& dc, std::optional<py::array> da,
                        std::optional<py::array> db, std::optional<int64_t> tile_m, std::optional<int64_t> tile_n,
                        std::optional<int64_t> tile_k, int64_t threads, const std::string& isa) {
  const Matrix ma = matrix(a, "a"), mb = matrix(b, "b"), mdc = matrix(dc, "dc");
  if (mb.dtype != ma.dtype || mdc.dtype != ma.dtype) throw py::value_error("a, b and dc must have one dtype");
  if (ma.cols != mb.rows) {
    throw py::value_error("inner dimensions differ: a is " + shape_str(a) + " and b is " + shape_str(b) +
                          " (a.shape[1] must equal b.shape[0])");
  }
  if (mdc.rows != ma.rows || mdc.cols != mb.cols) {
    throw py::value_error("dc has shape " + shape_str(dc) + ", expected (" + std::to_string(ma.rows) + ", " +
                          std::to_string(mb.cols) + ") (the shape of a @ b)");
  }
  for (const Matrix* in : {&ma, &mb, &mdc}) {
    if (in->ld != in->cols) throw py::value_error("a, b and dc must be C-contiguous");
  }
  check_threads(threads);
  const KernelSet& ks = kernel_set(isa);
  const Blocking blk = blocking_for(ks, tile_m, tile_n, tile_k);
  GemmBackwardProblem p;
  p.dtype = ma.dtype;
  p.m = ma.rows;
  p.k = ma.cols;
  p.n = mb.cols;
  const int64_t out_bytes = checked::add(da ? 0 : array_bytes({p.m, p.k}, ma.itemsize, "da size"),
                                         db ? 0 : array_bytes({p.k, p.n}, ma.itemsize, "db size"), "gradients");
  check_alloc(checked::add(gemm_backward_workspace_bytes(ks, p, blk, threads), out_bytes, "gemm backward"),
              "gemm backward");
  py::array ada = gradient_out(std::move(da), "da", ma, p.m, p.k, a, {&ma, &mb, &mdc});
  py::array adb = gradient_out(std::move(db), "db", ma, p.k, p.n, a, {&ma, &mb, &mdc});
  const Matrix mda = matrix(ada, "da"), mdb = matrix(adb, "db");
  if (overlaps(mda, mdb)) throw py::value_error("da and db must not overlap");
  p.a = ma.data;
  p.b = mb.data;
  p.dc = mdc.data;
  p.da = mda.data;
  p.db = mdb.data;
  Plan plan;
  plan.keep = py::make_tuple(a, b, dc, ada, adb);
  plan.result = py::make_tuple(ada, adb);
  plan.call = [&ks, p, blk, threads] { gemm_backward(ks, p, blk, static_cast<int>(threads)); };
  plan.tiles = tile_dict(ks.isa, ks.description, ks.mr, ks.nr, blk);
  return plan;
}

Plan conv2d_backward_plan(const py::array& x, const py::array& w, const py::array& dy, Pair stride, Pair padding,
                          Pair dilation, int64_t groups, std::optional<py::array> dx, std::optional<py::array> dw,
                          std::optional<int64_t> tile_m, std::optional<int64_t> tile_n, std::optional<int64_t> tile_k,
                          int64_t threads, const std::string& isa) {
  const Tensor tx = tensor(x, "x", 4), tw = tensor(w, "w", 4), tdy = tensor(dy, "dy", 4);
  ConvBackwardProblem p;
  p.conv = conv_problem(tx, tw, w, stride, padding, dilation, groups);
  const ConvProblem& c = p.conv;
  expect_dtype(tdy, tx, "dy", "x");
  expect_shape(tdy, dy, "dy", {c.n, c.k, c.out_h(), c.out_w()}, "the forward's output shape");
  check_threads(threads);
  const KernelSet& ks = kernel_set(isa);
  // tile_n is the pixel block (the products' columns and depth over output pixels); tile_m and tile_k
  // block the products as in a GEMM.
  const Blocking blk = blocking_for(ks, tile_m, std::nullopt, tile_k);
  p.pixel_block = tile_value(tile_n, "tile_n");
  const std::vector<int64_t> dx_shape(tx.shape), dw_shape(tw.shape);
  const int64_t out_bytes = checked::add(dx ? 0 : array_bytes(dx_shape, tx.itemsize, "dx size"),
                                         dw ? 0 : array_bytes(dw_shape, tx.itemsize, "dw size"), "gradients");
  check_alloc(checked::add(conv2d_backward_workspace_bytes(ks, p, blk, threads), out_bytes, "conv2d backward"),
              "conv2d backward");
  py::array adx = output_like(x, dx_shape, std::move(dx), "dx", c.dtype);
  py::array adw = output_like(x, dw_shape, std::move(dw), "dw", c.dtype);
  for (const py::array* out : {&adx, &adw}) {
    for (const py::array* in : {&x, &w, &dy}) {
      if (out->data() == in->data()) throw py::value_error("dx and dw must not be an input");
    }
  }
  p.conv.x = tx.data;
  p.conv.w = tw.data;
  p.dy = tdy.data;
  p.dx = adx.mutable_data();
  p.dw = adw.mutable_data();
  Plan plan;
  plan.keep = py::make_tuple(x, w, dy, adx, adw);
  plan.result = py::make_tuple(adx, adw);
  plan.call = [&ks, p, blk, threads] { conv2d_backward(ks, p, blk, static_cast<int>(threads)); };
  plan.tiles = tile_dict(ks.isa, ks.description, ks.mr, ks.nr, blk);
  plan.tiles["tile_n"] = conv2d_backward_pixel_block(p.conv, p.pixel_block);
  return plan;
}

}  // namespace

void define_training(py::module_& m) {
  m.def("prepare_conv2d_backward", &conv2d_backward_plan, py::arg("x"), py::arg("w"), py::arg("dy"),
        py::arg("stride") = Pair{1, 1}, py::arg("padding") = Pair{0, 0}, py::arg("dilation") = Pair{1, 1},
        py::arg("groups") = 1, py::arg("dx") = py::none(), py::arg("dw") = py::none(), py::arg("tile_m") = py::none(),
        py::arg("tile_n") = py::none(), py::arg("tile_k") = py::none(), py::arg("threads") = 1, py::arg("isa") = "",
        "dX and dW of conv2d(x, w) for the upstream gradient dy, prepared once (output() is (dx, dw)).");
  m.def("prepare_gemm_backward", &gemm_backward_plan, py::arg("a"), py::arg("b"), py::arg("dc"),
        py::arg("da") = py::none(), py::arg("db") = py::none(), py::arg("tile_m") = py::none(),
        py::arg("tile_n") = py::none(), py::arg("tile_k") = py::none(), py::arg("threads") = 1, py::arg("isa") = "",
        "dA = dC B^T and dB = A^T dC for C = A B, prepared once (a Plan whose output() is (da, db)).");
}

}  // namespace opbench::bind

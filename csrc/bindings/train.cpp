// opbench._core's backward passes: argument checks and prepared calls (Plan) around backward.hpp.
#include <algorithm>
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
  if (!given) return new_output(dtype_of.dtype(), {rows, cols});
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
                        std::optional<py::array> db, const Tiles& tiles) {
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
  const int64_t threads = tiles.threads;
  const KernelSet& ks = tiles.kernels();
  const Blocking blk = tiles.blocking(ks);
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
  plan.tiles = [&ks, blk] { return tile_dict(ks.isa, ks.description, ks.mr, ks.nr, blk); };
  return plan;
}

Plan conv2d_backward_plan(const py::array& x, const py::array& w, const py::array& dy, Pair stride, Padding padding,
                          Pair dilation, int64_t groups, std::optional<py::array> dx, std::optional<py::array> dw,
                          const Tiles& tiles) {
  const Tensor tx = tensor(x, "x", 4), tw = tensor(w, "w", 4), tdy = tensor(dy, "dy", 4);
  ConvBackwardProblem p;
  p.conv = conv_problem(tx, tw, w, stride, padding, dilation, groups);
  const ConvProblem& c = p.conv;
  expect_dtype(tdy, tx, "dy", "x");
  expect_shape(tdy, dy, "dy", {c.n, c.k, c.out_h(), c.out_w()}, "the forward's output shape");
  const int64_t threads = tiles.threads;
  const KernelSet& ks = tiles.kernels();
  // tile_n is the pixel block (the products' columns and depth over output pixels); tile_m and tile_k
  // block the products as in a GEMM.
  const Blocking blk = resolve_blocking(ks, {tiles.m, 0, tiles.k});
  p.pixel_block = tiles.n;
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
  plan.tiles = [&ks, blk, pixels = conv2d_backward_pixel_block(p.conv, p.pixel_block), path = conv2d_backward_path(p.conv)] {
    py::dict d = tile_dict(ks.isa, ks.description, ks.mr, ks.nr, blk);
    d["tile_n"] = pixels;
    d["path"] = path;
    return d;
  };
  return plan;
}

py::array f32_array(int64_t n) { return py::array_t<float>(std::vector<int64_t>{std::max<int64_t>(n, 1)}); }

Plan rnn_backward_plan(const std::string& cell, const py::array& x, const py::array& w_ih, const py::array& w_hh,
                       const py::array& b_ih, const py::array& b_hh, const py::array& h0, std::optional<py::array> c0,
                       const py::array& dy, const py::array& dh_n, std::optional<py::array> dc_n,
                       const Tiles& tiles) {
  RnnBackwardProblem p;
  p.fwd = rnn_problem(cell, x, w_ih, w_hh, b_ih, b_hh, h0, c0);
  RnnProblem& f = p.fwd;
  const bool lstm = f.mode == RnnMode::lstm;
  const int64_t T = f.seq_len, B = f.batch, I = f.input_size, H = f.hidden, G = rnn_gates(f.mode) * H;
  const Tensor tx = tensor(x, "x", 3), tdy = tensor(dy, "dy", 3), tdh = tensor(dh_n, "dh_n", 2);
  expect_shape(tdy, dy, "dy", {T, B, H}, "the forward's y: seq_len x batch x hidden");
  expect_shape(tdh, dh_n, "dh_n", {B, H}, "batch x hidden");
  expect_dtype(tdy, tx, "dy", "x");
  expect_dtype(tdh, tx, "dh_n", "x");
  if (lstm != dc_n.has_value()) {
    throw py::value_error(lstm ? "the LSTM needs dc_n (batch x hidden)" : "dc_n is the LSTM's; a " + cell +
                                                                                " cell has no cell state");
  }
  std::optional<Tensor> tdc;
  if (lstm) {
    tdc = tensor(*dc_n, "dc_n", 2);
    expect_shape(*tdc, *dc_n, "dc_n", {B, H}, "batch x hidden");
    expect_dtype(*tdc, tx, "dc_n", "x");
  }
  const int64_t threads = tiles.threads;
  const KernelSet& ks = tiles.kernels();
  const Blocking blk = tiles.blocking(ks);
  const RnnSavedSizes sizes = rnn_saved_floats(f);
  const int64_t item = tx.itemsize;
  const int64_t saved = checked::mul(checked::add(checked::add(sizes.gates, sizes.state, "saved"), sizes.tanh_c, "saved"),
                                     int64_t(sizeof(float)), "saved activations");
  const int64_t arrays = checked::mul(
      checked::add(checked::add(checked::mul(checked::mul(T, B, "y"), checked::add(I, H, "I + H"), "y and dx"),
                                checked::mul(G, checked::add(checked::add(I, H, "I + H"), 2, "weights"), "weights"),
                                "gradients"),
                   checked::mul(B, H, "states") * 4, "gradients"),
      item, "forward outputs and gradients");
  check_alloc(checked::add(checked::add(checked::add(rnn_workspace_bytes(ks, f, blk, threads),
                                                     rnn_backward_workspace_bytes(ks, p, blk, threads), "rnn training"),
                                        saved, "rnn training"),
                           arrays, "rnn training"),
              "rnn backward");
  // The training forward, once, here: its outputs and saved activations are what every call differentiates.
  py::array ay = output_like(x, {T, B, H}, std::nullopt, "y", f.dtype);
  py::array ah = output_like(x, {B, H}, std::nullopt, "h_n", f.dtype);
  py::array ac = output_like(x, {B, H}, std::nullopt, "c_n", f.dtype);
  py::array sg = f32_array(sizes.gates), ss = f32_array(sizes.state), st = f32_array(sizes.tanh_c);
  p.saved.gates = sizes.gates ? static_cast<float*>(sg.mutable_data()) : nullptr;
  p.saved.state = sizes.state ? static_cast<float*>(ss.mutable_data()) : nullptr;
  p.saved.tanh_c = sizes.tanh_c ? static_cast<float*>(st.mutable_data()) : nullptr;
  f.y = ay.mutable_data();
  f.h_n = ah.mutable_data();
  f.c_n = lstm ? ac.mutable_data() : nullptr;
  f.save = &p.saved;
  {
    py::gil_scoped_release release;
    rnn_forward(ks, rnn_kernels(ks), f, blk, static_cast<int>(threads));
  }
  f.save = nullptr;  // the plan's copy must not point at this frame
  p.dy = tdy.data;
  p.dh_n = tdh.data;
  p.dc_n = lstm ? tdc->data : nullptr;
  py::array gx = output_like(x, {T, B, I}, std::nullopt, "dx", f.dtype);
  py::array gwi = output_like(x, {G, I}, std::nullopt, "dw_ih", f.dtype);
  py::array gwh = output_like(x, {G, H}, std::nullopt, "dw_hh", f.dtype);
  py::array gbi = output_like(x, {G}, std::nullopt, "db_ih", f.dtype);
  py::array gbh = output_like(x, {G}, std::nullopt, "db_hh", f.dtype);
  py::array gh0 = output_like(x, {B, H}, std::nullopt, "dh0", f.dtype);
  py::array gc0 = output_like(x, {B, H}, std::nullopt, "dc0", f.dtype);
  p.dx = gx.mutable_data();
  p.dw_ih = gwi.mutable_data();
  p.dw_hh = gwh.mutable_data();
  p.db_ih = gbi.mutable_data();
  p.db_hh = gbh.mutable_data();
  p.dh0 = gh0.mutable_data();
  p.dc0 = lstm ? gc0.mutable_data() : nullptr;
  Plan plan;
  const py::object c0_obj = c0 ? py::object(*c0) : py::object(py::none());
  const py::object dcn_obj = dc_n ? py::object(*dc_n) : py::object(py::none());
  plan.keep = py::make_tuple(py::make_tuple(x, w_ih, w_hh, b_ih, b_hh, h0, c0_obj, dy, dh_n),
                             py::make_tuple(dcn_obj, ay, ah, ac, sg, ss, st),
                             py::make_tuple(gx, gwi, gwh, gbi, gbh, gh0, gc0));
  if (lstm) {
    plan.result = py::make_tuple(gx, gwi, gwh, gbi, gbh, gh0, gc0);
  } else {
    plan.result = py::make_tuple(gx, gwi, gwh, gbi, gbh, gh0);
  }
  plan.call = [&ks, p, blk, threads] { rnn_backward(ks, p, blk, static_cast<int>(threads)); };
  plan.saved["y"] = ay;
  plan.saved["h_n"] = ah;
  if (lstm) plan.saved["c_n"] = ac;
  if (sizes.gates) plan.saved["gates"] = sg.attr("reshape")(py::make_tuple(T, B, G));
  if (sizes.state) plan.saved["state"] = ss.attr("reshape")(py::make_tuple(T, B, H));
  if (sizes.tanh_c) plan.saved["tanh_c"] = st.attr("reshape")(py::make_tuple(T, B, H));
  plan.tiles = [&ks, blk] { return tile_dict(ks.isa, ks.description, ks.mr, ks.nr, blk); };
  return plan;
}

}  // namespace

void define_training(py::module_& m) {
  m.def("prepare_rnn_backward", &rnn_backward_plan, py::arg("cell"), py::arg("x"), py::arg("w_ih"), py::arg("w_hh"),
        py::arg("b_ih"), py::arg("b_hh"), py::arg("h0"), py::arg("c0"), py::arg("dy"), py::arg("dh_n"),
        py::arg("dc_n"), py::arg("tiles") = Tiles{},
        "The recurrent layer's forward with its activations saved, run once here, and its backward (BPTT) "
        "prepared: output() is (dx, dw_ih, dw_hh, db_ih, db_hh, dh0[, dc0]).");
  m.def("prepare_conv2d_backward", &conv2d_backward_plan, py::arg("x"), py::arg("w"), py::arg("dy"),
        py::arg("stride") = Pair{1, 1}, py::arg("padding") = Padding{0, 0, 0, 0}, py::arg("dilation") = Pair{1, 1},
        py::arg("groups") = 1, py::arg("dx") = py::none(), py::arg("dw") = py::none(), py::arg("tiles") = Tiles{},
        "dX and dW of conv2d(x, w) for the upstream gradient dy, prepared once (output() is (dx, dw)).");
  m.def("prepare_gemm_backward", &gemm_backward_plan, py::arg("a"), py::arg("b"), py::arg("dc"),
        py::arg("da") = py::none(), py::arg("db") = py::none(), py::arg("tiles") = Tiles{},
        "dA = dC B^T and dB = A^T dC for C = A B, prepared once (a Plan whose output() is (da, db)).");
}

}  // namespace opbench::bind

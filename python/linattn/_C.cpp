// nanobind bindings of the linattn C++ API.
//
// Arrays arrive through DLPack (nb::ndarray), so any framework that exports DLPack works
// (NumPy, PyTorch, CuPy, JAX) on any device; None stands for an absent optional tensor. The
// extension never allocates tensors: the caller passes every output and the workspace. A
// non-ok Status becomes a Python exception (kInvalidArgument -> ValueError, kNotSupported ->
// NotImplementedError, anything else -> RuntimeError) carrying the C++ message. The compute
// calls release the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <vector>

#include "linattn/linattn.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using linattn::DType;
using linattn::DeviceType;
using linattn::Status;
using linattn::StatusCode;
using linattn::TensorView;

using InArray = nb::ndarray<nb::ro>;  // read-only input
using OutArray = nb::ndarray<>;       // writable output
using OptIn = std::optional<InArray>;
using OptOut = std::optional<OutArray>;

[[noreturn]] void raise(PyObject* type, const std::string& msg) {
  PyErr_SetString(type, msg.c_str());
  throw nb::python_error();
}

void check(const Status& s) {
  if (s.ok()) return;
  switch (s.code) {
    case StatusCode::kInvalidArgument: raise(PyExc_ValueError, s.message);
    case StatusCode::kNotSupported: raise(PyExc_NotImplementedError, s.message);
    default: raise(PyExc_RuntimeError, s.message);
  }
}

DType to_dtype(const char* name, nb::dlpack::dtype dt) {
  using Code = nb::dlpack::dtype_code;
  if (dt.lanes == 1) {
    const auto code = static_cast<Code>(dt.code);
    if (code == Code::Float) {
      if (dt.bits == 16) return DType::kFloat16;
      if (dt.bits == 32) return DType::kFloat32;
      if (dt.bits == 64) return DType::kFloat64;
    } else if (code == Code::Bfloat && dt.bits == 16) {
      return DType::kBFloat16;
    } else if (code == Code::Int) {
      if (dt.bits == 32) return DType::kInt32;
      if (dt.bits == 64) return DType::kInt64;
    } else if (code == Code::UInt && dt.bits == 8) {
      return DType::kUInt8;
    }
  }
  raise(PyExc_ValueError, std::string(name) + ": unsupported dtype (DLPack code " +
                              std::to_string(dt.code) + ", " + std::to_string(dt.bits) +
                              " bits, " + std::to_string(dt.lanes) + " lanes); linattn takes "
                              "float16, bfloat16, float32, float64, int32, int64 or uint8");
}

template <typename Array>
TensorView to_view(const char* name, const Array& a) {
  TensorView t;
  if (a.ndim() > static_cast<size_t>(linattn::kMaxDims)) {
    raise(PyExc_ValueError, std::string(name) + " has " + std::to_string(a.ndim()) +
                                " dimensions; at most " + std::to_string(linattn::kMaxDims) +
                                " are supported");
  }
  t.data = const_cast<void*>(static_cast<const void*>(a.data()));
  t.dtype = to_dtype(name, a.dtype());
  t.ndim = static_cast<int32_t>(a.ndim());
  const int64_t* strides = a.stride_ptr();
  int64_t expected = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.shape[i] = static_cast<int64_t>(a.shape(i));
    t.strides[i] = strides ? strides[i] : expected;  // DLPack: null strides mean row-major
    expected *= t.shape[i];
  }
  switch (a.device_type()) {
    case nb::device::cpu::value:
    case nb::device::cuda_host::value:  // pinned host memory is host memory
      t.device = {DeviceType::kCPU, 0};
      break;
    case nb::device::cuda::value:
      t.device = {DeviceType::kCUDA, a.device_id()};
      break;
    default:
      raise(PyExc_ValueError, std::string(name) + " lives on an unsupported device (DLPack device type " +
                                  std::to_string(a.device_type()) + "); linattn takes CPU or CUDA arrays");
  }
  return t;
}

template <typename Array>
TensorView opt_view(const char* name, const std::optional<Array>& a) {
  if (!a.has_value() || !a->is_valid()) return TensorView{};
  return to_view(name, *a);
}

linattn::Family to_family(int f) {
  if (f < 0 || f > 3) raise(PyExc_ValueError, "family must be 0 (simple_gla), 1 (gla), 2 (gdn) or 3 (kda), got " + std::to_string(f));
  return static_cast<linattn::Family>(f);
}

// The workspace array through the C++ API's rules (workspace_from_view: a dense 1-D uint8
// buffer); forward / backward then check its size, device, alignment and overlap.
linattn::Workspace to_workspace(const OptOut& ws) {
  linattn::Workspace w;
  if (ws.has_value() && ws->is_valid()) check(linattn::workspace_from_view(to_view("workspace", *ws), &w));
  return w;
}

// Inputs shared by every call, in a fixed keyword order.
struct Inputs {
  InArray q, k, v;
  OptIn g, g_gamma, beta, A_log, dt_bias, initial_state, cu_seqlens, cu_seqlens_host;

  linattn::ForwardInputs views() const {
    linattn::ForwardInputs in;
    in.q = to_view("q", q);
    in.k = to_view("k", k);
    in.v = to_view("v", v);
    in.g = opt_view("g", g);
    in.g_gamma = opt_view("g_gamma", g_gamma);
    in.beta = opt_view("beta", beta);
    in.A_log = opt_view("A_log", A_log);
    in.dt_bias = opt_view("dt_bias", dt_bias);
    in.initial_state = opt_view("initial_state", initial_state);
    in.cu_seqlens = opt_view("cu_seqlens", cu_seqlens);
    in.cu_seqlens_host = opt_view("cu_seqlens_host", cu_seqlens_host);
    return in;
  }
};

linattn::ForwardOutputs fwd_out(const OutArray& o, const OptOut& final_state, const OptOut& h,
                                const OptOut& saved, const OptOut& state_map_o = std::nullopt,
                                const OptOut& state_map_final = std::nullopt) {
  linattn::ForwardOutputs out;
  out.o = to_view("o", o);
  out.final_state = opt_view("final_state", final_state);
  out.h = opt_view("h", h);
  out.saved = opt_view("saved", saved);
  out.state_map_o = opt_view("state_map_o", state_map_o);
  out.state_map_final = opt_view("state_map_final", state_map_final);
  return out;
}

linattn::BackwardInputs bwd_in(const Inputs& x, const InArray& d_o, const OptIn& dht,
                               const OptIn& saved) {
  linattn::BackwardInputs in;
  in.fwd = x.views();
  in.d_o = to_view("d_o", d_o);
  in.dht = opt_view("dht", dht);
  in.saved = opt_view("saved", saved);
  return in;
}

struct Grads {
  OutArray dq, dk, dv;
  OptOut dg, dg_gamma, dbeta, dA_log, ddt_bias, dh0;
  linattn::BackwardOutputs views() const {
    linattn::BackwardOutputs out;
    out.dq = to_view("dq", dq);
    out.dk = to_view("dk", dk);
    out.dv = to_view("dv", dv);
    out.dg = opt_view("dg", dg);
    out.dg_gamma = opt_view("dg_gamma", dg_gamma);
    out.dbeta = opt_view("dbeta", dbeta);
    out.dA_log = opt_view("dA_log", dA_log);
    out.ddt_bias = opt_view("ddt_bias", ddt_bias);
    out.dh0 = opt_view("dh0", dh0);
    return out;
  }
};

// Shape-only problem description for the saved-buffer size query of graph tracers (fake
// tensors carry no data). Each entry is (dtype name, shape); data pointers are never read
// because cu_seqlens (the only tensor whose values validation reads) is refused here.
DType dtype_from_name(const std::string& s) {
  static const std::pair<const char*, DType> names[] = {
      {"float16", DType::kFloat16}, {"bfloat16", DType::kBFloat16}, {"float32", DType::kFloat32},
      {"float64", DType::kFloat64}, {"int32", DType::kInt32},       {"int64", DType::kInt64},
      {"uint8", DType::kUInt8}};
  for (const auto& [n, d] : names) {
    if (s == n) return d;
  }
  raise(PyExc_ValueError, "unknown dtype name " + s);
}

using Spec = std::optional<std::tuple<std::string, std::vector<int64_t>>>;

TensorView spec_view(const char* name, const Spec& spec, linattn::Device device) {
  TensorView t;
  if (!spec.has_value()) return t;
  const auto& [dtype, shape] = *spec;
  if (shape.size() > static_cast<size_t>(linattn::kMaxDims)) raise(PyExc_ValueError, std::string(name) + ": too many dimensions");
  // Never dereferenced: a non-null placeholder satisfies the pointer check of validation.
  alignas(16) static unsigned char placeholder[16];
  t.data = placeholder;
  t.dtype = dtype_from_name(dtype);
  t.ndim = static_cast<int32_t>(shape.size());
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[i];
    t.strides[i] = stride;
    stride *= shape[i];
  }
  t.device = device;
  return t;
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "linattn C++ core (chunked linear attention) bound through DLPack";

  nb::enum_<linattn::BackwardPrecision>(m, "BackwardPrecision",
                                        "How the CUDA backward of KDA / GDN computes (linattn.hpp): "
                                        "auto (default), split, fast16, float32.")
      .value("auto", linattn::BackwardPrecision::kAuto)
      .value("split", linattn::BackwardPrecision::kSplit)
      .value("fast16", linattn::BackwardPrecision::kFast16)
      .value("float32", linattn::BackwardPrecision::kFloat32);

  nb::class_<linattn::Options>(m, "Options")
      .def(
          "__init__",
          [](linattn::Options* self, std::optional<double> scale, bool use_qk_l2norm_in_kernel,
             bool use_beta_sigmoid_in_kernel, bool allow_neg_eigval, bool use_gate_in_kernel,
             bool safe_gate, std::optional<float> lower_bound, bool state_v_first, bool disable_recompute,
             linattn::BackwardPrecision backward_precision, bool keep_chunk_local) {
            new (self) linattn::Options();
            self->scale = scale;
            self->use_qk_l2norm_in_kernel = use_qk_l2norm_in_kernel;
            self->use_beta_sigmoid_in_kernel = use_beta_sigmoid_in_kernel;
            self->allow_neg_eigval = allow_neg_eigval;
            self->use_gate_in_kernel = use_gate_in_kernel;
            self->safe_gate = safe_gate;
            self->lower_bound = lower_bound;
            self->state_v_first = state_v_first;
            self->disable_recompute = disable_recompute;
            self->backward_precision = backward_precision;
            self->keep_chunk_local = keep_chunk_local;
          },
          nb::kw_only(), "scale"_a.none() = nb::none(), "use_qk_l2norm_in_kernel"_a = false,
          "use_beta_sigmoid_in_kernel"_a = false, "allow_neg_eigval"_a = false,
          "use_gate_in_kernel"_a = false, "safe_gate"_a = false,
          "lower_bound"_a.none() = nb::none(), "state_v_first"_a = false, "disable_recompute"_a = false,
          "backward_precision"_a = linattn::BackwardPrecision::kAuto, "keep_chunk_local"_a = false)
      .def_rw("scale", &linattn::Options::scale, nb::arg().none())
      .def_rw("use_qk_l2norm_in_kernel", &linattn::Options::use_qk_l2norm_in_kernel)
      .def_rw("use_beta_sigmoid_in_kernel", &linattn::Options::use_beta_sigmoid_in_kernel)
      .def_rw("allow_neg_eigval", &linattn::Options::allow_neg_eigval)
      .def_rw("use_gate_in_kernel", &linattn::Options::use_gate_in_kernel)
      .def_rw("safe_gate", &linattn::Options::safe_gate)
      .def_rw("lower_bound", &linattn::Options::lower_bound, nb::arg().none())
      .def_rw("state_v_first", &linattn::Options::state_v_first)
      .def_rw("disable_recompute", &linattn::Options::disable_recompute)
      .def_rw("keep_chunk_local", &linattn::Options::keep_chunk_local)
      .def_rw("backward_precision", &linattn::Options::backward_precision);

  m.attr("CHUNK_SIZE") = linattn::kChunkSize;
  m.def("version", &linattn::version);
  m.def("cuda_available", &linattn::cuda_available,
        "Whether this build has the CUDA backend and a usable GPU is present.");

// The input keywords every entry point takes, in this order.
#define LINATTN_INPUT_ARGS                                                                     \
  "q"_a, "k"_a, "v"_a, "g"_a.none() = nb::none(), "g_gamma"_a.none() = nb::none(),            \
      "beta"_a.none() = nb::none(), "A_log"_a.none() = nb::none(),                             \
      "dt_bias"_a.none() = nb::none(), "initial_state"_a.none() = nb::none(),                  \
      "cu_seqlens"_a.none() = nb::none(), "cu_seqlens_host"_a.none() = nb::none()
#define LINATTN_INPUT_PARAMS                                                                   \
  InArray q, InArray k, InArray v, OptIn g, OptIn g_gamma, OptIn beta, OptIn A_log,            \
      OptIn dt_bias, OptIn initial_state, OptIn cu_seqlens, OptIn cu_seqlens_host
#define LINATTN_INPUTS                                                                         \
  Inputs {                                                                                     \
    q, k, v, g, g_gamma, beta, A_log, dt_bias, initial_state, cu_seqlens, cu_seqlens_host      \
  }

  m.def(
      "forward_workspace_size",
      [](int family, LINATTN_INPUT_PARAMS, const linattn::Options& opt) {
        std::size_t bytes = 0;
        check(linattn::forward_workspace_size(to_family(family), LINATTN_INPUTS.views(), opt, &bytes));
        return bytes;
      },
      "family"_a, LINATTN_INPUT_ARGS, "options"_a,
      "Bytes of scratch memory forward() needs for these inputs (validates them).");

  m.def(
      "backward_workspace_size",
      [](int family, LINATTN_INPUT_PARAMS, const linattn::Options& opt, OptIn saved) {
        std::size_t bytes = 0;
        linattn::BackwardInputs in;
        in.fwd = LINATTN_INPUTS.views();
        in.saved = opt_view("saved", saved);
        check(linattn::backward_workspace_size(to_family(family), in, opt, &bytes));
        return bytes;
      },
      "family"_a, LINATTN_INPUT_ARGS, "options"_a, "saved"_a.none() = nb::none(),
      "Bytes of scratch memory backward() needs for these inputs (validates them); with the "
      "saved buffer the backward will read (disable_recompute), the smaller size of that backward.");

  m.def(
      "saved_bytes",
      [](int family, LINATTN_INPUT_PARAMS, const linattn::Options& opt) {
        std::size_t bytes = 0;
        check(linattn::saved_bytes(to_family(family), LINATTN_INPUTS.views(), opt, &bytes));
        return bytes;
      },
      "family"_a, LINATTN_INPUT_ARGS, "options"_a,
      "Bytes of the disable_recompute buffer that forward() fills and backward() reads "
      "(0: the backend keeps nothing).");

  m.def(
      "num_chunks",
      [](InArray q, InArray k, InArray v, OptIn cu_seqlens, OptIn cu_seqlens_host) {
        linattn::ForwardInputs in;
        in.q = to_view("q", q);
        in.k = to_view("k", k);
        in.v = to_view("v", v);
        in.cu_seqlens = opt_view("cu_seqlens", cu_seqlens);
        in.cu_seqlens_host = opt_view("cu_seqlens_host", cu_seqlens_host);
        int64_t nt = 0;
        check(linattn::num_chunks(in, &nt));
        return nt;
      },
      "q"_a, "k"_a, "v"_a, "cu_seqlens"_a.none() = nb::none(),
      "cu_seqlens_host"_a.none() = nb::none(),
      "Total number of 64-token chunks NT (the second dimension of the intermediate states h).");

  m.def(
      "saved_bytes_from_shapes",
      [](int family, int device_type, int device_index, Spec q, Spec k, Spec v, Spec g,
         Spec g_gamma, Spec beta, Spec A_log, Spec dt_bias, Spec initial_state,
         const linattn::Options& opt) {
        if (device_type != 1 && device_type != 2) raise(PyExc_ValueError, "device_type must be 1 (CPU) or 2 (CUDA)");
        const linattn::Device dev{static_cast<DeviceType>(device_type), device_index};
        linattn::ForwardInputs in;
        in.q = spec_view("q", q, dev);
        in.k = spec_view("k", k, dev);
        in.v = spec_view("v", v, dev);
        in.g = spec_view("g", g, dev);
        in.g_gamma = spec_view("g_gamma", g_gamma, dev);
        in.beta = spec_view("beta", beta, dev);
        in.A_log = spec_view("A_log", A_log, dev);
        in.dt_bias = spec_view("dt_bias", dt_bias, dev);
        in.initial_state = spec_view("initial_state", initial_state, dev);
        std::size_t bytes = 0;
        check(linattn::saved_bytes(to_family(family), in, opt, &bytes));
        return bytes;
      },
      "family"_a, "device_type"_a, "device_index"_a, "q"_a, "k"_a, "v"_a, "g"_a.none(),
      "g_gamma"_a.none(), "beta"_a.none(), "A_log"_a.none(), "dt_bias"_a.none(),
      "initial_state"_a.none(), "options"_a,
      "saved_bytes() from (dtype name, shape) pairs instead of arrays, for fixed-length inputs "
      "(graph tracers whose tensors hold no data). None marks an absent input.");

  m.def(
      "forward",
      [](int family, LINATTN_INPUT_PARAMS, OutArray o, OptOut final_state, OptOut h, OptOut saved,
         const linattn::Options& opt, OptOut workspace, uintptr_t stream, OptOut state_map_o,
         OptOut state_map_final) {
        const linattn::ForwardInputs in = LINATTN_INPUTS.views();
        const linattn::ForwardOutputs out = fwd_out(o, final_state, h, saved, state_map_o, state_map_final);
        const linattn::Workspace ws = to_workspace(workspace);
        Status s;
        {
          nb::gil_scoped_release unlocked;
          s = linattn::forward(to_family(family), in, out, opt, ws, reinterpret_cast<linattn::Stream>(stream));
        }
        check(s);
      },
      "family"_a, LINATTN_INPUT_ARGS, "o"_a, "final_state"_a.none() = nb::none(),
      "h"_a.none() = nb::none(), "saved"_a.none() = nb::none(), "options"_a,
      "workspace"_a.none() = nb::none(), "stream"_a = 0, "state_map_o"_a.none() = nb::none(),
      "state_map_final"_a.none() = nb::none(),
      "Chunked forward into caller-allocated outputs. `stream` is a cudaStream_t as an int "
      "(0: the default stream), ignored for CPU arrays. state_map_o / state_map_final: how the "
      "outputs depend on the initial state (linattn.hpp; CUDA on Hopper only).");

  m.def(
      "backward",
      [](int family, LINATTN_INPUT_PARAMS, InArray d_o, OptIn dht, OptIn saved, OutArray dq,
         OutArray dk, OutArray dv, OptOut dg, OptOut dg_gamma, OptOut dbeta, OptOut dA_log,
         OptOut ddt_bias, OptOut dh0, const linattn::Options& opt, OptOut workspace,
         uintptr_t stream, bool saved_as_filled) {
        const Inputs x = LINATTN_INPUTS;
        linattn::BackwardInputs in = bwd_in(x, d_o, dht, saved);
        in.saved_as_filled = saved_as_filled;
        const linattn::BackwardOutputs out =
            Grads{dq, dk, dv, dg, dg_gamma, dbeta, dA_log, ddt_bias, dh0}.views();
        const linattn::Workspace ws = to_workspace(workspace);
        Status s;
        {
          nb::gil_scoped_release unlocked;
          s = linattn::backward(to_family(family), in, out, opt, ws, reinterpret_cast<linattn::Stream>(stream));
        }
        check(s);
      },
      "family"_a, LINATTN_INPUT_ARGS, "d_o"_a, "dht"_a.none() = nb::none(),
      "saved"_a.none() = nb::none(), "dq"_a, "dk"_a, "dv"_a, "dg"_a.none() = nb::none(),
      "dg_gamma"_a.none() = nb::none(), "dbeta"_a.none() = nb::none(),
      "dA_log"_a.none() = nb::none(), "ddt_bias"_a.none() = nb::none(),
      "dh0"_a.none() = nb::none(), "options"_a, "workspace"_a.none() = nb::none(),
      "stream"_a = 0, "saved_as_filled"_a = false,
      "Chunked backward into caller-allocated gradients (absent ones are not computed). "
      "saved_as_filled: saved is the forward's own buffer, unchanged (BackwardInputs::saved_as_filled: "
      "its header is not read back).");

  m.def(
      "reference_forward",
      [](int family, LINATTN_INPUT_PARAMS, OutArray o, OptOut final_state, OptOut h,
         const linattn::Options& opt) {
        const linattn::ForwardInputs in = LINATTN_INPUTS.views();
        const linattn::ForwardOutputs out = fwd_out(o, final_state, h, std::nullopt);
        Status s;
        {
          nb::gil_scoped_release unlocked;
          s = linattn::reference_forward(to_family(family), in, out, opt);
        }
        check(s);
      },
      "family"_a, LINATTN_INPUT_ARGS, "o"_a, "final_state"_a.none() = nb::none(),
      "h"_a.none() = nb::none(), "options"_a,
      "float64 token-by-token evaluation of the recurrence (CPU arrays only): the test oracle.");

  m.def(
      "reference_backward",
      [](int family, LINATTN_INPUT_PARAMS, InArray d_o, OptIn dht, OutArray dq, OutArray dk,
         OutArray dv, OptOut dg, OptOut dg_gamma, OptOut dbeta, OptOut dA_log, OptOut ddt_bias,
         OptOut dh0, const linattn::Options& opt) {
        const Inputs x = LINATTN_INPUTS;
        const linattn::BackwardInputs in = bwd_in(x, d_o, dht, std::nullopt);
        const linattn::BackwardOutputs out =
            Grads{dq, dk, dv, dg, dg_gamma, dbeta, dA_log, ddt_bias, dh0}.views();
        Status s;
        {
          nb::gil_scoped_release unlocked;
          s = linattn::reference_backward(to_family(family), in, out, opt);
        }
        check(s);
      },
      "family"_a, LINATTN_INPUT_ARGS, "d_o"_a, "dht"_a.none() = nb::none(), "dq"_a, "dk"_a,
      "dv"_a, "dg"_a.none() = nb::none(), "dg_gamma"_a.none() = nb::none(),
      "dbeta"_a.none() = nb::none(), "dA_log"_a.none() = nb::none(),
      "ddt_bias"_a.none() = nb::none(), "dh0"_a.none() = nb::none(), "options"_a,
      "float64 gradients of the recurrence (CPU arrays only): the test oracle.");

  m.def(
      "decode",
      [](int family, InArray q, InArray k, InArray v, OptIn g, OptIn g_gamma, OptIn beta, OptIn A_log,
         OptIn dt_bias, OptOut state, OptIn ssm_state_indices, OptIn num_accepted_tokens, OptIn cu_seqlens,
         OptIn cu_seqlens_host, bool inplace_final_state, OutArray o, OptOut final_state, OptOut status,
         const linattn::Options& opt, uintptr_t stream) {
        linattn::DecodeInputs in;
        in.q = to_view("q", q);
        in.k = to_view("k", k);
        in.v = to_view("v", v);
        in.g = opt_view("g", g);
        in.g_gamma = opt_view("g_gamma", g_gamma);
        in.beta = opt_view("beta", beta);
        in.A_log = opt_view("A_log", A_log);
        in.dt_bias = opt_view("dt_bias", dt_bias);
        in.state = opt_view("state", state);
        in.ssm_state_indices = opt_view("ssm_state_indices", ssm_state_indices);
        in.num_accepted_tokens = opt_view("num_accepted_tokens", num_accepted_tokens);
        in.cu_seqlens = opt_view("cu_seqlens", cu_seqlens);
        in.cu_seqlens_host = opt_view("cu_seqlens_host", cu_seqlens_host);
        in.inplace_final_state = inplace_final_state;
        linattn::DecodeOutputs out;
        out.o = to_view("o", o);
        out.final_state = opt_view("final_state", final_state);
        out.status = opt_view("status", status);
        Status s;
        {
          nb::gil_scoped_release unlocked;
          s = linattn::decode(to_family(family), in, out, opt, reinterpret_cast<linattn::Stream>(stream));
        }
        check(s);
      },
      "family"_a, "q"_a, "k"_a, "v"_a, "g"_a.none() = nb::none(), "g_gamma"_a.none() = nb::none(),
      "beta"_a.none() = nb::none(), "A_log"_a.none() = nb::none(), "dt_bias"_a.none() = nb::none(),
      "state"_a.none() = nb::none(), "ssm_state_indices"_a.none() = nb::none(),
      "num_accepted_tokens"_a.none() = nb::none(), "cu_seqlens"_a.none() = nb::none(),
      "cu_seqlens_host"_a.none() = nb::none(), "inplace_final_state"_a = false, "o"_a,
      "final_state"_a.none() = nb::none(), "status"_a.none() = nb::none(), "options"_a, "stream"_a = 0,
      "Recurrent decode (short sequences, state pools, speculative decoding) into caller-allocated "
      "outputs; `state` is updated in place with inplace_final_state. No workspace, no host sync.");
}

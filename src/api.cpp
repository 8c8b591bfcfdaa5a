// Public entry points: validate, size-check the workspace, dispatch to one backend.
#include <exception>
#include <new>
#include <string>

#include "common/backend.hpp"
#include "common/problem.hpp"
#include "linattn/linattn.hpp"

namespace linattn {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt8: return "uint8";
  }
  return "unknown";
}

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
    case DType::kBFloat16: return 2;
    case DType::kFloat32:
    case DType::kInt32: return 4;
    case DType::kFloat64:
    case DType::kInt64: return 8;
    case DType::kUInt8: return 1;
  }
  return 0;
}

const char* family_name(Family family) {
  switch (family) {
    case Family::kSimpleGLA: return "simple_gla";
    case Family::kGLA: return "gla";
    case Family::kGDN: return "gdn";
    case Family::kKDA: return "kda";
  }
  return "unknown";
}

const char* backward_precision_name(BackwardPrecision p) {
  switch (p) {
    case BackwardPrecision::kAuto: return "auto";
    case BackwardPrecision::kSplit: return "split";
    case BackwardPrecision::kFast16: return "fast16";
    case BackwardPrecision::kFloat32: return "float32";
  }
  return "unknown";
}

int64_t TensorView::numel() const {
  if (ndim < 0) return 0;
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    // Size-1 dimensions may carry any stride (as in PyTorch/DLPack).
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

TensorView make_view(const void* data, DType dtype, std::initializer_list<int64_t> shape,
                     Device device) {
  TensorView t;
  t.data = const_cast<void*>(data);
  t.dtype = dtype;
  t.ndim = static_cast<int32_t>(shape.size());
  int i = 0;
  for (int64_t d : shape) t.shape[i++] = d;
  int64_t stride = 1;
  for (int j = t.ndim - 1; j >= 0; --j) {
    t.strides[j] = stride;
    stride *= t.shape[j];
  }
  t.device = device;
  return t;
}

const char* version() { return "0.1.0"; }

bool cuda_available() { return cuda::available(); }

Status workspace_from_view(const TensorView& t, Workspace* ws) {
  if (ws == nullptr) return Status::Invalid("workspace_from_view: null output");
  return detail::workspace_view(t, ws);
}

namespace {

using detail::Problem;

bool on_cuda(const Problem& p) { return p.device.type == DeviceType::kCUDA; }

Status check_cuda_build(const Problem& p) {
  if (on_cuda(p) && !cuda::available()) {
    return Status::Unsupported("CUDA tensors were given but this build of linattn has no CUDA backend "
                               "or no CUDA device is present");
  }
  return Status::Ok();
}

// Every public entry point returns a Status and never throws: an allocation failure (host
// vectors sized from the problem, e.g. the sequence offsets of an absurd batch) or any other
// exception becomes a kBackendError.
template <class F>
Status guarded(F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return {StatusCode::kBackendError, "out of host memory (the problem's sizes are too large for this machine)"};
  } catch (const std::exception& e) {
    return {StatusCode::kBackendError, std::string("internal error: ") + e.what()};
  } catch (...) {
    return {StatusCode::kBackendError, "internal error: unknown exception"};
  }
}

std::size_t backend_saved_bytes(const Problem& p) {
  return on_cuda(p) ? cuda::saved_bytes(p) : cpu::saved_bytes(p);
}

Status check_saved_size(const TensorView& saved, const Problem& p) {
  const std::size_t need = backend_saved_bytes(p);
  if (need == 0 && p.opt.keep_chunk_local) {
    return Status::Unsupported("keep_chunk_local: nothing is kept for this problem on this backend (saved_bytes is "
                               "0: GLA or simple GLA on CUDA, Hopper, 16-bit inputs and compute, K = 128); pass no saved buffer");
  }
  if (static_cast<std::size_t>(saved.numel()) < need) {
    return Status::Invalid("saved buffer has " + std::to_string(saved.numel()) + " bytes, needs " +
                           std::to_string(need) + " (see saved_bytes)");
  }
  return Status::Ok();
}

}  // namespace

Status forward_workspace_size(Family family, const ForwardInputs& in, const Options& opt,
                              std::size_t* bytes) {
  return guarded([&]() -> Status {
    Problem p;
    Status s = detail::resolve_inputs(family, in, opt, &p);
    if (!s.ok()) return s;
    p.has_saved = opt.disable_recompute || opt.keep_chunk_local;
    *bytes = on_cuda(p) ? cuda::forward_workspace_bytes(p) : cpu::forward_workspace_bytes(p);
    return Status::Ok();
  });
}

Status backward_workspace_size(Family family, const BackwardInputs& in, const Options& opt,
                               std::size_t* bytes) {
  return guarded([&]() -> Status {
    Problem p;
    Status s = detail::resolve_inputs(family, in.fwd, opt, &p);
    if (!s.ok()) return s;
    p.has_saved = in.saved.present();
    *bytes = on_cuda(p) ? cuda::backward_workspace_bytes(p) : cpu::backward_workspace_bytes(p);
    return Status::Ok();
  });
}

Status saved_bytes(Family family, const ForwardInputs& in, const Options& opt, std::size_t* bytes) {
  return guarded([&]() -> Status {
    Problem p;
    Status s = detail::resolve_inputs(family, in, opt, &p);
    if (!s.ok()) return s;
    *bytes = backend_saved_bytes(p);
    return Status::Ok();
  });
}

Status num_chunks(const ForwardInputs& in, int64_t* nt) {
  return guarded([&]() -> Status {
    Problem p;
    // The family only matters for gate/beta rules; chunk counts depend on q and cu_seqlens alone,
    // so validate as simple GLA without gates.
    ForwardInputs shapes_only;
    shapes_only.q = in.q;
    shapes_only.k = in.k;
    shapes_only.v = in.v;
    shapes_only.cu_seqlens = in.cu_seqlens;
    shapes_only.cu_seqlens_host = in.cu_seqlens_host;
    Status s = detail::resolve_inputs(Family::kSimpleGLA, shapes_only, Options{}, &p);
    if (!s.ok()) return s;
    *nt = p.num_chunks;
    return Status::Ok();
  });
}

Status forward(Family family, const ForwardInputs& in, const ForwardOutputs& out,
               const Options& opt, Workspace ws, Stream stream) {
  return guarded([&]() -> Status {
    Problem p;
    Status s = detail::resolve_forward(family, in, out, opt, &p);
    if (!s.ok()) return s;
    if (!(s = check_cuda_build(p)).ok()) return s;
    if (out.saved.present() && !(s = check_saved_size(out.saved, p)).ok()) return s;
    if (out.state_map_o.present() && !on_cuda(p)) {
      return Status::Unsupported("state_map_o / state_map_final: the CPU backend does not compute them in the "
                                 "forward pass (a call from the identity state with zero values gives them)");
    }
    const std::size_t need = on_cuda(p) ? cuda::forward_workspace_bytes(p) : cpu::forward_workspace_bytes(p);
    if (!(s = detail::check_forward_workspace(p, in, out, ws, need)).ok()) {
      if (p.has_saved && s.code == StatusCode::kWorkspaceTooSmall) {
        s.message += " (with a saved buffer: set Options::disable_recompute for the query)";
      }
      return s;
    }
    if (on_cuda(p)) return cuda::forward(p, in, out, ws, stream);
    return cpu::forward(p, in, out, ws, stream);
  });
}

Status backward(Family family, const BackwardInputs& in, const BackwardOutputs& out,
                const Options& opt, Workspace ws, Stream stream) {
  return guarded([&]() -> Status {
    Problem p;
    Status s = detail::resolve_backward(family, in, out, opt, &p);
    if (!s.ok()) return s;
    if (!(s = check_cuda_build(p)).ok()) return s;
    // The CUDA backward checks a saved buffer itself, header first: one written under another backward
    // form has another size, and the header says which.
    if (in.saved.present() && (!on_cuda(p) || p.opt.keep_chunk_local) && !(s = check_saved_size(in.saved, p)).ok())
      return s;
    const std::size_t need = on_cuda(p) ? cuda::backward_workspace_bytes(p) : cpu::backward_workspace_bytes(p);
    if (!(s = detail::check_backward_workspace(p, in, out, ws, need)).ok()) return s;
    if (on_cuda(p)) return cuda::backward(p, in, out, ws, stream);
    return cpu::backward(p, in, out, ws, stream);
  });
}

Status reference_forward(Family family, const ForwardInputs& in, const ForwardOutputs& out,
                         const Options& opt) {
  return guarded([&]() -> Status {
    Problem p;
    Status s = detail::resolve_forward(family, in, out, opt, &p);
    if (!s.ok()) return s;
    if (on_cuda(p)) return Status::Unsupported("the float64 reference runs on CPU tensors only");
    if (out.state_map_o.present()) return Status::Unsupported("the float64 reference does not compute state maps");
    return reference::forward(p, in, out);
  });
}

Status reference_backward(Family family, const BackwardInputs& in, const BackwardOutputs& out,
                          const Options& opt) {
  return guarded([&]() -> Status {
    Problem p;
    Status s = detail::resolve_backward(family, in, out, opt, &p);
    if (!s.ok()) return s;
    if (on_cuda(p)) return Status::Unsupported("the float64 reference runs on CPU tensors only");
    return reference::backward(p, in, out);
  });
}

}  // namespace linattn

// Host-side helpers shared by the CUDA backend's entry points (cuda_backend.cu, chunk_bwd.cu):
// CUDA errors as Status, the transforms' kernel codes, chunk_prep's parameters, the alignment
// check, and switching to the tensors' device for a call.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include <cuda_runtime.h>

#include "common/problem.hpp"
#include "cuda/common/chunk_fwd.hpp"
#include "cuda/config/device_code.hpp"
#include "cuda/config/device_info.hpp"
#include "cuda/config/limits.hpp"
#include "linattn/linattn.hpp"

namespace linattn::cuda {

// dtype codes of the kernels' runtime switches (0 fp16, 1 bf16, 2 fp32, 3 anything else):
// config/limits.hpp.
using config::dtype_code;

inline Status cuda_error(const char* what, cudaError_t e) {
  return {StatusCode::kBackendError, std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e)};
}

// A kernel whose smallest configuration needs more shared memory a block than `device` offers
// (config::smem_limits): refused before its launch, with both sizes, nothing written to outputs.
inline Status smem_refusal(const char* direction, const char* kernel, std::size_t need, int device,
                           const char* hint = nullptr) {
  return Status::Unsupported(std::string("CUDA ") + direction + ": " + kernel + " needs " +
                             std::to_string(need / 1024) + " KiB of shared memory a block at this head size and dtype; this GPU offers " +
                             std::to_string(config::smem_limits(device).block / 1024) + " KiB" +
                             (hint ? std::string(" (") + hint + ")" : std::string()));
}

// The in-kernel transforms as the kernels' codes: gate 0 identity, 1 softplus, 2 lower bound;
// beta 0 identity, 1 sigmoid, 2 2·sigmoid.
inline int gate_kind_code(const detail::Problem& p) {
  switch (p.gate_tf.kind) {
    case detail::GateTransform::Kind::kSoftplus: return 1;
    case detail::GateTransform::Kind::kLowerBound: return 2;
    default: return 0;
  }
}
inline int beta_mode_code(const detail::Problem& p) { return p.beta_tf.sigmoid ? (p.beta_tf.neg_eigval ? 2 : 1) : 0; }

// chunk_prep's inputs and settings for problem p, reading the caller's q, k, v; the caller adds
// the chunk map, its outputs and the shared-memory choice (q_in_smem).
inline kern::PrepParams prep_params(const detail::Problem& p, const ForwardInputs& in) {
  kern::PrepParams pp{};
  pp.q = in.q.data;
  pp.k = in.k.data;
  pp.v = in.v.data;
  pp.g = p.has_g ? in.g.data : nullptr;
  pp.g_dt = p.has_g ? dtype_code(in.g.dtype) : 2;
  pp.beta = p.delta ? in.beta.data : nullptr;
  pp.beta_dt = p.delta ? dtype_code(in.beta.dtype) : 2;
  pp.delta = p.delta ? 1 : 0;
  pp.g_gamma = p.has_g_gamma ? in.g_gamma.data : nullptr;
  pp.gg_dt = p.has_g_gamma ? dtype_code(in.g_gamma.dtype) : 2;
  pp.A_log = p.has_A_log ? in.A_log.data : nullptr;
  pp.alog_dt = p.has_A_log ? dtype_code(in.A_log.dtype) : 2;
  pp.dt_bias = p.has_dt_bias ? in.dt_bias.data : nullptr;
  pp.dtb_dt = p.has_dt_bias ? dtype_code(in.dt_bias.dtype) : 2;
  pp.num_chunks = static_cast<int>(p.num_chunks);
  pp.H = static_cast<int>(p.H);
  pp.HV = static_cast<int>(p.HV);
  pp.G = static_cast<int>(p.G);
  pp.K = static_cast<int>(p.K);
  pp.V = static_cast<int>(p.V);
  pp.scale = static_cast<float>(p.scale);
  pp.l2norm = p.opt.use_qk_l2norm_in_kernel ? 1 : 0;
  pp.beta_mode = beta_mode_code(p);
  pp.gate_kind = gate_kind_code(p);
  pp.lower_bound = static_cast<float>(p.gate_tf.lower_bound);
  pp.has_alog = p.has_A_log ? 1 : 0;
  pp.has_dtb = p.has_dt_bias ? 1 : 0;
  return pp;
}

// The kernels move tensors in 16-byte pieces (uint4 / cp.async): every tensor they touch must
// start 16-byte aligned. Allocations are (cudaMalloc: 256 bytes); a view at an odd element offset
// is not, and is refused here rather than faulting in a kernel.
inline Status check_aligned(std::initializer_list<std::pair<const char*, const TensorView*>> ts) {
  for (const auto& [name, t] : ts) {
    if (t->present() && t->numel() > 0 && reinterpret_cast<std::uintptr_t>(t->data) % 16 != 0)
      return Status::Unsupported(std::string("the CUDA kernels need 16-byte aligned tensors; ") + name +
                                 " starts at a misaligned address (a view at an element offset?)");
  }
  return Status::Ok();
}

// Makes `device` current for the guard's lifetime and restores the caller's device after.
class DeviceGuard {
 public:
  // Status of the switch; the call must not proceed unless ok(). A device this build has no code
  // for (config/device_code.hpp: below compute capability 8.0, or off Hopper under a 90a-only
  // build) is refused here, before anything runs, rather than by the first launch's "no kernel
  // image"; any other failure of that query is left to the launches to report.
  Status enter(int device) {
    cudaError_t e = cudaGetDevice(&prev_);
    if (e != cudaSuccess) return cuda_error("cudaGetDevice", e);
    if (prev_ != device) {
      if ((e = cudaSetDevice(device)) != cudaSuccess) return cuda_error("cudaSetDevice", e);
      switched_ = true;
    }
    int arch = 0;
    if (config::no_device_code(config::query_device_code_arch(device, &arch)))
      return Status::Unsupported(config::no_device_code_message(device, config::device_info(device).cc, config::build_archs()));
    return Status::Ok();
  }
  ~DeviceGuard() {
    if (switched_) cudaSetDevice(prev_);
  }

 private:
  int prev_ = 0;
  bool switched_ = false;
};

}  // namespace linattn::cuda

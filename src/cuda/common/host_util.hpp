// Host-side helpers shared by the CUDA backend's entry points (cuda_backend.cu, chunk_bwd.cu):
// the kernels' dtype codes, CUDA errors as Status, and switching to the tensors' device for a call.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include <cuda_runtime.h>

#include "linattn/linattn.hpp"

namespace linattn::cuda {

// dtype codes of the kernels' runtime switches: 0 fp16, 1 bf16, 2 fp32, 3 anything else.
inline int dtype_code(DType d) {
  switch (d) {
    case DType::kFloat16: return 0;
    case DType::kBFloat16: return 1;
    case DType::kFloat32: return 2;
    default: return 3;
  }
}

inline Status cuda_error(const char* what, cudaError_t e) {
  return {StatusCode::kBackendError, std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e)};
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
  // Status of the switch; the call must not proceed unless ok().
  Status enter(int device) {
    cudaError_t e = cudaGetDevice(&prev_);
    if (e != cudaSuccess) return cuda_error("cudaGetDevice", e);
    if (prev_ != device) {
      if ((e = cudaSetDevice(device)) != cudaSuccess) return cuda_error("cudaSetDevice", e);
      switched_ = true;
    }
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

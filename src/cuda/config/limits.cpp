#include "cuda/config/limits.hpp"

#include "cuda/config/device_info.hpp"

#include <string>

#include <cuda_runtime.h>

#include "common/problem.hpp"

namespace linattn::cuda::config {

int sm_count(int device) { return device_info(device).sm_count; }

SmemLimits smem_limits(int device) { return device_info(device).smem; }

Status can_implement(const detail::Problem& p, const char* direction) {
  const std::string what = std::string("CUDA ") + direction;
  // The four families share one path (GLA, simple GLA: the delta rule dropped); what validation
  // lets through for them (no beta, no in-kernel gate, g_gamma for simple GLA) runs as is.
  if (p.dtype != DType::kBFloat16 && p.dtype != DType::kFloat16 && p.dtype != DType::kFloat32) {
    return Status::Unsupported(what + " takes bfloat16, float16 or float32 q/k/v, got " + dtype_name(p.dtype));
  }
  auto ok_size = [](int64_t x) { return x == 64 || x == 128 || x == 256; };
  if (!ok_size(p.K)) {
    return Status::Unsupported(what + " supports head size K in {64, 128, 256}, got K = " + std::to_string(p.K));
  }
  if (!ok_size(p.V)) {
    return Status::Unsupported(what + " supports head size V in {64, 128, 256}, got V = " + std::to_string(p.V));
  }
  if (p.B * p.T >= (int64_t{1} << 31) || p.num_chunks * p.HV >= (int64_t{1} << 31)) {
    return Status::Unsupported(what + ": too many tokens for 32-bit token indices");
  }
  if (p.num_chunks > 0x7fffffff || p.HV > 65535 || p.N > 65535) {
    return Status::Unsupported(what + ": grid too large (HV and the sequence count must be <= 65535)");
  }
  return Status::Ok();
}

}  // namespace linattn::cuda::config

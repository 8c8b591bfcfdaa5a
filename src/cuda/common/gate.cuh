// Gate semantics shared by the CUDA kernels (SPEC.md; the CPU backend's are in
// common/transforms.hpp and cpu/common/simd.hpp):
//   - a gate after the in-kernel transform at or below kGateFloor (-110, e.g. g = -inf, a valid full
//     forget) is raised to it before the chunk-local cumulative sums, so that decays are never
//     -inf - (-inf) = NaN and huge finite gates (-1e30) do not swamp the ordinary gates summed
//     with them; every exp of a decay spanning it underflows to 0 (-ftz=true), i.e. a full forget;
//   - the gradient of a floored gate is 0 (the exact one is exp(g) times bounded terms);
//   - the in-kernel transforms give the limit of the formula, never inf * 0 = NaN, when exp(A_log)
//     overflows float32 (or underflows): -exp(A_log) softplus(x) as -exp(A_log + log softplus(x)),
//     exp(A_log) x as sign(x) exp(A_log + log|x|).
#pragma once

#include <cmath>

#include "common/transforms.hpp"

namespace linattn::cuda::gate {

constexpr float kFloor = static_cast<float>(detail::kGateFloor);

// NaN passes through (a NaN gate is the caller's NaN).
__device__ __forceinline__ float floor_gate(float g) { return g < kFloor ? kFloor : g; }

__device__ __forceinline__ float log_softplus(float x, float sp) { return x < -20.f ? x : logf(sp); }
__device__ __forceinline__ float log_sigmoid(float x) { return -(fmaxf(-x, 0.f) + log1pf(expf(-fabsf(x)))); }

// -exp(A_log) * softplus(x), given ea = exp(A_log) and sp = softplus(x).
__device__ __forceinline__ float neg_exp_softplus(float alog, float ea, float x, float sp) {
  if (isfinite(ea) && ea > 0.f && isfinite(sp)) return -ea * sp;
  return -expf(alog + log_softplus(x, sp));
}

// exp(A_log) * x, given ea = exp(A_log).
__device__ __forceinline__ float exp_times(float alog, float ea, float x) {
  if (isfinite(ea) || isnan(x)) return ea * x;
  if (x == 0.f) return 0.f;
  return copysignf(expf(alog + logf(fabsf(x))), x);
}

}  // namespace linattn::cuda::gate

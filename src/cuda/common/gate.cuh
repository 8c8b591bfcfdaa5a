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
#include <type_traits>

#include "common/transforms.hpp"

namespace linattn::cuda::gate {

constexpr float kFloor = static_cast<float>(detail::kGateFloor);

// The l2norm transform (use_qk_l2norm_in_kernel): x / sqrt(Σx² + ε) per token and head, ε as the
// CPU backend's and FLA's (common/transforms.hpp). The reciprocal norm from a float32 sum of squares:
constexpr float kL2Eps = static_cast<float>(detail::kL2NormEps);
__device__ __forceinline__ float l2_rnorm(float sumsq) { return rsqrtf(sumsq + kL2Eps); }

// Two adjacent lanes hold the sums of squares of one row's two halves (of q in sq, of k in sk):
// both get the row's sums, and the first (first = true) stores the row's reciprocal norms.
__device__ __forceinline__ void store_pair_rnorms(float sq, float sk, bool first, float* rq, float* rk) {
  sq += __shfl_xor_sync(0xffffffffu, sq, 1);
  sk += __shfl_xor_sync(0xffffffffu, sk, 1);
  if (first) {
    *rq = l2_rnorm(sq);
    *rk = l2_rnorm(sk);
  }
}

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

// Reciprocal by MUFU.RCP (~1 ulp): __frcp_rn's IEEE slow path costs a call and two convergence
// barriers a value, which ncu found among chunk_prep's hottest lines. rcp(inf) = 0, rcp(NaN) = NaN.
__device__ __forceinline__ float rcp_approx(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
// 2^x by MUFU.EX2, denormal results flushed to 0 (the decays' exponents: a flushed decay is a full
// forget). exp(x) = ex2_ftz(x kLog2e).
constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ float ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// Fast softplus / sigmoid for 16-bit inputs (absolute error ~1e-6, far below the operands' rounding).
__device__ __forceinline__ float sigmoid_fast(float x) { return rcp_approx(1.f + __expf(-x)); }
__device__ __forceinline__ float softplus_fast(float x) {
  const float e = __expf(-fabsf(x));
  return fmaxf(x, 0.f) + (e < 1e-3f ? e - 0.5f * e * e : __logf(1.f + e));
}
// Precise ones (float32 inputs).
__device__ __forceinline__ float sigmoid_precise(float x) {
  return x >= 0.f ? 1.f / (1.f + expf(-x)) : expf(x) / (1.f + expf(x));
}
__device__ __forceinline__ float softplus_precise(float x) { return fmaxf(x, 0.f) + log1pf(expf(-fabsf(x))); }

// The in-kernel gate of one head (SPEC.md's transforms), with what is uniform over the head
// decided once per block instead of per element.
struct HeadGate {
  int kind;       // 0: g as given (+ simple GLA's g_gamma); 1: -exp(A_log) softplus(g + dt_bias);
                  // 2: lower_bound sigmoid(exp(A_log) (g + dt_bias)) (without A_log: of g + dt_bias)
  bool has_alog;
  float alog, ea;  // A_log and exp(A_log)
  float lower_bound, gamma;
  // exp(A_log) is a float for which the plain products are also the limits (kind 1: finite and
  // > 0; kind 2: finite): the limit forms above compile away
  __device__ bool regular() const { return kind == 1 ? (isfinite(ea) && ea > 0.f) : isfinite(ea); }
};

// The log decay of one raw gate value before the floor. KIND, REGULAR: head.kind and
// head.regular() as compile-time values (with_head_gate); FAST16: the fast transforms of 16-bit
// inputs. REGULAR = false is the general form (the limits when exp(A_log) over- or underflows).
template <int KIND, bool REGULAR, bool FAST16>
__device__ __forceinline__ float head_gate_raw(const HeadGate& h, float raw, float dtb) {
  if constexpr (KIND == 1) {
    const float x = raw + dtb;
    const float sp = FAST16 ? softplus_fast(x) : softplus_precise(x);
    // regular: -ea * sp equals the limit form for every x (sp = inf gives -inf either way)
    return REGULAR ? -h.ea * sp : neg_exp_softplus(h.alog, h.ea, x, sp);
  } else if constexpr (KIND == 2) {
    const float x = raw + dtb;
    const float z = h.has_alog ? (REGULAR ? h.ea * x : exp_times(h.alog, h.ea, x)) : x;
    return h.lower_bound * (FAST16 ? sigmoid_fast(z) : sigmoid_precise(z));
  } else {
    return raw + h.gamma;
  }
}
// The same, floored: what the forward's cumulative sums take.
template <int KIND, bool REGULAR, bool FAST16>
__device__ __forceinline__ float head_gate(const HeadGate& h, float raw, float dtb) {
  return floor_gate(head_gate_raw<KIND, REGULAR, FAST16>(h, raw, dtb));
}

// The gate scans' two steps (chunk_prep, the Hopper vector prep, pass 2's recompute). First every
// token of a step is transformed, rows past the chunk too (they hold a finite placeholder whose
// transform is discarded); then the running sum takes the predicate. A predicate around each
// transform compiled to a branch per token, one dependent MUFU chain after another (ncu,
// session 33); unconditional, the N chains interleave.
template <int KIND, bool REGULAR, bool FAST16, int N>
__device__ __forceinline__ void head_gate_each(const HeadGate& h, float (&x)[N], float dtb) {
#pragma unroll
  for (int m = 0; m < N; ++m) x[m] = head_gate<KIND, REGULAR, FAST16>(h, x[m], dtb);
}
// The running sum over the tokens first + m < valid (run carries to the next step); sink(m, run)
// receives the total through token m as soon as it is formed.
template <int N, class Sink>
__device__ __forceinline__ void running_sum_below(const float (&x)[N], int first, int valid, float& run, Sink&& sink) {
#pragma unroll
  for (int m = 0; m < N; ++m) {
    run += first + m < valid ? x[m] : 0.f;
    sink(m, run);
  }
}

// f(std::integral_constant<int, KIND>{}, std::bool_constant<REGULAR>{}) for the head's gate: one
// branch per block, so the element loop inside f has none.
template <typename F>
__device__ __forceinline__ void with_head_gate(const HeadGate& h, F&& f) {
  if (h.kind == 1) {
    if (h.regular()) f(std::integral_constant<int, 1>{}, std::true_type{});
    else f(std::integral_constant<int, 1>{}, std::false_type{});
  } else if (h.kind == 2) {
    if (h.regular()) f(std::integral_constant<int, 2>{}, std::true_type{});
    else f(std::integral_constant<int, 2>{}, std::false_type{});
  } else {
    f(std::integral_constant<int, 0>{}, std::true_type{});
  }
}

// The transform before the floor with the kind known only at run time, in float32 (the
// backward's; kind 0: raw itself, g_gamma is added by the caller). head_gate_raw<kind, false,
// false> spelled with a run-time kind: routing it through head_gate_raw changed chunk_bwd.cu's
// SASS (exp(A_log) shared differently), which no GPU run has checked yet.
__device__ __forceinline__ float transform_raw(int kind, int has_alog, float lower_bound, float raw, float dtb,
                                              float alog) {
  const float x = raw + dtb;
  switch (kind) {
    case 1: return neg_exp_softplus(alog, expf(alog), x, softplus_precise(x));
    case 2: return lower_bound * sigmoid_precise(has_alog ? exp_times(alog, expf(alog), x) : x);
    default: return raw;
  }
}
// sigmoid_precise(x) given e = expf(-|x|), bit for bit (each branch there takes exactly this exp).
__device__ __forceinline__ float sigmoid_given_exp(float x, float e) { return x >= 0.f ? 1.f / (1.f + e) : e / (1.f + e); }
// The identity transform's backward: dL/dg, or exactly 0 on a floored gate (transform_bwd's
// rule, for callers that know the floor from elsewhere).
__device__ __forceinline__ float identity_bwd(bool floored, float dg) { return floored || dg == 0.f ? 0.f : dg; }
// dβ's factor through β = scale · sigmoid(raw), scale 2 in mode 2, else 1 (mode 0, β as given,
// has no factor: callers skip this and β's load).
__device__ __forceinline__ float beta_sigmoid_grad(int mode, float raw) {
  const float sg = sigmoid_precise(raw);
  return (mode == 2 ? 2.f : 1.f) * sg * (1.f - sg);
}
// dL/draw given dL/dg; *da += dL/dA_log. A floored gate (or a zero dg) has gradient exactly 0,
// whatever overflowing factors the transform's derivative holds. gamma: simple GLA's g_gamma, added
// to the (identity-transformed) gate before the floor; 0 for the other families.
__device__ __forceinline__ float transform_bwd(int kind, int has_alog, float lower_bound, float raw, float dtb,
                                              float alog, float dg, float* da, float gamma = 0.f) {
  const float x = raw + dtb;
  const float g = transform_raw(kind, has_alog, lower_bound, raw, dtb, alog) + gamma;
  if (g <= kFloor || dg == 0.f) return 0.f;
  switch (kind) {
    case 1: {
      const float ea = expf(alog), sp = softplus_precise(x);
      if (isfinite(ea) && ea > 0.f && isfinite(sp)) {
        *da += dg * (-ea * sp);
        return dg * (-ea * sigmoid_precise(x));
      }
      *da += dg * g;  // dg/dA_log = g
      return dg * -expf(alog + log_sigmoid(x));
    }
    case 2: {
      if (!has_alog) {
        const float s = sigmoid_precise(x);
        return dg * lower_bound * s * (1.f - s);
      }
      const float ea = expf(alog);
      const float z = exp_times(alog, ea, x);
      const float s = sigmoid_precise(z);
      const float sd = s * (1.f - s);
      if (sd == 0.f) return 0.f;  // saturated: the exact derivative underflows too
      const float ds = dg * lower_bound * sd;
      *da += ds * z;  // dz/dA_log = z
      return ds * ea;
    }
    default: return dg;
  }
}

// transform_bwd for one head's gate (with_head_gate's KIND, REGULAR; h.gamma as its gamma), the
// same values bit for bit. transform_bwd evaluates the forward transform and then its derivative
// afresh, exp(A_log) included, for every element: here exp(A_log) comes from h and the one
// expf(-|x|) serves softplus and sigmoid (the backward's finish kernel is bound by this
// arithmetic, not by its bytes). REGULAR = false is transform_bwd itself.
// FAST16: 16-bit inputs, whose forward took the fast transforms (head_gate<.., FAST16>): softplus
// and sigmoid from one __expf(-|x|) (absolute error ~1e-6, as softplus_fast / sigmoid_fast).
template <int KIND, bool REGULAR, bool FAST16 = false>
__device__ __forceinline__ float head_gate_bwd(const HeadGate& h, float raw, float dtb, float dg, float* da) {
  if constexpr (FAST16 && REGULAR && KIND != 0) {
    const float x = raw + dtb;
    const float z = KIND == 2 && h.has_alog ? h.ea * x : x;
    const float e = __expf(-fabsf(z));
    const float r = rcp_approx(1.f + e);
    const float s = z >= 0.f ? r : e * r;  // sigmoid(z)
    if constexpr (KIND == 1) {
      const float sp = fmaxf(x, 0.f) + (e < 1e-3f ? e - 0.5f * e * e : __logf(1.f + e));  // softplus_fast(x)
      const float gr = -h.ea * sp;
      if (gr + h.gamma <= kFloor || dg == 0.f) return 0.f;
      *da += dg * gr;
      return dg * (-h.ea * s);
    } else {
      if (h.lower_bound * s + h.gamma <= kFloor || dg == 0.f) return 0.f;
      const float sd = s * (1.f - s);
      if (!h.has_alog) return dg * h.lower_bound * sd;
      if (sd == 0.f) return 0.f;  // saturated: the exact derivative underflows too
      const float ds = dg * h.lower_bound * sd;
      *da += ds * z;  // dz/dA_log = z
      return ds * h.ea;
    }
  } else if constexpr (!REGULAR) {
    return transform_bwd(h.kind, h.has_alog, h.lower_bound, raw, dtb, h.alog, dg, da, h.gamma);
  } else if constexpr (KIND == 1) {
    // ea finite and > 0: transform_bwd's regular branch, and its limit branch only where sp is
    // inf (g = -inf: 0 before either) or NaN (NaN either way)
    const float x = raw + dtb;
    const float e = expf(-fabsf(x));
    const float sp = fmaxf(x, 0.f) + log1pf(e);  // softplus_precise(x)
    const float gr = -h.ea * sp;
    if (gr + h.gamma <= kFloor || dg == 0.f) return 0.f;
    *da += dg * gr;
    return dg * (-h.ea * sigmoid_given_exp(x, e));
  } else if constexpr (KIND == 2) {
    const float x = raw + dtb;
    const float z = h.has_alog ? h.ea * x : x;  // exp_times with ea finite
    const float s = sigmoid_precise(z);
    if (h.lower_bound * s + h.gamma <= kFloor || dg == 0.f) return 0.f;
    if (!h.has_alog) return dg * h.lower_bound * s * (1.f - s);
    const float sd = s * (1.f - s);
    if (sd == 0.f) return 0.f;  // saturated: the exact derivative underflows too
    const float ds = dg * h.lower_bound * sd;
    *da += ds * z;  // dz/dA_log = z
    return ds * h.ea;
  } else {
    return raw + h.gamma <= kFloor || dg == 0.f ? 0.f : dg;
  }
}

}  // namespace linattn::cuda::gate

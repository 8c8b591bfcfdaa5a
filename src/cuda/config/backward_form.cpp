#include "cuda/config/backward_form.hpp"

#include "common/problem.hpp"
#include "cuda/config/heuristics.hpp"

namespace linattn::cuda::config {

// Gradients that are sums over every token of a head (dA_log, ddt_bias, simple GLA's dg_gamma)
// cancel: their condition number reaches ~1e3-1e4 on random draws, so 16-bit operands put them at
// the 1e-2 bar (dg_gamma measured 9.6e-3 in bf16 on an H200). auto computes those in float32.
bool needs_float32(const detail::Problem& p) {
  return (p.has_g && (p.has_A_log || p.has_dt_bias)) || p.has_g_gamma;
}

Compute compute_of(const detail::Problem& p) {
  const BackwardPrecision bp = p.opt.backward_precision;
  if (p.dtype == DType::kFloat32 || bp == BackwardPrecision::kFloat32) return Compute::kFloat32;
  if (bp == BackwardPrecision::kFast16) return Compute::kSixteen;
  if (bp == BackwardPrecision::kAuto && needs_float32(p)) return Compute::kFloat32;
  // Without the delta rule (GLA, simple GLA) the low halves have nothing to protect: they carry
  // the delta rule's near-cancelling terms (⟨dY, v⟩ against ⟨dX, E k⟩, W S against U), which
  // these families do not have, so the split request computes in the 16-bit type.
  if (!p.delta) return Compute::kSixteen;
  return split_fits(p, smem_limits(p.device.index)) ? Compute::kSplit : Compute::kFloat32;
}

const char* compute_name(int32_t c) {
  switch (static_cast<Compute>(c)) {
    case Compute::kSixteen: return "fast16";
    case Compute::kSplit: return "split";
    case Compute::kFloat32: return "float32";
  }
  return "unknown";
}

}  // namespace linattn::cuda::config

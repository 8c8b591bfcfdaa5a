// Where the wgmma kernels run: the forward's recurrence (chunk_recurrence_wgmma.cuh, and its stages)
// and chunk_prep, the backward's pass 1 (chunk_dh_wgmma.cuh).
#include <cuda_runtime.h>

#include "cuda/common/chunk_bwd.cuh"
#include "cuda/common/chunk_fwd.hpp"
#include "cuda/config/device_info.hpp"

namespace linattn::cuda::kern {

cudaError_t launch_recurrence_wgmma_bf16(const StateParams& p, cudaStream_t s);
cudaError_t launch_recurrence_wgmma_fp16(const StateParams& p, cudaStream_t s);
cudaError_t launch_prep_wgmma_bf16(const PrepParams& p, cudaStream_t s);
cudaError_t launch_state_wide_wgmma(const StateParams& p, cudaStream_t s);
cudaError_t launch_prep_wgmma_fp16(const PrepParams& p, cudaStream_t s);
cudaError_t launch_prep_vector_wgmma_bf16(const PrepParams& p, cudaStream_t s);
cudaError_t launch_prep_vector_nodelta_wgmma_bf16(const PrepParams& p, cudaStream_t s);
cudaError_t launch_prep_vector_wide_wgmma_bf16(const PrepParams& p, cudaStream_t s);

bool sm90a_built() {
#if defined(LINATTN_HAS_SM90A)
  return true;
#else
  return false;
#endif
}

bool recurrence_wgmma_supported(int dtype, int K, int V) {
  return sm90a_built() && (dtype == 0 || dtype == 1) && K == 128 && V % 64 == 0 &&
         config::current_device_info().cc == 90;  // sm_90a code runs on compute capability 9.0 only
}

bool saved_forward_o_in_pass(int dtype, int K, int V) {
  return (dtype == 0 || dtype == 1) && recurrence_wgmma_supported(dtype, K, V);
}

bool recurrence_wgmma_applies(int dtype, const StateParams& p) {
  if (p.h) {  // the backward's recompute, and a forward that saves it or returns its chunk states
    // (with the delta rule only a forward that saves V_new too: a plain one returning its chunk
    // states has no vnew); without the delta rule V_new = V may come from the v rows (v_raw)
    // instead of U
    // h in float32, or without the delta rule in the compute type, K-major (the recompute's, GLA's
    // chunk-local saved buffer's, a returned h of the input type)
    const bool h16 = p.h_dt == dtype && dtype != 2 && !p.delta && !p.v_first;
    const bool common = (p.h_dt == 2 || h16) && (p.vnew != nullptr || !p.delta) && p.trans == nullptr &&
                        p.q_raw == nullptr && (p.v_raw == nullptr || !p.delta);
    if (dtype == 2)  // the float32 form on 16-bit inputs: the hi + lo kernel (chunk_state_wide_wgmma.cuh),
                     // a saving forward's O then from hs by the output kernel
      return common && (p.o == nullptr || p.hs != nullptr) && p.v_raw == nullptr && p.vnew != nullptr && p.wide16 &&
             p.U_lo == nullptr && p.vnew_lo == nullptr && recurrence_wgmma_supported(1, p.K, p.V);
    // kRecompute, or with O kSaved (O in the pass: no hs)
    return common && p.hs == nullptr && (p.U_lo == nullptr) == (p.vnew_lo == nullptr) && (p.U_lo == nullptr || p.delta) &&
           recurrence_wgmma_supported(dtype, p.K, p.V);
  }
  return p.fused_vt == 64 && p.o != nullptr && p.hs == nullptr && p.h == nullptr && p.vnew == nullptr &&
         p.U_lo == nullptr && (p.q_raw == nullptr || (p.k_raw != nullptr && p.rowfac != nullptr)) &&
         recurrence_wgmma_supported(dtype, p.K, p.V);
}

cudaError_t launch_recurrence_wgmma(int dtype, const StateParams& p, cudaStream_t s) {
  // Stages (launch_type): three (two chunks in flight) with the delta rule (one CTA an SM either
  // way: W makes a stage 67.5 KB), two without it (two CTAs an SM fit). Measured at the reference
  // shape (H200, bench/NOTES_cuda_forward.md v17): 3 stages GDN 0.757 -> 0.735 ms, KDA 1.32 ->
  // 1.33; the no-delta pass slower with 3 (simple GLA 0.384 -> 0.406, GLA 0.863 -> 0.90).
  if (dtype == 2) return launch_state_wide_wgmma(p, s);
  return dtype == 0 ? launch_recurrence_wgmma_fp16(p, s) : launch_recurrence_wgmma_bf16(p, s);
}

bool prep_wgmma_applies(int dtype, bool vector_gate, const PrepParams& p) {
  if (dtype == 2)  // the float32 form on bf16 inputs (WIDE: float32 outputs from bf16 hi + lo products), vector gate
    return vector_gate && p.in_dt == 1 && p.U_lo == nullptr && p.KgT_lo == nullptr && p.Aqk && p.gexp &&
           recurrence_wgmma_supported(1, p.K, p.V) && (p.V == 64 || p.V == 128) && p.g != nullptr &&
           p.g_gamma == nullptr && p.Qg && p.KgT && p.rowfac == nullptr &&
           (p.delta ? (p.W && p.U && p.Ainv) : (!p.W && !p.U && !p.Ainv));
  const bool exports = p.Ainv || p.U_lo || p.KgT_lo;  // the backward's (vector gate with the delta rule only)
  if (exports && !(vector_gate && p.delta && p.Ainv && (p.U_lo == nullptr) == (p.KgT_lo == nullptr))) return false;
  const bool common = p.Aqk && p.gexp && recurrence_wgmma_supported(dtype, p.K, p.V);
  // with the delta rule U's V tiles are the prep's: V 64 or 128
  const bool v_tiles = !p.delta || p.V == 64 || p.V == 128;
  if (vector_gate)  // KDA and GLA: Qg and KgT, bf16 only (intra_chunk_vector_gate.cuh says why); GLA reads
                    // its V from the v rows (no U)
    return common && (p.V == 64 || p.V == 128) && dtype == 1 && p.g != nullptr && p.g_gamma == nullptr && p.Qg &&
           p.KgT && p.rowfac == nullptr && (p.delta ? (p.W && p.U) : (!p.W && !p.U));
  // the scalar gate, raw-row outputs: with the delta rule (GDN) W and U; without it (simple GLA,
  // g and / or g_gamma) neither, its V read from the v rows. Without the delta rule the backward's
  // recompute takes Qg and KgT themselves instead of the row factors.
  if (!p.delta && p.Qg && p.KgT && p.rowfac == nullptr) return common && !p.W && !p.U;
  return common && v_tiles && p.rowfac != nullptr && p.Qg == nullptr && p.KgT == nullptr &&
         (p.delta ? (p.W && p.U && p.g_gamma == nullptr) : (!p.W && !p.U));
}

cudaError_t launch_prep_wgmma(int dtype, bool vector_gate, const PrepParams& p, cudaStream_t s) {
  if (dtype == 2) return launch_prep_vector_wide_wgmma_bf16(p, s);  // the float32 form on bf16 inputs
  if (vector_gate) return p.delta ? launch_prep_vector_wgmma_bf16(p, s) : launch_prep_vector_nodelta_wgmma_bf16(p, s);
  return dtype == 0 ? launch_prep_wgmma_fp16(p, s) : launch_prep_wgmma_bf16(p, s);
}

cudaError_t launch_fused_scalar_forward_bf16(const PrepParams& pp, const StateParams& sp, int64_t tokens,
                                             const InlineSeqMap& seqs, cudaStream_t s);
cudaError_t launch_fused_scalar_forward_fp16(const PrepParams& pp, const StateParams& sp, int64_t tokens,
                                             const InlineSeqMap& seqs, cudaStream_t s);

bool fused_scalar_forward_applies(int dtype, bool vector_gate, const PrepParams& pp) {
  // the scalar gate without the delta rule, V from the v rows; the caller checks the pass's side
  // (the plain forward over the sequence map: o, no h, state map, split or U)
  return (dtype == 0 || dtype == 1) && !vector_gate && !pp.delta && pp.K == 128 && pp.v != nullptr &&
         pp.Ainv == nullptr && pp.U_lo == nullptr && pp.KgT_lo == nullptr && recurrence_wgmma_supported(dtype, pp.K, pp.V);
}

cudaError_t launch_fused_scalar_forward(int dtype, const PrepParams& pp, const StateParams& sp, int64_t tokens,
                                        const InlineSeqMap& seqs, cudaStream_t s) {
  return dtype == 0 ? launch_fused_scalar_forward_fp16(pp, sp, tokens, seqs, s)
                     : launch_fused_scalar_forward_bf16(pp, sp, tokens, seqs, s);
}

}  // namespace linattn::cuda::kern

namespace linattn::cuda::bwd {

cudaError_t launch_dh_wgmma_bf16(const DhParams& p, cudaStream_t s);
cudaError_t launch_dh_wgmma_fp16(const DhParams& p, cudaStream_t s);

bool dh_wgmma_applies(int dtype, const DhParams& p) {
  const bool split = p.KgT_lo != nullptr;
  if (p.d_o_dt >= 0)  // the float32 form on 16-bit inputs: Hopper's pass 1 splits float32 operands for bf16 dO
    return dtype == 2 && p.d_o_dt == 1 && !split && p.dN_lo == nullptr && (!p.delta || p.W != nullptr) &&
           kern::recurrence_wgmma_supported(1, p.K, p.V);
  return kern::recurrence_wgmma_supported(dtype, p.K, p.V) && (split == (p.dN_lo != nullptr)) && (!split || p.delta) &&
         (!p.delta || p.W != nullptr);
}

cudaError_t launch_dh_wgmma(int dtype, const DhParams& p, cudaStream_t s) {
  return dtype == 0 ? launch_dh_wgmma_fp16(p, s) : launch_dh_wgmma_bf16(p, s);
}

cudaError_t launch_pass2_scalar_wgmma_bf16(const WyParams& p, cudaStream_t s);
cudaError_t launch_pass2_scalar_wgmma_fp16(const WyParams& p, cudaStream_t s);

bool pass2_scalar_wgmma_applies(int dtype, bool vector_gate, const WyParams& p) {
  return (dtype == 0 || dtype == 1) && !vector_gate && !p.delta && p.in_dt < 0 && p.h16 && !p.h_vfirst &&
         p.dv_written && p.K == 128 && p.V == 128 && p.dN_lo == nullptr && p.vnew_lo == nullptr &&
         (p.dq != nullptr) == (p.dk != nullptr) && (!p.dg_direct || p.gate.g != nullptr) &&
         kern::recurrence_wgmma_supported(dtype, p.K, p.V);
}

cudaError_t launch_pass2_scalar_wgmma(int dtype, const WyParams& p, cudaStream_t s) {
  return dtype == 0 ? launch_pass2_scalar_wgmma_fp16(p, s) : launch_pass2_scalar_wgmma_bf16(p, s);
}

cudaError_t launch_pass2_vector_wgmma_bf16(const WyParams& p, cudaStream_t s);

bool pass2_vector_wgmma_applies(int dtype, bool vector_gate, const WyParams& p) {
  return dtype == 1 && vector_gate && !p.delta && p.in_dt < 0 && !p.h_vfirst && p.dv_written &&
         p.K == 128 && p.V == 128 && p.dN_lo == nullptr && p.vnew_lo == nullptr &&
         (p.dq != nullptr) == (p.dk != nullptr) && p.dg_direct && p.gate.g != nullptr && p.gate.kind == 0 &&
         p.gate.g_gamma == nullptr && kern::recurrence_wgmma_supported(dtype, p.K, p.V);
}

cudaError_t launch_pass2_vector_wgmma(int dtype, const WyParams& p, cudaStream_t s) {
  (void)dtype;
  return launch_pass2_vector_wgmma_bf16(p, s);
}

cudaError_t launch_bwd_chains_bf16(const kern::StateParams& sp, const DhParams& dp, cudaStream_t s);
cudaError_t launch_bwd_chains_fp16(const kern::StateParams& sp, const DhParams& dp, cudaStream_t s);

bool bwd_chains_apply(int dtype, const kern::StateParams& sp, const DhParams& dp) {
  return (dtype == 0 || dtype == 1) && !sp.delta && !dp.delta && sp.U == nullptr && sp.v_raw != nullptr &&
         sp.h != nullptr && sp.o == nullptr && sp.hs == nullptr && sp.U_lo == nullptr && sp.q_raw == nullptr &&
         dp.d_o_dt < 0 && dp.KgT_lo == nullptr && dp.dN_lo == nullptr && sp.seqs == dp.seqs && sp.N == dp.N &&
         sp.HV == dp.HV && sp.V == dp.V && sp.K == 128 && dp.K == 128 && kern::recurrence_wgmma_applies(dtype, sp) &&
         dh_wgmma_applies(dtype, dp);
}

cudaError_t launch_bwd_chains(int dtype, const kern::StateParams& sp, const DhParams& dp, cudaStream_t s) {
  return dtype == 0 ? launch_bwd_chains_fp16(sp, dp, s) : launch_bwd_chains_bf16(sp, dp, s);
}

}  // namespace linattn::cuda::bwd

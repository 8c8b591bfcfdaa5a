#include "cuda/host/backward_plan.hpp"

#include <algorithm>

#include "cuda/common/chunk_bwd.cuh"
#include "cuda/common/chunk_bwd.hpp"
#include "cuda/common/chunk_fwd.hpp"
#include "cuda/common/chunk_map.hpp"
#include "cuda/common/host_util.hpp"
#include "cuda/config/limits.hpp"

namespace linattn::cuda::host {
namespace {
using config::align_up;
using bwd::kC;
using bwd::partial_qk_bytes;
using kern::SeqInfo;
}  // namespace

ChunkPlan::ChunkPlan(const detail::Problem& p, Compute compute, SavedKind kind) {
  const config::ComputeForm cf(p.dtype, compute);
  const bool saved = kind == SavedKind::kAll;      // the whole front half is the caller's
  const bool local = kind == SavedKind::kChunkLocal;  // its chunk-local part is
  f32 = cf.f32;
  split = cf.split;
  from_saved = saved;
  KG = p.vector_gate ? static_cast<int>(p.K) : 1;
  tokens = p.B * p.T;
  const std::size_t es = f32 ? 4 : 2;
  const std::size_t nb = static_cast<std::size_t>(p.num_chunks) * p.HV;
  const std::size_t T = static_cast<std::size_t>(tokens);
  const std::size_t K = static_cast<std::size_t>(p.K), V = static_cast<std::size_t>(p.V);
  std::size_t o = 0;
  seqs = o; o = align_up(o + sizeof(SeqInfo) * std::max<int64_t>(p.N, 1));
  chunks = o; o = align_up(o + sizeof(kern::ChunkInfo) * std::max<int64_t>(p.num_chunks, 1));
  FrontOffsets& f = front;
  const std::size_t reuse = o;
  const std::size_t wy = p.delta ? 1 : 0;  // no W and no M⁻¹ without the delta rule
  if (!saved) {
    f.W = o; o = align_up(o + wy * nb * kC * K * es);
    if (!local) {
      f.Qg = o; o = align_up(o + nb * kC * K * es);
      f.KgT = o; o = align_up(o + nb * kC * K * es);
      f.Aqk = o; o = align_up(o + nb * kC * kC * es);
    }
    if (split) { f.KgT_lo = o; o = align_up(o + nb * kC * K * es); }
  }
  // Partials only where a finish kernel reads them: pass 2 writes dq, dk itself without the
  // l2norm backward and the GVA sum (WyParams::dq), and dg itself with the identity gate
  // transform and no gate-parameter gradients (WyParams::dg_direct; dA_log / ddt_bias need
  // A_log / dt_bias). Both follow from the problem alone, as the workspace query must; the
  // launch checks that pass 2 agrees. At the reference shape this drops GLA's pq, pk, pg (768 MiB)
  // and KDA's pg (256 MiB).
  dqk_direct = !p.opt.use_qk_l2norm_in_kernel && p.G == 1;
  dg_direct = p.has_g && gate_kind_code(p) == 0 && !p.has_g_gamma && !p.has_A_log && !p.has_dt_bias;
  std::size_t r = reuse;
  // dq̂, dk̂ partials in pass 2's PartialQK: bfloat16 for bfloat16 inputs, in either form
  const std::size_t pqk = dqk_direct ? 0 : T * p.HV * K * partial_qk_bytes(dtype_code(p.dtype));
  pq = r; r = align_up(r + pqk);
  pk = r; r = align_up(r + pqk);
  pg = r; r = align_up(r + (dg_direct ? 0 : T * p.HV * KG * 4));  // one float a row with the scalar gate
  pb = r; r = align_up(r + T * p.HV * 4);
  o = std::max(o, r);
  // Without the delta rule, in a 16-bit compute type on Hopper, the state pass reads V from the
  // v rows (no U) and pass 1 writes dv itself (no dN): run_front's and pass 1's own tests
  // (recurrence_wgmma_applies with v_raw, dh_wgmma_applies) reduce to this for such a problem.
  // Then dY (U's home; pass 2's scratch only with the delta rule) and dN are not allocated:
  // 2 x 128 MiB at GLA's reference shape. Their offsets stay kNone and the launches refuse
  // rather than write through them (run_front, run_chunked).
  no_delta_rows = !p.delta && !f32 &&
                  kern::recurrence_wgmma_supported(dtype_code(p.dtype), static_cast<int>(K), static_cast<int>(V));
  if (!no_delta_rows) { dY = o; o = align_up(o + nb * kC * V * es); }
  if (!saved) {
    if (!no_delta_rows) f.U = dY;
    f.Ainv = o; o = align_up(o + wy * nb * kC * kC * es);
    if (!local) { f.gexp = o; o = align_up(o + nb * K * 4); }
    f.h_dt = host::state_dtype_code(p, compute);
    h16 = f.h_dt != 2;
    if (!local) {
      // (at least 32 bytes a channel: draw's rows take this region after pass 2, 8 a 64-token block)
      f.h = o; o = align_up(o + nb * K * std::max<std::size_t>(V * (h16 ? es : 4), 32));
    } else {  // h is the saved buffer's (read-only): draw's rows (ddt_bias only) get their own
      draw = o; o = align_up(o + (p.has_dt_bias ? nb * K * 32 : 0));
    }
    // V_new: the delta rule's (without it pass 2 reads V from the v rows; the float32 form's
    // Hopper state pass writes it regardless)
    if (p.delta || f32) { f.vnew = o; o = align_up(o + nb * kC * V * es); }
  }
  dh = o; o = align_up(o + nb * K * V * es);  // the compute type (DhParams::dh)
  // (a saved buffer's run keeps dN: the column sums' rows take its region after pass 2)
  if (!no_delta_rows || saved) { dN = o; o = align_up(o + nb * kC * V * es); }
  if (split) {
    if (!saved) { f.U_lo = o; o = align_up(o + nb * kC * V * es); f.vnew_lo = f.U_lo; }
    dN_lo = o; o = align_up(o + nb * kC * V * es);
    dY_lo = o; o = align_up(o + nb * kC * V * es);
  }
  // h and dh (dh and dN from saved) are dead after pass 2; pq .. pb are not
  if (!local) draw = saved ? dh : f.h;
  da = saved ? dN : dh;
  total = o;
}

SavedForwardPlan::SavedForwardPlan(const detail::Problem& p, Compute compute) {
  const config::ComputeForm cf(p.dtype, compute);
  const std::size_t es = cf.f32 ? 4 : 2;
  const std::size_t nb = static_cast<std::size_t>(p.num_chunks) * p.HV;
  std::size_t o = 0;
  seqs = o; o = align_up(o + sizeof(SeqInfo) * std::max<int64_t>(p.N, 1));
  chunks = o; o = align_up(o + sizeof(kern::ChunkInfo) * std::max<int64_t>(p.num_chunks, 1));
  const int cdt = cf.f32 ? 2 : dtype_code(p.dtype);
  if (!kern::saved_forward_o_in_pass(cdt, static_cast<int>(p.K), static_cast<int>(p.V))) {
    hs = o; o = align_up(o + nb * p.K * p.V * es);
  }
  total = o;
}

SavedKind saved_kind(const detail::Problem& p) {
  if (!p.has_saved) return SavedKind::kNone;
  if (!p.opt.keep_chunk_local) return SavedKind::kAll;
  return chunk_local_saved_applies(p) ? SavedKind::kChunkLocal : SavedKind::kNone;
}

}  // namespace linattn::cuda::host

// The CUDA backward of every family (KDA, GDN, GLA, simple GLA) and the forward that fills a saved
// buffer: the workspace plans, the chunked path's front half (run_front: chunk_prep in its backward
// form, the state pass), pass 1 (dh) and pass 2 (run_chunked), composed with the token replay and the
// finish of chunk_bwd_stages.hpp (their own translation units). Kernels: chunk_bwd_wy.cu, sm90/;
// design in chunk_bwd.cuh and docs/chunked_backward.md.
#include "cuda/common/chunk_bwd.hpp"
#include "cuda/common/host_util.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "cuda/common/chunk_bwd.cuh"
#include "cuda/common/chunk_bwd_stages.hpp"
#include "cuda/common/chunk_map.hpp"
#include "cuda/config/backward_form.hpp"
#include "cuda/config/heuristics.hpp"
#include "cuda/config/limits.hpp"
#include "cuda/host/backward_plan.hpp"
#include "cuda/host/saved_buffer.hpp"
#include "cuda/host/stage_timer.hpp"

namespace linattn::cuda {
namespace bwd {
namespace {

using config::align_up;
using config::kAlign;

// The compute form (Compute, ComputeForm, compute_of): config/backward_form.hpp.
using config::Compute;
using config::compute_of;
using config::compute_name;

// What the compute form means for problem p's buffers.
struct ComputeForm : config::ComputeForm {
  ComputeForm(const detail::Problem& p, Compute compute) : config::ComputeForm(p.dtype, compute) {}
};

// The saved buffer (disable_recompute) and the front half's offsets: host/saved_buffer.hpp.
using host::FrontOffsets;
using host::kSavedHeaderBytes;
using host::SavedLayout;

// h in the caller's float64 (return_intermediate_states next to a saved buffer): from saved's float32.
__global__ void widen_states_kernel(const float* src, double* dst, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

// The workspace plans (ChunkPlan, SavedForwardPlan, SavedKind): host/backward_plan.hpp.
using host::ChunkPlan;
using host::SavedForwardPlan;
using host::SavedKind;
using host::saved_kind;

std::size_t workspace_of(const detail::Problem& p) {
  return p.token_replay ? token_replay_workspace_bytes(p) : ChunkPlan(p, compute_of(p), saved_kind(p)).total;
}


}  // namespace

GateArgs gate_args(const detail::Problem& p, const ForwardInputs& f) {
  GateArgs ga{};
  ga.kind = gate_kind_code(p);
  ga.lower_bound = static_cast<float>(p.gate_tf.lower_bound);
  ga.has_alog = p.has_A_log ? 1 : 0;
  ga.has_dtb = p.has_dt_bias ? 1 : 0;
  ga.A_log = p.has_A_log ? f.A_log.data : nullptr;
  ga.alog_dt = p.has_A_log ? dtype_code(f.A_log.dtype) : 2;
  ga.dt_bias = p.has_dt_bias ? f.dt_bias.data : nullptr;
  ga.dtb_dt = p.has_dt_bias ? dtype_code(f.dt_bias.dtype) : 2;
  return ga;
}

cudaError_t build_maps(const detail::Problem& p, unsigned char* seqs, unsigned char* chunks, cudaStream_t st) {
  kern::MapParams mp{};
  mp.cu = p.cu.data();
  mp.N = static_cast<int>(p.N);
  mp.num_chunks = static_cast<int>(p.num_chunks);
  mp.seqs = reinterpret_cast<kern::SeqInfo*>(seqs);
  mp.chunks = reinterpret_cast<kern::ChunkInfo*>(chunks);
  return kern::launch_chunk_maps(mp, st);
}

namespace {

// The buffers of the chunked backward's front half (chunk_prep, then the state pass).
struct FrontBufs {
  const kern::SeqInfo* seqs = nullptr;
  const kern::ChunkInfo* chunks = nullptr;
  void *W = nullptr, *U = nullptr, *Qg = nullptr, *KgT = nullptr, *Aqk = nullptr, *Ainv = nullptr;
  float* gexp = nullptr;
  void* h = nullptr;  // the chunk-start states, float32 or (h_dt) the compute type
  int h_dt = 2;
  void* vnew = nullptr;
  void *U_lo = nullptr, *KgT_lo = nullptr, *vnew_lo = nullptr;  // split form
};
FrontBufs front_bufs(unsigned char* region, const FrontOffsets& o, const unsigned char* maps, std::size_t seqs,
                     std::size_t chunks) {
  auto at = [&](std::size_t off) -> void* { return off == FrontOffsets::kNone ? nullptr : region + off; };
  FrontBufs b;
  b.seqs = reinterpret_cast<const kern::SeqInfo*>(maps + seqs);
  b.chunks = reinterpret_cast<const kern::ChunkInfo*>(maps + chunks);
  b.W = at(o.W);
  b.U = at(o.U);
  b.Qg = at(o.Qg);
  b.KgT = at(o.KgT);
  b.Aqk = at(o.Aqk);
  b.Ainv = at(o.Ainv);
  b.gexp = static_cast<float*>(at(o.gexp));
  b.h = at(o.h);
  b.h_dt = o.h_dt;
  b.vnew = at(o.vnew);
  b.U_lo = at(o.U_lo);
  b.KgT_lo = at(o.KgT_lo);
  b.vnew_lo = at(o.vnew_lo);
  return b;
}

// What a forward adds to the front half: the final state and O (through hs, the chunk-start
// states in the compute type, and the chunk-parallel output kernel).
struct FrontOutputs {
  void* ht = nullptr;
  int ht_dt = 2;
  void* o = nullptr;
  int o_dt = 2;
  void* hs = nullptr;
};

// The dtype code of the caller's q, k, v, dO where the kernels compute in another type: the float32
// form on 16-bit inputs reads them in place, converting as it loads (exact); -1 otherwise.
int in_dt_of(const detail::Problem& p, int cdt) {
  return cdt == 2 && p.dtype != DType::kFloat32 ? dtype_code(p.dtype) : -1;
}

// chunk_prep in its backward form (M⁻¹, the split form's low halves) and the state pass: the
// intermediates the backward reads, recomputed by the backward or kept by a forward with a saved
// buffer (the same kernels with the same inputs: bitwise the same values). A timer (benchmarks)
// gets a "state" mark between the two.
// deferred (the backward): where the state pass is the one bwd_chains_apply may fuse with pass 1
// (the recompute reading the v rows), its parameters and shared memory go there and it does not
// launch; the caller launches it, alone or with pass 1.
struct DeferredState {
  bool set = false;
  kern::StateParams sp{};
  int smem = 0;
};
Status run_front(const detail::Problem& p, const ForwardInputs& f, int cdt, bool split, const FrontBufs& b,
                 const FrontOutputs& fo, cudaStream_t st, StageTimer* timer = nullptr,
                 DeferredState* deferred = nullptr) {
  const int K = static_cast<int>(p.K), V = static_cast<int>(p.V);
  cudaError_t e = cudaSuccess;
  kern::StateParams sp{};
  sp.W = p.delta ? b.W : nullptr;
  sp.delta = p.delta ? 1 : 0;
  sp.U = b.U;
  sp.Qg = b.Qg;
  sp.KgT = b.KgT;
  sp.Aqk = b.Aqk;
  sp.gexp = b.gexp;
  sp.seqs = b.seqs;
  sp.h0 = p.has_h0 ? f.initial_state.data : nullptr;
  sp.h0_dt = p.has_h0 ? dtype_code(f.initial_state.dtype) : 2;
  sp.ht = fo.ht;
  sp.ht_dt = fo.ht_dt;
  sp.h = b.h;
  sp.h_dt = b.h_dt;
  sp.o = fo.o;
  sp.o_dt = fo.o_dt;
  sp.hs = fo.hs;
  sp.chunks = b.chunks;
  sp.num_chunks = static_cast<int>(p.num_chunks);
  sp.vnew = b.vnew;
  sp.N = static_cast<int>(p.N);
  sp.HV = static_cast<int>(p.HV);
  sp.K = K;
  sp.V = V;
  sp.v_first = p.opt.state_v_first ? 1 : 0;
  sp.wide16 = cdt == 2 && p.dtype != DType::kFloat32 ? 1 : 0;
  const config::SmemLimits lim = config::smem_limits(p.device.index);
  const config::Staged sg = config::state_stages(cdt, K, lim);
  if (sg.smem > lim.block && p.N > 0) return smem_refusal("backward", "the state recompute", sg.smem, p.device.index);
  sp.stages = sg.stages;
  if (split) {
    if (sg.stages == 0 && p.N > 0) return {StatusCode::kBackendError, "CUDA backward: the state pass does not fit shared memory"};
    sp.U_lo = b.U_lo;
    sp.vnew_lo = b.vnew_lo;  // may be U_lo: each element is read before it is written, same thread
  }
  // Without the delta rule V_new = V: where the Hopper state pass runs it reads the v rows, and
  // chunk_prep writes no U (its copy of V: 128 MiB written and read at the reference shape).
  if (!p.delta && in_dt_of(p, cdt) < 0) {
    kern::StateParams rows = sp;
    rows.U = nullptr;
    rows.v_raw = f.v.data;
    if (kern::recurrence_wgmma_applies(cdt, rows)) sp = rows;
  }
  if (!p.delta && sp.U == nullptr && sp.v_raw == nullptr)  // (ChunkPlan::no_delta_rows disagrees with the launch)
    return {StatusCode::kBackendError, "CUDA backward: the state pass would read U, which the workspace plan left out"};
  if (p.num_chunks > 0) {
    kern::PrepParams pp = prep_params(p, f);
    // the caller's q, k, v (prep_params), converted as they load when the compute type is float32
    pp.in_dt = in_dt_of(p, cdt);
    pp.chunks = b.chunks;
    // (the vector-gate size fits GDN too)
    const config::PrepSmem smem = config::prep_smem(cdt, K, /*vec_gate=*/true, lim);
    if (!smem.fits) return smem_refusal("backward", "chunk_prep", smem.bytes, p.device.index);
    pp.q_in_smem = smem.q_in_smem && pp.in_dt < 0;  // 16-bit q under float32 compute: from global memory
    pp.W = p.delta ? b.W : nullptr;  // no delta rule: no W, no M⁻¹
    pp.U = sp.U ? b.U : nullptr;  // null where the state pass reads the v rows
    pp.Qg = b.Qg;
    pp.KgT = b.KgT;
    pp.Aqk = b.Aqk;
    pp.gexp = b.gexp;
    pp.Ainv = p.delta ? b.Ainv : nullptr;
    if (split) {
      pp.U_lo = b.U_lo;
      pp.KgT_lo = b.KgT_lo;
    }
    e = kern::prep_wgmma_applies(cdt, p.vector_gate, pp) ? kern::launch_prep_wgmma(cdt, p.vector_gate, pp, st)
                                                         : kern::launch_prep(cdt, p.vector_gate, pp, static_cast<int>(smem.bytes), st);
    if (e != cudaSuccess) return cuda_error("chunk_prep launch (backward form)", e);
    if (timer) timer->mark("state", st);
  }
  if (p.N > 0) {
    if (deferred && !p.delta && sp.U == nullptr && sp.v_raw != nullptr) {
      deferred->set = true;
      deferred->sp = sp;
      deferred->smem = static_cast<int>(sg.smem);
      return Status::Ok();
    }
    e = kern::launch_state(cdt, sp, static_cast<int>(sg.smem), st);
    if (e != cudaSuccess) return cuda_error("chunk_state launch (backward form)", e);
  }
  return Status::Ok();
}

// The chunked (WY) backward in `compute`'s form: the front half (or the saved buffer's),
// pass 1 (dh), pass 2 (wy); the partials in *parts. timer: stage marks for benchmarks.
Status run_chunked(const detail::Problem& p, const BackwardInputs& in, const BackwardOutputs& out,
                   unsigned char* base, Compute compute, SavedKind kind, cudaStream_t st, StageTimer* timer,
                   Partials* parts) {
  const bool from_saved = kind == SavedKind::kAll;
  const ForwardInputs& f = in.fwd;
  cudaError_t e = cudaSuccess;
  const int dt = dtype_code(p.dtype);
  const GateArgs ga = gate_args(p, f);
  const int beta_mode = beta_mode_code(p);
  const int l2 = p.opt.use_qk_l2norm_in_kernel ? 1 : 0;
  float *&pq = parts->pq, *&pk = parts->pk, *&pg = parts->pg, *&pb = parts->pb, *&draw = parts->draw, *&da = parts->da;
  int& KG = parts->KG;  // NS stays 1: no V splits
  const ChunkPlan pl(p, compute, kind);
  KG = pl.KG;
  // where pass 2 writes dg and dq, dk itself (below); the plan, from the problem alone, must not
  // have left out partials it would write
  const bool dg_direct = p.has_g && ga.kind == 0 && !p.has_g_gamma && !out.ddt_bias.present() && !out.dA_log.present();
  const bool dqk_direct = !l2 && p.G == 1 && out.dq.present() && out.dk.present();
  if ((pl.dqk_direct && !dqk_direct) || (pl.dg_direct && !dg_direct))
    return {StatusCode::kBackendError, "CUDA backward: the workspace plan has no partials that pass 2 would write"};
  parts->pg_ld = pl.KG;
  if ((e = build_maps(p, base + pl.seqs, base + pl.chunks, st)) != cudaSuccess)
    return cuda_error("chunk map launch", e);
  const int K = static_cast<int>(p.K), V = static_cast<int>(p.V);
  const int cdt = pl.f32 ? 2 : dt;  // compute type of the kernels below
  // The front half's buffers: in the workspace, or the saved buffer's (read-only).
  FrontBufs fb = from_saved ? front_bufs(static_cast<unsigned char*>(in.saved.data), SavedLayout(p, compute).front,
                                         base, pl.seqs, pl.chunks)
                            : front_bufs(base, pl.front, base, pl.seqs, pl.chunks);
  if (kind == SavedKind::kChunkLocal) {  // chunk_prep's outputs and the states from the forward (read-only)
    const FrontBufs sv = front_bufs(static_cast<unsigned char*>(in.saved.data), SavedLayout(p, compute).front, base,
                                    pl.seqs, pl.chunks);
    fb.Qg = sv.Qg;
    fb.KgT = sv.KgT;
    fb.Aqk = sv.Aqk;
    fb.gexp = sv.gexp;
    fb.h = sv.h;
    fb.h_dt = sv.h_dt;
  }
  // Every kernel reads the caller's q, k, v, dO (in_dt: their type where the compute type is
  // float32 and they are 16-bit; converted as loaded). The finish kernels write dq, dk, dv in the
  // caller's dtype.
  const int in_dt = in_dt_of(p, cdt);
  // Benchmarks: stage boundaries on the caller's timer (none in the product).
  auto mark = [&](const char* next) {
    if (timer) timer->mark(next, st);
  };
  const bool local = kind == SavedKind::kChunkLocal;
  DeferredState deferred;  // the state pass, where it may run in one kernel with pass 1
  mark(from_saved || local ? "pass1" : "prep");
  if (!from_saved && !local) {
    // ---- recompute the forward's chunk intermediates, plus M⁻¹, h and V_new (no output)
    if (Status fs = run_front(p, f, cdt, pl.split, fb, FrontOutputs{}, st, timer, &deferred); !fs.ok()) return fs;
    mark("pass1");
  }
  bool dv_from_pass1 = false;
  if (p.N > 0) {
    // ---- pass 1: dh, dN (sequential over chunks), dh0
    DhParams dp{};
    dp.Aqk = fb.Aqk;
    dp.KgT = fb.KgT;
    dp.Qg = fb.Qg;
    dp.W = p.delta ? fb.W : nullptr;
    dp.delta = p.delta ? 1 : 0;
    dp.gexp = fb.gexp;
    dp.d_o = in.d_o.data;
    dp.d_o_dt = in_dt;
    dp.seqs = fb.seqs;
    dp.dht = in.dht.present() ? in.dht.data : nullptr;
    dp.dht_dt = in.dht.present() ? dtype_code(in.dht.dtype) : 2;
    dp.dh0 = out.dh0.present() ? out.dh0.data : nullptr;
    dp.dh0_dt = out.dh0.present() ? dtype_code(out.dh0.dtype) : 2;
    dp.dh = base + pl.dh;
    dp.dN = pl.dN == ChunkPlan::kNone ? nullptr : base + pl.dN;  // none: pass 1 writes dv (no_delta_rows)
    dp.N = static_cast<int>(p.N);
    dp.HV = static_cast<int>(p.HV);
    dp.K = K;
    dp.V = V;
    dp.v_first = p.opt.state_v_first ? 1 : 0;
    if (pl.split) {
      dp.KgT_lo = fb.KgT_lo;
      dp.dN_lo = base + pl.dN_lo;
    }
    const bool chains = deferred.set && !p.separate_chains && bwd_chains_apply(cdt, deferred.sp, dp);
    if (deferred.set && !chains) {  // the state pass alone first
      e = kern::launch_state(cdt, deferred.sp, deferred.smem, st);
      if (e != cudaSuccess) return cuda_error("chunk_state launch (backward form)", e);
    }
    const bool dh_hopper = dh_wgmma_applies(cdt, dp);
    // no delta rule, 16-bit compute (the caller's dtype): the Hopper pass 1 writes dv itself (dN is dv)
    if (dh_hopper && !p.delta && cdt == dt && out.dv.present()) dp.dv = out.dv.data;
    if (dp.dN == nullptr && dp.dv == nullptr)  // the plan and the launch disagree (never expected)
      return {StatusCode::kBackendError, "CUDA backward: pass 1 would write dN, which the workspace plan left out"};
    if (dh_hopper) {
      e = chains ? launch_bwd_chains(cdt, deferred.sp, dp, st) : launch_dh_wgmma(cdt, dp, st);
    } else {
      const config::SmemLimits lim = config::smem_limits(p.device.index);
      const config::Staged sg = config::dh_stages(cdt, K, pl.split, lim);
      if (sg.smem > lim.block)
        return smem_refusal("backward", "pass 1", sg.smem, p.device.index);
      if (sg.stages == 0 && cdt != 2) return {StatusCode::kBackendError, "CUDA backward: pass 1 does not fit shared memory"};
      dp.stages = sg.stages;
      e = launch_dh(cdt, dp, static_cast<int>(sg.smem), st);
    }
    if (e != cudaSuccess) return cuda_error("dh launch", e);
    dv_from_pass1 = dp.dv != nullptr;
    mark("pass2");
  }
  if (p.num_chunks > 0) {
    // ---- pass 2: chunk-parallel gradients
    WyParams wp{};
    wp.chunks = fb.chunks;
    wp.q = f.q.data;
    wp.k = f.k.data;
    wp.v = f.v.data;
    wp.d_o = in.d_o.data;
    wp.in_dt = in_dt;
    wp.delta = p.delta ? 1 : 0;
    wp.beta = p.delta ? f.beta.data : nullptr;
    wp.beta_dt = p.delta ? dtype_code(f.beta.dtype) : 2;
    wp.beta_mode = beta_mode;
    wp.gate.g = p.has_g ? f.g.data : nullptr;
    wp.gate.g_dt = p.has_g ? dtype_code(f.g.dtype) : 2;
    wp.gate.g_gamma = p.has_g_gamma ? f.g_gamma.data : nullptr;
    wp.gate.gg_dt = p.has_g_gamma ? dtype_code(f.g_gamma.dtype) : 2;
    wp.gate.kind = ga.kind;
    wp.gate.lower_bound = ga.lower_bound;
    wp.gate.has_alog = ga.has_alog;
    wp.gate.has_dtb = ga.has_dtb;
    wp.gate.A_log = ga.A_log;
    wp.gate.alog_dt = ga.alog_dt;
    wp.gate.dt_bias = ga.dt_bias;
    wp.gate.dtb_dt = ga.dtb_dt;
    wp.Ainv = p.delta ? fb.Ainv : nullptr;
    wp.vnew = fb.vnew;
    wp.h = fb.h;
    wp.h_vfirst = p.opt.state_v_first ? 1 : 0;
    wp.h16 = fb.h_dt != 2 ? 1 : 0;
    wp.dh = base + pl.dh;
    wp.dN = pl.dN == ChunkPlan::kNone ? nullptr : base + pl.dN;  // not read where pass 1 wrote dv
    wp.dY = pl.dY == ChunkPlan::kNone ? nullptr : base + pl.dY;  // the delta rule's scratch
    wp.dv = out.dv.data;
    wp.dv_dt = dt;
    wp.dv_written = dv_from_pass1 ? 1 : 0;
    wp.pq = base + pl.pq;
    wp.pk = base + pl.pk;
    parts->pqk16 = partial_qk_bytes(dt) == 2;  // bfloat16 partials (PartialQK of the input type)
    wp.pg = reinterpret_cast<float*>(base + pl.pg);
    wp.pb = reinterpret_cast<float*>(base + pl.pb);
    wp.num_chunks = static_cast<int>(p.num_chunks);
    wp.H = static_cast<int>(p.H);
    wp.HV = static_cast<int>(p.HV);
    wp.G = static_cast<int>(p.G);
    wp.K = K;
    wp.V = V;
    wp.scale = static_cast<float>(p.scale);
    wp.l2norm = l2;
    if (pl.split) {
      wp.dN_lo = base + pl.dN_lo;
      wp.dY_lo = base + pl.dY_lo;
      wp.vnew_lo = fb.vnew_lo;
    }
    // dg and dβ written by pass 2 itself where nothing else needs the partials: the identity gate
    // transform without gate-parameter gradients or g_gamma (dg is then the partial), and dβ
    // always (one row a token). Saves finish_gb its pass over pg (a copy, 268 MB each way at
    // issue 5's reference shape) and, for the scalar gate, pass 2 its zero-padded pg rows.
    wp.dg_direct = dg_direct;
    wp.dg = wp.dg_direct && out.dg.present() ? out.dg.data : nullptr;
    wp.dg_dt = p.has_g ? dtype_code(f.g.dtype) : 2;
    wp.dbeta = p.delta && out.dbeta.present() ? out.dbeta.data : nullptr;
    parts->dg_written = wp.dg_direct != 0;
    parts->dbeta_written = wp.dbeta != nullptr;
    // dq, dk straight out where finish_qk would only copy the partial: no l2norm backward and no
    // GVA sum (G = 1). Saves its pass over pq, pk (2 x 268 MB read and 2 x 134 MB written at issue
    // 17's GLA shape) and halves pass 2's dq, dk stores.
    if (dqk_direct) {
      wp.dq = out.dq.data;
      wp.dk = out.dk.data;
    }
    parts->dqk_written = wp.dq != nullptr;
    const bool pass2_hopper =
        pass2_scalar_wgmma_applies(cdt, p.vector_gate, wp) || pass2_vector_wgmma_applies(cdt, p.vector_gate, wp);
    const config::SmemLimits lim = config::smem_limits(p.device.index);
    if (!pass2_hopper && wy_smem_bytes(cdt) > lim.block) {
      // 16-bit inputs computing in float32 (auto's choice with A_log / dt_bias): the split request
      // computes in the input type, whose pass 2 may fit
      const int in16 = dtype_code(p.dtype);
      const bool split_would_fit = cdt == 2 && in16 != 2 && wy_smem_bytes(in16) <= lim.block &&
                                   (!p.delta || config::split_fits(p, lim));
      return smem_refusal("backward", cdt == 2 ? "pass 2 (float32 compute)" : "pass 2", wy_smem_bytes(cdt), p.device.index,
                          split_would_fit ? "backward_precision='split' computes in the inputs' 16-bit type and fits" : nullptr);
    }
    e = pass2_scalar_wgmma_applies(cdt, p.vector_gate, wp)   ? launch_pass2_scalar_wgmma(cdt, wp, st)
        : pass2_vector_wgmma_applies(cdt, p.vector_gate, wp) ? launch_pass2_vector_wgmma(cdt, wp, st)
                                                               : launch_wy(cdt, p.vector_gate, wp, st);
    if (e != cudaSuccess) return cuda_error("pass 2 launch", e);
    mark("finish_qk");
  }
  pq = reinterpret_cast<float*>(base + pl.pq);
  pk = reinterpret_cast<float*>(base + pl.pk);
  pg = reinterpret_cast<float*>(base + pl.pg);
  pb = reinterpret_cast<float*>(base + pl.pb);
  draw = reinterpret_cast<float*>(base + pl.draw);
  da = reinterpret_cast<float*>(base + pl.da);
  return Status::Ok();
}


}  // namespace
}  // namespace bwd

std::size_t backward_kda_gdn_workspace_bytes(const detail::Problem& p) {
  if (!config::can_implement(p, "backward").ok()) return 0;
  return bwd::workspace_of(p);
}

Status backward_kda_gdn(const detail::Problem& p, const BackwardInputs& in, const BackwardOutputs& out,
                        Workspace ws, cudaStream_t st, StageTimer* timer) {
  using namespace bwd;
  Status s = config::can_implement(p, "backward");
  if (!s.ok()) return s;
  const ForwardInputs& f = in.fwd;
  s = check_aligned({{"q", &f.q}, {"k", &f.k}, {"v", &f.v}, {"g", &f.g}, {"beta", &f.beta},
                     {"A_log", &f.A_log}, {"dt_bias", &f.dt_bias}, {"initial_state", &f.initial_state},
                     {"d_o", &in.d_o}, {"dht", &in.dht}, {"dq", &out.dq}, {"dk", &out.dk}, {"dv", &out.dv},
                     {"dg", &out.dg}, {"dbeta", &out.dbeta}, {"dA_log", &out.dA_log},
                     {"ddt_bias", &out.ddt_bias}, {"dh0", &out.dh0}});
  if (!s.ok()) return s;
  const bool token = p.token_replay;
  if (token && !p.delta)  // a test hook: its token kernels run the delta rule's recurrence
    return Status::Unsupported("the CUDA token replay (a test oracle) covers the delta-rule families only");
  const bool from_saved = !token && in.saved.present();
  const SavedKind kind = token ? SavedKind::kNone : saved_kind(p);
  if (from_saved && kind == SavedKind::kNone)  // (the API refuses it first: saved_bytes is 0)
    return Status::Unsupported("keep_chunk_local does not apply to this problem: pass no saved buffer");
  const Compute compute = compute_of(p);  // the chunked path's (and a saved buffer's) form
  const std::size_t need = token ? token_replay_workspace_bytes(p) : ChunkPlan(p, compute, kind).total;
  if (ws.bytes < need || (need > 0 && ws.data == nullptr))
    return {StatusCode::kWorkspaceTooSmall, "CUDA backward workspace too small"};
  // The saved buffer's shape checks need no device; its header is read after the switch to it.
  const Compute saved_form = compute;
  const std::size_t saved_have = from_saved ? static_cast<std::size_t>(in.saved.numel()) : 0;
  const std::size_t saved_want = from_saved ? SavedLayout(p, saved_form).total : 0;
  auto saved_size_error = [&] {
    return Status::Invalid("saved has " + std::to_string(saved_have) + " bytes, needs " +
                           std::to_string(saved_want) + " (see saved_bytes)");
  };
  if (from_saved) {
    if (reinterpret_cast<std::uintptr_t>(in.saved.data) % kAlign != 0)
      return Status::Invalid("saved must be 256-byte aligned on CUDA (as allocations are)");
    if (saved_have < kSavedHeaderBytes) return saved_size_error();
  }
  DeviceGuard device;
  if (Status ds = device.enter(p.device.index); !ds.ok()) return ds;
  if (from_saved) {
    // header first: a buffer written under another backward form has another size, the header says which
    if (!in.saved_as_filled)  // the caller's word that saved is the forward's, unchanged: no stream sync
      if (Status hs = host::check_saved_header(p, saved_form, in.saved.data, st); !hs.ok()) return hs;
    if (saved_have < saved_want) return saved_size_error();
  }
  // the token replay or the chunked form, then the shared finish
  unsigned char* base = static_cast<unsigned char*>(ws.data);
  Partials parts;
  s = token ? run_token_replay(p, in, out, base, st, &parts)
            : run_chunked(p, in, out, base, compute, kind, st, timer, &parts);
  if (!s.ok()) return s;
  if (Status fs = run_finish(p, in, out, parts, st, token ? nullptr : timer); !fs.ok()) return fs;
  if (timer && !token) timer->mark("end", st);
  return Status::Ok();
}


bool chunk_local_saved_applies(const detail::Problem& p) {
  return p.opt.keep_chunk_local && !p.delta && p.dtype != DType::kFloat32 &&
         !config::ComputeForm(p.dtype, config::compute_of(p)).f32 &&
         kern::recurrence_wgmma_supported(dtype_code(p.dtype), static_cast<int>(p.K), static_cast<int>(p.V)) &&
         config::can_implement(p, "backward").ok();
}

std::size_t saved_kda_gdn_bytes(const detail::Problem& p) {
  if (!config::can_implement(p, "backward").ok()) return 0;
  if (p.opt.keep_chunk_local && !chunk_local_saved_applies(p)) return 0;
  return bwd::SavedLayout(p, bwd::compute_of(p)).total;
}

std::size_t forward_saved_workspace_bytes(const detail::Problem& p) {
  if (!config::can_implement(p, "backward").ok()) return 0;
  return bwd::SavedForwardPlan(p, bwd::compute_of(p)).total;
}

Status forward_saved_kda_gdn(const detail::Problem& p, const ForwardInputs& in, const ForwardOutputs& out,
                             Workspace ws, cudaStream_t st) {
  using namespace bwd;
  Status s = config::can_implement(p, "backward");
  if (!s.ok()) return s;
  const Compute compute = compute_of(p);
  const SavedLayout sl(p, compute);
  const SavedForwardPlan pl(p, compute);
  if (static_cast<std::size_t>(out.saved.numel()) < sl.total)
    return Status::Invalid("saved has " + std::to_string(out.saved.numel()) + " bytes, needs " +
                           std::to_string(sl.total) + " (see saved_bytes)");
  if (reinterpret_cast<std::uintptr_t>(out.saved.data) % kAlign != 0)
    return Status::Invalid("saved must be 256-byte aligned on CUDA (as allocations are)");
  if (ws.bytes < pl.total || (pl.total > 0 && ws.data == nullptr))
    return {StatusCode::kWorkspaceTooSmall,
            "CUDA forward with a saved buffer: workspace too small (query forward_workspace_size with "
            "Options::disable_recompute set)"};
  DeviceGuard device;
  if (Status ds = device.enter(p.device.index); !ds.ok()) return ds;
  cudaError_t e = cudaSuccess;
  const ComputeForm cf(p, compute);
  const int dt = dtype_code(p.dtype);
  const int cdt = cf.f32 ? 2 : dt;
  unsigned char* base = static_cast<unsigned char*>(ws.data);
  unsigned char* sv = static_cast<unsigned char*>(out.saved.data);

  if ((e = build_maps(p, base + pl.seqs, base + pl.chunks, st)) != cudaSuccess)
    return cuda_error("chunk map launch", e);
  const FrontBufs fb = front_bufs(sv, sl.front, base, pl.seqs, pl.chunks);
  FrontOutputs fo;
  fo.ht = out.final_state.present() ? out.final_state.data : nullptr;
  fo.ht_dt = out.final_state.present() ? dtype_code(out.final_state.dtype) : 2;
  fo.o = out.o.data;
  fo.o_dt = dt;
  fo.hs = pl.hs == SavedForwardPlan::kNone ? nullptr : base + pl.hs;
  if (Status fs = run_front(p, in, cdt, cf.split, fb, fo, st); !fs.ok()) return fs;
  if (out.h.present() && p.num_chunks > 0) {  // return_intermediate_states: the saved float32 states
    const int64_t n = p.num_chunks * p.HV * p.K * p.V;
    if (out.h.dtype == DType::kFloat32) {
      e = cudaMemcpyAsync(out.h.data, fb.h, static_cast<std::size_t>(n) * 4, cudaMemcpyDeviceToDevice, st);
    } else {
      const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096));
      widen_states_kernel<<<blocks, 256, 0, st>>>(static_cast<const float*>(fb.h), static_cast<double*>(out.h.data), n);
      e = cudaGetLastError();
    }
    if (e != cudaSuccess) return cuda_error("copying h", e);
  }
  return host::write_saved_header(p, compute, sv, st);
}

}  // namespace linattn::cuda

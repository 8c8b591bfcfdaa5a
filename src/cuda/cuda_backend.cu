// The CUDA backend's entry points: the chunked forward of the four families (see
// common/chunk_fwd.hpp: one path; GLA and simple GLA are KDA and GDN without the delta rule, the
// difference carried by Problem::delta / ::vector_gate into the kernels' parameters); the backward
// (the same composition) lives in common/chunk_bwd.*.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "common/backend.hpp"
#include "cuda/common/chunk_bwd.hpp"
#include "cuda/common/chunk_fwd.hpp"
#include "cuda/common/chunk_map.hpp"
#include "cuda/common/host_util.hpp"
#include "cuda/config/backward_form.hpp"
#include "cuda/config/heuristics.hpp"
#include "cuda/config/limits.hpp"
#include "cuda/host/forward_stages.hpp"
#include "cuda/host/saved_buffer.hpp"
#include "cuda/host/stage_timer.hpp"

namespace linattn::cuda {
namespace {

using detail::Problem;
using config::align_up;
using config::raw_rows;
constexpr int64_t kC = config::kChunk;

// Whether the forward's chunk_prep and state pass run in raw-row form (config::raw_rows): not with
// a chunk-local saved buffer, which keeps the backward's Qg and KgT, so the forward computes them.
bool forward_raw_rows(const Problem& p, bool keep) { return raw_rows(p) && !keep; }

// Workspace carve-up (byte offsets). Raw-row mode (simple GLA's and GDN's plain forward, not
// simple GLA's keep_chunk_local one, whose saved buffer holds the backward's Qg / KgT): no Qg /
// KgT, [2][64] row factors per block. Without the delta rule (GLA, simple GLA) no W.
// The sequence-split pass (seg_chunks > 0, docs/sequence_split.md) adds its segment map, the
// segments' transitions and their start states.
struct WsLayout {
  int seg_chunks;
  int64_t segments;  // entries of the segment map (0 without the split)
  std::size_t chunks, seqs, W, U, Qg, KgT, Aqk, gexp, rowfac, segs, trans, hseg, total;
  // split false: no sequence split (the sizes are then at most those with it); local_in_saved:
  // Qg, KgT, Aqk and gexp go to a chunk-local saved buffer (Options::keep_chunk_local), not here
  explicit WsLayout(const Problem& p, bool split = true, bool local_in_saved = false)
      : seg_chunks(split ? config::seq_split_chunks(p, config::sm_count(p.device.index)) : 0),
        segments(seg_chunks > 0 ? kern::map_entries(p.cu.data(), p.N, seg_chunks) : 0) {
    const std::size_t es = p.dtype == DType::kFloat32 ? 4 : 2;
    const std::size_t nb = static_cast<std::size_t>(p.num_chunks) * p.HV;  // (chunk, head) blocks
    const bool rows = forward_raw_rows(p, local_in_saved);
    std::size_t o = 0;
    chunks = o; o = align_up(o + sizeof(kern::ChunkInfo) * std::max<int64_t>(p.num_chunks, 1));
    seqs = o; o = align_up(o + sizeof(kern::SeqInfo) * std::max<int64_t>(p.N, 1));
    W = o; o = align_up(o + (p.delta ? nb * kC * p.K * es : 0));
    U = o; o = align_up(o + (config::reads_v_rows(p) ? 0 : nb * kC * p.V * es));
    const std::size_t here = local_in_saved ? 0 : 1;
    Qg = o; o = align_up(o + here * (rows ? 0 : nb * kC * p.K * es));
    KgT = o; o = align_up(o + here * (rows ? 0 : nb * kC * p.K * es));
    Aqk = o; o = align_up(o + here * nb * kC * kC * es);
    gexp = o; o = align_up(o + here * nb * p.K * 4);
    rowfac = o; o = align_up(o + (rows ? nb * 2 * kC * 4 : 0));
    const std::size_t sh = static_cast<std::size_t>(segments) * p.HV * p.K * 4;  // float32 per (segment, head) row
    segs = o; o = align_up(o + sizeof(kern::SeqInfo) * segments);
    trans = o; o = align_up(o + sh * (p.V + (p.delta ? p.K : 0)));
    hseg = o; o = align_up(o + sh * p.V);
    total = o;
  }
};

// The sequence-split state pass (docs/sequence_split.md): the segments' transitions, their start
// states, then the pass over the segment map from those states. sp: the whole-sequence pass's
// parameters.
cudaError_t launch_split_state(const Problem& p, const WsLayout& lay, unsigned char* base, kern::StateParams sp,
                               cudaStream_t st, StageTimer* timer) {
  const int dt = dtype_code(p.dtype);
  const auto* segs = reinterpret_cast<const kern::SeqInfo*>(base + lay.segs);
  float* hseg = reinterpret_cast<float*>(base + lay.hseg);
  kern::CombineParams cp{};
  cp.segs = segs;
  cp.M = static_cast<int>(lay.segments);
  cp.N = static_cast<int>(p.N);
  cp.trans = reinterpret_cast<float*>(base + lay.trans);
  cp.gexp = p.delta ? nullptr : sp.gexp;  // without the delta rule the transitions are diagonal
  cp.h0 = sp.h0;
  cp.h0_dt = sp.h0_dt;
  cp.hseg = hseg;
  cp.HV = sp.HV;
  cp.K = sp.K;
  cp.V = sp.V;
  cp.v_first = sp.v_first;
  sp.seqs = segs;
  sp.N = cp.M;
  {
    kern::StateParams ta = sp;
    ta.trans = reinterpret_cast<float*>(base + lay.trans);
    ta.ht = nullptr;  // (h0: the sequences' own, read by their first segments)
    if (timer) timer->mark("segments", st);
    cudaError_t e = kern::launch_recurrence_wgmma(dt, ta, st);
    if (e != cudaSuccess) return e;
  }
  if (timer) timer->mark("combine", st);
  cudaError_t e = kern::launch_segment_combine(cp, st);
  if (e != cudaSuccess) return e;
  sp.h0 = hseg;
  sp.h0_dt = dtype_code(DType::kFloat32);
  if (timer) timer->mark("state", st);
  return kern::launch_recurrence_wgmma(dt, sp, st);
}

}  // namespace

bool available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state of the failed query
    return false;
  }
  return n > 0;
}

std::size_t forward_workspace_bytes(const Problem& p) {
  if (!config::can_implement(p, "forward").ok()) return 0;
  // keep_chunk_local: the plain forward, its chunk-local outputs in the saved buffer
  if (p.has_saved && p.opt.keep_chunk_local) return WsLayout(p, true, chunk_local_saved_applies(p)).total;
  // disable_recompute: the forward that fills a saved buffer runs other kernels (chunk_bwd.hpp)
  // and is sized for them alone (on Hopper at K = 128 in 16 bits a few KiB: O comes from the
  // recompute's pass); a plain forward given that workspace is refused as too small
  if (p.has_saved && saved_kda_gdn_bytes(p) > 0) return forward_saved_workspace_bytes(p);
  return WsLayout(p).total;
}
std::size_t backward_workspace_bytes(const Problem& p) { return backward_kda_gdn_workspace_bytes(p); }
std::size_t saved_bytes(const Problem& p) {
  return config::can_implement(p, "forward").ok() ? saved_kda_gdn_bytes(p) : 0;
}

Status forward(const Problem& p, const ForwardInputs& in, const ForwardOutputs& out, Workspace ws,
               Stream stream) {
  return forward(p, in, out, ws, static_cast<cudaStream_t>(stream), nullptr);
}

Status forward(const Problem& p, const ForwardInputs& in, const ForwardOutputs& out, Workspace ws,
               cudaStream_t st, StageTimer* timer) {
  Status s = config::can_implement(p, "forward");
  if (!s.ok()) return s;
  s = check_aligned({{"q", &in.q}, {"k", &in.k}, {"v", &in.v}, {"g", &in.g}, {"beta", &in.beta},
                     {"A_log", &in.A_log}, {"dt_bias", &in.dt_bias}, {"initial_state", &in.initial_state},
                     {"o", &out.o}, {"final_state", &out.final_state}, {"h", &out.h},
                     {"state_map_o", &out.state_map_o}, {"state_map_final", &out.state_map_final}});
  if (!s.ok()) return s;
  const bool state_map = out.state_map_o.present();
  if (state_map && (out.saved.present() || out.h.present())) {
    return Status::Unsupported("state_map_o / state_map_final cannot be combined with saved or h");
  }
  // disable_recompute: the backward's front half, keeping its intermediates in out.saved
  const bool keep = out.saved.present() && p.opt.keep_chunk_local;  // GLA: chunk_prep's outputs in out.saved
  if (out.saved.present() && !keep) return forward_saved_kda_gdn(p, in, out, ws, st);
  if (keep) {  // (the API checked the size against saved_bytes, which is 0 where this does not apply)
    if (!chunk_local_saved_applies(p) || state_map)
      return Status::Unsupported("keep_chunk_local does not apply to this problem: pass no saved buffer");
    if (static_cast<std::size_t>(out.saved.numel()) < saved_kda_gdn_bytes(p))
      return Status::Invalid("saved is smaller than saved_bytes");
    if (reinterpret_cast<std::uintptr_t>(out.saved.data) % config::kAlign != 0)
      return Status::Invalid("saved must be 256-byte aligned on CUDA (as allocations are)");
    // the state pass writes the states into saved (SavedLayout), which is where h would go
    if (out.h.present())
      return Status::Unsupported("keep_chunk_local keeps the chunk-start states in saved: it cannot be combined with "
                                 "h (return_intermediate_states); pass no saved buffer");
  }
  DeviceGuard device;
  if (Status ds = device.enter(p.device.index); !ds.ok()) return ds;
  cudaError_t e = cudaSuccess;
  const int dt = dtype_code(p.dtype);
  // the state map's columns run in the wgmma pass over whole sequences (no sequence split)
  if (state_map && !(p.delta && kern::recurrence_wgmma_supported(dt, static_cast<int>(p.K), static_cast<int>(p.V)))) {
    return Status::Unsupported("state_map_o / state_map_final: computed in the forward pass on Hopper with 16-bit "
                               "inputs and K = 128 only");
  }

  const WsLayout lay(p, /*split=*/!state_map, keep);
  const bool rows = forward_raw_rows(p, keep);
  if (ws.bytes < lay.total) return {StatusCode::kWorkspaceTooSmall, "CUDA forward workspace too small"};
  unsigned char* base = static_cast<unsigned char*>(ws.data);
  // chunk_prep's outputs: in the workspace, or (keep_chunk_local) where the saved buffer keeps them
  unsigned char *Qg = base + lay.Qg, *KgT = base + lay.KgT, *Aqk = base + lay.Aqk, *gexp = base + lay.gexp;
  void* h = out.h.present() ? out.h.data : nullptr;  // the chunk-start states, where asked for
  int h_dt = out.h.present() ? dtype_code(out.h.dtype) : 2;
  if (keep) {  // and the states, for the backward (it then recomputes nothing before pass 1)
    const host::SavedLayout sl(p, config::compute_of(p));
    unsigned char* sv = static_cast<unsigned char*>(out.saved.data);
    Qg = sv + sl.front.Qg;
    KgT = sv + sl.front.KgT;
    Aqk = sv + sl.front.Aqk;
    gexp = sv + sl.front.gexp;
    h = sv + sl.front.h;
    h_dt = sl.front.h_dt;
  }

  // Simple GLA on Hopper, the plain forward over whole sequences: one kernel, the chunk-local
  // work in the state pass's producers (sm90/fused_scalar_forward_wgmma.cuh), no chunk_prep
  const kern::PrepParams pp_in = prep_params(p, in);
  // (its pass: o, the final states, no h, map_o, split or U)
  const bool one_kernel = p.N > 0 && rows && !keep && !state_map && h == nullptr &&
                          lay.seg_chunks == 0 && config::reads_v_rows(p) &&
                          kern::fused_scalar_forward_applies(dt, p.vector_gate, pp_in);

  // chunk and sequence maps from the validated host offsets, passed as kernel parameters (no
  // stream sync, graph-capturable; the device cu_seqlens is not read: chunk_map.hpp)
  // The one-kernel forward of at most kSeqBatchSmall sequences takes its sequence map by value
  // and needs no chunk map: no map kernel runs before it.
  kern::InlineSeqMap inline_seqs{};
  if (one_kernel) kern::fill_inline_seq_map(p.cu.data(), p.N, inline_seqs);
  if (inline_seqs.count == 0) {
    kern::MapParams mp{};
    mp.cu = p.cu.data();
    mp.N = static_cast<int>(p.N);
    mp.num_chunks = static_cast<int>(p.num_chunks);
    mp.seqs = reinterpret_cast<kern::SeqInfo*>(base + lay.seqs);
    mp.chunks = reinterpret_cast<kern::ChunkInfo*>(base + lay.chunks);
    if (lay.seg_chunks > 0) {
      mp.segs = reinterpret_cast<kern::SeqInfo*>(base + lay.segs);
      mp.seg_chunks = lay.seg_chunks;
    }
    if (timer) timer->mark("maps", st);
    e = kern::launch_chunk_maps(mp, st);
    if (e != cudaSuccess) return cuda_error("chunk map launch", e);
  }

  // ---- kernel 1: chunk-local preparation
  if (p.num_chunks > 0 && !one_kernel) {
    kern::PrepParams pp = pp_in;
    pp.chunks = reinterpret_cast<const kern::ChunkInfo*>(base + lay.chunks);
    const config::PrepSmem smem = config::prep_smem(dt, pp.K, p.vector_gate, config::smem_limits(p.device.index));
    if (!smem.fits) return smem_refusal("forward", "chunk_prep", smem.bytes, p.device.index);
    pp.q_in_smem = smem.q_in_smem;
    pp.W = p.delta ? base + lay.W : nullptr;
    pp.U = config::reads_v_rows(p) ? nullptr : base + lay.U;
    if (rows) {
      pp.rowfac = reinterpret_cast<float*>(base + lay.rowfac);
    } else {
      pp.Qg = Qg;
      pp.KgT = KgT;
    }
    pp.Aqk = Aqk;
    pp.gexp = reinterpret_cast<float*>(gexp);
    if (timer) timer->mark("prep", st);
    // GDN, simple GLA, KDA and GLA on Hopper: the chunk-local work on warpgroup MMAs (src/cuda/sm90/)
    e = kern::prep_wgmma_applies(dt, p.vector_gate, pp)
            ? kern::launch_prep_wgmma(dt, p.vector_gate, pp, st)
            : kern::launch_prep(dt, p.vector_gate, pp, static_cast<int>(smem.bytes), st);
    if (e != cudaSuccess) return cuda_error("chunk_prep launch", e);
  }

  // ---- kernel 2': the sequential state pass with the output (fused)
  if (p.N > 0) {
    kern::StateParams sp{};
    sp.W = p.delta ? base + lay.W : nullptr;
    sp.U = config::reads_v_rows(p) ? nullptr : base + lay.U;
    sp.v_raw = config::reads_v_rows(p) ? in.v.data : nullptr;
    sp.delta = p.delta ? 1 : 0;
    if (rows) {
      sp.q_raw = in.q.data;
      sp.k_raw = in.k.data;
      sp.rowfac = reinterpret_cast<const float*>(base + lay.rowfac);
      sp.H = static_cast<int>(p.H);
      sp.G = static_cast<int>(p.G);
    } else {
      sp.Qg = Qg;
      sp.KgT = KgT;
    }
    sp.Aqk = Aqk;
    sp.gexp = reinterpret_cast<const float*>(gexp);
    sp.seqs = reinterpret_cast<const kern::SeqInfo*>(base + lay.seqs);
    sp.h0 = p.has_h0 ? in.initial_state.data : nullptr;
    sp.h0_dt = p.has_h0 ? dtype_code(in.initial_state.dtype) : 2;
    sp.ht = out.final_state.present() ? out.final_state.data : nullptr;
    sp.ht_dt = out.final_state.present() ? dtype_code(out.final_state.dtype) : 2;
    sp.h = h;
    sp.h_dt = h_dt;
    sp.o = out.o.data;  // hs null: the fused kernel (V_new, O, S update in one pass)
    if (state_map) {
      sp.map_o = out.state_map_o.data;
      sp.map_ht = static_cast<float*>(out.state_map_final.data);
    }
    sp.chunks = reinterpret_cast<const kern::ChunkInfo*>(base + lay.chunks);
    sp.num_chunks = static_cast<int>(p.num_chunks);
    sp.N = static_cast<int>(p.N);
    sp.HV = static_cast<int>(p.HV);
    sp.K = static_cast<int>(p.K);
    sp.V = static_cast<int>(p.V);
    sp.v_first = p.opt.state_v_first ? 1 : 0;
    const config::SmemLimits lim = config::smem_limits(p.device.index);
    const config::FusedTile ft =
        config::fused_tile(dt, sp.K, sp.V, sp.HV, sp.N, config::sm_count(p.device.index), rows, lim);
    if (ft.smem > lim.block)
      return smem_refusal("forward", "the state pass", ft.smem, p.device.index);
    sp.fused_vt = ft.vt;
    sp.stages = ft.stages;
    if (rows && ft.stages == 0) return {StatusCode::kBackendError, "CUDA forward: state pass does not fit shared memory"};
    if (sp.v_raw && !kern::fused_warp_applies(dt, sp))
      return {StatusCode::kBackendError, "CUDA forward: no U was prepared, but the warp-owned state pass does not apply"};
    if (state_map && !kern::recurrence_wgmma_applies(dt, sp)) {  // (checked above; outputs untouched)
      return Status::Unsupported("state_map_o / state_map_final: this shape does not run the wgmma pass");
    }
    // the split: not where the pass writes every chunk's state (h, asked for or kept, needs the
    // whole chains)
    if (one_kernel) {
      if (timer) timer->mark("state", st);
      e = kern::launch_fused_scalar_forward(dt, pp_in, sp, p.B * p.T, inline_seqs, st);
      if (e != cudaSuccess) return cuda_error("one-kernel forward launch", e);
    } else if (lay.seg_chunks > 0 && sp.h == nullptr && kern::recurrence_wgmma_applies(dt, sp)) {
      e = launch_split_state(p, lay, base, sp, st, timer);
      if (e != cudaSuccess) return cuda_error("sequence-split state pass launch", e);
    } else {
      if (timer) timer->mark("state", st);
      e = kern::launch_state(dt, sp, static_cast<int>(ft.smem), st);
      if (e != cudaSuccess) return cuda_error("chunk_state launch", e);
    }
  }
  if (timer) timer->mark("end", st);
  // keep_chunk_local: the header last, naming what the buffer was written for
  if (keep) return host::write_saved_header(p, config::compute_of(p), out.saved.data, st);
  return Status::Ok();
}

Status backward(const Problem& p, const BackwardInputs& in, const BackwardOutputs& out, Workspace ws,
                Stream stream) {
  return backward_kda_gdn(p, in, out, ws, static_cast<cudaStream_t>(stream));
}

}  // namespace linattn::cuda

// The forward's sequential pass on Hopper (sm_90a, 16-bit, K = 128, V tile 64) over operands that
// chunk_prep wrote to the workspace: a producer warpgroup copies each chunk's W, Qg / q rows,
// KgT / k rows, Aqk, U / v and exp(γ_C) into a ring of stages by cp.async (completion signalled
// on full[s] mbarriers by cp.async.mbarrier.arrive.noinc), and the consumer warpgroup
// (recurrence_consumer.cuh) runs the recurrence, releasing a stage on empty[s] after its last
// wgmma. No block-wide barrier in the chunk loop.
#pragma once

#include "cuda/sm90/recurrence_consumer.cuh"

namespace linattn::cuda::kern {
namespace wgmma_recurrence {

template <class E, bool DELTA, int STAGES, PassOut OUT>
struct alignas(1024) RecurrenceSmem {
  StageOf<E, DELTA, OUT> st[STAGES];
  // full[s]: stage s's copies landed (128 producer arrivals, cp.async.mbarrier.arrive.noinc);
  // empty[s]: the consumer's wgmmas are done with it (128 consumer arrivals)
  alignas(8) uint64_t full[STAGES];
  alignas(8) uint64_t empty[STAGES];
};

// A chunk-parallel Hopper kernel (one warpgroup per (chunk, value head)) with SMEM bytes of dynamic
// shared memory: the attribute, then the launch over (num_chunks, HV).
template <class Kernel>
cudaError_t launch_chunk_heads(Kernel kernel, int smem, const PrepParams& p, cudaStream_t s) {
  return launch_with_smem(kernel, smem, ChunkParallelScheduler<>::grid_shape(p.num_chunks, p.HV), kThreads, p, s);
}

// One CTA per (map entry n, value head, V tile). The map is the sequence map, or the sequence-split
// pass's segments (docs/sequence_split.md): the initial state is read for entry n, the final
// state written for its sequence by the sequence's last entry. kTransition (that pass's first kernel),
// for every entry but a sequence's last: tiles 0 .. V/64 - 1 carry C (from h0 of the sequence in
// its first segment, else from zero); with the delta rule tiles V/64 .. (V + K)/64 - 1 carry M
// (from the identity, U = 0; not in a first segment, whose start state is known). The end states
// go to p.trans, no O. (Without the delta rule M is diagonal: the combine forms it from exp(γ_C).)
// kOutput with StateParams::map_o (context parallelism's state map, sequence map only): tiles
// V/64 .. (V + K)/64 - 1 carry M from the identity with U = 0 as the transition tiles do, writing
// their O (Q~) to map_o and their final states to map_ht.
// kRecompute (the backward's recompute; sequence map, no RAW): the state before each chunk and V_new
// (StateParams::h, vnew, vnew_lo), no O. kSaved (a forward that fills a saved buffer): the same
// writes and O.
// SPLIT: the recompute's split form (U_lo staged, V_new's low half written), compile-time.
// The state chain of one (map entry, value head, V tile): warpgroup ct.wg 0 copies (the
// producer), 1 runs the pass (the consumer). INIT: it initialises its ring's barriers (the block's
// last __syncthreads; a transition nobody needs returns before, the whole CTA); a kernel that runs
// it beside another chain (ct.wg, ct.tid relative to this chain's two warpgroups) initialises
// every ring itself first.
template <class T, bool DELTA, bool RAW, int STAGES, PassOut OUT, bool SPLIT, bool INIT = true, int ROLE = -1>
__device__ __forceinline__ void recurrence_chain(
    const StateParams& p,
    RecurrenceSmem<typename RecurrenceConsumer<T, DELTA, RAW, OUT, SPLIT>::E, DELTA, STAGES, OUT>& sm,
    const ChainTile& ct) {
  constexpr bool TRANS = OUT == PassOut::kTransition;
  constexpr bool kO = writes_o(OUT), kRe = writes_recompute(OUT);
  static_assert(!RAW || !kRe, "the recompute reads Qg / KgT");
  using Consumer = RecurrenceConsumer<T, DELTA, RAW, OUT, SPLIT>;
  const int V = p.V, HV = p.HV;
  const int v0 = ct.v0, hv = ct.hv, n = ct.n, wg = ct.wg, tid = ct.tid;
  const SeqInfo si = ct.si;
  const bool last = n + 1 == p.N || p.seqs[n + 1].seq != si.seq;  // the entry that ends its sequence
  const bool first = n == 0 || p.seqs[n - 1].seq != si.seq;      // the entry that starts it
  // a transition or state-map tile: U = 0, nothing of U or V read (never in the recompute)
  const bool mtile = !kRe && v0 >= V;
  if (TRANS && (last || (mtile && first))) return;  // (whole CTA) transitions nobody needs
  const int nch = (si.len + kC - 1) / kC;  // = ct.nch; formed past the early return (its SASS as before)
  const int hk = hv / p.G;
  using Bar = cutlass::arch::ClusterBarrier;
  if constexpr (INIT) init_ring_barriers(sm.full, sm.empty);  // the block's last __syncthreads

  // ROLE 0 / 1: only the producer's / the consumer's code (a kernel that sets each role's registers
  // with setmaxnreg); -1: the warpgroup picks
  if (ROLE == 0 || (ROLE < 0 && wg == 0)) {  // the producer: stage ci as soon as the consumer has released its buffer
    const bool vrows = !DELTA && p.v_raw != nullptr;
    for (int ci = 0; ci < nch; ++ci) {
      if (ci >= STAGES) Bar::wait(&sm.empty[ci % STAGES], ((ci / STAGES) - 1) & 1);
      auto& st = sm.st[ci % STAGES];
      const int64_t blk = static_cast<int64_t>(si.chunk0 + ci) * HV + hv;
      const int valid = min(kC, si.len - ci * kC);
      if constexpr (DELTA)
        copy_kmajor<T, kC, kK, false>(reinterpret_cast<T*>(st.w), static_cast<const T*>(p.W) + blk * kC * kK, kK, tid);
      if constexpr (RAW) {  // raw q / k rows ([tokens][H][K], shared by the value heads of a key head)
        const int64_t rs = static_cast<int64_t>(p.H) * kK;
        const int64_t r0 = static_cast<int64_t>(si.t0 + ci * kC) * rs + static_cast<int64_t>(hk) * kK;
        if constexpr (kO)
          copy_kmajor<T, kC, kK, true>(reinterpret_cast<T*>(st.q), static_cast<const T*>(p.q_raw) + r0, rs, tid, valid);
        copy_mnmajor<T>(reinterpret_cast<T*>(st.k), static_cast<const T*>(p.k_raw) + r0, rs, tid, valid);
        tile_copy<float, 1, 2 * kC, kThreads>(st.rf, 2 * kC, p.rowfac + blk * 2 * kC, 2 * kC, tid);
      } else {
        if constexpr (kO)
          copy_kmajor<T, kC, kK, false>(reinterpret_cast<T*>(st.q), static_cast<const T*>(p.Qg) + blk * kC * kK, kK, tid);
        copy_kmajor<T, kK, kC, false>(reinterpret_cast<T*>(st.k), static_cast<const T*>(p.KgT) + blk * kK * kC, kC, tid);
      }
      if constexpr (kO)
        copy_kmajor<T, kC, kC, false>(reinterpret_cast<T*>(st.a), static_cast<const T*>(p.Aqk) + blk * kC * kC, kC, tid);
      if (mtile) {
        // a transition tile reads no U
      } else if (vrows) {  // V_new = V from the token-major v rows; rows past the chunk's end zero
        const int64_t vs = static_cast<int64_t>(HV) * V;
        copy_kmajor<T, kC, kVT, true>(reinterpret_cast<T*>(st.u),
                                      static_cast<const T*>(p.v_raw) + static_cast<int64_t>(si.t0 + ci * kC) * vs +
                                          static_cast<int64_t>(hv) * V + v0,
                                      vs, tid, valid);
      } else {
        copy_kmajor<T, kC, kVT, false>(reinterpret_cast<T*>(st.u), static_cast<const T*>(p.U) + blk * kC * V + v0, V, tid);
        if constexpr (SPLIT)
          copy_kmajor<T, kC, kVT, false>(reinterpret_cast<T*>(st.ulo), static_cast<const T*>(p.U_lo) + blk * kC * V + v0,
                                         V, tid);
      }
      tile_copy<float, 1, kK, kThreads>(st.ge, kK, p.gexp + blk * kK, kK, tid);
      // full[s] completes when every producer thread's copies of this stage have landed
      cutlass::arch::cpasync_barrier_arrive_noinc(&sm.full[ci % STAGES]);
    }
    cp_wait<0>();  // (the barriers track completion; nothing may stay in flight past exit)
    return;
  }

  Consumer cons;
  // TRANS: h0 of the sequence in its first segment (C is then the start of the next), else zero
  cons.init(p, TRANS ? si.seq : n, hv, v0, tid, /*read_h0=*/(!TRANS || first) && !mtile);
  if (mtile) cons.init_identity(v0 - V);
  // a state-map tile's O is Q~: [tokens][HV][K] at column v0 - V
  const int OW = mtile ? kK : V;
  const int64_t ostride = static_cast<int64_t>(HV) * OW;
  T* og = kO ? static_cast<T*>(mtile ? p.map_o : p.o) + static_cast<int64_t>(hv) * OW + (mtile ? v0 - V : v0) : nullptr;
  for (int ci = 0; ci < nch; ++ci) {
    Bar::wait(&sm.full[ci % STAGES], (ci / STAGES) & 1);  // stage ci's copies landed
    cutlass::arch::fence_view_async_shared();  // the producer's cp.async data -> this thread's wgmmas
    if constexpr (kRe) {
      const int64_t blk = static_cast<int64_t>(si.chunk0 + ci) * HV + hv;
      const bool h16 = p.h_dt != 2;  // the compute type, [K][V] (recurrence_wgmma_applies)
      const typename Consumer::RecomputeOut ro{
          h16 ? nullptr : static_cast<float*>(p.h) + blk * kK * V + state_index<kK>(V, p.v_first, 0, v0),
          DELTA || p.vnew ? static_cast<T*>(p.vnew) + blk * kC * V + v0 : nullptr,  // always with the delta rule
          p.vnew_lo ? static_cast<T*>(p.vnew_lo) + blk * kC * V + v0 : nullptr,
          p.hs ? static_cast<T*>(p.hs) + (blk * V + v0) * kK : nullptr, V, p.v_first,
          h16 ? static_cast<T*>(p.h) + blk * kK * V + v0 : nullptr};
      if constexpr (kO)
        cons.chunk(sm.st[ci % STAGES], og + static_cast<int64_t>(si.t0 + ci * kC) * ostride, ostride,
                   min(kC, si.len - ci * kC), false, &ro);
      else
        cons.chunk(sm.st[ci % STAGES], nullptr, 0, kC, false, &ro);
    } else {
      cons.chunk(sm.st[ci % STAGES], kO ? og + static_cast<int64_t>(si.t0 + ci * kC) * ostride : nullptr, ostride,
                 min(kC, si.len - ci * kC), mtile);
    }
    Bar::arrive(&sm.empty[ci % STAGES]);  // every read of stage ci (wgmmas and loads) is done
  }
  if constexpr (TRANS) {
    cons.store_trans(p, n, hv, v0);
  } else if (last) {
    if (mtile) cons.store_map(p, si.seq, hv, v0 - V);
    else cons.store(p, si.seq, hv, v0);
  }
}

template <class T, bool DELTA, bool RAW, int STAGES, PassOut OUT, bool SPLIT>
__global__ void __launch_bounds__(2 * kThreads, 1) chunk_recurrence_wgmma_kernel(const StateParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Smem = RecurrenceSmem<typename RecurrenceConsumer<T, DELTA, RAW, OUT, SPLIT>::E, DELTA, STAGES, OUT>;
  extern __shared__ unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_base_1024(smem_raw));
  recurrence_chain<T, DELTA, RAW, STAGES, OUT, SPLIT>(p, sm, ChainTile::get(p.seqs));
#endif
}

template <class T, bool DELTA, bool RAW, int STAGES, PassOut OUT, bool SPLIT = false>
cudaError_t launch(const StateParams& p, cudaStream_t s) {
  constexpr bool TRANS = OUT == PassOut::kTransition;
  static_assert(smem_bytes_of<RecurrenceSmem<typename Atoms<T>::E, DELTA, STAGES, OUT>>() <= 227 * 1024,
                "the stages exceed the 227 KB of shared memory a CTA may have");
  // the transitions' and the state map's M columns after the V columns
  const bool mcols = DELTA && (TRANS || (OUT == PassOut::kOutput && p.map_o != nullptr));
  const dim3 grid = SequentialScheduler<kVT>::grid_shape(mcols ? p.V + kK : p.V, p.HV, p.N);
  return launch_with_smem(chunk_recurrence_wgmma_kernel<T, DELTA, RAW, STAGES, OUT, SPLIT>,
                          smem_bytes_of<RecurrenceSmem<typename Atoms<T>::E, DELTA, STAGES, OUT>>(), grid, 2 * kThreads,
                          p, s);
}

// The instantiations of one 16-bit type (one translation unit each: chunk_recurrence_wgmma_{bf16,fp16}.cu):
// the delta rule with three stages, without it two (launch_recurrence_wgmma says why); kTransition
// when p.trans is set; kRecompute (four stages: no O, so a chunk's consumer work is shorter and
// the stage smaller, ~50 KB with the delta rule) when p.h is, kSaved (the forward's stages, 73 KB
// with the delta rule: three fit) when p.o is too.
template <class T>
cudaError_t launch_type(const StateParams& p, cudaStream_t s) {
  constexpr PassOut kOut = PassOut::kOutput, kTrans = PassOut::kTransition, kRe = PassOut::kRecompute,
                    kSav = PassOut::kSaved;
  const bool raw = p.q_raw != nullptr, trans = p.trans != nullptr;
  const bool split = p.U_lo != nullptr;  // (recurrence_wgmma_applies: with vnew_lo, delta rule only)
  if (p.h && p.o) {
    if (!p.delta) return launch<T, false, false, 2, kSav>(p, s);
    return split ? launch<T, true, false, 3, kSav, true>(p, s) : launch<T, true, false, 3, kSav>(p, s);
  }
  if (p.h) {
    if (!p.delta) return launch<T, false, false, 4, kRe>(p, s);
    return split ? launch<T, true, false, 4, kRe, true>(p, s) : launch<T, true, false, 4, kRe>(p, s);
  }
  if (p.delta) {
    if (trans) return raw ? launch<T, true, true, 3, kTrans>(p, s) : launch<T, true, false, 3, kTrans>(p, s);
    return raw ? launch<T, true, true, 3, kOut>(p, s) : launch<T, true, false, 3, kOut>(p, s);
  }
  if (trans) return raw ? launch<T, false, true, 2, kTrans>(p, s) : launch<T, false, false, 2, kTrans>(p, s);
  return raw ? launch<T, false, true, 2, kOut>(p, s) : launch<T, false, false, 2, kOut>(p, s);
}

}  // namespace wgmma_recurrence
}  // namespace linattn::cuda::kern

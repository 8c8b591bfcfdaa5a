// Simple GLA's forward in one kernel on Hopper (sm_90a, 16-bit, K = 128, V tile 64): the
// chunk-local work (γ, Q Kᵀ with the decay, Aqk, the row factors, exp(γ_C)) runs in two producer
// warpgroups of the state pass, into the stages the consumer reads, instead of in chunk_prep
// through the workspace. Without the delta rule that work is small (no K Kᵀ inverse, W or U) and
// the pass reads the raw q, k and v rows anyway: one kernel drops chunk_prep's second read of q and
// k and the Aqk round trip (docs/fused_forward_design.md).
//
// Why two producers: one warpgroup runs the chunk-local work at one warp a scheduler, ~2.4 µs a
// chunk (session 42's one-producer form, measured slower than two kernels), against the consumer's
// ~1.3 µs. Two on alternate chunks each have two consumer periods for theirs.
//
// Per (sequence, value head, V tile) CTA of three warpgroups:
//   0, 1: producers of the even / odd chunks (setmaxnreg 144 each; named barriers 1 and 2). Each
//         waits for its chunk's tiles on loaded[s], computes the chunk's operands
//         (intra_chunk_scalar_delta.cuh's producer, delta rule off, through StageSink) and
//         releases the stage on full[s] (128 arrivals, after a proxy fence: the consumer's wgmmas
//         read Aqk through the async proxy). Its next chunk's raw gate it prefetches into registers;
//   2:    the raw-row recurrence (recurrence_consumer.cuh, as the two-kernel pass; setmaxnreg 216). A
//         chunk of 64 tokens leaves O in its stage's v tile (stmatrix), which one thread stores by
//         TMA; that thread then refills the previous chunk's stage (whose O store has been read by
//         then) with chunk c + 3's q, k rows and v tile (tma_chunk_rows.cuh: ten boxes, their bytes
//         expected on loaded[s]). A shorter chunk (a sequence's last) stores O's rows itself.
// Four stages: chunk c is in stage c % 4. Why the consumer loads: when each producer waited for its
// next stage to be free before computing its current chunk, the consumer's release of chunk c - 2
// gated the producer's work on chunk c, and a chunk cost about (load issue + produce + consume) / 2
// (session 54's diagnostic variants: 2.2 µs against ~1.6 for either role alone). The consumer
// refills a stage a chunk after it is done with it, so nothing waits on a free stage; the
// producers wait only for data issued three chunks ahead.
#pragma once

#include <cutlass/arch/reg_reconfig.h>

#include "cuda/sm90/chunk_recurrence_wgmma.cuh"
#include "cuda/sm90/intra_chunk_scalar_delta.cuh"
#include "cuda/sm90/tma_chunk_rows.cuh"

namespace linattn::cuda::kern {
namespace wgmma_recurrence {

// The kernel's parameters: the chunk-local inputs (PrepParams: q, k, v, g, g_gamma, scale, GVA)
// and the pass's (StateParams: the sequence map, h0, ht, o), the tensor maps of q, k, v and o,
// and the sequence map itself where it fits (seqs.count > 0; else state.seqs, in the workspace).
struct FusedScalarParams {
  ChunkRowMaps maps;
  PrepParams prep;
  StateParams state;
  InlineSeqMap seqs;
};

// The producer's results straight into a RecurrenceStage: Aqk (tok, tok') at kmajor_off<64> (the
// consumer's TokByTok B operand), the row factors and exp(γ_C).
template <class E>
struct StageSink {
  static constexpr bool kSmemAqk = true;  // Aqk by stmatrix (aqk_epilogue)
  E* a;
  float* rfac;
  float* gexp;
  __device__ __forceinline__ void ge(int d, float x) { gexp[d] = x; }
  __device__ __forceinline__ void rf(int i, float x) { rfac[i] = x; }
  __device__ __forceinline__ void aqk(int r, int c, uint32_t x) {  // (r, c), (r, c + 1); c even
    *reinterpret_cast<uint32_t*>(a + kmajor_off<kC>(r, c) + (c & 7)) = x;
  }
};

constexpr int kFusedScalarStages = 4;
// Registers by setmaxnreg. The CTA starts with 168 a thread (384 threads under 64 K, in steps of
// 8) and setmaxnreg moves registers only within the CTA's own pool: the consumer's increase must
// not exceed what the producers free, or its setmaxnreg waits for ever (session 53's first run
// hung at 144 / 144 / 224). ptxas, both types: no spill in any loop at 144 / 216 (the consumer's
// ~48 bytes are in its final-state store); 128 and 136 for the producers spill in their loops.
constexpr int kFusedLaunchRegs = 168;
constexpr int kFusedProducerRegs = 144;
constexpr int kFusedConsumerRegs = 216;
static_assert(3 * 128 * kFusedLaunchRegs <= 64 * 1024 && (3 * 128 * (kFusedLaunchRegs + 8) > 64 * 1024),
              "the launch's registers a thread (__launch_bounds__(384, 1))");
static_assert(2 * (kFusedLaunchRegs - kFusedProducerRegs) >= kFusedConsumerRegs - kFusedLaunchRegs,
              "the consumer takes no more registers than the two producers give back");

template <class E, int STAGES>
struct alignas(1024) FusedScalarSmem {
  RecurrenceStage<E, false> st[STAGES];
  ScalarGateScratch sc[2];            // each producer's γ, row norms and factors
  alignas(8) uint64_t full[STAGES];   // 128 producer arrivals: the stage's operands are in
  alignas(8) uint64_t loaded[STAGES];  // one arrival and the TMA bytes: the stage's q, k and v tiles landed
};

// Producer P of chunks P, P + 2, ...
template <class T, int STAGES, int P, class Smem>
__device__ __forceinline__ void fused_scalar_producer(const FusedScalarParams& fp, Smem& sm, const ChainTile& ct) {
  static_assert(STAGES % 2 == 0, "a stage's chunks all belong to one producer");
  using Producer = ScalarDeltaProducer<T, /*DELTA=*/false, /*BAR=*/1 + P>;
  using E = typename Producer::E;
  using Bar = cutlass::arch::ClusterBarrier;
  const SeqInfo si = ct.si;
  const int nch = ct.nch;
  Producer prod(fp.prep, sm.sc[P], ct.tid, ct.hv, ct.v0);
  if (P < nch) prod.load_gate(si.t0 + P * kC, min(kC, si.len - P * kC));
  const float braw[2] = {0.f, 0.f};  // (no β without the delta rule)
  for (int ci = P; ci < nch; ci += 2) {
    const float graw[2] = {prod.graw[0], prod.graw[1]};  // chunk ci's, before the next one's load
    // The thread's coordinates made opaque each chunk: otherwise their derived shared-memory
    // offsets (Aqk's swizzled stores) are hoisted out of the loop and spilled at 144 registers.
    asm volatile("" : "+r"(prod.tid), "+r"(prod.warp), "+r"(prod.lane), "+r"(prod.g), "+r"(prod.t));
    const int cn = ci + 2;
    if (cn < nch) prod.load_gate(si.t0 + cn * kC, min(kC, si.len - cn * kC));
    const int Lc = min(kC, si.len - ci * kC);
    auto& st = sm.st[ci % STAGES];
    Bar::wait(&sm.loaded[ci % STAGES], (ci / STAGES) & 1);
    if (Lc < kC) clear_tail_rows(st.q, st.k, st.u, Lc, prod.tid);  // (a sequence's last chunk)
    cutlass::arch::fence_view_async_shared();  // the cleared rows -> the wgmmas (async proxy)
    warpgroup_sync<1 + P>();                   // the last chunk's scratch reads done, the rows cleared
    StageSink<E> sink{st.a, st.rf, st.ge};
    prod.compute(typename Producer::Tiles{st.q, st.k, nullptr}, Lc, graw, braw, nullptr, sink);
    cutlass::arch::fence_view_async_shared();  // the Aqk stores -> the consumer's wgmmas (async proxy)
    Bar::arrive(&sm.full[ci % STAGES]);
  }
}

template <class T, int STAGES>
__global__ void __launch_bounds__(3 * kThreads, 1) fused_scalar_forward_kernel(const __grid_constant__ FusedScalarParams fp) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Consumer = RecurrenceConsumer<T, /*DELTA=*/false, /*RAW=*/true, PassOut::kOutput, false, /*STAGE_O=*/true>;
  using E = typename Consumer::E;
  using Smem = FusedScalarSmem<E, STAGES>;
  using Bar = cutlass::arch::ClusterBarrier;
  extern __shared__ unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_base_1024(smem_raw));
  const StateParams& p = fp.state;
  const ChainTile ct = ChainTile::get(fp.seqs, p.seqs);  // the sequence map: entry n is sequence n
  init_ring_barriers(sm.full, sm.loaded, 1);     // the block's last __syncthreads
  // each role's code under its own register count (ptxas allocates per branch)
  if (ct.wg < 2) {
    cutlass::arch::warpgroup_reg_dealloc<kFusedProducerRegs>();
    if (ct.wg == 0) fused_scalar_producer<T, STAGES, 0>(fp, sm, ct);
    else fused_scalar_producer<T, STAGES, 1>(fp, sm, ct);
    return;
  }
  cutlass::arch::warpgroup_reg_alloc<kFusedConsumerRegs>();
  const SeqInfo si = ct.si;
  const int nch = ct.nch, hv = ct.hv, v0 = ct.v0, tid = ct.tid;
  const int64_t ostride = static_cast<int64_t>(p.HV) * p.V;
  const int hk = hv / fp.prep.G;
  // one thread: chunk c's q, k rows and v tile into stage c % STAGES, their bytes expected on loaded[]
  auto issue = [&](int c) {
    auto& st = sm.st[c % STAGES];
    issue_chunk_rows(fp.maps, &sm.loaded[c % STAGES], st.q, st.k, st.u, si.t0 + c * kC, hk, hv, v0);
  };
  if (tid == 0) {
    cute::prefetch_tma_descriptor(&fp.maps.q);
    cute::prefetch_tma_descriptor(&fp.maps.k);
    cute::prefetch_tma_descriptor(&fp.maps.v);
    cute::prefetch_tma_descriptor(&fp.maps.o);
    for (int c = 0; c < min(STAGES, nch); ++c) issue(c);
  }
  Consumer cons;
  cons.init(p, si.seq, hv, v0, tid);
  T* og = static_cast<T*>(p.o) + static_cast<int64_t>(hv) * p.V + v0;
  for (int ci = 0; ci < nch; ++ci) {
    Bar::wait(&sm.full[ci % STAGES], (ci / STAGES) & 1);
    cutlass::arch::fence_view_async_shared();  // (as the two-kernel pass; the producers fenced their own writes)
    const int t0 = si.t0 + ci * kC, Lc = min(kC, si.len - ci * kC);
    auto& st = sm.st[ci % STAGES];
    cons.chunk(st, og + static_cast<int64_t>(t0) * ostride, ostride, Lc);  // (Lc == 64: O left in st.u)
    cutlass::arch::fence_view_async_shared();  // this thread's O pieces -> the TMA store (async proxy)
    warpgroup_sync<3>();                       // every consumer thread is done with the stage
    if (tid == 0) {
      if (Lc == kC) store_chunk_o(fp.maps, st.u, t0, hv, v0);
      cute::tma_store_arrive();  // (one bulk group a chunk, empty for a short one)
      // Stage (ci - 1) % STAGES is refilled, not this one: its O store (one chunk old) has been
      // read by now, so waiting for it costs nothing; this chunk's is still reading st.u.
      if (ci >= 1 && ci - 1 + STAGES < nch) {
        cute::tma_store_wait<1>();
        issue(ci - 1 + STAGES);
      }
    }
  }
  cons.store(p, si.seq, hv, v0);
  if (tid == 0) cute::tma_store_wait<0>();  // the stores' reads of shared memory, before the CTA ends
#endif
}

// `tokens`: the rows of q, k and v (the flattened token axis).
template <class T>
cudaError_t launch_fused_scalar_forward(const PrepParams& pp, const StateParams& sp, int64_t tokens,
                                        const InlineSeqMap& seqs, cudaStream_t s) {
  using Smem = FusedScalarSmem<typename Atoms<T>::E, kFusedScalarStages>;
  static_assert(smem_bytes_of<Smem>() <= 227 * 1024, "the stages exceed the 227 KB of shared memory a CTA may have");
  FusedScalarParams fp{{}, pp, sp, seqs};
  static_assert(sizeof(FusedScalarParams) <= 32764 - 1024, "inside the 32764 bytes of kernel parameters");
  const cudaError_t e = encode_chunk_row_maps(fp.maps, pp.q, pp.k, pp.v, sp.o, tokens, pp.H, pp.HV, pp.V);
  if (e != cudaSuccess) return e;
  const dim3 grid = SequentialScheduler<kVT>::grid_shape(fp.state.V, fp.state.HV, fp.state.N);
  return launch_with_smem(fused_scalar_forward_kernel<T, kFusedScalarStages>, smem_bytes_of<Smem>(), grid, 3 * kThreads,
                          fp, s);
}

}  // namespace wgmma_recurrence
}  // namespace linattn::cuda::kern

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
//   2:    the raw-row recurrence (recurrence_consumer.cuh, as the two-kernel pass; setmaxnreg 216). Done with
//         chunk c, it issues chunk c + 4's q, k rows and v tile into the stage it frees (cp.async,
//         their completion arriving on loaded[s]: 128 arrivals, one a thread, .noinc).
// Four stages: chunk c is in stage c % 4. Why the consumer loads: when each producer waited for its
// next stage to be free before computing its current chunk, the consumer's release of chunk c - 2
// gated the producer's work on chunk c, and a chunk cost about (load issue + produce + consume) / 2
// (session 54's diagnostic variants: 2.2 µs against ~1.6 for either role alone). The consumer
// frees a stage and fills it again at once, so nothing waits on a free stage; the producers wait
// only for data issued four chunks ahead.
#pragma once

#include <cutlass/arch/reg_reconfig.h>

#include "cuda/sm90/chunk_recurrence_wgmma.cuh"
#include "cuda/sm90/intra_chunk_scalar_delta.cuh"

namespace linattn::cuda::kern {
namespace wgmma_recurrence {

// The kernel's parameters: the chunk-local inputs (PrepParams: q, k, v, g, g_gamma, scale, GVA)
// and the pass's (StateParams: the sequence map, h0, ht, o).
struct FusedScalarParams {
  PrepParams prep;
  StateParams state;
};

// The producer's results straight into a RecurrenceStage: Aqk (tok, tok') at kmajor_off<64> (the
// consumer's TokByTok B operand), the row factors and exp(γ_C).
template <class E>
struct StageSink {
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
  alignas(8) uint64_t loaded[STAGES];  // 128 consumer cp.async arrivals: the stage's q, k and v tiles landed
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
    Bar::wait(&sm.loaded[ci % STAGES], (ci / STAGES) & 1);
    cutlass::arch::fence_view_async_shared();  // the consumer's cp.async data -> the Q Kᵀ wgmmas
    warpgroup_sync<1 + P>();                   // the last chunk's scratch reads done
    auto& st = sm.st[ci % STAGES];
    StageSink<E> sink{st.a, st.rf, st.ge};
    prod.compute(typename Producer::Tiles{st.q, st.k, nullptr}, min(kC, si.len - ci * kC), graw, braw, nullptr, sink);
    cutlass::arch::fence_view_async_shared();  // the Aqk stores -> the consumer's wgmmas (async proxy)
    Bar::arrive(&sm.full[ci % STAGES]);
  }
}

template <class T, int STAGES>
__global__ void __launch_bounds__(3 * kThreads, 1) fused_scalar_forward_kernel(const __grid_constant__ FusedScalarParams fp) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Consumer = RecurrenceConsumer<T, /*DELTA=*/false, /*RAW=*/true, PassOut::kOutput, false>;
  using E = typename Consumer::E;
  using Smem = FusedScalarSmem<E, STAGES>;
  using Bar = cutlass::arch::ClusterBarrier;
  extern __shared__ unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_base_1024(smem_raw));
  const StateParams& p = fp.state;
  const ChainTile ct = ChainTile::get(p.seqs);  // the sequence map: entry n is sequence n
  init_ring_barriers(sm.full, sm.loaded);        // the block's last __syncthreads
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
  const PrepParams& pp = fp.prep;
  const int64_t ostride = static_cast<int64_t>(p.HV) * p.V;
  // chunk c's q, k rows and v tile into stage c % STAGES; their landing arrives on loaded[]
  const int64_t vs = static_cast<int64_t>(pp.HV) * pp.V;
  const T* vrows = static_cast<const T*>(pp.v) + static_cast<int64_t>(hv) * pp.V + v0;
  auto issue = [&](int c) {
    auto& st = sm.st[c % STAGES];
    const int t0 = si.t0 + c * kC, Lc = min(kC, si.len - c * kC);
    ScalarDeltaProducer<T, false>::copy_qk(pp, hv / pp.G, st.q, st.k, t0, Lc, tid);
    copy_kmajor<T, kC, kVT, true>(reinterpret_cast<T*>(st.u), vrows + static_cast<int64_t>(t0) * vs, vs, tid, Lc);
    cutlass::arch::cpasync_barrier_arrive_noinc(&sm.loaded[c % STAGES]);
  };
  for (int c = 0; c < min(STAGES, nch); ++c) issue(c);
  Consumer cons;
  cons.init(p, si.seq, hv, v0, tid);
  T* og = static_cast<T*>(p.o) + static_cast<int64_t>(hv) * p.V + v0;
  for (int ci = 0; ci < nch; ++ci) {
    Bar::wait(&sm.full[ci % STAGES], (ci / STAGES) & 1);
    cutlass::arch::fence_view_async_shared();  // (as the two-kernel pass: the cp.async tiles -> this thread's wgmmas)
    cons.chunk(sm.st[ci % STAGES], og + static_cast<int64_t>(si.t0 + ci * kC) * ostride, ostride, min(kC, si.len - ci * kC));
    if (ci + STAGES < nch) {
      warpgroup_sync<3>();  // every consumer thread is done reading the stage
      issue(ci + STAGES);
    }
  }
  cons.store(p, si.seq, hv, v0);
#endif
}

template <class T>
cudaError_t launch_fused_scalar_forward(const FusedScalarParams& fp, cudaStream_t s) {
  using Smem = FusedScalarSmem<typename Atoms<T>::E, kFusedScalarStages>;
  static_assert(smem_bytes_of<Smem>() <= 227 * 1024, "the stages exceed the 227 KB of shared memory a CTA may have");
  const dim3 grid = SequentialScheduler<kVT>::grid_shape(fp.state.V, fp.state.HV, fp.state.N);
  return launch_with_smem(fused_scalar_forward_kernel<T, kFusedScalarStages>, smem_bytes_of<Smem>(), grid, 3 * kThreads,
                          fp, s);
}

}  // namespace wgmma_recurrence
}  // namespace linattn::cuda::kern

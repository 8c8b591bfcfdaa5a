// The fused forward of the scalar gate on Hopper (sm_90a, 16-bit, K = 128, V tile 64): the
// chunk-local work and the recurrence in one kernel, no workspace round trip. One CTA per
// (sequence, value head, V tile), two warpgroups:
//   producer (warpgroup 0, intra_chunk_scalar_gate.cuh): cp.async of chunk c + 1's q, k rows and
//     v tile into its stage, then chunk c's chunk-local work into chunk c's stage; full[s] when it
//     is written;
//   consumer (warpgroup 1, recurrence_consumer.cuh): the sequential recurrence over the stages,
//     empty[s] when it is done with one.
// Three stages: the consumer on chunk c - 1, the producer computing c and loading c + 1. The stage
// tiles are the consumer's raw-row operands, so the q / k / v tiles the producer loads are read in
// place by both sides. Instantiated without the delta rule (simple GLA): with it (GDN) one
// producer warpgroup is too slow for the pass (docs/fused_forward_design.md; branch fused-gdn).
#pragma once

#include "cuda/sm90/chunk_recurrence_wgmma.cuh"
#include "cuda/sm90/intra_chunk_scalar_gate.cuh"

namespace linattn::cuda::kern {
namespace wgmma_recurrence {

constexpr int kFusedStages = 3;

template <class E, bool DELTA>
struct alignas(1024) FusedSmem {
  RecurrenceStage<E, DELTA> st[kFusedStages];
  ScalarGateScratch<DELTA> scratch;
  alignas(8) uint64_t full[kFusedStages];   // the producer wrote stage s (128 arrivals)
  alignas(8) uint64_t empty[kFusedStages];  // the consumer is done with stage s (128 arrivals)
};

template <class T, bool DELTA>
__global__ void __launch_bounds__(2 * kThreads, 1) fused_forward_scalar_gate_kernel(const __grid_constant__ FusedForwardParams fp) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Producer = ScalarGateProducer<T, DELTA>;
  using Consumer = RecurrenceConsumer<T, DELTA, true>;
  using Smem = FusedSmem<typename Consumer::E, DELTA>;
  extern __shared__ unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_base_1024(smem_raw));
  const StateParams& p = fp.state;
  const int v0 = blockIdx.x * kVT, hv = blockIdx.y, n = blockIdx.z;
  const int wg = threadIdx.x / kThreads, tid = threadIdx.x % kThreads;
  const SeqInfo si = p.seqs[n];
  const int nch = (si.len + kC - 1) / kC;
  using Bar = cutlass::arch::ClusterBarrier;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kFusedStages; ++s) {
      Bar::init(&sm.full[s], kThreads);
      Bar::init(&sm.empty[s], kThreads);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();  // the initialised barriers before any use; the last block-wide barrier

  if (wg == 0) {
    Producer prod(fp.prep, sm.scratch, tid, hv, v0);
    auto chunk_len = [&](int ci) { return min(kC, si.len - ci * kC); };
    if (nch > 0) prod.load(sm.st[0], si.t0, chunk_len(0));
    for (int ci = 0; ci < nch; ++ci) {
      // chunk ci's raw gate / β, before load() fetches chunk ci + 1's
      const float gcur[2] = {prod.graw[0], prod.graw[1]}, bcur[2] = {prod.braw[0], prod.braw[1]};
      if (ci + 1 < nch) {
        const int s1 = (ci + 1) % kFusedStages;
        if (ci + 1 >= kFusedStages) Bar::wait(&sm.empty[s1], ((ci + 1) / kFusedStages - 1) & 1);
        prod.load(sm.st[s1], si.t0 + (ci + 1) * kC, chunk_len(ci + 1));
        cp_wait<1>();  // chunk ci's group (groups complete in order)
      } else {
        cp_wait<0>();
      }
      cutlass::arch::fence_view_async_shared();  // this thread's cp.async data -> the wgmmas
      warpgroup_sync<1>();                         // every thread's copies of chunk ci
      prod.compute(sm.st[ci % kFusedStages], chunk_len(ci), gcur, bcur);
      cutlass::arch::fence_view_async_shared();  // the generic-proxy writes -> the consumer's wgmmas
      Bar::arrive(&sm.full[ci % kFusedStages]);
    }
    return;
  }

  Consumer cons;
  cons.init(p, n, hv, v0, tid);
  const int64_t ostride = static_cast<int64_t>(p.HV) * p.V;
  T* og = static_cast<T*>(p.o) + static_cast<int64_t>(hv) * p.V + v0;
  for (int ci = 0; ci < nch; ++ci) {
    Bar::wait(&sm.full[ci % kFusedStages], (ci / kFusedStages) & 1);
    cutlass::arch::fence_view_async_shared();
    cons.chunk(sm.st[ci % kFusedStages], og + static_cast<int64_t>(si.t0 + ci * kC) * ostride, ostride,
               min(kC, si.len - ci * kC));
    Bar::arrive(&sm.empty[ci % kFusedStages]);
  }
  cons.store(p, n, hv, v0);
#endif
}

template <class T, bool DELTA>
cudaError_t launch_fused(const FusedForwardParams& fp, cudaStream_t s) {
  auto kernel = fused_forward_scalar_gate_kernel<T, DELTA>;
  // + 1024: the kernel aligns its base to the 128-byte swizzle's 1024-byte period
  constexpr int smem = static_cast<int>(sizeof(FusedSmem<typename Atoms<T>::E, DELTA>)) + 1024;
  static_assert(smem <= 227 * 1024, "three stages fit an SM's shared memory");
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  dim3 grid(fp.state.V / kVT, fp.state.HV, fp.state.N);
  kernel<<<grid, 2 * kThreads, smem, s>>>(fp);
  return cudaGetLastError();
}

}  // namespace wgmma_recurrence
}  // namespace linattn::cuda::kern

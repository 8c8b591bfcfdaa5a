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

template <class E, bool DELTA, int STAGES>
struct alignas(1024) RecurrenceSmem {
  RecurrenceStage<E, DELTA> st[STAGES];
  // full[s]: stage s's copies landed (128 producer arrivals, cp.async.mbarrier.arrive.noinc);
  // empty[s]: the consumer's wgmmas are done with it (128 consumer arrivals)
  alignas(8) uint64_t full[STAGES];
  alignas(8) uint64_t empty[STAGES];
};

// The shared-memory base rounded up to the 128-byte swizzle's 1024-byte period; an offset from
// smem_raw (not an integer round trip) keeps the pointer's shared-memory provenance (LDS).
__device__ __forceinline__ unsigned char* smem_base_1024(unsigned char* smem_raw) {
  const unsigned pad = (1024u - (static_cast<unsigned>(__cvta_generic_to_shared(smem_raw)) & 1023u)) & 1023u;
  return smem_raw + pad;
}

// A chunk-parallel Hopper kernel (one warpgroup per (chunk, value head)) with SMEM bytes of dynamic
// shared memory: the attribute, then the launch over (num_chunks, HV).
template <class Kernel>
cudaError_t launch_chunk_heads(Kernel kernel, int smem, const PrepParams& p, cudaStream_t s) {
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  kernel<<<dim3(p.num_chunks, p.HV), kThreads, smem, s>>>(p);
  return cudaGetLastError();
}

template <class T, bool DELTA, bool RAW, int STAGES>
__global__ void __launch_bounds__(2 * kThreads, 1) chunk_recurrence_wgmma_kernel(const StateParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Consumer = RecurrenceConsumer<T, DELTA, RAW>;
  using Smem = RecurrenceSmem<typename Consumer::E, DELTA, STAGES>;
  extern __shared__ unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_base_1024(smem_raw));
  const int V = p.V, HV = p.HV;
  const int v0 = blockIdx.x * kVT, hv = blockIdx.y, n = blockIdx.z;
  // warpgroup 0 copies (the producer), warpgroup 1 runs the pass (the consumer)
  const int wg = threadIdx.x / kThreads, tid = threadIdx.x % kThreads;
  const SeqInfo si = p.seqs[n];
  const int nch = (si.len + kC - 1) / kC;
  const int hk = hv / p.G;
  using Bar = cutlass::arch::ClusterBarrier;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      Bar::init(&sm.full[s], kThreads);
      Bar::init(&sm.empty[s], kThreads);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();  // the initialised barriers before any use; the last block-wide barrier

  if (wg == 0) {  // the producer: stage ci as soon as the consumer has released its buffer
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
        copy_kmajor<T, kC, kK, true>(reinterpret_cast<T*>(st.q), static_cast<const T*>(p.q_raw) + r0, rs, tid, valid);
        copy_mnmajor<T>(reinterpret_cast<T*>(st.k), static_cast<const T*>(p.k_raw) + r0, rs, tid, valid);
        tile_copy<float, 1, 2 * kC, kThreads>(st.rf, 2 * kC, p.rowfac + blk * 2 * kC, 2 * kC, tid);
      } else {
        copy_kmajor<T, kC, kK, false>(reinterpret_cast<T*>(st.q), static_cast<const T*>(p.Qg) + blk * kC * kK, kK, tid);
        copy_kmajor<T, kK, kC, false>(reinterpret_cast<T*>(st.k), static_cast<const T*>(p.KgT) + blk * kK * kC, kC, tid);
      }
      copy_kmajor<T, kC, kC, false>(reinterpret_cast<T*>(st.a), static_cast<const T*>(p.Aqk) + blk * kC * kC, kC, tid);
      if (vrows) {  // V_new = V from the token-major v rows; rows past the chunk's end zero
        const int64_t vs = static_cast<int64_t>(HV) * V;
        copy_kmajor<T, kC, kVT, true>(reinterpret_cast<T*>(st.u),
                                      static_cast<const T*>(p.v_raw) + static_cast<int64_t>(si.t0 + ci * kC) * vs +
                                          static_cast<int64_t>(hv) * V + v0,
                                      vs, tid, valid);
      } else {
        copy_kmajor<T, kC, kVT, false>(reinterpret_cast<T*>(st.u), static_cast<const T*>(p.U) + blk * kC * V + v0, V, tid);
      }
      tile_copy<float, 1, kK, kThreads>(st.ge, kK, p.gexp + blk * kK, kK, tid);
      // full[s] completes when every producer thread's copies of this stage have landed
      cutlass::arch::cpasync_barrier_arrive_noinc(&sm.full[ci % STAGES]);
    }
    cp_wait<0>();  // (the barriers track completion; nothing may stay in flight past exit)
    return;
  }

  Consumer cons;
  cons.init(p, n, hv, v0, tid);
  const int64_t ostride = static_cast<int64_t>(HV) * V;
  T* og = static_cast<T*>(p.o) + static_cast<int64_t>(hv) * V + v0;
  for (int ci = 0; ci < nch; ++ci) {
    Bar::wait(&sm.full[ci % STAGES], (ci / STAGES) & 1);  // stage ci's copies landed
    cutlass::arch::fence_view_async_shared();  // the producer's cp.async data -> this thread's wgmmas
    cons.chunk(sm.st[ci % STAGES], og + static_cast<int64_t>(si.t0 + ci * kC) * ostride, ostride,
               min(kC, si.len - ci * kC));
    Bar::arrive(&sm.empty[ci % STAGES]);  // every read of stage ci (wgmmas and loads) is done
  }
  cons.store(p, n, hv, v0);
#endif
}

template <class T, bool DELTA, bool RAW, int STAGES>
cudaError_t launch(const StateParams& p, cudaStream_t s) {
  auto kernel = chunk_recurrence_wgmma_kernel<T, DELTA, RAW, STAGES>;
  // + 1024: the kernel aligns its base to the 128-byte swizzle's 1024-byte period
  constexpr int smem = static_cast<int>(sizeof(RecurrenceSmem<typename Atoms<T>::E, DELTA, STAGES>)) + 1024;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  dim3 grid(p.V / kVT, p.HV, p.N);
  kernel<<<grid, 2 * kThreads, smem, s>>>(p);
  return cudaGetLastError();
}

// The instantiations of one 16-bit type (one translation unit each: chunk_recurrence_wgmma_{bf16,fp16}.cu).
template <class T>
cudaError_t launch_type(const StateParams& p, int stages, cudaStream_t s) {
  const bool raw = p.q_raw != nullptr;
  if (p.delta) {
    if (stages == 3) return raw ? launch<T, true, true, 3>(p, s) : launch<T, true, false, 3>(p, s);
    return raw ? launch<T, true, true, 2>(p, s) : launch<T, true, false, 2>(p, s);
  }
  if (stages == 3) return raw ? launch<T, false, true, 3>(p, s) : launch<T, false, false, 3>(p, s);
  return raw ? launch<T, false, true, 2>(p, s) : launch<T, false, false, 2>(p, s);
}

}  // namespace wgmma_recurrence
}  // namespace linattn::cuda::kern

// chunk_prep of the scalar-gate delta rule (GDN) on Hopper (sm_90a, 16-bit, K = 128, V 64 or 128):
// one warpgroup per (chunk, value head) runs intra_chunk_scalar_delta.cuh's chunk-local work on
// wgmma into shared memory, then writes W, U, Aqk, the row factors and exp(γ_C) to the workspace
// in chunk_prep's layouts (PrepParams), for the raw-row wgmma pass. Two CTAs an SM (96 KB each).
#pragma once

#include "cuda/sm90/chunk_recurrence_wgmma.cuh"
#include "cuda/sm90/intra_chunk_scalar_delta.cuh"

namespace linattn::cuda::kern {
namespace wgmma_recurrence {

template <class E>
struct alignas(1024) PrepWgmmaSmem {
  RecurrenceStage<E, true> st;  // q, k, v tile 0 in; W, Aqk, U tile 0, row factors, exp(γ_C) out
  alignas(1024) E v1[kC * kVT];  // v tile 1 in (V = 128), U tile 1 out
  ScalarDeltaScratch sc;
};

// A K-major swizzled shared tile (kmajor_off) out to a row-major global one (row stride gld), in
// 16-byte pieces by the 128 threads.
template <class T, int ROWS, int COLS>
__device__ __forceinline__ void store_kmajor(T* dst, int64_t gld, const T* src, int tid) {
  constexpr int ppr = COLS / 8, rstep = kThreads / ppr, iters = ROWS / rstep;
  static_assert(rstep % 8 == 0 && ROWS % rstep == 0, "whole atoms per pass");
  const int r0 = tid / ppr, c0 = (tid % ppr) * 8;
  const T* s0 = src + kmajor_off<ROWS>(r0, c0);
#pragma unroll
  for (int it = 0; it < iters; ++it)
    *reinterpret_cast<uint4*>(dst + (r0 + it * rstep) * gld + c0) = *reinterpret_cast<const uint4*>(s0 + it * rstep * 64);
}

template <class T>
__global__ void __launch_bounds__(kThreads, 2) chunk_prep_scalar_delta_wgmma_kernel(const __grid_constant__ PrepParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Producer = ScalarDeltaProducer<T>;
  using E = typename Producer::E;
  extern __shared__ unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<PrepWgmmaSmem<E>*>(smem_base_1024(smem_raw));
  const int c = blockIdx.x, hv = blockIdx.y, tid = threadIdx.x;
  const ChunkInfo ci = p.chunks[c];
  const int V = p.V;
  Producer prod(p, sm.sc, tid, hv, 0);
  prod.load(sm.st, ci.t0, ci.len);  // q, k, v tile 0; the raw gate and β
  if (V > kVT) {
    const int64_t vs = static_cast<int64_t>(p.HV) * V;
    copy_kmajor<T, kC, kVT, true>(reinterpret_cast<T*>(sm.v1),
                                  static_cast<const T*>(p.v) + static_cast<int64_t>(ci.t0) * vs +
                                      static_cast<int64_t>(hv) * V + kVT,
                                  vs, tid, ci.len);
    cp_commit();
  }
  cp_wait<0>();
  cutlass::arch::fence_view_async_shared();  // this thread's cp.async data -> the wgmmas
  warpgroup_sync<1>();
  const float graw[2] = {prod.graw[0], prod.graw[1]}, braw[2] = {prod.braw[0], prod.braw[1]};
  prod.compute(sm.st, ci.len, graw, braw);
  if (V > kVT) prod.u_tile(sm.v1);
  warpgroup_sync<1>();  // every thread's shared-memory results

  const int64_t blk = static_cast<int64_t>(c) * p.HV + hv;
  store_kmajor<T, kC, kK>(static_cast<T*>(p.W) + blk * kC * kK, kK, reinterpret_cast<const T*>(sm.st.w), tid);
  store_kmajor<T, kC, kC>(static_cast<T*>(p.Aqk) + blk * kC * kC, kC, reinterpret_cast<const T*>(sm.st.a), tid);
  T* U = static_cast<T*>(p.U) + blk * kC * V;
  store_kmajor<T, kC, kVT>(U, V, reinterpret_cast<const T*>(sm.st.u), tid);
  if (V > kVT) store_kmajor<T, kC, kVT>(U + kVT, V, reinterpret_cast<const T*>(sm.v1), tid);
  p.rowfac[blk * 2 * kC + tid] = sm.st.rf[tid];
  p.gexp[blk * kK + tid] = sm.st.ge[tid];
#endif
}

template <class T>
cudaError_t launch_prep_wgmma(const PrepParams& p, cudaStream_t s) {
  auto kernel = chunk_prep_scalar_delta_wgmma_kernel<T>;
  // + 1024: the kernel aligns its base to the 128-byte swizzle's 1024-byte period
  constexpr int smem = static_cast<int>(sizeof(PrepWgmmaSmem<typename Atoms<T>::E>)) + 1024;
  static_assert(2 * smem <= 227 * 1024, "two CTAs an SM");
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  dim3 grid(p.num_chunks, p.HV);
  kernel<<<grid, kThreads, smem, s>>>(p);
  return cudaGetLastError();
}

}  // namespace wgmma_recurrence
}  // namespace linattn::cuda::kern

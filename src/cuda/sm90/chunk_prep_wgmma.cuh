// chunk_prep of the scalar-gate delta rule (GDN) on Hopper (sm_90a, 16-bit, K = 128, V 64 or 128):
// one warpgroup per (chunk, value head) runs intra_chunk_scalar_delta.cuh's chunk-local work on
// wgmma into shared memory, then writes W, U, Aqk, the row factors and exp(γ_C) to the workspace
// in chunk_prep's layouts (PrepParams) straight from the accumulators, for the raw-row wgmma pass.
#pragma once

#include "cuda/sm90/chunk_recurrence_wgmma.cuh"
#include "cuda/sm90/intra_chunk_scalar_delta.cuh"

namespace linattn::cuda::kern {
namespace wgmma_recurrence {

template <class E>
struct alignas(1024) PrepWgmmaSmem {
  alignas(1024) E q[kC * kK];    // q (tok, ch); the inverse's scratch once the products have read it
  alignas(1024) E k[kK * kC];    // k (ch, tok)
  alignas(1024) E v0[kC * kVT];  // v, columns 0..63
  alignas(1024) E v1[kC * kVT];  // v, columns 64..127 (V = 128)
  ScalarDeltaScratch sc;
};

// Three CTAs an SM (~72 KB each, <= 168 registers): the chunk's work is latency-bound, so the
// resident warps, not the instruction count, set its speed (bench/NOTES_cuda_forward.md v18).
template <class T>
__global__ void __launch_bounds__(kThreads, 3) chunk_prep_scalar_delta_wgmma_kernel(const __grid_constant__ PrepParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Producer = ScalarDeltaProducer<T>;
  using E = typename Producer::E;
  extern __shared__ unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<PrepWgmmaSmem<E>*>(smem_base_1024(smem_raw));
  const int c = blockIdx.x, hv = blockIdx.y, tid = threadIdx.x;
  const ChunkInfo ci = p.chunks[c];
  const int V = p.V;
  Producer prod(p, sm.sc, tid, hv, 0);
  const typename Producer::Tiles in{sm.q, sm.k, sm.v0};
  prod.load(in, ci.t0, ci.len);  // q, k, v tile 0; the raw gate and β
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
  const int64_t blk = static_cast<int64_t>(c) * p.HV + hv;
  WorkspaceSink<T> out{static_cast<T*>(p.W) + blk * kC * kK, static_cast<T*>(p.Aqk) + blk * kC * kC,
                       static_cast<T*>(p.U) + blk * kC * V, p.rowfac + blk * 2 * kC, p.gexp + blk * kK, V};
  const float graw[2] = {prod.graw[0], prod.graw[1]}, braw[2] = {prod.braw[0], prod.braw[1]};
  prod.compute(in, ci.len, graw, braw, reinterpret_cast<float*>(sm.q), out);
  if (V > kVT) prod.u_tile(sm.v1, out, kVT);
#endif
}

template <class T>
cudaError_t launch_prep_wgmma(const PrepParams& p, cudaStream_t s) {
  auto kernel = chunk_prep_scalar_delta_wgmma_kernel<T>;
  // + 1024: the kernel aligns its base to the 128-byte swizzle's 1024-byte period
  constexpr int smem = static_cast<int>(sizeof(PrepWgmmaSmem<typename Atoms<T>::E>)) + 1024;
  static_assert(3 * (smem + 1024) <= 228 * 1024, "three CTAs an SM (each with its 1 KB reserved)");
  return launch_chunk_heads(kernel, smem, p, s);
}

}  // namespace wgmma_recurrence
}  // namespace linattn::cuda::kern

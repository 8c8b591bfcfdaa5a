// chunk_prep of the scalar gate (GDN with the delta rule, simple GLA without) on Hopper (sm_90a,
// 16-bit, K = 128; with the delta rule V 64 or 128): one warpgroup per (chunk, value head) runs
// intra_chunk_scalar_delta.cuh's chunk-local work on wgmma into shared memory, then writes W, U
// (delta rule), Aqk, the row factors and exp(γ_C) to the workspace in chunk_prep's layouts
// (PrepParams) straight from the accumulators, for the raw-row wgmma pass.
#pragma once

#include "cuda/sm90/chunk_recurrence_wgmma.cuh"
#include "cuda/sm90/intra_chunk_scalar_delta.cuh"

namespace linattn::cuda::kern {
namespace wgmma_recurrence {

template <class E>
struct VTiles {
  alignas(1024) E v0[kC * kVT];  // v, columns 0..63
  alignas(1024) E v1[kC * kVT];  // v, columns 64..127 (V = 128)
};
template <class E>
struct NoVTiles {
  E v0[8], v1[8];  // placeholders, never read
};
template <class E, bool DELTA>
struct alignas(1024) PrepWgmmaSmem {
  alignas(1024) E q[kC * kK];  // q (tok, ch); the inverse's scratch once the products have read it
  alignas(1024) E k[kK * kC];  // k (ch, tok)
  std::conditional_t<DELTA, VTiles<E>, NoVTiles<E>> vt;
  ScalarDeltaScratch sc;
};

// The chunk's work is latency-bound, so the resident warps, not the instruction count, set its
// speed (bench/NOTES_cuda_forward.md v18): three CTAs an SM with the delta rule (~72 KB each,
// <= 168 registers), four without it (~55 KB, <= 128 registers).
template <class T, bool DELTA>
__global__ void __launch_bounds__(kThreads, DELTA ? 3 : 4) chunk_prep_scalar_delta_wgmma_kernel(const __grid_constant__ PrepParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Producer = ScalarDeltaProducer<T, DELTA>;
  using E = typename Producer::E;
  extern __shared__ unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<PrepWgmmaSmem<E, DELTA>*>(smem_base_1024(smem_raw));
  const auto bc = ChunkParallelScheduler<>::block_coord();
  const int c = bc.c, hv = bc.hv, tid = threadIdx.x;
  const ChunkInfo ci = p.chunks[c];
  const int V = p.V;
  Producer prod(p, sm.sc, tid, hv, 0);
  const typename Producer::Tiles in{sm.q, sm.k, DELTA ? sm.vt.v0 : nullptr};
  prod.load(in, ci.t0, ci.len);  // q, k, v tile 0 (delta rule); the raw gate and β
  if (DELTA && V > kVT) {
    const int64_t vs = static_cast<int64_t>(p.HV) * V;
    copy_kmajor<T, kC, kVT, true>(reinterpret_cast<T*>(sm.vt.v1),
                                  static_cast<const T*>(p.v) + static_cast<int64_t>(ci.t0) * vs +
                                      static_cast<int64_t>(hv) * V + kVT,
                                  vs, tid, ci.len);
    cp_commit();
  }
  cp_wait<0>();
  cutlass::arch::fence_view_async_shared();  // this thread's cp.async data -> the wgmmas
  warpgroup_sync<1>();
  const int64_t blk = static_cast<int64_t>(c) * p.HV + hv;
  WorkspaceSink<T> out{DELTA ? static_cast<T*>(p.W) + blk * kC * kK : nullptr, static_cast<T*>(p.Aqk) + blk * kC * kC,
                       DELTA ? static_cast<T*>(p.U) + blk * kC * V : nullptr, p.rowfac + blk * 2 * kC,
                       p.gexp + blk * kK, V};
  const float graw[2] = {prod.graw[0], prod.graw[1]}, braw[2] = {prod.braw[0], prod.braw[1]};
  prod.compute(in, ci.len, graw, braw, reinterpret_cast<float*>(sm.q), out);
  if (DELTA && V > kVT) prod.u_tile(sm.vt.v1, out, kVT);
#endif
}

template <class T, bool DELTA>
cudaError_t launch_prep_wgmma(const PrepParams& p, cudaStream_t s) {
  constexpr int smem = smem_bytes_of<PrepWgmmaSmem<typename Atoms<T>::E, DELTA>>();
  static_assert((DELTA ? 3 : 4) * (smem + 1024) <= 228 * 1024, "the CTAs an SM of the launch bounds (each with its 1 KB reserved)");
  return launch_chunk_heads(chunk_prep_scalar_delta_wgmma_kernel<T, DELTA>, smem, p, s);
}
template <class T>
cudaError_t launch_prep_wgmma(const PrepParams& p, cudaStream_t s) {
  return p.delta ? launch_prep_wgmma<T, true>(p, s) : launch_prep_wgmma<T, false>(p, s);
}

}  // namespace wgmma_recurrence
}  // namespace linattn::cuda::kern

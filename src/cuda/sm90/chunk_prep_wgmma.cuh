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
  ScalarScratchOf<DELTA> sc;
};

// Qg = diag(s r_q e^γ) q [64][128] and KgT = (diag(r_k e^{γ_C - γ}) k)ᵀ [128][64] in the compute type,
// chunk_prep's layouts and values (the row factors of PrepParams::rowfac, 0 past the chunk's end),
// from the staged q (tok, ch) and k (ch, tok) tiles: what the backward's recompute and pass 1 read
// without the delta rule. Every global store is a 16-byte piece and every warp's stores whole
// 128-byte rows: KgT's rows are gathered (a thread's channel, conflict-free along the MN-major
// tile) into the q tile's space once Qg has read it, rows swizzled by XOR with the row mod 8, and
// copied out row-wise (one thread a channel stored straight out wrote 16 bytes every 128: ncu
// showed L2 at 75% against DRAM's 47%).
template <class T, class E, class Scratch>
__device__ __forceinline__ void write_qg_kgt(E* q, const E* k, Scratch& sc, float scale, int Lc,
                                             T* Qg, T* KgT, int tid) {
  static_assert(sizeof(E) == sizeof(T) && kC * kK * sizeof(E) == kK * kC * sizeof(T), "KgT staged in q's tile");
  if (tid < kC) {  // the row factors once a token, in place of r_q and r_k (nothing reads those after)
    const float gt = sc.gam[tid], gC = sc.gam[kC - 1];
    const bool live = tid < Lc;
    const float fq = live ? scale * sc.rq[tid] * __expf(gt) : 0.f;
    const float fk = live ? sc.rk[tid] * __expf(gC - gt) : 0.f;
    sc.rq[tid] = fq;
    sc.rk[tid] = fk;
  }
  warpgroup_sync<1>();
#pragma unroll
  for (int m = 0; m < kC * kK / 8 / kThreads; ++m) {  // Qg: piece e = row e / 16, channels 8 (e % 16) ..
    const int e = tid + kThreads * m, i = e >> 4, c0 = (e & 15) * 8;
    const float f = sc.rq[i];
    const uint4 x = *reinterpret_cast<const uint4*>(q + kmajor_off<kC>(i, c0));
    const E* xe = reinterpret_cast<const E*>(&x);
    uint4 o;
    uint32_t* ow = reinterpret_cast<uint32_t*>(&o);
#pragma unroll
    for (int j = 0; j < 4; ++j) ow[j] = pack2<T>(f * float(xe[2 * j]), f * float(xe[2 * j + 1]));
    *reinterpret_cast<uint4*>(Qg + i * kK + c0) = o;
  }
  warpgroup_sync<1>();  // every read of the q tile is done
  uint4* rows = reinterpret_cast<uint4*>(q);  // KgT (ch, tok): row d's piece m at 8 d + (m ^ (d & 7))
  const int d = tid;                           // this thread's channel, its 64 tokens in 8 pieces
  static_assert(kThreads == kK, "one channel a thread");
#pragma unroll
  for (int m = 0; m < kC / 8; ++m) {
    uint4 o;
    uint32_t* ow = reinterpret_cast<uint32_t*>(&o);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float x[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int t = 8 * m + 2 * j + h;
        x[h] = sc.rk[t] * float(k[mnmajor_off(d, t) + (d & 7)]);
      }
      ow[j] = pack2<T>(x[0], x[1]);
    }
    rows[8 * d + (m ^ (d & 7))] = o;
  }
  warpgroup_sync<1>();
#pragma unroll
  for (int m = 0; m < kK * kC / 8 / kThreads; ++m) {  // piece e = row e / 8, tokens 8 (e % 8) ..
    const int e = tid + kThreads * m, r = e >> 3, pc = e & 7;
    *reinterpret_cast<uint4*>(KgT + r * kC + 8 * pc) = rows[8 * r + (pc ^ (r & 7))];
  }
}

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
                       DELTA ? static_cast<T*>(p.U) + blk * kC * V : nullptr, p.rowfac ? p.rowfac + blk * 2 * kC : nullptr,
                       p.gexp + blk * kK, V};
  const float graw[2] = {prod.graw[0], prod.graw[1]}, braw[2] = {prod.braw[0], prod.braw[1]};
  prod.compute(in, ci.len, graw, braw, reinterpret_cast<float*>(sm.q), out);
  if constexpr (DELTA) {
    if (V > kVT) prod.u_tile(sm.vt.v1, out, kVT);
  }
  if constexpr (!DELTA) {
    if (p.Qg) {  // the backward's recompute (no delta rule): Qg and KgT themselves, not their row factors
      warpgroup_sync<1>();  // γ, r_q, r_k of every token; the products' reads of r_q, r_k done
      write_qg_kgt<T>(sm.q, sm.k, sm.sc, p.scale, ci.len, static_cast<T*>(p.Qg) + blk * kC * kK,
                      static_cast<T*>(p.KgT) + blk * kK * kC, tid);
    }
  }
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

// The backward's pass 1 (dh, dN) on Hopper (sm_90a, 16-bit compute type, K = 128, V tile 64): the
// reverse recurrence of one (sequence, value head, V tile) over the chunk intermediates the
// backward's recompute (or the saved buffer) holds, chunks last to first:
//   dh[c] = dS⁺;  dN = Aqkᵀ dO + Kg dS⁺;  dS = e^{γ_C} ⊙ dS⁺ + Qgᵀ dO − Wᵀ dN
// (docs/chunked_backward.md; the mma.sync twin is dh_kernel in common/chunk_bwd_wy.cu, which runs
// everywhere else). Without the delta rule dN is dv and the −Wᵀ dN term is absent.
//
// The forward's pass (chunk_recurrence_wgmma.cuh) transposed once more: written as
//   dNᵀ = dOᵀ Aqk + dS⁺ᵀ Kgᵀ,   dSᵀ = dS⁺ᵀ diag(e^{γ_C}) + dOᵀ Qg − dNᵀ W,
// dSᵀ (64 V columns x 128 channels) is the float32 accumulator of an m64n128 wgmma and, rounded,
// the register A operand of dS⁺ᵀ Kgᵀ; dNᵀ's accumulator is the register A operand of dNᵀ W; the
// dO tile is the shared A operand of the two dOᵀ products. Every B operand is a tile the forward
// also stages, read MN-major here (the forward reads them K-major).
//
// Split (the split form: DhParams::KgT_lo and dN_lo): dS⁺ and Kg as hi + lo halves (three products,
// no lo·lo) and dN written as hi + lo, as dh_kernel does.
//
// A producer warpgroup copies each chunk's tiles into a ring of stages by cp.async (full[s]
// mbarriers, cp.async.mbarrier.arrive.noinc); the consumer warpgroup releases a stage on empty[s]
// after its last wgmma. No block-wide barrier in the chunk loop.
#pragma once

#include "cuda/common/chunk_bwd.cuh"
#include "cuda/sm90/wgmma_tiles.cuh"

namespace linattn::cuda::kern {
namespace wgmma_recurrence {

// One chunk's operands (bf16 / fp16 E): 64.5 KB, 80.5 KB split.
template <class E, bool DELTA, bool SPLIT>
struct alignas(1024) DhStage {
  alignas(1024) E w[DELTA ? kC * kK : 8];  // W (tok, ch): mnmajor_off, the MN-major B (ch, tok) of dNᵀ W
  alignas(1024) E q[kC * kK];              // Qg (tok, ch): mnmajor_off, the B of dOᵀ Qg
  alignas(1024) E k[kK * kC];              // KgT (ch, tok): kmajor_off<128> = TokByChMN, the B of dS⁺ᵀ Kgᵀ
  alignas(1024) E klo[SPLIT ? kK * kC : 8];  // KgT's low half
  alignas(1024) E a[kC * kC];              // Aqk (i, j): kmajor_off<64> = VcByTokMN (j, i), the B of dOᵀ Aqk
  alignas(1024) E o[kC * kVT];             // dO (tok, vcol): kmajor_off<64> = VcByTokMN (vcol, tok), the A
  alignas(16) float ge[kK];                // exp(γ_C) per channel
};

template <class E, bool DELTA, bool SPLIT, int STAGES>
struct alignas(1024) DhSmem {
  DhStage<E, DELTA, SPLIT> st[STAGES];
  alignas(8) uint64_t full[STAGES];
  alignas(8) uint64_t empty[STAGES];
};

// The reverse recurrence of one chain, by the 128 threads of the consumer warpgroup.
template <class T, bool DELTA, bool SPLIT>
struct DhConsumer {
  using A = Atoms<T>;
  using E = typename A::E;
  using L = Layouts<E>;
  using Stage = DhStage<E, DELTA, SPLIT>;
  using MmaN = decltype(make_tiled_mma(typename A::N64MN{}));                 // dS⁺ᵀ Kgᵀ
  using MmaNss = decltype(make_tiled_mma(typename A::template SSmn<64>{}));   // dOᵀ Aqk
  using MmaD = decltype(make_tiled_mma(typename A::N128MN{}));                // dNᵀ W
  using MmaDss = decltype(make_tiled_mma(typename A::template SSmn<128>{}));  // dOᵀ Qg
  using AccD = decltype(partition_fragment_C(std::declval<MmaD>(), Shape<_64, Int<kK>>{}));
  using AccN = decltype(partition_fragment_C(std::declval<MmaN>(), Shape<_64, _64>{}));

  MmaN mmaN;
  MmaNss mmaNss;
  MmaD mmaD;
  MmaDss mmaDss;
  AccD D;   // dSᵀ: (V column, channel)
  AccN Nt;  // dNᵀ: (V column, token)
  int tid, warp, g, t;

  __device__ int row_of(int i) const { return acc_row(warp, g, i); }
  __device__ int col_of(int i) const { return acc_col(t, i); }
  __device__ static int64_t state_index(const bwd::DhParams& p, int ch, int vv) {
    return p.v_first ? static_cast<int64_t>(vv) * kK + ch : static_cast<int64_t>(ch) * p.V + vv;
  }

  // dSᵀ from dht (zero without it), columns v0.. of head hv of sequence n.
  __device__ __forceinline__ void init(const bwd::DhParams& p, int n, int hv, int v0, int tid_) {
    tid = tid_;
    warp = tid >> 5;
    g = (tid & 31) >> 2;
    t = tid & 3;
    D = partition_fragment_C(mmaD, Shape<_64, Int<kK>>{});
    Nt = partition_fragment_C(mmaN, Shape<_64, _64>{});
    const int64_t base = (static_cast<int64_t>(n) * p.HV + hv) * kK * p.V;
#pragma unroll
    for (int i = 0; i < size(D); ++i)
      D(i) = p.dht ? load_state(p.dht, p.dht_dt, base + state_index(p, col_of(i), v0 + row_of(i))) : 0.f;
  }
  // dh0 = dS before the first chunk.
  __device__ __forceinline__ void store(const bwd::DhParams& p, int n, int hv, int v0) {
    if (!p.dh0) return;
    const int64_t base = (static_cast<int64_t>(n) * p.HV + hv) * kK * p.V;
#pragma unroll
    for (int i = 0; i < size(D); ++i) store_state(p.dh0, p.dh0_dt, base + state_index(p, col_of(i), v0 + row_of(i)), D(i));
  }

  // One chunk over stage st: dh (float32 [K][V], this CTA's columns at dh0), dN (and its low half)
  // as [64][V] rows at dn / dnlo. The stage's last read is complete when this returns.
  __device__ __forceinline__ void chunk(const Stage& st, float* dhc, T* dn, T* dnlo, int V) {
    auto thrN = mmaN.get_thread_slice(tid);
    auto thrNss = mmaNss.get_thread_slice(tid);
    auto thrD = mmaD.get_thread_slice(tid);
    auto thrDss = mmaDss.get_thread_slice(tid);
    E* so = const_cast<E*>(st.o);
    Tensor tOn = thrNss.partition_fragment_A(make_tensor(make_smem_ptr(so), typename L::VcByTokMN{}));
    Tensor tA = thrNss.partition_fragment_B(make_tensor(make_smem_ptr(const_cast<E*>(st.a)), typename L::VcByTokMN{}));
    Tensor tK = thrN.partition_fragment_B(make_tensor(make_smem_ptr(const_cast<E*>(st.k)), typename L::TokByChMN{}));
    Tensor tOd = thrDss.partition_fragment_A(make_tensor(make_smem_ptr(so), typename L::VcByTokMN{}));
    Tensor tQ = thrDss.partition_fragment_B(make_tensor(make_smem_ptr(const_cast<E*>(st.q)), typename L::ChByTokMN{}));
    // register A operands, the accumulators' element order: dS⁺ᵀ (hi, lo) and −dNᵀ
    Tensor Sa = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kK / 16>>{});
    Tensor Sl = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<SPLIT ? kK / 16 : 1>>{});
    Tensor Na = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kC / 16>>{});

    // dh[c] = dS⁺: each warp store covers 4 channels x 8 consecutive V columns (32-byte pieces)
    float* dhw = dhc + static_cast<int64_t>(2 * t) * V + 16 * warp + g;
#pragma unroll
    for (int i = 0; i < size(D); ++i) dhw[static_cast<int64_t>(8 * (i >> 2) + (i & 1)) * V + 8 * ((i >> 1) & 1)] = D(i);
#pragma unroll
    for (int i = 0; i < size(D); ++i) {
      Sa(i) = E(D(i));
      if constexpr (SPLIT) Sl(i) = E(D(i) - static_cast<float>(Sa(i)));
    }
    // dS = e^{γ_C} dS⁺ (dSᵀ: columns are channels), before any wgmma of this chunk is in flight
#pragma unroll
    for (int i = 0; i < size(D); ++i) D(i) *= st.ge[col_of(i)];
    fence_regs(Sa);
    if constexpr (SPLIT) fence_regs(Sl);
    fence_regs(D);
    fence_regs(Nt);
    warpgroup_arrive();
    wg_gemm<true>(mmaNss, tOn, tA, Nt);  // dNᵀ = dOᵀ Aqk
    wg_gemm<false>(mmaN, Sa, tK, Nt);    //      + dS⁺ᵀ Kgᵀ
    if constexpr (SPLIT) {
      Tensor tKl = thrN.partition_fragment_B(make_tensor(make_smem_ptr(const_cast<E*>(st.klo)), typename L::TokByChMN{}));
      wg_gemm<false>(mmaN, Sl, tK, Nt);
      wg_gemm<false>(mmaN, Sa, tKl, Nt);
    }
    warpgroup_commit_batch();
    wg_gemm<false>(mmaDss, tOd, tQ, D);  // dSᵀ += dOᵀ Qg
    warpgroup_commit_batch();
    warpgroup_wait<1>();  // dNᵀ (dOᵀ Qg may still run)
    fence_regs(Nt);
    if constexpr (DELTA) {  // dSᵀ −= dNᵀ W: issued before dN's stores, which it overlaps
#pragma unroll
      for (int i = 0; i < size(Nt); ++i) Na(i) = E(-Nt(i));
      Tensor tW = thrD.partition_fragment_B(make_tensor(make_smem_ptr(const_cast<E*>(st.w)), typename L::ChByTokMN{}));
      fence_regs(Na);
      warpgroup_arrive();
      wg_gemm<false>(mmaD, Na, tW, D);
      warpgroup_commit_batch();
    }
    // dN rows: each 8x8 (V column, token) block transposed in registers (4-byte stores of two
    // adjacent columns of one token); a chunk's 64 rows all exist in the workspace
    const int64_t off = static_cast<int64_t>(g) * V + 16 * warp + 2 * t;
#pragma unroll
    for (int nb = 0; nb < kC / 8; ++nb)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const float x0 = Nt(4 * nb + 2 * hh), x1 = Nt(4 * nb + 2 * hh + 1);
        const int64_t o = off + static_cast<int64_t>(8 * nb) * V + 8 * hh;
        *reinterpret_cast<uint32_t*>(dn + o) = movmatrix_trans(pack2<T>(x0, x1));
        if constexpr (SPLIT) {
          const float l0 = x0 - to_f(from_f<T>(x0)), l1 = x1 - to_f(from_f<T>(x1));
          *reinterpret_cast<uint32_t*>(dnlo + o) = movmatrix_trans(pack2<T>(l0, l1));
        }
      }
    warpgroup_wait<0>();
    fence_regs(D);
  }
};

// One CTA per (sequence n, value head, V tile): warpgroup 0 stages chunks last to first, warpgroup 1
// runs DhConsumer.
template <class T, bool DELTA, bool SPLIT, int STAGES>
__global__ void __launch_bounds__(2 * kThreads, 1) chunk_dh_wgmma_kernel(const bwd::DhParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Consumer = DhConsumer<T, DELTA, SPLIT>;
  using Smem = DhSmem<typename Consumer::E, DELTA, SPLIT, STAGES>;
  extern __shared__ unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_base_1024(smem_raw));
  const int V = p.V, HV = p.HV;
  const int v0 = blockIdx.x * kVT, hv = blockIdx.y, n = blockIdx.z;
  const int wg = threadIdx.x / kThreads, tid = threadIdx.x % kThreads;
  const SeqInfo si = p.seqs[n];
  const int nch = (si.len + kC - 1) / kC;
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

  if (wg == 0) {  // the producer: step it stages chunk nch - 1 - it once its buffer is released
    const int64_t os = static_cast<int64_t>(HV) * V;
    for (int it = 0; it < nch; ++it) {
      if (it >= STAGES) Bar::wait(&sm.empty[it % STAGES], ((it / STAGES) - 1) & 1);
      auto& st = sm.st[it % STAGES];
      const int ci = nch - 1 - it;
      const int64_t blk = static_cast<int64_t>(si.chunk0 + ci) * HV + hv;
      if constexpr (DELTA) copy_mnmajor<T>(reinterpret_cast<T*>(st.w), static_cast<const T*>(p.W) + blk * kC * kK, kK, tid, kC);
      copy_mnmajor<T>(reinterpret_cast<T*>(st.q), static_cast<const T*>(p.Qg) + blk * kC * kK, kK, tid, kC);
      copy_kmajor<T, kK, kC, false>(reinterpret_cast<T*>(st.k), static_cast<const T*>(p.KgT) + blk * kK * kC, kC, tid);
      if constexpr (SPLIT)
        copy_kmajor<T, kK, kC, false>(reinterpret_cast<T*>(st.klo), static_cast<const T*>(p.KgT_lo) + blk * kK * kC, kC, tid);
      copy_kmajor<T, kC, kC, false>(reinterpret_cast<T*>(st.a), static_cast<const T*>(p.Aqk) + blk * kC * kC, kC, tid);
      // dO rows of this chunk (rows past the sequence's end zero), this CTA's 64 columns
      copy_kmajor<T, kC, kVT, true>(reinterpret_cast<T*>(st.o),
                                    static_cast<const T*>(p.d_o) + static_cast<int64_t>(si.t0 + ci * kC) * os +
                                        static_cast<int64_t>(hv) * V + v0,
                                    os, tid, min(kC, si.len - ci * kC));
      tile_copy<float, 1, kK, kThreads>(st.ge, kK, p.gexp + blk * kK, kK, tid);
      cutlass::arch::cpasync_barrier_arrive_noinc(&sm.full[it % STAGES]);
    }
    cp_wait<0>();  // (the barriers track completion; nothing may stay in flight past exit)
    return;
  }

  Consumer cons;
  cons.init(p, n, hv, v0, tid);
  for (int it = 0; it < nch; ++it) {
    const int ci = nch - 1 - it;
    const int64_t blk = static_cast<int64_t>(si.chunk0 + ci) * HV + hv;
    Bar::wait(&sm.full[it % STAGES], (it / STAGES) & 1);
    cutlass::arch::fence_view_async_shared();  // the producer's cp.async data -> this thread's wgmmas
    T* dn = static_cast<T*>(p.dN) + blk * kC * V + v0;
    T* dnlo = SPLIT ? static_cast<T*>(p.dN_lo) + blk * kC * V + v0 : nullptr;
    cons.chunk(sm.st[it % STAGES], p.dh + blk * kK * V + v0, dn, dnlo, V);
    Bar::arrive(&sm.empty[it % STAGES]);
  }
  cons.store(p, n, hv, v0);
#endif
}

template <class T, bool DELTA, bool SPLIT, int STAGES>
cudaError_t launch_dh(const bwd::DhParams& p, cudaStream_t s) {
  auto kernel = chunk_dh_wgmma_kernel<T, DELTA, SPLIT, STAGES>;
  // + 1024: the kernel aligns its base to the 128-byte swizzle's 1024-byte period
  constexpr int smem = static_cast<int>(sizeof(DhSmem<typename Atoms<T>::E, DELTA, SPLIT, STAGES>)) + 1024;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  kernel<<<dim3(p.V / kVT, p.HV, p.N), 2 * kThreads, smem, s>>>(p);
  return cudaGetLastError();
}

// The instantiations of one 16-bit type (chunk_dh_wgmma_{bf16,fp16}.cu): three stages (two chunks
// in flight), two in the split form (a stage is 80.5 KB). The split form has the delta rule only
// (config::compute_of: GLA and simple GLA never split; dh_wgmma_applies).
template <class T>
cudaError_t launch_dh_type(const bwd::DhParams& p, cudaStream_t s) {
  if (p.delta) return p.KgT_lo ? launch_dh<T, true, true, 2>(p, s) : launch_dh<T, true, false, 3>(p, s);
  return launch_dh<T, false, false, 3>(p, s);
}

}  // namespace wgmma_recurrence
}  // namespace linattn::cuda::kern

// The backward's state pass (recompute) in its float32 form on Hopper: the float32 W, KgT and U
// that chunk_prep<float> wrote are split by a producer warpgroup into bf16 hi + lo tiles (the
// split_tile of pass 1's float32 form), and the consumer runs the recurrence of
// recurrence_consumer.cuh with every product as three bf16 wgmmas (hi·hi + hi·lo + lo·hi) and the
// state's and V_new's A operands as hi + lo registers:
//   V_new = U - W S,  S = exp(γ_C) S + KgT V_new,
// writing the state before each chunk (float32 h; float32 hs for a forward that saves it) and
// V_new in float32. About 16 mantissa bits a product: what the float32 form's pass 1 already runs
// on (docs/chunked_backward.md; 3xTF32 on mma.sync before, ~2.5x slower). For float32 compute on
// 16-bit inputs only (StateParams::wide16): float32 inputs keep chunk_state's 3xTF32.
#pragma once

#include "cuda/sm90/recurrence_consumer.cuh"

namespace linattn::cuda::kern {
namespace wgmma_recurrence {

constexpr int kLdU = kVT + 4;  // the float U tile's row stride: the consumer's reads on distinct banks

// One chunk's operands (80.5 KB with the delta rule): two stages fit.
template <bool DELTA>
struct alignas(1024) WideStateStage {
  using E = cutlass::bfloat16_t;
  alignas(1024) E w[DELTA ? kC * kK : 8];     // W hi (tok, ch): kmajor_off<64>
  alignas(1024) E wlo[DELTA ? kC * kK : 8];   // W lo
  alignas(1024) E k[kK * kC];                 // KgT hi (ch, tok): kmajor_off<128>
  alignas(1024) E klo[kK * kC];               // KgT lo
  alignas(16) float u[kC * kLdU];             // U (tok, this CTA's 64 columns), float32
  alignas(16) float ge[kK];                   // exp(γ_C) per channel
};

template <bool DELTA, int STAGES>
struct alignas(1024) WideStateSmem {
  WideStateStage<DELTA> st[STAGES];
  alignas(8) uint64_t full[STAGES];   // the producer's 128 arrivals (plain shared stores, fenced)
  alignas(8) uint64_t empty[STAGES];  // the consumer's 128 arrivals
};

// The state of one (sequence, value head, 64-column V tile) chain: Sᵀ in float32 registers, with
// the 16-bit recompute's state, tiles and h0 / final-state handling (RecurrenceConsumer); only the
// chunk step differs.
template <bool DELTA>
struct WideStateConsumer : RecurrenceConsumer<__nv_bfloat16, DELTA, false, PassOut::kRecompute> {
  using Base = RecurrenceConsumer<__nv_bfloat16, DELTA, false, PassOut::kRecompute>;
  using typename Base::E;
  using typename Base::L;
  using Base::mma64, Base::mmaS, Base::S, Base::P, Base::tid, Base::warp, Base::g, Base::t, Base::row_of, Base::col_of;

  // One chunk: h (the state at (channel 0, column v0) of this chunk's float32 state), hs (null or
  // its row v0 of the [V][K] float32 copy), vnew (V_new's row 0, column v0; row stride V).
  __device__ __forceinline__ void chunk(const WideStateStage<DELTA>& st, float* h, float* hs, float* vnew, int V,
                                        int v_first) {
    auto thr64 = mma64.get_thread_slice(tid);
    auto thrS = mmaS.get_thread_slice(tid);
    Tensor tK = thrS.partition_fragment_B(make_tensor(make_smem_ptr(const_cast<E*>(st.k)), typename L::ChByTok{}));
    Tensor tKl = thrS.partition_fragment_B(make_tensor(make_smem_ptr(const_cast<E*>(st.klo)), typename L::ChByTok{}));
    Tensor Sh = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kK / 16>>{});
    Tensor Sl = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kK / 16>>{});
    Tensor Vh = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kC / 16>>{});
    Tensor Vl = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kC / 16>>{});
    {  // the state before this chunk: hi + lo operands, and out in float32
      const int64_t hc = v_first ? 1 : V, hvs = v_first ? kK : 1;  // a channel's, a column's step
      float* hb = h + (v_first ? static_cast<int64_t>(16 * warp + g) * kK + 2 * t : static_cast<int64_t>(2 * t) * V + 16 * warp + g);
#pragma unroll
      for (int i = 0; i < size(S); ++i) {
        Sh(i) = E(S(i));
        Sl(i) = E(S(i) - static_cast<float>(Sh(i)));
        hb[(8 * (i >> 2) + (i & 1)) * hc + 8 * ((i >> 1) & 1) * hvs] = S(i);
      }
      if (hs) {
#pragma unroll
        for (int i = 0; i < size(S); i += 2)
          *reinterpret_cast<float2*>(hs + row_of(i) * kK + col_of(i)) = make_float2(S(i), S(i + 1));
      }
    }
#pragma unroll
    for (int i = 0; i < size(S); ++i) S(i) *= st.ge[col_of(i)];
    if constexpr (DELTA) {  // P = W S as hi·hi + hi·lo + lo·hi
      Tensor tW = thr64.partition_fragment_B(make_tensor(make_smem_ptr(const_cast<E*>(st.w)), typename L::TokByK{}));
      Tensor tWl = thr64.partition_fragment_B(make_tensor(make_smem_ptr(const_cast<E*>(st.wlo)), typename L::TokByK{}));
      fence_regs(Sh);
      fence_regs(Sl);
      fence_regs(P);
      warpgroup_arrive();
      wg_gemm<true>(mma64, Sh, tW, P);
      wg_gemm<false>(mma64, Sh, tWl, P);
      wg_gemm<false>(mma64, Sl, tW, P);
      warpgroup_commit_batch();
      warpgroup_wait<0>();
      fence_regs(P);
    }
    // V_newᵀ (V column, token) = Uᵀ - (S Wᵀ)ᵀ: out in float32, and its hi + lo operands
    const float* ub = st.u + (2 * t) * kLdU + 16 * warp + g;
    float* vb = vnew + static_cast<int64_t>(2 * t) * V + 16 * warp + g;
#pragma unroll
    for (int i = 0; i < size(P); ++i) {
      const int dt = 8 * (i >> 2) + (i & 1), dv = 8 * ((i >> 1) & 1);  // token and column steps
      float vn = ub[dt * kLdU + dv];
      if constexpr (DELTA) vn -= P(i);
      vb[dt * V + dv] = vn;
      Vh(i) = E(vn);
      Vl(i) = E(vn - static_cast<float>(Vh(i)));
    }
    // S += KgT V_new as hi·hi + hi·lo + lo·hi
    fence_regs(S);
    fence_regs(Vh);
    fence_regs(Vl);
    warpgroup_arrive();
    wg_gemm<false>(mmaS, Vh, tK, S);
    wg_gemm<false>(mmaS, Vh, tKl, S);
    wg_gemm<false>(mmaS, Vl, tK, S);
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    fence_regs(S);
  }
};

// One CTA per (sequence n, value head, V tile): warpgroup 0 stages chunks in order (plain loads,
// the float32 tiles split as they are stored), warpgroup 1 runs WideStateConsumer.
template <bool DELTA, int STAGES>
__global__ void __launch_bounds__(2 * kThreads, 1) chunk_state_wide_wgmma_kernel(const StateParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Smem = WideStateSmem<DELTA, STAGES>;
  extern __shared__ unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_base_1024(smem_raw));
  const int V = p.V, HV = p.HV;
  const ChainTile ct = ChainTile::get(p.seqs);
  const int v0 = ct.v0, hv = ct.hv, n = ct.n, wg = ct.wg, tid = ct.tid, nch = ct.nch;
  const SeqInfo si = ct.si;
  using Bar = cutlass::arch::ClusterBarrier;
  init_ring_barriers(sm.full, sm.empty);  // the block's last __syncthreads

  if (wg == 0) {  // the producer
    const float* W = static_cast<const float*>(p.W);
    const float* KgT = static_cast<const float*>(p.KgT);
    const float* U = static_cast<const float*>(p.U);
    for (int ci = 0; ci < nch; ++ci) {
      if (ci >= STAGES) Bar::wait(&sm.empty[ci % STAGES], ((ci / STAGES) - 1) & 1);
      auto& st = sm.st[ci % STAGES];
      const int64_t blk = static_cast<int64_t>(si.chunk0 + ci) * HV + hv;
      // U's 64 x 64 float tile and exp(γ_C) first (all loads in flight), then the split tiles
      constexpr int kU4 = kC * kVT / 4 / kThreads;  // float4 pieces a thread
      float4 uv[kU4];
      const float* u0 = U + blk * kC * V + v0;
#pragma unroll
      for (int j = 0; j < kU4; ++j) {
        const int e = j * kThreads + tid, r = e / (kVT / 4), c = (e % (kVT / 4)) * 4;
        uv[j] = __ldg(reinterpret_cast<const float4*>(u0 + static_cast<int64_t>(r) * V + c));
      }
      float4 gv = make_float4(0.f, 0.f, 0.f, 0.f);
      if (tid < kK / 4) gv = __ldg(reinterpret_cast<const float4*>(p.gexp + blk * kK) + tid);
      if constexpr (DELTA)
        split_tile<kC, kK>(st.w, st.wlo, W + blk * kC * kK, tid, [](int r, int c) { return kmajor_off<kC>(r, c); });
      split_tile<kK, kC>(st.k, st.klo, KgT + blk * kK * kC, tid, [](int r, int c) { return kmajor_off<kK>(r, c); });
#pragma unroll
      for (int j = 0; j < kU4; ++j) {
        const int e = j * kThreads + tid, r = e / (kVT / 4), c = (e % (kVT / 4)) * 4;
        *reinterpret_cast<float4*>(st.u + r * kLdU + c) = uv[j];
      }
      if (tid < kK / 4) reinterpret_cast<float4*>(st.ge)[tid] = gv;
      cutlass::arch::fence_view_async_shared();  // this thread's shared stores -> the consumer's wgmmas
      Bar::arrive(&sm.full[ci % STAGES]);
    }
    return;
  }

  WideStateConsumer<DELTA> cons;
  cons.init(p, n, hv, v0, tid);
  float* hg = static_cast<float*>(p.h);
  float* hsg = static_cast<float*>(p.hs);
  float* vng = static_cast<float*>(p.vnew);
  for (int ci = 0; ci < nch; ++ci) {
    Bar::wait(&sm.full[ci % STAGES], (ci / STAGES) & 1);
    cutlass::arch::fence_view_async_shared();
    const int64_t blk = static_cast<int64_t>(si.chunk0 + ci) * HV + hv;
    cons.chunk(sm.st[ci % STAGES], hg + blk * kK * V + (p.v_first ? static_cast<int64_t>(v0) * kK : v0),
               hsg ? hsg + (blk * V + v0) * kK : nullptr, vng + blk * kC * V + v0, V, p.v_first);
    Bar::arrive(&sm.empty[ci % STAGES]);
  }
  cons.store(p, si.seq, hv, v0);
#endif
}

template <bool DELTA>
cudaError_t launch_state_wide(const StateParams& p, cudaStream_t s) {
  constexpr int kStages = 2;
  return launch_with_smem(chunk_state_wide_wgmma_kernel<DELTA, kStages>, smem_bytes_of<WideStateSmem<DELTA, kStages>>(),
                          SequentialScheduler<kVT>::grid_shape(p.V, p.HV, p.N), 2 * kThreads, p, s);
}

}  // namespace wgmma_recurrence
}  // namespace linattn::cuda::kern

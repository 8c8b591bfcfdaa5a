// Pass 2 of the backward without the delta rule, scalar gate (simple GLA: g and / or g_gamma), on
// Hopper (sm_90a, 16-bit, K = V = 128): dq̂, dk̂ and dg of one (chunk, value head) per warpgroup,
// every product on wgmma with float32 accumulators. It replaces wy_kernel (mma.sync) for these
// problems: docs/backward_v2_plan.md ("The no-delta pass 2 on wgmma") has the sizing.
//
// With γ the chunk-local cumsum of the gate, E_i = e^{γ_i}, F_j = e^{γ_L - γ_j} (L the chunk's last
// token), S the chunk-start state and dS⁺ the gradient of the chunk-end state (pass 1's dh), both
// [K][V] in the compute type:
//   A    = s tril(dO Vᵀ ⊙ Γ),  Γ_ij = e^{γ_i - γ_j}          (exact per-element decays, every one <= 1)
//   dq̂   = s diag(E) dO Sᵀ + A K̂,    dk̂ = diag(F) V dS⁺ᵀ + Aᵀ Q̂  (q̂ = diag(r_q) q: the l2 norms')
//   dg_t = e^{γ_L} Σ S⊙dS⁺ + Σ_{j<t} ct_j + Σ_{i≥t} rt_i + Σ_{j<t≤i} X_ij      (the straddling form of
//          chunk_bwd_wy.cu's scalar_gate_dg: rt_i = ⟨q̂_i, s E_i (dO Sᵀ)_i⟩, ct_j = ⟨k̂_j, F_j (V dS⁺ᵀ)_j⟩,
//          X_ij = A_ij ⟨q̂_i, k̂_j⟩ for j < i)
// dv is pass 1's (WyParams::dv_written). Products: dO Vᵀ and Q Kᵀ (SS, m64n64k128), then for each
// half of the 128 key channels dO S_hᵀ and V dS⁺_hᵀ (SS, m64n64k128: S streams in 64-channel halves,
// one slot, so that two CTAs fit an SM), A K̂_h (RS: A's registers from dO Vᵀ's accumulator) and
// Aᵀ Q̂_h (SS, A through shared memory, both operands MN-major). Every tile is token-major and
// K-major in the 128-byte swizzle (copy_kmajor); a 64-channel half of the q / k tile is, read
// MN-major, the (channel, token) operand of the last two products.
#pragma once

#include "cuda/common/chunk_bwd.cuh"
#include "cuda/common/gate.cuh"
#include "cuda/sm90/wgmma_tiles.cuh"

namespace linattn::cuda::bwd {
namespace pass2_scalar {

using namespace cute;
using kern::wgmma_recurrence::Atoms;
using kern::wgmma_recurrence::Layouts;
using kern::wgmma_recurrence::acc_col;
using kern::wgmma_recurrence::acc_row;
using kern::wgmma_recurrence::copy_kmajor;
using kern::wgmma_recurrence::fence_regs;
using kern::wgmma_recurrence::kmajor_off;
using kern::wgmma_recurrence::piece_dot;
using kern::wgmma_recurrence::quad_prefix;
using kern::wgmma_recurrence::quad_transpose4;
using kern::wgmma_recurrence::QuadScan;
using kern::wgmma_recurrence::wg_gemm;
using kern::load_any;
using kern::pack2;
using kern::store2;
using kern::to_f;

constexpr int kC = config::kChunk;  // 64 tokens
constexpr int kK = 128;             // key head size
constexpr int kV = 128;             // value head size
constexpr int kThreads = kern::wgmma_recurrence::kThreads;  // one warpgroup
constexpr int kHalf = kC * 64;      // elements of a 64-column half of a 64-row tile

// A packed pair of 16-bit T as two floats.
template <class T>
__device__ __forceinline__ float2 unpack2(uint32_t u) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
  else return __half22float2(*reinterpret_cast<const __half2*>(&u));
}

template <class E>
struct alignas(1024) Smem {
  alignas(1024) E dO[kC * kV];  // (tok, vcol), K-major (TokByK)
  alignas(1024) E v[kC * kV];   // (tok, vcol)
  alignas(1024) E q[kC * kK];   // (tok, ch); its channel half h at h kHalf is the (ch, tok) MN-major tile
  alignas(1024) E k[kC * kK];
  alignas(1024) E S[64 * kV];   // rows 64 h .. 64 h + 63 of S: (ch, vcol), K-major
  alignas(1024) E dS[64 * kV];  // the same rows of dS⁺
  alignas(1024) E P[kC * kC];   // diag(r_q) A at kmajor_off<64>(i, j): the MN-major (j, i) A of Aᵀ Q̂
  float gam[kC];                // γ; past the chunk's end γ of its last token
  float rq[kC], rk[kC];
  float rt[kC], ct[kC];
  float pair[4][kC];            // the straddling pairs' sums, one row a warp
  float cend[4];
  int floored[kC];              // the identity gate's floored tokens (dg_direct)
};

template <class T>
__global__ void __launch_bounds__(kThreads, 2) pass2_scalar_wgmma_kernel(const __grid_constant__ WyParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using At = Atoms<T>;
  using E = typename At::E;
  using L = Layouts<E>;
  extern __shared__ unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<Smem<E>*>(kern::wgmma_recurrence::smem_base_1024(smem_raw));
  const auto bc = kern::ChunkParallelScheduler<>::block_coord();
  const int c = bc.c, hv = bc.hv, hk = hv / p.G, HV = p.HV;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const kern::ChunkInfo ci = p.chunks[c];
  const int t0 = ci.t0, Lc = ci.len;
  const int64_t blk = static_cast<int64_t>(c) * HV + hv;
  const int64_t qk_row = static_cast<int64_t>(p.H) * kK, v_row = static_cast<int64_t>(HV) * kV;
  const T* Sg = static_cast<const T*>(p.h) + blk * kK * kV;
  const T* dSg = static_cast<const T*>(p.dh) + blk * kK * kV;
  // dg is formed unless nothing reads it (the identity gate with dg not asked for)
  const bool need_dg = !p.dg_direct || p.dg != nullptr;

  // ---- every tile in flight at once: the token tiles (group 0), S's and dS⁺'s first half (group 1)
  copy_kmajor<T, kC, kV, true>(reinterpret_cast<T*>(sm.dO), static_cast<const T*>(p.d_o) + t0 * v_row + hv * kV, v_row, tid, Lc);
  copy_kmajor<T, kC, kV, true>(reinterpret_cast<T*>(sm.v), static_cast<const T*>(p.v) + t0 * v_row + hv * kV, v_row, tid, Lc);
  copy_kmajor<T, kC, kK, true>(reinterpret_cast<T*>(sm.q), static_cast<const T*>(p.q) + t0 * qk_row + hk * kK, qk_row, tid, Lc);
  copy_kmajor<T, kC, kK, true>(reinterpret_cast<T*>(sm.k), static_cast<const T*>(p.k) + t0 * qk_row + hk * kK, qk_row, tid, Lc);
  kern::cp_commit();
  copy_kmajor<T, 64, kV, false>(reinterpret_cast<T*>(sm.S), Sg, kV, tid);
  copy_kmajor<T, 64, kV, false>(reinterpret_cast<T*>(sm.dS), dSg, kV, tid);
  kern::cp_commit();

  // ---- γ (warp 0: two tokens a lane, one warp-wide scan), with the forward's transform and floor
  if (warp == 0) {
    const WyGate& ga = p.gate;
    gate::HeadGate hgate;
    hgate.kind = ga.kind;
    hgate.has_alog = ga.kind != 0 && ga.has_alog;
    hgate.alog = hgate.has_alog ? load_any(ga.A_log, ga.alog_dt, hv) : 0.f;
    hgate.ea = hgate.has_alog ? expf(hgate.alog) : 1.f;
    hgate.lower_bound = ga.lower_bound;
    hgate.gamma = ga.g_gamma ? load_any(ga.g_gamma, ga.gg_dt, hv) : 0.f;
    const float dtb = ga.kind != 0 && ga.has_dtb ? load_any(ga.dt_bias, ga.dtb_dt, hv) : 0.f;
    float x[2] = {0.f, 0.f};
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      const int i = 2 * lane + m;
      float raw = 0.f;
      if (i < Lc) {
        raw = ga.g ? load_any(ga.g, ga.g_dt, static_cast<int64_t>(t0 + i) * HV + hv) : 0.f;
        gate::with_head_gate(hgate, [&](auto kind, auto regular) {
          x[m] = gate::head_gate<decltype(kind)::value, decltype(regular)::value, true>(hgate, raw, dtb);
        });
      }
      sm.floored[i] = raw <= gate::kFloor ? 1 : 0;
    }
    float s = x[0] + x[1];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float y = __shfl_up_sync(0xffffffffu, s, o);
      if (lane >= o) s += y;
    }
    sm.gam[2 * lane] = s - x[1];  // tokens past Lc add 0: γ stays at the last token's
    sm.gam[2 * lane + 1] = s;
  }
  kern::cp_wait<1>();
  cutlass::arch::fence_view_async_shared();  // this thread's cp.async data -> the wgmmas
  __syncthreads();

  // ---- dP = dO Vᵀ and the Gram matrix Q Kᵀ
  auto mmaSS = make_tiled_mma(typename At::SS64{});
  auto thrSS = mmaSS.get_thread_slice(tid);
  Tensor sDO = make_tensor(make_smem_ptr(sm.dO), typename L::TokByK{});
  Tensor sV = make_tensor(make_smem_ptr(sm.v), typename L::TokByK{});
  Tensor sQ = make_tensor(make_smem_ptr(sm.q), typename L::TokByK{});
  Tensor sK = make_tensor(make_smem_ptr(sm.k), typename L::TokByK{});
  Tensor tDOa = thrSS.partition_fragment_A(sDO);
  Tensor tVa = thrSS.partition_fragment_A(sV);
  Tensor accP = partition_fragment_C(mmaSS, Shape<Int<kC>, Int<kC>>{});
  Tensor accG = partition_fragment_C(mmaSS, Shape<Int<kC>, Int<kC>>{});
  fence_regs(accP);
  fence_regs(accG);
  // (the Gram matrix even where dg is not formed: a wgmma under a branch inside a batch makes ptxas
  // serialise the batch, and it is an eighth of the tensor work)
  warpgroup_arrive();
  wg_gemm<true>(mmaSS, tDOa, thrSS.partition_fragment_B(sV), accP);
  wg_gemm<true>(mmaSS, thrSS.partition_fragment_A(sQ), thrSS.partition_fragment_B(sK), accG);
  warpgroup_commit_batch();
  // the l2 norms' reciprocals meanwhile, from the landed q / k tiles (two threads a row, 64
  // channels each): float32 sums of exact 16-bit squares, as wy_kernel forms them
  if (p.l2norm) {
    const int r = tid >> 1, half = tid & 1;
    float sq = 0.f, sk = 0.f;
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      const int off = kmajor_off<kC>(r, 64 * half + 8 * m);
      const uint4 a = *reinterpret_cast<const uint4*>(sm.q + off);  // one 16-byte load each
      const uint4 b = *reinterpret_cast<const uint4*>(sm.k + off);
      kern::add_squares8<T>(a, b, sq, sk);
    }
    gate::store_pair_rnorms(sq, sk, half == 0, &sm.rq[r], &sm.rk[r]);
  } else if (tid < kC) {
    sm.rq[tid] = sm.rk[tid] = 1.f;
  }
  __syncthreads();  // γ, r_q, r_k
  warpgroup_wait<0>();
  fence_regs(accP);
  fence_regs(accG);

  // ---- A = s tril(dP ⊙ Γ): diag(r_k)-scaled as A K̂'s register operand, diag(r_q)-scaled into P for
  // Aᵀ Q̂; the pairs X_ij (j < i) summed into Σ_{i≥t} Σ_{j<t} X_ij per column t
  const float scale = p.scale, gL = sm.gam[kC - 1];
  float gi[2], rqi[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = 16 * warp + g + 8 * h;
    gi[h] = sm.gam[r];
    rqi[h] = sm.rq[r];
  }
  Tensor Aq = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kC / 16>>{});
  float X[32];
#pragma unroll
  for (int i = 0; i < 32; i += 2) {
    const int h = (i >> 1) & 1, n = i >> 2;
    const int r = 16 * warp + g + 8 * h, cc = acc_col(t, i);
    float a0 = 0.f, a1 = 0.f;
    float2 rkc = make_float2(0.f, 0.f);
    if (n <= 2 * warp + 1) {  // column block n reaches this warp's rows (warp-uniform)
      const float2 gc = *reinterpret_cast<const float2*>(sm.gam + cc);
      rkc = *reinterpret_cast<const float2*>(sm.rk + cc);
      if (cc <= r) a0 = scale * accP(i) * __expf(gi[h] - gc.x);
      if (cc + 1 <= r) a1 = scale * accP(i + 1) * __expf(gi[h] - gc.y);
    }
    Aq(i) = E(a0 * rkc.x);
    Aq(i + 1) = E(a1 * rkc.y);
    *reinterpret_cast<uint32_t*>(sm.P + kmajor_off<kC>(r, cc) + (cc & 7)) = pack2<T>(a0 * rqi[h], a1 * rqi[h]);
    X[i] = need_dg && cc < r ? a0 * rqi[h] * rkc.x * accG(i) : 0.f;
    X[i + 1] = need_dg && cc + 1 < r ? a1 * rqi[h] * rkc.y * accG(i + 1) : 0.f;
  }
  if (need_dg) {
    // Per row: the exclusive prefix over the columns, E_r(c) = Σ_{c' < c} X_rc' (a quad holds a
    // row's 8-column block, two columns a lane); then Σ_{r ≥ c} E_r(c) over this thread's rows, the
    // warp's lanes, and (in shared memory) the warps.
    float contrib[16];
#pragma unroll
    for (int m = 0; m < 16; ++m) contrib[m] = 0.f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 16 * warp + g + 8 * h;
      float base = 0.f;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const float x0 = X[4 * n + 2 * h], x1 = X[4 * n + 2 * h + 1];
        const QuadScan qs = quad_prefix(x0, x1, t);
        const int c0 = 8 * n + 2 * t;
        const float ex = base + qs.ex;
        if (r >= c0) contrib[2 * n] += ex;
        if (r >= c0 + 1) contrib[2 * n + 1] += ex + x0;
        base += qs.tot;
      }
    }
#pragma unroll
    for (int m = 0; m < 16; ++m) {
      contrib[m] += __shfl_xor_sync(0xffffffffu, contrib[m], 4);
      contrib[m] += __shfl_xor_sync(0xffffffffu, contrib[m], 8);
      contrib[m] += __shfl_xor_sync(0xffffffffu, contrib[m], 16);
    }
    if (g == 0) {
#pragma unroll
      for (int m = 0; m < 16; ++m) sm.pair[warp][8 * (m >> 1) + 2 * t + (m & 1)] = contrib[m];
    }
  }
  kern::cp_wait<0>();  // S's and dS⁺'s first half
  cutlass::arch::fence_view_async_shared();  // P's stores and the cp.async data -> the wgmmas
  __syncthreads();

  // ---- per half of the key channels: dq̂, dk̂ (64 columns each), the row terms of dg
  auto mmaR = make_tiled_mma(typename At::N64MN{});
  auto mmaT = make_tiled_mma(typename At::template SSmn<64>{});
  auto thrR = mmaR.get_thread_slice(tid);
  auto thrT = mmaT.get_thread_slice(tid);
  Tensor sS = make_tensor(make_smem_ptr(sm.S), typename L::TokByK{});
  Tensor sdS = make_tensor(make_smem_ptr(sm.dS), typename L::TokByK{});
  Tensor tPa = thrT.partition_fragment_A(make_tensor(make_smem_ptr(sm.P), typename L::VcByTokMN{}));
  float E2[2], F2[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    E2[h] = scale * __expf(gi[h]);
    F2[h] = __expf(gL - gi[h]);
  }
  float rtp[2] = {0.f, 0.f}, ctp[2] = {0.f, 0.f}, cs = 0.f;
  using PQ = PartialQK<T>;
#pragma unroll 1
  for (int half = 0; half < 2; ++half) {
    Tensor accQ = partition_fragment_C(mmaSS, Shape<Int<kC>, _64>{});
    Tensor accK = partition_fragment_C(mmaSS, Shape<Int<kC>, _64>{});
    fence_regs(accQ);
    fence_regs(accK);
    warpgroup_arrive();
    wg_gemm<true>(mmaSS, tDOa, thrSS.partition_fragment_B(sS), accQ);
    wg_gemm<true>(mmaSS, tVa, thrSS.partition_fragment_B(sdS), accK);
    warpgroup_commit_batch();
    if (need_dg) {  // Σ S ⊙ dS⁺ over this half (the two tiles share their layout: piece by piece)
#pragma unroll
      for (int m = 0; m < 8; ++m) {
        const int e = 8 * (tid + kThreads * m);
        piece_dot<T>(*reinterpret_cast<const uint4*>(sm.S + e), *reinterpret_cast<const uint4*>(sm.dS + e), cs);
      }
    }
    warpgroup_wait<0>();
    fence_regs(accQ);
    fence_regs(accK);
    if (half == 0) {  // S's and dS⁺'s second half into the slot, behind the rest of this half
      __syncthreads();  // every thread's wgmmas and Σ S ⊙ dS⁺ are done with the slot
      copy_kmajor<T, 64, kV, false>(reinterpret_cast<T*>(sm.S), Sg + 64 * kV, kV, tid);
      copy_kmajor<T, 64, kV, false>(reinterpret_cast<T*>(sm.dS), dSg + 64 * kV, kV, tid);
      kern::cp_commit();
    }
    // the row factors; rt, ct from the V-side products alone
#pragma unroll
    for (int i = 0; i < 32; i += 2) {
      const int h = (i >> 1) & 1;
      const int r = 16 * warp + g + 8 * h, cc = 64 * half + acc_col(t, i);
      accQ(i) *= E2[h];
      accQ(i + 1) *= E2[h];
      accK(i) *= F2[h];
      accK(i + 1) *= F2[h];
      if (need_dg) {
        const int off = kmajor_off<kC>(r, cc) + (cc & 7);
        const float2 qv = unpack2<T>(*reinterpret_cast<const uint32_t*>(sm.q + off));
        const float2 kv = unpack2<T>(*reinterpret_cast<const uint32_t*>(sm.k + off));
        rtp[h] += qv.x * accQ(i) + qv.y * accQ(i + 1);
        ctp[h] += kv.x * accK(i) + kv.y * accK(i + 1);
      }
    }
    // + A K̂_h and + Aᵀ Q̂_h
    Tensor tKb = thrR.partition_fragment_B(make_tensor(make_smem_ptr(sm.k + half * kHalf), typename L::VcByTokMN{}));
    Tensor tQb = thrT.partition_fragment_B(make_tensor(make_smem_ptr(sm.q + half * kHalf), typename L::VcByTokMN{}));
    fence_regs(Aq);
    fence_regs(accQ);
    fence_regs(accK);
    warpgroup_arrive();
    wg_gemm<false>(mmaR, Aq, tKb, accQ);
    wg_gemm<false>(mmaT, tPa, tQb, accK);
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    fence_regs(accQ);
    fence_regs(accK);
    // the gradients themselves (WyParams::dq: no l2norm, G = 1) or the partials for finish_qk.
    // 16-bit outputs leave in 16-byte pieces, a quad's four pieces 64 contiguous bytes of its row
    // (two whole sectors a warp store: the accumulators' 4-byte pairs half-wrote every sector, and
    // ncu showed L2 at 70% against DRAM's 52%); float32 partials (fp16 inputs) as pairs.
    if (p.dq || sizeof(PQ) == 2) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 16 * warp + g + 8 * h;
        const int64_t orow = (static_cast<int64_t>(t0 + r) * HV + hv) * kK + 64 * half;
#pragma unroll
        for (int b = 0; b < 2; ++b) {  // column blocks 4 b .. 4 b + 3: this thread's piece is block 4 b + t
          uint32_t xq[4], xk[4];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int i = 4 * (4 * b + j) + 2 * h;
            xq[j] = pack2<T>(accQ(i), accQ(i + 1));
            xk[j] = pack2<T>(accK(i), accK(i + 1));
          }
          quad_transpose4(xq, t);
          quad_transpose4(xk, t);
          if (r < Lc) {
            const int64_t at = orow + 32 * b + 8 * t;
            void* oq = p.dq ? static_cast<void*>(static_cast<T*>(p.dq) + at) : static_cast<void*>(static_cast<PQ*>(p.pq) + at);
            void* ok = p.dq ? static_cast<void*>(static_cast<T*>(p.dk) + at) : static_cast<void*>(static_cast<PQ*>(p.pk) + at);
            *reinterpret_cast<uint4*>(oq) = make_uint4(xq[0], xq[1], xq[2], xq[3]);
            *reinterpret_cast<uint4*>(ok) = make_uint4(xk[0], xk[1], xk[2], xk[3]);
          }
        }
      }
    } else {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 16 * warp + g + 8 * h;
        if (r < Lc) {
          const int64_t orow = (static_cast<int64_t>(t0 + r) * HV + hv) * kK + 64 * half;
#pragma unroll
          for (int n = 0; n < 8; ++n) {
            const int i = 4 * n + 2 * h, cc = acc_col(t, i);
            store2<PQ>(static_cast<PQ*>(p.pq) + orow + cc, accQ(i), accQ(i + 1));
            store2<PQ>(static_cast<PQ*>(p.pk) + orow + cc, accK(i), accK(i + 1));
          }
        }
      }
    }
    if (half == 0) {
      kern::cp_wait<0>();
      cutlass::arch::fence_view_async_shared();
      __syncthreads();
    }
  }
  if (!need_dg) return;

  // ---- dg_t = e^{γ_L} Σ S ⊙ dS⁺ + Σ_{j<t} ct_j + Σ_{i≥t} rt_i + pairs
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    rtp[h] += __shfl_xor_sync(0xffffffffu, rtp[h], 1);
    rtp[h] += __shfl_xor_sync(0xffffffffu, rtp[h], 2);
    ctp[h] += __shfl_xor_sync(0xffffffffu, ctp[h], 1);
    ctp[h] += __shfl_xor_sync(0xffffffffu, ctp[h], 2);
    if (t == 0) {
      const int r = 16 * warp + g + 8 * h;
      sm.rt[r] = rqi[h] * rtp[h];
      sm.ct[r] = sm.rk[r] * ctp[h];
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) cs += __shfl_xor_sync(0xffffffffu, cs, o);
  if (lane == 0) sm.cend[warp] = cs;
  __syncthreads();
  if (tid < kC) {
    float col = 0.f, row = 0.f;
    for (int j = 0; j < tid; ++j) col += sm.ct[j];
    for (int i = kC - 1; i >= tid; --i) row += sm.rt[i];
    const float pair = sm.pair[0][tid] + sm.pair[1][tid] + sm.pair[2][tid] + sm.pair[3][tid];
    const float d = __expf(gL) * (sm.cend[0] + sm.cend[1] + sm.cend[2] + sm.cend[3]) + col + row + pair;
    if (tid < Lc) {
      const int64_t at = static_cast<int64_t>(t0 + tid) * HV + hv;
      if (p.dg_direct) stf(p.dg, p.dg_dt, at, gate::identity_bwd(sm.floored[tid] != 0, d));
      else p.pg[at] = d;  // pg's scalar-gate rows: one float a (token, value head)
    }
  }
#endif
}

template <class T>
cudaError_t launch(const WyParams& p, cudaStream_t s) {
  constexpr int smem = kern::wgmma_recurrence::smem_bytes_of<Smem<typename Atoms<T>::E>>();
  static_assert(2 * (smem + 1024) <= 228 * 1024, "two CTAs an SM (each with its 1 KB reserved)");
  return kern::wgmma_recurrence::launch_with_smem(pass2_scalar_wgmma_kernel<T>, smem,
                                                  kern::ChunkParallelScheduler<>::grid_shape(p.num_chunks, p.HV),
                                                  kThreads, p, s);
}

}  // namespace pass2_scalar
}  // namespace linattn::cuda::bwd

// Pass 2 of the backward without the delta rule, vector gate (GLA), on Hopper (sm_90a, bf16,
// K = V = 128): dq̂, dk̂ and dg of one (chunk, value head, 64-channel half) per warpgroup, every
// product on wgmma with float32 accumulators. It replaces wy_kernel (mma.sync) for these problems;
// docs/backward_v2_plan.md (session 45) has the sizing and the measurements.
//
// With γ_ic the chunk-local cumsum of the (floored) gate per channel, S the chunk-start state, dS⁺ the
// gradient of the chunk-end state (both [K][V] in bf16), dP = tril(dO Vᵀ), L the chunk's last token:
//   dq̂_ic = s e^{γ_ic} (S dO_i)_c + s Σ_{j≤i} dP_ij k̂_jc e^{γ_ic - γ_jc}
//   dk̂_jc = e^{γ_Lc - γ_jc} (dS⁺ v_j)_c + s Σ_{i≥j} dP_ij q̂_ic e^{γ_ic - γ_jc}
//   dg_mc = Σ_{i≥m} (q̂ dq̂ - k̂ dk̂)_ic + e^{γ_Lc} Σ_v S_cv dS⁺_cv + Σ_j k̂_jc e^{γ_Lc - γ_jc} (dS⁺ v_j)_c
// (the identity gate transform: dg 0 on floored tokens, gate::identity_bwd).
//
// Everything is computed transposed, the half's 64 channels as the wgmma's M, so that a thread
// holds, for its two channels, the same sixteen tokens in every accumulator and register A operand
// (acc_row / acc_col): γ, q̂, k̂ and the decays live at the thread's own positions and the token scans
// (γ, dg) run along the accumulator's columns in registers.
//   inter: dq̂ᵀ = S_h dOᵀ, dk̂ᵀ = dS⁺_h Vᵀ (SS, m64n64k128), then the per-element factors;
//   intra, per 16-token block I with the reference Rs_I = γ before block I and Re_I = γ at its end:
//     dq̂ᵀ[:, I] += s e^{γ_i - Rs_I} (A_I P[I, :]ᵀ),  A_I[c][j] = k̂_jc e^{Rs_I - γ_jc}, j in blocks 0..I
//     dk̂ᵀ[:, I] += s e^{Re_I - γ_j} (B_I Pᵀ[I, :]ᵀ),  B_I[c][i] = q̂_ic e^{γ_ic - Re_I}, i in blocks I..3
//   one RS m64n16 product a block (k-blocks 0..I, resp. I..3) against a 16-row slice of the K-major
//   P (resp. Pᵀ) tile, whose zeros above the diagonal mask the diagonal block. Off the diagonal every
//   factor is <= 1; on it A_I's factor is at most e^{spread}, spread = Rs_I - Re_I (the block's gate
//   sum), and the output factor brings each pair back to e^{γ_i - γ_j} <= 1. A (block, channel)
//   whose spread passes kWide (steep or floored gates) takes its diagonal block exactly on the CUDA
//   cores instead (its A entries there are 0), one exp a pair. The diagonal k-block's operands are
//   hi + lo bf16 pairs (a second m64n16k16 a block), so that each diagonal pair's two dγ terms
//   (through q̂ dq̂ and k̂ dk̂) cancel to float32 rounding as exact arithmetic has them cancel.
// S_h (16-bit, or the saving forward's float32 rounded as it lands) and dS⁺_h (the half's 64 rows)
// are the inter products' A operands; once read, their slots stage
// dq̂ and dk̂ as token rows for 16-byte stores. The two halves of a chunk are adjacent CTAs (their dO,
// V tiles and the l2 norms' full q / k rows come through L2); two CTAs an SM.
#pragma once

#include "cuda/common/chunk_bwd.cuh"
#include "cuda/common/gate.cuh"
#include "cuda/sm90/wgmma_tiles.cuh"

namespace linattn::cuda::bwd {
namespace pass2_vector {

using namespace cute;
using kern::load_any;
using kern::pack2;
using kern::to_f;
using kern::wgmma_recurrence::acc_col;
using kern::wgmma_recurrence::acc_row;
using kern::wgmma_recurrence::Atoms;
using kern::wgmma_recurrence::copy_kmajor;
using kern::wgmma_recurrence::fence_regs;
using kern::wgmma_recurrence::kmajor_off;
using kern::wgmma_recurrence::Layouts;
using kern::wgmma_recurrence::movmatrix_trans;
using kern::wgmma_recurrence::piece_dot;
using kern::wgmma_recurrence::quad_prefix;
using kern::wgmma_recurrence::quad_suffix;
using kern::wgmma_recurrence::QuadScan;
using kern::wgmma_recurrence::wg_gemm;

constexpr int kC = config::kChunk;  // 64 tokens
constexpr int kK = 128;
constexpr int kV = 128;
constexpr int kH = 64;  // channels a CTA
constexpr int kThreads = kern::wgmma_recurrence::kThreads;
// The largest block gate sum whose diagonal block runs on the tensor cores: A_I's entries there are
// k̂ e^{spread} in bf16 (float32's exponent range) and the accumulators e^{spread} |dP| |k̂| 16.
constexpr float kWide = 64.f;

template <class E>
struct alignas(1024) Smem {
  alignas(1024) E dO[kC * kV];  // (tok, vcol), K-major (TokByK)
  alignas(1024) E v[kC * kV];
  alignas(1024) E S[kH * kV];   // rows 64 h .. 64 h + 63 of S: (ch, vcol), K-major; then dq̂'s staging, then q̂ ⊙ dq̂
  alignas(1024) E dS[kH * kV];  // the same rows of dS⁺; then dk̂'s staging
  alignas(1024) E q[kC * kH];   // (tok, ch) of the half, K-major (kmajor_off<64>)
  alignas(1024) E k[kC * kH];
  alignas(1024) E P[kC * kC];   // tril(dO Vᵀ): (i, j) K-major
  alignas(1024) E PT[kC * kC];  // its transpose: (j, i) K-major
  float rq[kC], rk[kC];
  float rs[kH];                 // Σ_v S ⊙ dS⁺ of the half's channels
};

__device__ __forceinline__ float as_float(float x) { return x; }
__device__ __forceinline__ float as_float(double x) { return static_cast<float>(x); }
__device__ __forceinline__ float as_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float as_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// The raw gate at this thread's 32 positions (position i = 4 n + 2 rr + e: token 8 n + 2 t + e of
// channel row rr), floored, 0 past the chunk's end; bit i of `floored` marks a floored token.
template <class G>
__device__ __forceinline__ void load_gate(const G* row0, int64_t ts, int Lc, int t, float (&x)[32], unsigned& floored) {
#pragma unroll
  for (int rr = 0; rr < 2; ++rr)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const G* row = row0 + (2 * t + e) * ts + 8 * rr;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        const int i = 4 * n + 2 * rr + e, tok = 8 * n + 2 * t + e;
        const float raw = tok < Lc ? as_float(row[8 * n * ts]) : 0.f;
        floored |= (tok < Lc && raw <= gate::kFloor ? 1u : 0u) << i;
        x[i] = tok < Lc ? gate::floor_gate(raw) : 0.f;
      }
    }
}

// A (channel, token) accumulator of the half, rounded to 16-bit O, into the staging tile
// [64 tokens][64 channels] (16-byte pieces XOR-swizzled by the token row), then out as 16-byte row
// pieces: out_row(r) is token r's 64 channels.
template <class O, class Acc, class Out>
__device__ __forceinline__ void stage_rows(const Acc& acc, O* stage, int warp, int g, int t, int tid, int Lc,
                                           Out&& out_row) {
#pragma unroll
  for (int i = 0; i < 32; i += 2) {
    const uint32_t x = movmatrix_trans(pack2<O>(acc(i), acc(i + 1)));
    const int r = 8 * (i >> 2) + g, ch = 16 * warp + 8 * ((i >> 1) & 1) + 2 * t;
    *reinterpret_cast<uint32_t*>(stage + r * kH + ((((ch >> 3) ^ r) & 7) << 3) + (ch & 7)) = x;
  }
  __syncthreads();
#pragma unroll
  for (int it = 0; it < 4; ++it) {
    const int idx = tid + kThreads * it, r = idx >> 3, pc = idx & 7;
    if (r < Lc) *reinterpret_cast<uint4*>(out_row(r) + 8 * pc) = *reinterpret_cast<const uint4*>(stage + r * kH + (((pc ^ r) & 7) << 3));
  }
}

// The half's 64 rows of a float32 state [rows][128] rounded to T into the K-major tile (kmajor_off):
// every load in flight, then the conversions and 16-byte shared stores.
template <class T>
__device__ __forceinline__ void copy_kmajor_rounded(T* dst, const float* src, int tid) {
  constexpr int n = kH * kV / 8 / kThreads;  // 16-byte pieces a thread
  float4 x[n][2];
#pragma unroll
  for (int j = 0; j < n; ++j) {
    const int e = j * kThreads + tid, r = e / (kV / 8), c = (e % (kV / 8)) * 8;
    x[j][0] = __ldg(reinterpret_cast<const float4*>(src + r * kV + c));
    x[j][1] = __ldg(reinterpret_cast<const float4*>(src + r * kV + c + 4));
  }
#pragma unroll
  for (int j = 0; j < n; ++j) {
    const int e = j * kThreads + tid, r = e / (kV / 8), c = (e % (kV / 8)) * 8;
    const uint4 w = make_uint4(pack2<T>(x[j][0].x, x[j][0].y), pack2<T>(x[j][0].z, x[j][0].w),
                               pack2<T>(x[j][1].x, x[j][1].y), pack2<T>(x[j][1].z, x[j][1].w));
    *reinterpret_cast<uint4*>(dst + kmajor_off<kH>(r, c)) = w;
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads, 2) pass2_vector_wgmma_kernel(const __grid_constant__ WyParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using At = Atoms<T>;
  using E = typename At::E;
  using L = Layouts<E>;
  using PQ = PartialQK<T>;
  static_assert(sizeof(PQ) == 2, "16-bit partials: staged and stored as dq, dk are");
  extern __shared__ unsigned char smem_raw[];
  auto& sm = *reinterpret_cast<Smem<E>*>(kern::wgmma_recurrence::smem_base_1024(smem_raw));
  const auto bc = kern::ChunkPartScheduler<2>::block_coord();
  const int c = bc.c, hv = bc.hv, half = bc.part, hk = hv / p.G, HV = p.HV;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const kern::ChunkInfo ci = p.chunks[c];
  const int t0 = ci.t0, Lc = ci.len;
  const int64_t blk = static_cast<int64_t>(c) * HV + hv;
  const int64_t qk_row = static_cast<int64_t>(p.H) * kK, v_row = static_cast<int64_t>(HV) * kV;
  const int64_t g_row = static_cast<int64_t>(HV) * kK;  // g, dg, the partials: [tokens][HV][K]
  const int64_t s_off = blk * kK * kV + half * kH * kV;  // the half's rows of S and dS⁺
  const T* dSg = static_cast<const T*>(p.dh) + s_off;
  const T* qrows = static_cast<const T*>(p.q) + t0 * qk_row + hk * kK;
  const T* krows = static_cast<const T*>(p.k) + t0 * qk_row + hk * kK;
  const bool need_dg = p.dg != nullptr;
  const float scale = p.scale;

  // ---- the token tiles and the q / k half (group 0), S_h and dS⁺_h (group 1)
  copy_kmajor<T, kC, kV, true>(reinterpret_cast<T*>(sm.dO), static_cast<const T*>(p.d_o) + t0 * v_row + hv * kV, v_row, tid, Lc);
  copy_kmajor<T, kC, kV, true>(reinterpret_cast<T*>(sm.v), static_cast<const T*>(p.v) + t0 * v_row + hv * kV, v_row, tid, Lc);
  copy_kmajor<T, kC, kH, true>(reinterpret_cast<T*>(sm.q), qrows + half * kH, qk_row, tid, Lc);
  copy_kmajor<T, kC, kH, true>(reinterpret_cast<T*>(sm.k), krows + half * kH, qk_row, tid, Lc);
  kern::cp_commit();
  if (p.h16) copy_kmajor<T, kH, kV, false>(reinterpret_cast<T*>(sm.S), static_cast<const T*>(p.h) + s_off, kV, tid);
  copy_kmajor<T, kH, kV, false>(reinterpret_cast<T*>(sm.dS), dSg, kV, tid);
  kern::cp_commit();
  // float32 states (the saving forward's): rounded to T as they land, the values the 16-bit states
  // hold, so that both give the same bits
  if (!p.h16) copy_kmajor_rounded<T>(reinterpret_cast<T*>(sm.S), static_cast<const float*>(p.h) + s_off, tid);

  // ---- the l2 norms' reciprocals over all 128 channels (two threads a row, from global memory:
  // the other half's channels are the other CTA's tile), float32 sums of exact 16-bit squares
  if (p.l2norm) {
    const int r = tid >> 1, hf = tid & 1;
    float sq = 0.f, sk = 0.f;
    if (r < Lc) {
      uint4 a[8], b[8];
#pragma unroll
      for (int m = 0; m < 8; ++m) {
        a[m] = __ldg(reinterpret_cast<const uint4*>(qrows + r * qk_row + 64 * hf) + m);
        b[m] = __ldg(reinterpret_cast<const uint4*>(krows + r * qk_row + 64 * hf) + m);
      }
#pragma unroll
      for (int m = 0; m < 8; ++m) kern::add_squares8<T>(a[m], b[m], sq, sk);
    }
    gate::store_pair_rnorms(sq, sk, hf == 0, &sm.rq[r], &sm.rk[r]);
  } else if (tid < kC) {
    sm.rq[tid] = sm.rk[tid] = 1.f;
  }

  // ---- γ at this thread's positions: channel row rr is 16 warp + g + 8 rr of the half
  const int cl0 = 16 * warp + g;  // the half's channel of row rr = 0; + 8 the other
  float gam[32];
  unsigned floored = 0;
  {
    const int64_t at = static_cast<int64_t>(t0) * g_row + static_cast<int64_t>(hv) * kK + half * kH + cl0;
    switch (p.gate.g_dt) {
      case 0: load_gate(static_cast<const __half*>(p.gate.g) + at, g_row, Lc, t, gam, floored); break;
      case 1: load_gate(static_cast<const __nv_bfloat16*>(p.gate.g) + at, g_row, Lc, t, gam, floored); break;
      case 2: load_gate(static_cast<const float*>(p.gate.g) + at, g_row, Lc, t, gam, floored); break;
      default: load_gate(static_cast<const double*>(p.gate.g) + at, g_row, Lc, t, gam, floored); break;
    }
  }
  // the inclusive scan of each row's tokens (a quad holds an 8-token block, two tokens a lane;
  // blocks in order); tokens past Lc add 0, so γ stays at the last token's
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    float base = 0.f;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const int i0 = 4 * n + 2 * rr;
      const float x0 = gam[i0], x1 = gam[i0 + 1];
      const QuadScan qs = quad_prefix(x0, x1, t);
      gam[i0] = base + qs.ex + x0;
      gam[i0 + 1] = base + qs.ex + x0 + x1;
      base += qs.tot;
    }
  }
  // Re[b][rr]: γ at block b's last token (lane t = 3, n = 2 b + 1, e = 1); Rs(b) = γ before block b
  float Re[4][2];
#pragma unroll
  for (int b = 0; b < 4; ++b)
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) Re[b][rr] = __shfl_sync(0xffffffffu, gam[8 * b + 4 + 2 * rr + 1], (lane & ~3) | 3);
  auto Rs = [&](int b, int rr) { return b == 0 ? 0.f : Re[b - 1][rr]; };
  unsigned wide = 0;  // bit 2 b + rr: block b of channel row rr takes its diagonal block exactly
#pragma unroll
  for (int b = 0; b < 4; ++b)
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) wide |= (!(Rs(b, rr) - Re[b][rr] <= kWide) ? 1u : 0u) << (2 * b + rr);
  const bool any_wide = __any_sync(0xffffffffu, wide != 0);

  // q̂, k̂ at position i = 4 n + 2 rr + e, from the half tiles: element offset off[rr][e] + 512 n
  // (token 8 n + 2 t + e: its 8-row atom n, row 2 t + e in it), a base and compile-time steps
  int off[2][2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int ch = cl0 + 8 * rr;
      off[rr][e] = kmajor_off<kC>(2 * t + e, ch) + (ch & 7);
    }
  const T* qs = reinterpret_cast<const T*>(sm.q);
  const T* ks = reinterpret_cast<const T*>(sm.k);
  auto qhat = [&](int i) { return to_f(qs[off[(i >> 1) & 1][i & 1] + 512 * (i >> 2)]) * sm.rq[acc_col(t, i)]; };
  auto khat = [&](int i) { return to_f(ks[off[(i >> 1) & 1][i & 1] + 512 * (i >> 2)]) * sm.rk[acc_col(t, i)]; };

  kern::cp_wait<1>();
  cutlass::arch::fence_view_async_shared();  // this thread's cp.async data -> the wgmmas
  __syncthreads();                           // the tiles, r_q, r_k

  // ---- dP = dO Vᵀ into P (tril, 16-bit, unscaled) and Pᵀ
  auto mmaSS = make_tiled_mma(typename At::SS64{});
  auto thrSS = mmaSS.get_thread_slice(tid);
  Tensor sDO = make_tensor(make_smem_ptr(sm.dO), typename L::TokByK{});
  Tensor sV = make_tensor(make_smem_ptr(sm.v), typename L::TokByK{});
  {
    Tensor accP = partition_fragment_C(mmaSS, Shape<Int<kC>, Int<kC>>{});
    fence_regs(accP);
    warpgroup_arrive();
    wg_gemm<true>(mmaSS, thrSS.partition_fragment_A(sDO), thrSS.partition_fragment_B(sV), accP);
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    fence_regs(accP);
#pragma unroll
    for (int i = 0; i < 32; i += 2) {
      const int r = acc_row(warp, g, i), cc = acc_col(t, i);
      const float a0 = cc <= r ? accP(i) : 0.f, a1 = cc + 1 <= r ? accP(i + 1) : 0.f;
      const uint32_t x = pack2<T>(a0, a1);
      *reinterpret_cast<uint32_t*>(sm.P + kmajor_off<kC>(r, cc) + (cc & 7)) = x;
      // the warp's 8 x 8 block transposed: this lane then holds Pᵀ row 8 (i >> 2) + g, columns
      // 16 warp + 8 rr + 2 t, + 1
      const int jr = 8 * (i >> 2) + g, ic = 16 * warp + 8 * ((i >> 1) & 1) + 2 * t;
      *reinterpret_cast<uint32_t*>(sm.PT + kmajor_off<kC>(jr, ic) + (ic & 7)) = movmatrix_trans(x);
    }
  }
  kern::cp_wait<0>();
  cutlass::arch::fence_view_async_shared();  // P's stores and S_h, dS⁺_h -> the wgmmas
  __syncthreads();

  // Σ_v S ⊙ dS⁺ of each channel row of the half (two threads a row), before dq̂'s staging reuses S
  if (need_dg) {
    const int r = tid >> 1, hf = tid & 1;
    float a = 0.f;
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      const int off = kmajor_off<kH>(r, 64 * hf + 8 * m);
      piece_dot<T>(*reinterpret_cast<const uint4*>(sm.S + off), *reinterpret_cast<const uint4*>(sm.dS + off), a);
    }
    a += __shfl_xor_sync(0xffffffffu, a, 1);
    if (hf == 0) sm.rs[r] = a;
  }

  auto mma16 = make_tiled_mma(typename At::N16{});
  auto thr16 = mma16.get_thread_slice(tid);
  Tensor sP = make_tensor(make_smem_ptr(sm.P), typename L::TokByTok{});
  Tensor sPT = make_tensor(make_smem_ptr(sm.PT), typename L::TokByTok{});
  using Acc16 = decltype(partition_fragment_C(mma16, Shape<_64, _16>{}));
  // one block's product: k-blocks KB0 .. KB0 + NKB - 1 of the A fragment (built by `entry` at
  // accumulator positions 8 kb + e) against rows 16 I .. 16 I + 15 of the tile
  // and the diagonal k-block (I) once more with its low halves Alo
  auto block_gemm = [&](auto Ic, auto KB0c, auto NKBc, auto& tile, auto& A, auto& Alo, Acc16& Y) {
    constexpr int I = decltype(Ic)::value, KB0 = decltype(KB0c)::value, NKB = decltype(NKBc)::value;
    Tensor tB = thr16.partition_fragment_B(local_tile(tile, Shape<_16, Int<kC>>{}, make_coord(I, 0)));
    mma16.accumulate_ = GMMA::ScaleOut::Zero;
#pragma unroll
    for (int kb = 0; kb < NKB; ++kb) {
      cute::gemm(mma16, A(_, _, kb), tB(_, _, KB0 + kb), Y);
      mma16.accumulate_ = GMMA::ScaleOut::One;
    }
    cute::gemm(mma16, Alo(_, _, 0), tB(_, _, I), Y);
  };
  // x as a bf16 pair hi + lo (~16 mantissa bits)
  auto split = [](float x, E& hi, E& lo) {
    hi = E(x);
    lo = E(x - float(hi));
  };
  const int64_t orow0 = static_cast<int64_t>(t0) * g_row + static_cast<int64_t>(hv) * kK + half * kH;
  Tensor acc = partition_fragment_C(mmaSS, Shape<Int<kH>, Int<kC>>{});  // dq̂ᵀ, then dk̂ᵀ: (channel, token)
  Acc16 Y[4];

  // ================= dq̂ᵀ
  {
    Tensor sS = make_tensor(make_smem_ptr(sm.S), typename L::TokByK{});
    // A_I over k-blocks 0 .. I: k̂_j e^{Rs_I - γ_j}; the diagonal block as hi + lo (its pairs then
    // enter dq̂ and dk̂ with float32-grade factors, so that their dγ terms cancel as in exact
    // arithmetic: one bf16 each put dg at 3e-2 of float64 with steep gates, tools/precision/
    // gla_pass2_blocks.py), 0 where it is wide
    auto build = [&](auto Ic, auto& A, auto& Alo) {
      constexpr int I = decltype(Ic)::value;
#pragma unroll
      for (int i = 0; i < 8 * (I + 1); ++i) {
        const int rr = (i >> 1) & 1;
        const bool zero = (i >> 3) == I && ((wide >> (2 * I + rr)) & 1u);
        const float x = zero ? 0.f : khat(i) * __expf(Rs(I, rr) - gam[i]);
        if ((i >> 3) == I) split(x, A(i), Alo(i - 8 * I));
        else A(i) = E(x);
      }
    };
    using FragLo = decltype(make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, _1>{}));
    FragLo Alo[4];
    auto A0 = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, _1>{});
    auto A1 = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, _2>{});
    build(Int<0>{}, A0, Alo[0]);
    build(Int<1>{}, A1, Alo[1]);
    fence_regs(acc);
    fence_regs(Y[0]);
    fence_regs(Y[1]);
    fence_regs(A0);
    fence_regs(A1);
    fence_regs(Alo[0]);
    fence_regs(Alo[1]);
    warpgroup_arrive();
    wg_gemm<true>(mmaSS, thrSS.partition_fragment_A(sS), thrSS.partition_fragment_B(sDO), acc);
    block_gemm(Int<0>{}, Int<0>{}, Int<1>{}, sP, A0, Alo[0], Y[0]);
    block_gemm(Int<1>{}, Int<0>{}, Int<2>{}, sP, A1, Alo[1], Y[1]);
    warpgroup_commit_batch();
    auto A2 = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, _3>{});
    auto A3 = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, _4>{});
    build(Int<2>{}, A2, Alo[2]);
    build(Int<3>{}, A3, Alo[3]);
    fence_regs(Y[2]);
    fence_regs(Y[3]);
    fence_regs(A2);
    fence_regs(A3);
    fence_regs(Alo[2]);
    fence_regs(Alo[3]);
    warpgroup_arrive();
    block_gemm(Int<2>{}, Int<0>{}, Int<3>{}, sP, A2, Alo[2], Y[2]);
    block_gemm(Int<3>{}, Int<0>{}, Int<4>{}, sP, A3, Alo[3], Y[3]);
    warpgroup_commit_batch();
    // dq̂ = s e^{γ_i - Rs_I} (e^{Rs_I} inter + Y_I)
    auto epilogue = [&](auto Ic) {
      constexpr int I = decltype(Ic)::value;
#pragma unroll
      for (int m = 0; m < 8; ++m) {
        const int i = 8 * I + m, rr = (m >> 1) & 1;
        const float rs = Rs(I, rr);
        acc(i) = scale * __expf(gam[i] - rs) * (__expf(rs) * acc(i) + Y[I](m));
      }
    };
    warpgroup_wait<1>();
    fence_regs(acc);
    fence_regs(Y[0]);
    fence_regs(Y[1]);
    epilogue(Int<0>{});
    epilogue(Int<1>{});
    warpgroup_wait<0>();
    fence_regs(Y[2]);
    fence_regs(Y[3]);
    epilogue(Int<2>{});
    epilogue(Int<3>{});
  }
  // the wide diagonal blocks exactly: + s Σ_{j in block, j <= i} dP_ij k̂_j e^{γ_i - γ_j}; a quad
  // holds a block's sixteen tokens of a channel (lane t': 2 t' + e and 8 + 2 t' + e)
  auto exact_diag = [&](auto for_dq_c) {
    constexpr bool for_dq = decltype(for_dq_c)::value;
#pragma unroll
    for (int I = 0; I < 4; ++I)
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        float d[4] = {0.f, 0.f, 0.f, 0.f}, go[4], xo[4];
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const int i = 8 * I + 4 * (m >> 1) + 2 * rr + (m & 1);
          go[m] = gam[i];
          xo[m] = for_dq ? khat(i) : qhat(i);
        }
#pragma unroll 1
        for (int src = 0; src < 4; ++src)
#pragma unroll
          for (int m2 = 0; m2 < 4; ++m2) {
            const int other = 16 * I + 8 * (m2 >> 1) + 2 * src + (m2 & 1);
            const float go2 = __shfl_sync(0xffffffffu, go[m2], (lane & ~3) | src);
            const float xo2 = __shfl_sync(0xffffffffu, xo[m2], (lane & ~3) | src);
#pragma unroll
            for (int m = 0; m < 4; ++m) {
              const int own = 16 * I + 8 * (m >> 1) + 2 * t + (m & 1);
              // dq: P[own][other] (0 unless other <= own); dk: P[other][own] (0 unless other >= own).
              // The exponent clamped at 0: where it would be positive the P entry is 0.
              const int pr = for_dq ? own : other, pc = for_dq ? other : own;
              const float pv = to_f(reinterpret_cast<const T*>(sm.P)[kmajor_off<kC>(pr, pc) + (pc & 7)]);
              const float ex = for_dq ? go[m] - go2 : go2 - go[m];
              d[m] = fmaf(pv * xo2, __expf(fminf(ex, 0.f)), d[m]);
            }
          }
        if ((wide >> (2 * I + rr)) & 1u) {
#pragma unroll
          for (int m = 0; m < 4; ++m) acc(8 * I + 4 * (m >> 1) + 2 * rr + (m & 1)) += scale * d[m];
        }
      }
  };
  if (any_wide) exact_diag(std::true_type{});
  __syncthreads();  // every thread's products are done with S_h; Σ S ⊙ dS⁺ read it
  {
    T* out = static_cast<T*>(p.dq ? p.dq : p.pq) + orow0;
    stage_rows<T>(acc, reinterpret_cast<T*>(sm.S), warp, g, t, tid, Lc, [&](int r) { return out + r * g_row; });
  }
  // q̂ ⊙ dq̂ for dg, parked in S's slot (16 KB: 32 floats a thread, position-major) through the dk̂ phase
  float* dgam = reinterpret_cast<float*>(sm.S);
  if (need_dg) {
    __syncthreads();  // every thread has stored its staged rows
#pragma unroll
    for (int i = 0; i < 32; ++i) dgam[i * kThreads + tid] = qhat(i) * acc(i);
  }

  // ================= dk̂ᵀ
  float endc[2] = {0.f, 0.f};
  {
    Tensor sdS = make_tensor(make_smem_ptr(sm.dS), typename L::TokByK{});
    // B_J over k-blocks J .. 3: q̂_i e^{γ_i - Re_J}; the diagonal block as hi + lo, 0 where it is wide
    auto build = [&](auto Jc, auto& A, auto& Alo) {
      constexpr int J = decltype(Jc)::value;
#pragma unroll
      for (int a = 0; a < 8 * (4 - J); ++a) {
        const int i = 8 * J + a, rr = (i >> 1) & 1;
        const bool zero = (i >> 3) == J && ((wide >> (2 * J + rr)) & 1u);
        const float x = zero ? 0.f : qhat(i) * __expf(gam[i] - Re[J][rr]);
        if (a < 8) split(x, A(a), Alo(a));
        else A(a) = E(x);
      }
    };
    using FragLo = decltype(make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, _1>{}));
    FragLo Alo[4];
    auto A3 = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, _1>{});
    auto A2 = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, _2>{});
    build(Int<3>{}, A3, Alo[3]);
    build(Int<2>{}, A2, Alo[2]);
    fence_regs(acc);
    fence_regs(Y[3]);
    fence_regs(Y[2]);
    fence_regs(A3);
    fence_regs(A2);
    fence_regs(Alo[3]);
    fence_regs(Alo[2]);
    warpgroup_arrive();
    wg_gemm<true>(mmaSS, thrSS.partition_fragment_A(sdS), thrSS.partition_fragment_B(sV), acc);
    block_gemm(Int<3>{}, Int<3>{}, Int<1>{}, sPT, A3, Alo[3], Y[3]);
    block_gemm(Int<2>{}, Int<2>{}, Int<2>{}, sPT, A2, Alo[2], Y[2]);
    warpgroup_commit_batch();
    auto A1 = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, _3>{});
    auto A0 = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, _4>{});
    build(Int<1>{}, A1, Alo[1]);
    build(Int<0>{}, A0, Alo[0]);
    fence_regs(Y[1]);
    fence_regs(Y[0]);
    fence_regs(A1);
    fence_regs(A0);
    fence_regs(Alo[1]);
    fence_regs(Alo[0]);
    warpgroup_arrive();
    block_gemm(Int<1>{}, Int<1>{}, Int<3>{}, sPT, A1, Alo[1], Y[1]);
    block_gemm(Int<0>{}, Int<0>{}, Int<4>{}, sPT, A0, Alo[0], Y[0]);
    warpgroup_commit_batch();
    // dk̂ = e^{Re_J - γ_j} (e^{γ_L - Re_J} inter + s Y_J); the chunk-end column term from the inter part
    auto epilogue = [&](auto Jc) {
      constexpr int J = decltype(Jc)::value;
#pragma unroll
      for (int m = 0; m < 8; ++m) {
        const int i = 8 * J + m, rr = (m >> 1) & 1;
        const float f = __expf(Re[J][rr] - gam[i]);
        const float inter = f * __expf(Re[3][rr] - Re[J][rr]) * acc(i);
        if (need_dg) endc[rr] += khat(i) * inter;
        acc(i) = inter + scale * f * Y[J](m);
      }
    };
    warpgroup_wait<1>();
    fence_regs(acc);
    fence_regs(Y[3]);
    fence_regs(Y[2]);
    epilogue(Int<3>{});
    epilogue(Int<2>{});
    warpgroup_wait<0>();
    fence_regs(Y[1]);
    fence_regs(Y[0]);
    epilogue(Int<1>{});
    epilogue(Int<0>{});
  }
  if (any_wide) exact_diag(std::false_type{});
  __syncthreads();  // every thread's products are done with dS⁺_h
  {
    T* out = static_cast<T*>(p.dq ? p.dk : p.pk) + orow0;
    stage_rows<T>(acc, reinterpret_cast<T*>(sm.dS), warp, g, t, tid, Lc, [&](int r) { return out + r * g_row; });
  }

  // ================= dg_mc = Σ_{i≥m} (q̂ dq̂ - k̂ dk̂)_ic + e^{γ_Lc} Σ S ⊙ dS⁺ + the column term:
  // a reverse scan along each channel row's tokens
  if (need_dg) {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      endc[rr] += __shfl_xor_sync(0xffffffffu, endc[rr], 1);
      endc[rr] += __shfl_xor_sync(0xffffffffu, endc[rr], 2);
      const int ch = cl0 + 8 * rr;
      float base = __expf(Re[3][rr]) * sm.rs[ch] + endc[rr];
#pragma unroll
      for (int n = 7; n >= 0; --n) {
        const int i0 = 4 * n + 2 * rr;
        const float x0 = dgam[i0 * kThreads + tid] - khat(i0) * acc(i0);
        const float x1 = dgam[(i0 + 1) * kThreads + tid] - khat(i0 + 1) * acc(i0 + 1);
        const QuadScan qs = quad_suffix(x0, x1, t);  // lanes t + 1 .. 3 of this 8-token block
        const float d1 = base + qs.ex + x1, d0 = d1 + x0;  // tokens 8 n + 2 t + 1, 8 n + 2 t
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int tok = 8 * n + 2 * t + e;
          if (tok < Lc)
            stf(p.dg, p.dg_dt, orow0 + static_cast<int64_t>(tok) * g_row + ch,
                gate::identity_bwd((floored >> (i0 + e)) & 1u, e ? d1 : d0));
        }
        base += qs.tot;
      }
    }
  }
#endif
}

template <class T>
cudaError_t launch(const WyParams& p, cudaStream_t s) {
  static_assert(std::is_same_v<T, __nv_bfloat16>, "bf16 (kWide and the 16-bit partials assume it)");
  constexpr int smem = kern::wgmma_recurrence::smem_bytes_of<Smem<typename Atoms<T>::E>>();
  static_assert(2 * (smem + 1024) <= 228 * 1024, "two CTAs an SM (each with its 1 KB reserved)");
  return kern::wgmma_recurrence::launch_with_smem(pass2_vector_wgmma_kernel<T>, smem,
                                                  kern::ChunkPartScheduler<2>::grid_shape(p.num_chunks, p.HV),
                                                  kThreads, p, s);
}

}  // namespace pass2_vector
}  // namespace linattn::cuda::bwd

// The chunk-local work of the scalar-gate delta rule (GDN) on one warpgroup of Hopper, producing
// the operands of the wgmma recurrence (recurrence_consumer.cuh) — W, U, Aqk, the row factors,
// exp(γ_C) — through a sink: the workspace (WorkspaceSink, chunk_prep_wgmma.cuh) or a shared-memory
// stage (branch fused-gdn). Run chunk-parallel by chunk_prep_wgmma.cuh (the forward's chunk-local kernel for 16-bit GDN on
// Hopper; branch fused-gdn also runs it as the producer warpgroup of a fused kernel). Per chunk of
// 64 tokens:
//   γ  = chunk-local cumsum of the (in-kernel transformed, floored) gate; β (sigmoid when asked);
//   r  = the l2-norm reciprocals of the q and k rows (1 without l2norm);
//   K Kᵀ and Q Kᵀ on SS wgmma (m64n64k128) from the raw q / k tiles, then the decay, β, r, scale;
//   Aqk = scale tril(r_q Q Kᵀ r_k ⊙ e^{γ_i - γ_j})              (16-bit, into the stage)
//   T   = (I + tril(β r K Kᵀ r ⊙ e^{γ_i - γ_j}, -1))⁻¹           (tri_inverse.cuh, compact form)
//   W   = (T diag(β r_k e^γ)) k,  U = (T diag(β)) v              (RS wgmma: A from registers, the raw
//                                                                 k and v tiles as MN-major B)
//   the row factors of the raw-row pass and exp(γ_C).
// The same quantities as chunk_prep's scalar-gate form (chunk_prep.cuh), which the other GPUs and
// the backward's recompute keep.
#pragma once

#include "cuda/common/prep_gate.cuh"
#include "cuda/common/tri_inverse.cuh"
#include "cuda/sm90/recurrence_consumer.cuh"

namespace linattn::cuda::kern {
namespace wgmma_recurrence {

// The producer's own shared memory (besides the stages it fills): with the delta rule (GDN) the
// inverse's blocks, β and W's column factor besides the per-token values of the gate-only form.
struct ScalarDeltaScratch {
  alignas(16) float Ab[10 * kTriBlock];  // A's lower blocks; the diagonal ones become T_II
  alignas(16) float Tb[6 * kTriBlock];   // T's off-diagonal blocks
  alignas(16) float gam[kC];             // γ (chunk-local cumsum); past the chunk's end: γ of its last token
  alignas(16) float bet[kC];             // β (0 past the chunk's end)
  alignas(16) float rk[kC];
  alignas(16) float rq[kC];
  alignas(16) float nk2[kC];  // |k_i|², |q_i|²: the diagonals of K Kᵀ and Q Qᵀ
  alignas(16) float nq2[kC];
  alignas(16) float wfac[kC];  // β_j r_k,j e^{γ_j}: W's column factor on T
};
// Without the delta rule (simple GLA): the per-token values alone, 1.25 KB (two producers of the
// one-kernel forward each keep one beside four stages).
struct ScalarGateScratch {
  alignas(16) float gam[kC];
  alignas(16) float rk[kC];
  alignas(16) float rq[kC];
  alignas(16) float nk2[kC];
  alignas(16) float nq2[kC];
  // Aqk's decay with its row and column factors as one power of two: element (r, c) is
  // 2^(xr_r - xc_c) Q Kᵀ (r, c), xr = γ log2 e + log2(s r_q), xc = γ log2 e - log2 r_k
  alignas(16) float xr[kC];
  alignas(16) float xc[kC];
};
template <bool DELTA>
using ScalarScratchOf = std::conditional_t<DELTA, ScalarDeltaScratch, ScalarGateScratch>;

// One chunk's input tiles in shared memory (1024-byte aligned): q (tok, ch) at kmajor_off<64>, k
// (ch, tok) at mnmajor_off, one 64-column v tile (tok, vcol) at kmajor_off<64>.
template <class E>
struct ChunkTiles {
  E* q;
  E* k;
  E* v;
};

// The results into chunk_prep's workspace blocks (row-major W [64][128], Aqk [64][64], U [64][ldu],
// row factors [2][64], exp(γ_C) [128]), from the accumulators as 16-byte row pieces (Aqk without
// the delta rule: pairs).
template <class T>
struct WorkspaceSink {
  static constexpr bool kSmemAqk = false;
  T* W;
  T* A;
  T* U;
  float* rowfac;
  float* gexp;
  int ldu;
  __device__ __forceinline__ void ge(int d, float x) { gexp[d] = x; }
  // (null rowfac: the backward's recompute, which takes Qg and KgT instead: chunk_prep_wgmma.cuh)
  __device__ __forceinline__ void rf(int i, float x) {
    if (rowfac) rowfac[i] = x;
  }
  // 16-byte pieces: columns c .. c + 7 of row r (acc_row_pieces); Aqk without the delta rule as
  // (row, even column) pairs (the pieces made simple GLA's prep slower: docs/backward_v2_plan.md)
  __device__ __forceinline__ void aqk(int r, int c, uint4 x) { *reinterpret_cast<uint4*>(A + r * kC + c) = x; }
  __device__ __forceinline__ void aqk(int r, int c, uint32_t x) { *reinterpret_cast<uint32_t*>(A + r * kC + c) = x; }
  __device__ __forceinline__ void w(int r, int c, uint4 x) { *reinterpret_cast<uint4*>(W + r * kK + c) = x; }
  __device__ __forceinline__ void u(int r, int c, uint4 x) { *reinterpret_cast<uint4*>(U + r * ldu + c) = x; }
};

// T diag(f0) and T diag(f1) (rows of block row `warp`, T = (I + A)⁻¹ in tri_inverse.cuh's compact
// form: diagonal blocks in Ab, off-diagonal ones in Tb) as the register A operands of m64 x k64
// products: element i is (acc_row, acc_col); its column block J = i / 8 is compile-time, so a
// block's base (T_II for J = warp, an off-diagonal T block for J < warp, none above) is chosen
// once per J and the element offsets are one per-thread base plus immediates.
// With SPLIT, *a1 receives the low halves of T diag(f0) instead (x - round(x); f1 unused): the
// float32 form's hi + lo operand.
// [backward] T itself, row-major [64][64] with zeros above the diagonal (pass 2's M⁻¹), 16-bit
// (or float32 for the float32 form): warp w writes block row w.
template <class T>
__device__ __forceinline__ void store_inverse(const float* Ab, const float* Tb, int warp, int g, int t, T* out) {
  const int eb = g * kTriLd + 2 * t;
#pragma unroll
  for (int J = 0; J < 4; ++J) {
    const bool live = J <= warp;  // warp-uniform
    const float* blk = J == warp ? Ab + tri_block(warp, warp) : Tb + tri_off(warp > J ? warp : 1, warp > J ? J : 0);
#pragma unroll
    for (int q = 0; q < 2; ++q)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float2 tv = live ? *reinterpret_cast<const float2*>(blk + eb + 8 * h * kTriLd + 8 * q) : make_float2(0.f, 0.f);
        T* o = out + (16 * warp + g + 8 * h) * kC + 16 * J + 8 * q + 2 * t;
        if constexpr (std::is_same_v<T, float>) *reinterpret_cast<float2*>(o) = tv;
        else *reinterpret_cast<uint32_t*>(o) = pack2<T>(tv.x, tv.y);
      }
  }
}

template <bool SPLIT = false, class Frag>
__device__ __forceinline__ void scaled_inverse_a(const float* Ab, const float* Tb, int warp, int g, int t, Frag& a0,
                                                 const float* f0, Frag* a1, const float* f1) {
  using EE = typename Frag::value_type;
  const int eb = g * kTriLd + 2 * t;  // (r & 15, c & 15) - (8 h, 8 ((i >> 2) & 1) + (i & 1))
#pragma unroll
  for (int J = 0; J < 4; ++J) {
    const bool live = J <= warp;  // warp-uniform
    const float* blk = J == warp ? Ab + tri_block(warp, warp) : Tb + tri_off(warp > J ? warp : 1, warp > J ? J : 0);
#pragma unroll
    for (int q = 0; q < 2; ++q) {  // the two 8-column groups of block J: i = 8 J + 4 q + 2 h + e
      const int c = 16 * J + 8 * q + 2 * t;
      const float2 x0 = *reinterpret_cast<const float2*>(f0 + c);
      float2 x1 = make_float2(0.f, 0.f);
      if (a1 && !SPLIT) x1 = *reinterpret_cast<const float2*>(f1 + c);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float2 tv = make_float2(0.f, 0.f);
        if (live) tv = *reinterpret_cast<const float2*>(blk + eb + 8 * h * kTriLd + 8 * q);
        const int i = 8 * J + 4 * q + 2 * h;
        a0(i) = EE(tv.x * x0.x);
        a0(i + 1) = EE(tv.y * x0.y);
        if constexpr (SPLIT) {
          (*a1)(i) = EE(tv.x * x0.x - float(a0(i)));
          (*a1)(i + 1) = EE(tv.y * x0.y - float(a0(i + 1)));
        } else if (a1) {
          (*a1)(i) = EE(tv.x * x1.x);
          (*a1)(i + 1) = EE(tv.y * x1.y);
        }
      }
    }
  }
}

// DELTA = false (simple GLA): γ with g_gamma, Q Kᵀ (K Kᵀ / Q Qᵀ only for the l2 norms), the
// Aqk epilogue, the row factors and exp(γ_C); no β, A, inverse, W or U, and no v tile.
// BAR: the named barrier of this warpgroup's syncs (1; a kernel with two producers gives each its
// own).
template <class T, bool DELTA = true, int BAR = 1>
struct ScalarDeltaProducer {
  using A = Atoms<T>;
  using E = typename A::E;
  using L = Layouts<E>;
  using Tiles = ChunkTiles<E>;
  using Scratch = ScalarScratchOf<DELTA>;

  const PrepParams& pp;
  Scratch& sc;
  int tid, warp, lane, g, t;
  int hv, hk, v0;
  gate::HeadGate hg;
  float dtb;
  float graw[2] = {0.f, 0.f}, braw[2] = {0.f, 0.f};  // the next chunk's raw gate (warp 0) / β (warp 1), tokens 2 lane, 2 lane + 1

  __device__ ScalarDeltaProducer(const PrepParams& p_, Scratch& sc_, int tid_, int hv_, int v0_)
      : pp(p_), sc(sc_), tid(tid_), hv(hv_), v0(v0_) {
    warp = tid >> 5;
    lane = tid & 31;
    g = lane >> 2;
    t = lane & 3;
    hk = hv / pp.G;
    hg = prep_head_gate(pp, hv, !DELTA && pp.g_gamma ? load_any(pp.g_gamma, pp.gg_dt, hv) : 0.f);
    dtb = pp.gate_kind != 0 && pp.has_dtb ? load_any(pp.dt_bias, pp.dtb_dt, hv) : 0.f;
  }

  // cp.async of chunk (t0, Lc)'s q and k rows (key head hk) into the q (tok, ch) and k (ch, tok)
  // tiles, by thread tid of a warpgroup; rows past Lc zero-filled. (The one-kernel forward's
  // consumer issues these for its producers: fused_scalar_forward_wgmma.cuh.)
  __device__ __forceinline__ static void copy_qk(const PrepParams& pp, int hk, E* q, E* k, int t0, int Lc, int tid) {
    const int64_t rs = static_cast<int64_t>(pp.H) * kK;
    const int64_t r0 = static_cast<int64_t>(t0) * rs + static_cast<int64_t>(hk) * kK;
    copy_kmajor<T, kC, kK, true>(reinterpret_cast<T*>(q), static_cast<const T*>(pp.q) + r0, rs, tid, Lc);
    copy_mnmajor<T>(reinterpret_cast<T*>(k), static_cast<const T*>(pp.k) + r0, rs, tid, Lc);
  }

  // cp.async of chunk (t0, Lc)'s q, k rows and v tile into `in` (one commit group), and the raw
  // gate and β into registers (their latency hides behind other work).
  __device__ __forceinline__ void load(const Tiles& in, int t0, int Lc) {
    copy_qk(pp, hk, in.q, in.k, t0, Lc, tid);
    if constexpr (DELTA) {
      const int64_t vs = static_cast<int64_t>(pp.HV) * pp.V;
      copy_kmajor<T, kC, kVT, true>(reinterpret_cast<T*>(in.v),
                                    static_cast<const T*>(pp.v) + static_cast<int64_t>(t0) * vs +
                                        static_cast<int64_t>(hv) * pp.V + v0,
                                    vs, tid, Lc);
    }
    cp_commit();
    load_gate(t0, Lc);
  }
  // The raw gate (warp 0) and β (warp 1) of chunk (t0, Lc) into registers, tokens 2 lane, 2 lane + 1.
  __device__ __forceinline__ void load_gate(int t0, int Lc) {
    if (warp < (DELTA ? 2 : 1)) {
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        const int i = 2 * lane + m;
        const int64_t at = static_cast<int64_t>(t0 + i) * pp.HV + hv;
        if (warp == 0) graw[m] = i < Lc && pp.g ? load_any(pp.g, pp.g_dt, at) : 0.f;
        else braw[m] = i < Lc ? load_any(pp.beta, pp.beta_dt, at) : 0.f;
      }
    }
  }

  template <class Frag>
  __device__ __forceinline__ void scaled_t(Frag& a0, const float* f0, Frag* a1, const float* f1) const {
    scaled_inverse_a(sc.Ab, sc.Tb, warp, g, t, a0, f0, a1, f1);
  }

  // U = (T diag(β)) v for another 64-column tile (v in `vt`, kmajor_off<64>, visible to the async
  // proxy) into the sink's columns col0..col0+63; T and β of the last compute().
  template <class Sink>
  __device__ __forceinline__ void u_tile(E* vt, Sink& out, int col0) {
    Tensor Ua = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kC / 16>>{});
    scaled_t(Ua, sc.bet, static_cast<decltype(Ua)*>(nullptr), nullptr);
    auto mmaU = make_tiled_mma(typename A::N64MN{});
    Tensor tVu = mmaU.get_thread_slice(tid).partition_fragment_B(make_tensor(make_smem_ptr(vt), typename L::VcByTokMN{}));
    Tensor accU = partition_fragment_C(mmaU, Shape<_64, _64>{});
    fence_regs(Ua);
    fence_regs(accU);
    warpgroup_arrive();
    wg_gemm<true>(mmaU, Ua, tVu, accU);
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    fence_regs(accU);
    acc_row_pieces<64>([&](int i) { return pack2<T>(accU(i), accU(i + 1)); }, warp, g, t,
                       [&](int r, int c, uint4 x) { out.u(r, col0 + c, x); });
  }

  // graw_c / braw_c: this chunk's raw gate and β (what load() fetched for it).
  // The chunk whose tiles load() put in `in` (landed and visible to this warpgroup and the async
  // proxy): every operand of the recurrence into `out`. The caller syncs the warpgroup before the
  // scratch is reused.
  // X: three warps' 16 x kTriLd float scratch for the inverse (free from the inverse's start: the
  // chunk-parallel prep passes the q tile, read only by the first products).
  template <class Sink>
  __device__ __forceinline__ void compute(const Tiles& in, int Lc, const float (&graw_c)[2], const float (&braw_c)[2],
                                          float* X, Sink& out) {
    // ---- K Kᵀ, Q Kᵀ and (l2norm) Q Qᵀ on SS wgmma from the staged tiles; the row norms are
    // the diagonals of K Kᵀ and Q Qᵀ (float32 sums of exact 16-bit products)
    auto mmaSS = make_tiled_mma(typename A::SS64{});
    auto thrSS = mmaSS.get_thread_slice(tid);
    Tensor sKt = make_tensor(make_smem_ptr(in.k), typename L::TokByKChFirst{});  // (tok, ch)
    Tensor sQt = make_tensor(make_smem_ptr(in.q), typename L::TokByK{});         // (tok, ch)
    Tensor tKa = thrSS.partition_fragment_A(sKt);
    Tensor tQa = thrSS.partition_fragment_A(sQt);
    Tensor tKb = thrSS.partition_fragment_B(sKt);
    Tensor accK = partition_fragment_C(mmaSS, Shape<_64, _64>{});
    Tensor accQ = partition_fragment_C(mmaSS, Shape<_64, _64>{});
    fence_regs(accK);
    fence_regs(accQ);
    warpgroup_arrive();
    if constexpr (DELTA) wg_gemm<true>(mmaSS, tKa, tKb, accK);  // (without it K Kᵀ is for the l2 norm alone)
    wg_gemm<true>(mmaSS, tQa, tKb, accQ);
    warpgroup_commit_batch();
    // ---- γ (warp 0: two tokens a lane, one warp-wide scan), β (warp 1), while the products run
    // (they read only the tiles; before session 56 the scan ran first and the wgmmas waited for it)
    if (warp == 0) {
      float x[2] = {0.f, 0.f};
      gate::with_head_gate(hg, [&](auto kind, auto regular) {
#pragma unroll
        for (int m = 0; m < 2; ++m)
          if (2 * lane + m < Lc)
            x[m] = gate::head_gate<decltype(kind)::value, decltype(regular)::value, true>(hg, graw_c[m], dtb);
      });
      float s = x[0] + x[1];
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const float y = __shfl_up_sync(0xffffffffu, s, o);
        if (lane >= o) s += y;
      }
      // s: inclusive sum through token 2 lane + 1; tokens past Lc add 0 (γ stays at the last token's)
      sc.gam[2 * lane] = s - x[1];
      sc.gam[2 * lane + 1] = s;
    } else if constexpr (DELTA) {
      if (warp == 1) {
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          float b = 0.f;
          if (2 * lane + m < Lc) {
            b = braw_c[m];
            if (pp.beta_mode != 0) b = (pp.beta_mode == 2 ? 2.f : 1.f) * gate::sigmoid_precise(b);
          }
          sc.bet[2 * lane + m] = b;
        }
      }
    }
    if (pp.l2norm) {
      Tensor tQb = thrSS.partition_fragment_B(sQt);
      Tensor accN = partition_fragment_C(mmaSS, Shape<_64, _64>{});
      fence_regs(accN);
      warpgroup_arrive();
      if constexpr (!DELTA) wg_gemm<true>(mmaSS, tKa, tKb, accK);
      wg_gemm<true>(mmaSS, tQa, tQb, accN);
      warpgroup_commit_batch();
      warpgroup_wait<0>();
      fence_regs(accN);
      fence_regs(accK);
      // element (r, r) is held by one thread: column block 2 warp + h, lane with 2 t + e = g
#pragma unroll
      for (int i = 0; i < size(accN); ++i) {
        const int r = acc_row(warp, g, i), c = acc_col(t, i);
        if (c == r) {
          sc.nk2[r] = accK(i);
          sc.nq2[r] = accN(i);
        }
      }
    } else {
      warpgroup_wait<0>();
      fence_regs(accK);
    }
    fence_regs(accQ);
    warpgroup_sync<BAR>();  // γ, β, the squared norms
    // per-token factors: r_k, r_q, W's column factor, the raw-row pass's row factors, exp(γ_C)
    const float gC = sc.gam[kC - 1];
    out.ge(tid, expf(gC));
    if (tid < kC) {
      const float rk = pp.l2norm ? gate::l2_rnorm(sc.nk2[tid]) : 1.f;
      const float rq = pp.l2norm ? gate::l2_rnorm(sc.nq2[tid]) : 1.f;
      const float gt = sc.gam[tid];
      sc.rk[tid] = rk;
      sc.rq[tid] = rq;
      if constexpr (DELTA) sc.wfac[tid] = sc.bet[tid] * rk * __expf(gt);
      else {
        sc.xr[tid] = fmaf(gt, gate::kLog2e, log2f(fabsf(pp.scale) * rq));  // (the sign: aqk_epilogue)
        sc.xc[tid] = fmaf(gt, gate::kLog2e, -log2f(rk));
      }
      out.rf(tid, tid < Lc ? pp.scale * rq * __expf(gt) : 0.f);
      out.rf(kC + tid, tid < Lc ? rk * __expf(gC - gt) : 0.f);
    }
    warpgroup_sync<BAR>();

    // ---- the decay epilogue: Aqk (16-bit, into the sink) and, with the delta rule, A
    if constexpr (DELTA) delta_epilogue(in, accQ, accK, X, out);  // (the caller syncs before the scratch is reused)
    else aqk_epilogue(accQ, out);
  }

  // With the delta rule: A (float, compact blocks, j < i) and Aqk, then wy_tail. Column block nb
  // (8 tokens) of this warp's rows 16 warp .. + 15 lies above the diagonal when nb > 2 warp + 1
  // (warp-uniform): zeros, no exps.
  template <class Acc, class Sink>
  __device__ __forceinline__ void delta_epilogue(const Tiles& in, const Acc& accQ, const Acc& accK, float* X, Sink& out) {
    float gi[2], sqf[2], bk[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 16 * warp + g + 8 * h;
      gi[h] = sc.gam[r];
      sqf[h] = pp.scale * sc.rq[r];
      bk[h] = sc.bet[r] * sc.rk[r];
    }
    uint32_t aqw[kC / 4];  // Aqk's packed pairs, stored as row pieces by wy_tail
#pragma unroll
    for (int nb = 0; nb < kC / 8; ++nb) {
      const int c = 8 * nb + 2 * t;
      const bool live = nb <= 2 * warp + 1;
      float2 gc = make_float2(0.f, 0.f), kc = make_float2(0.f, 0.f);
      if (live) {
        gc = *reinterpret_cast<const float2*>(sc.gam + c);
        kc = *reinterpret_cast<const float2*>(sc.rk + c);
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = 4 * nb + 2 * h, r = 16 * warp + g + 8 * h;
        float d0 = 0.f, d1 = 0.f;
        if (live) {
          d0 = c <= r ? __expf(gi[h] - gc.x) * kc.x : 0.f;
          d1 = c + 1 <= r ? __expf(gi[h] - gc.y) * kc.y : 0.f;
        }
        aqw[i / 2] = pack2<T>(sqf[h] * d0 * accQ(i), sqf[h] * d1 * accQ(i + 1));
        if (nb / 2 <= warp) {  // block (warp, nb / 2) of the lower triangle
          const float a0 = c < r ? bk[h] * d0 * accK(i) : 0.f;
          const float a1 = c + 1 < r ? bk[h] * d1 * accK(i + 1) : 0.f;
          *reinterpret_cast<float2*>(sc.Ab + tri_block(warp, nb / 2) + (r & 15) * kTriLd + (c & 15)) = make_float2(a0, a1);
        }
      }
    }
    wy_tail(in, aqw, X, out);
  }

  // Without the delta rule: Aqk alone, one subtraction, one ex2 and one product an element (the
  // row and column factors folded into the exponents xr, xc; warp 3's live blocks, the longest of
  // the four warps' epilogues, were ~20% of the one-kernel forward's instructions with the factors
  // as products: docs/fused_forward_design.md, session 55). A negative scale's sign is applied to
  // the packed pair (xr holds log2 |scale r_q|). A sink with kSmemAqk (the one-kernel forward's
  // stage, kmajor_off<64>) takes Aqk by stmatrix: four 8 x 8 blocks a store (column blocks nb,
  // nb + 1 of this warp's two row blocks) in place of 16 four-byte stores.
  template <class Acc, class Sink>
  __device__ __forceinline__ void aqk_epilogue(const Acc& accQ, Sink& out) {
    const uint32_t sign = pp.scale < 0.f ? 0x80008000u : 0u;
    static_assert(sizeof(E) == 2, "the sign bits of a 16-bit pair");
    float xr[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) xr[h] = sc.xr[16 * warp + g + 8 * h];
    // column block nb's two pairs (row blocks h = 0, 1: elements 4 nb + 2 h, + 1)
    auto pairs = [&](int nb, uint32_t (&pr)[2]) {
      const int c = 8 * nb + 2 * t;
      const bool live = nb <= 2 * warp + 1;  // warp-uniform
      const float2 xc = live ? *reinterpret_cast<const float2*>(sc.xc + c) : make_float2(0.f, 0.f);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = 4 * nb + 2 * h, r = 16 * warp + g + 8 * h;
        float d0 = 0.f, d1 = 0.f;
        if (live) {
          d0 = c <= r ? gate::ex2_ftz(xr[h] - xc.x) : 0.f;
          d1 = c + 1 <= r ? gate::ex2_ftz(xr[h] - xc.y) : 0.f;
        }
        pr[h] = pack2<T>(d0 * accQ(i), d1 * accQ(i + 1)) ^ sign;
      }
    };
    if constexpr (Sink::kSmemAqk) {
      // matrix m of the store at nb: row block m & 1, column block nb + (m >> 1); lane l gives row
      // l & 7 of matrix l >> 3
      const int m = lane >> 3, row = 16 * warp + 8 * (m & 1) + (lane & 7);
#pragma unroll
      for (int nb = 0; nb < kC / 8; nb += 2) {
        uint32_t p0[2], p1[2];
        pairs(nb, p0);
        pairs(nb + 1, p1);
        const uint32_t x[4] = {p0[0], p0[1], p1[0], p1[1]};
        stsm_x4(x, out.a + kmajor_off<kC>(row, 8 * (nb + (m >> 1))));
      }
    } else {
#pragma unroll
      for (int nb = 0; nb < kC / 8; ++nb) {
        uint32_t pr[2];
        pairs(nb, pr);
#pragma unroll
        for (int h = 0; h < 2; ++h) out.aqk(16 * warp + g + 8 * h, 8 * nb + 2 * t, pr[h]);
      }
    }
  }

  // The delta rule's rest of compute(): Aqk's row pieces, T = (I + A)⁻¹, W and U.
  template <class Sink>
  __device__ __forceinline__ void wy_tail(const Tiles& in, const uint32_t (&aqw)[kC / 4], float* X, Sink& out) {
    acc_row_pieces<kC>([&](int i) { return aqw[i / 2]; }, warp, g, t, [&](int r, int c, uint4 x) { out.aqk(r, c, x); });
    warpgroup_sync<BAR>();

    // ---- T = (I + A)⁻¹: diagonal blocks, then three levels of off-diagonal blocks
    if (tid < kC) tri_diag_compact(sc.Ab, tid >> 4, tid & 15);
    warpgroup_sync<BAR>();
    X += warp * kTriBlock;
    if (warp < 3) tri_offdiag_compact<false>(sc.Ab, sc.Tb, X, warp + 1, warp);
    warpgroup_sync<BAR>();
    if (warp < 2) tri_offdiag_compact<false>(sc.Ab, sc.Tb, X, warp + 2, warp);
    warpgroup_sync<BAR>();
    if (warp == 0) tri_offdiag_compact<false>(sc.Ab, sc.Tb, X, 3, 0);
    warpgroup_sync<BAR>();

    // ---- W = (T diag(β r_k e^γ)) k and U = (T diag(β)) v: the scaled T as register A operands
    Tensor Wa = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kC / 16>>{});
    Tensor Ua = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kC / 16>>{});
    scaled_t(Wa, sc.wfac, &Ua, sc.bet);
    auto mmaW = make_tiled_mma(typename A::N128MN{});
    auto mmaU = make_tiled_mma(typename A::N64MN{});
    Tensor tKw = mmaW.get_thread_slice(tid).partition_fragment_B(make_tensor(make_smem_ptr(in.k), typename L::ChByTokMN{}));
    Tensor tVu = mmaU.get_thread_slice(tid).partition_fragment_B(make_tensor(make_smem_ptr(in.v), typename L::VcByTokMN{}));
    Tensor accW = partition_fragment_C(mmaW, Shape<_64, Int<kK>>{});
    Tensor accU = partition_fragment_C(mmaU, Shape<_64, _64>{});
    fence_regs(Wa);
    fence_regs(Ua);
    fence_regs(accW);
    fence_regs(accU);
    warpgroup_arrive();
    wg_gemm<true>(mmaW, Wa, tKw, accW);
    wg_gemm<true>(mmaU, Ua, tVu, accU);
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    fence_regs(accW);
    fence_regs(accU);
    acc_row_pieces<kK>([&](int i) { return pack2<T>(accW(i), accW(i + 1)); }, warp, g, t,
                       [&](int r, int c, uint4 x) { out.w(r, c, x); });
    acc_row_pieces<64>([&](int i) { return pack2<T>(accU(i), accU(i + 1)); }, warp, g, t,
                       [&](int r, int c, uint4 x) { out.u(r, c, x); });
  }
};

}  // namespace wgmma_recurrence
}  // namespace linattn::cuda::kern

// The chunk-local work of the vector gate (KDA with the delta rule, GLA without) on one warpgroup
// of Hopper, run chunk-parallel (one CTA per (chunk, value head)) as the forward's chunk_prep for
// bf16 at K = 128: it writes Qg, KgT, Aqk, exp(γ_C) and (delta rule) W, U in chunk_prep's
// workspace layouts for the wgmma pass (recurrence_consumer.cuh). Per chunk of 64 tokens:
//   γ   = chunk-local cumsum of the (in-kernel transformed, floored) gate, per channel;
//   K Kᵀ and Q Kᵀ with the per-channel decay e^{γ_i - γ_j}, one 16-row block I of i at a time:
//   with R_I = γ of the token before block I (R_0 = 0),
//     (A_I)ᵀ[j][i] = Σ_d P_I[j][d] L[i][d],  P_I = k_j e^{R_I - γ_j},  L = k_i e^{γ_i - R_I}
//   L <= |k| always; P_I <= |k| for j < 16 I and <= e^{spread} |k| on the diagonal block
//   (spread = max_d R_I - R_{I+1}: <= 80 always with safe_gate). A diagonal block whose spread
//   exceeds kWideSpread ("wide": steep gates without safe_gate) is recomputed exactly per element.
//   P_I is built in registers (RS wgmma, m64n16: the 64 rows j against block I's 16 rows i) from
//   one per-element base k_j e^{R_{w+1} - γ_j} <= |k| of warp w's rows times a per-channel
//   e^{R_I - R_{w+1}} <= 1, so each element takes one exp for all four blocks;
//   Aqk; with the delta rule T = (I + tril(β A))⁻¹ (tri_inverse.cuh, compact form),
//   W = T diag(β) (r_k k ⊙ e^γ), U = T diag(β) v (RS wgmma, as the scalar gate's producer).
// Three CTAs an SM for both families (~75 KB of shared memory, 168 registers): the work is
// latency-bound, so resident warps set its speed. One tile per operand is reused as the work moves
// on (VectorGateSmem), and P_I has one register buffer, not two.
// The same quantities as chunk_prep's vector-gate form (chunk_prep.cuh), which other GPUs, fp16 and
// other head sizes keep.
// WIDE: the backward's float32 form on bf16 inputs (its recompute): every output in float32 and
// float32-grade (~16 mantissa bits), at the bf16 rate. The derived operands (P_I, L_q, L_k, W's B
// operand, T diag(β)) are carried as bf16 hi + lo halves and each product is hi·hi + hi·lo + lo·hi
// (two where one side is an input: T diag(β) v); q, k, v are exact in bf16
// (docs/chunked_backward.md, "Why the gate-parameter gradients need float32-grade operands";
// tools/precision's bf16x2). Two CTAs an SM (the low tiles add 32 KB).
#pragma once

#include "cuda/sm90/chunk_recurrence_wgmma.cuh"
#include "cuda/sm90/intra_chunk_scalar_delta.cuh"

namespace linattn::cuda::kern {
namespace wgmma_recurrence {

constexpr int kLdG = kK + 8;            // γ's row stride (floats): 8 rows' float2 loads on distinct banks
constexpr float kWideSpread = 80.f;     // e^80 |k| stays inside bfloat16's range
__host__ __device__ constexpr int rpair(int I, int J) { return I * (I - 1) / 2 + J; }  // 0 <= J < I <= 4

// One tile of each operand, reused as the chunk's work moves on (three CTAs an SM, ~75 KB):
//   q:   q rows, then L_q in place, then A's compact blocks (float);
//   k:   k rows (MN-major: the K-major operand of the products too, TokByKChFirst), then L_k in
//        place, then (delta rule) W's B operand r_k k ⊙ e^γ = r_k L_k e^{R_I} in place;
//   gam: the float32 raw gate, then γ; after the products T's off-diagonal blocks and X at the
//        front and (delta rule) the two v tiles at kVOff, loaded then (the inverse hides their latency).
template <class E>
struct alignas(1024) VectorGateSmem {
  alignas(1024) E q[kC * kK];
  alignas(1024) E k[kK * kC];
  alignas(1024) float gam[kC * kLdG];
  alignas(16) float er[10 * kK];      // e^{R_I - R_J}, J < I <= 4 (rpair)
  alignas(16) float ed[4 * kK];       // e^{min(R_I - R_{I+1}, kWideSpread)}: the diagonal block's factor
  alignas(16) float bet[kC];
  alignas(16) float rk[kC];
  alignas(16) float rq[kC];
  int wide[16];  // [warp][block]: some channel of the warp's 32 has a wide diagonal block
};
constexpr int kVOff = 12 * 1024;  // bytes into gam: past T's blocks and X, 1024-aligned for the swizzle

// WIDE: the low halves of L_q and L_k (then of W's B operand), in the q and k tiles' layouts.
template <class E>
struct alignas(1024) VectorGateWideSmem : VectorGateSmem<E> {
  alignas(1024) E qlo[kC * kK];
  alignas(1024) E klo[kK * kC];
};

// The two bf16 halves of x: hi = round(x), lo = round(x - hi).
template <class E>
__device__ __forceinline__ void split2(float x, E& hi, E& lo) {
  hi = E(x);
  lo = E(x - float(hi));
}

template <class T, bool DELTA, bool WIDE>
__global__ void __launch_bounds__(kThreads, WIDE ? 2 : 3) chunk_prep_vector_wgmma_kernel(const __grid_constant__ PrepParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using At = Atoms<T>;
  using E = typename At::E;
  using L = Layouts<E>;
  using Smem = std::conditional_t<WIDE, VectorGateWideSmem<E>, VectorGateSmem<E>>;
  using O = std::conditional_t<WIDE, float, T>;  // the outputs' element type
  static_assert(!WIDE || std::is_same_v<T, __nv_bfloat16>, "WIDE: bf16 inputs");
  static_assert(10 * kTriBlock * sizeof(float) <= sizeof(Smem::q), "A's blocks fit the q tile");
  static_assert(9 * kTriBlock * sizeof(float) <= kVOff && kVOff + 2 * kC * kVT * sizeof(E) <= sizeof(Smem::gam),
                "T's blocks and three warps' X, then the v tiles, fit γ's buffer");
  extern __shared__ unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_base_1024(smem_raw));
  const auto bc = ChunkParallelScheduler<>::block_coord();
  const int c = bc.c, hv = bc.hv, tid = threadIdx.x;
  const int w = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const ChunkInfo ci = p.chunks[c];
  const int t0 = ci.t0, Lc = ci.len, V = p.V, HV = p.HV;
  const int hk = hv / p.G;
  const int64_t blk = static_cast<int64_t>(c) * HV + hv;

  // ---- loads (cp.async): the float32 raw gate as its own group, then q and k rows, so the γ scan
  // below runs while q and k are still landing; β into registers
  const int64_t rs = static_cast<int64_t>(p.H) * kK;
  const int64_t r0 = static_cast<int64_t>(t0) * rs + static_cast<int64_t>(hk) * kK;
  const T* qg = static_cast<const T*>(p.q) + r0;
  const T* kg = static_cast<const T*>(p.k) + r0;
  const bool gf32 = p.g_dt == 2;
  const int64_t gs = static_cast<int64_t>(HV) * kK;
  const int64_t gb = static_cast<int64_t>(t0) * gs + static_cast<int64_t>(hv) * kK;
  if (gf32) {
    const float* gsrc = static_cast<const float*>(p.g) + gb;
#pragma unroll
    for (int it = 0; it < kC * (kK / 4) / kThreads; ++it) {
      const int e = it * kThreads + tid, i = e >> 5, d = (e & 31) * 4;
      const bool ok = i < Lc;
      cp_async16_zfill(sm.gam + i * kLdG + d, ok ? gsrc + i * gs + d : gsrc, ok);
    }
  }
  cp_commit();
  copy_kmajor<T, kC, kK, true>(reinterpret_cast<T*>(sm.q), qg, rs, tid, Lc);
  copy_mnmajor<T>(reinterpret_cast<T*>(sm.k), kg, rs, tid, Lc);
  cp_commit();
  float braw = 0.f;
  if (DELTA && tid < Lc && tid < kC) braw = load_any(p.beta, p.beta_dt, static_cast<int64_t>(t0 + tid) * HV + hv);
  const gate::HeadGate hg = prep_head_gate(p, hv);
  const float dtb = p.gate_kind != 0 && p.has_dtb ? load_any(p.dt_bias, p.dtb_dt, static_cast<int64_t>(hv) * kK + tid) : 0.f;
  cp_wait<1>();  // the gate's group
  warpgroup_sync<1>();

  // ---- γ: thread = channel d, the transform and a serial cumsum over the 64 tokens; R_I, the
  // factor tables, exp(γ_C), the wide flags
  {
    const int d = tid;
    if (!gf32) {  // 16-bit (or float64) raw gates: widened into γ's buffer first, so the scan has one form
#pragma unroll 4
      for (int i = 0; i < kC; ++i) sm.gam[i * kLdG + d] = i < Lc ? load_any(p.g, p.g_dt, gb + i * gs + d) : 0.f;
    }
    // The scan's code is kept small (four tokens a step, five gate variants): fully unrolled
    // it made the kernel ~30 K instructions and instruction-fetch stalls its largest cost. Rows
    // past the chunk's end hold zeros (their transforms discarded by the sum).
    gate::with_head_gate(hg, [&](auto kind, auto regular) {
      float run = 0.f;
#pragma unroll 1
      for (int i0 = 0; i0 < kC; i0 += 4) {
        float x[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) x[u] = sm.gam[(i0 + u) * kLdG + d];
        gate::head_gate_each<decltype(kind)::value, decltype(regular)::value, true>(hg, x, dtb);
        gate::running_sum_below(x, i0, Lc, run, [&](int u, float r) { sm.gam[(i0 + u) * kLdG + d] = r; });
      }
    });
    float R[5];
    R[0] = 0.f;
#pragma unroll
    for (int I = 0; I < 4; ++I) R[I + 1] = sm.gam[(16 * I + 15) * kLdG + d];  // this thread's own writes
#pragma unroll
    for (int I = 1; I <= 4; ++I)
#pragma unroll
      for (int J = 0; J < I; ++J) sm.er[rpair(I, J) * kK + d] = __expf(R[I] - R[J]);
#pragma unroll
    for (int I = 0; I < 4; ++I) {
      const float s = R[I] - R[I + 1];
      sm.ed[I * kK + d] = __expf(fminf(s, kWideSpread));
      const unsigned b = __ballot_sync(0xffffffffu, !(s <= kWideSpread));
      if (lane == 0) sm.wide[w * 4 + I] = b != 0u;
    }
    p.gexp[blk * kK + d] = expf(R[4]);
  }
  cp_wait<0>();  // q, k rows
  warpgroup_sync<1>();
  // l2 norms: thread = (k or q, row), four partial sums (a 128-long FMA chain otherwise); β
  {
    const int r = tid & (kC - 1);
    float s = 0.f;
    if (p.l2norm) {  // uniform
      float part[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int pc = 0; pc < kK / 8; ++pc) {
        const T* src = tid < kC ? reinterpret_cast<const T*>(sm.k) + mnmajor_off(8 * pc, r)
                                : reinterpret_cast<const T*>(sm.q) + kmajor_off<kC>(r, 8 * pc);
        const uint4 x = *reinterpret_cast<const uint4*>(src);
        const T* xe = reinterpret_cast<const T*>(&x);
#pragma unroll
        for (int m = 0; m < 8; ++m) {
          const float f = to_f(xe[m]);
          part[m & 3] = fmaf(f, f, part[m & 3]);
        }
      }
      s = (part[0] + part[1]) + (part[2] + part[3]);
    }
    const float rn = p.l2norm ? gate::l2_rnorm(s) : 1.f;
    if (tid < kC) sm.rk[r] = rn;
    else sm.rq[r] = rn;
    if (tid < kC) {
      float b = 0.f;
      if (tid < Lc) {
        b = braw;
        if (p.beta_mode != 0) b = (p.beta_mode == 2 ? 2.f : 1.f) * gate::sigmoid_precise(b);
      }
      sm.bet[tid] = b;
    }
  }
  warpgroup_sync<1>();

  // ---- warp w's rows j = 16 w .. 16 w + 15 in the A-operand order: base = k_j e^{R_{w+1} - γ_j}
  // (<= |k|), and KgT = r_k,j k_j e^{γ_C - γ_j} = r_k,j base e^{R_4 - R_{w+1}} to the workspace
  float base[kK / 2];
  {
    const float* Rn = sm.gam + (16 * w + 15) * kLdG;
    const float* ekg = w < 3 ? sm.er + rpair(4, w + 1) * kK : nullptr;
    O* kgt = static_cast<O*>(p.KgT) + blk * kK * kC;
    T* kgt_lo = !WIDE && p.KgT_lo ? static_cast<T*>(p.KgT_lo) + blk * kK * kC : nullptr;
    const float rkj[2] = {sm.rk[16 * w + g], sm.rk[16 * w + g + 8]};
    uint32_t kg_pend = 0, kg_pend_lo = 0;  // h = 0's words until h = 1's
#pragma unroll
    for (int i = 0; i < kK / 2; i += 2) {
      const int h = (i >> 1) & 1, j = 16 * w + g + 8 * h, d = 8 * (i >> 2) + 2 * t;
      const uint32_t kk = *reinterpret_cast<const uint32_t*>(reinterpret_cast<const T*>(sm.k) + mnmajor_off(d, j) + (d & 7));
      const T* ke = reinterpret_cast<const T*>(&kk);
      const float2 gj = *reinterpret_cast<const float2*>(sm.gam + j * kLdG + d);
      const float2 rn = *reinterpret_cast<const float2*>(Rn + d);
      base[i] = to_f(ke[0]) * __expf(rn.x - gj.x);
      base[i + 1] = to_f(ke[1]) * __expf(rn.y - gj.y);
      const float2 f = ekg ? *reinterpret_cast<const float2*>(ekg + d) : make_float2(1.f, 1.f);
      const float ka = base[i] * f.x * rkj[h], kb = base[i + 1] * f.y * rkj[h];
      if constexpr (WIDE) {  // float32 (d, j) and (d + 1, j)
        kgt[d * kC + j] = ka;
        kgt[(d + 1) * kC + j] = kb;
      } else if constexpr (DELTA) {
        // (j, d-pair) -> (d, j-pair): 4-byte stores along KgT's rows (the sector-pair form below
        // made KDA's prep slower: docs/backward_v2_plan.md, session 40)
        const int64_t off = (8 * (i >> 2) + g) * kC + 16 * w + 8 * h + 2 * t;
        *reinterpret_cast<uint32_t*>(kgt + off) = movmatrix_trans(pack2<T>(ka, kb));
        if (kgt_lo) {  // [backward, split] the low halves
          const uint32_t lo = pack2<T>(ka - to_f(from_f<T>(ka)), kb - to_f(from_f<T>(kb)));
          *reinterpret_cast<uint32_t*>(kgt_lo + off) = movmatrix_trans(lo);
        }
      } else {
        // (j, d-pair) -> (d, j-pair) by movmatrix; the two token blocks (h = 0, 1) of a row of 8
        // channels leave together, 8 bytes a lane (quad_sector_pair)
        const uint32_t x = movmatrix_trans(pack2<T>(ka, kb));
        const uint32_t xlo = kgt_lo ? movmatrix_trans(pack2<T>(ka - to_f(from_f<T>(ka)), kb - to_f(from_f<T>(kb)))) : 0u;
        if (h == 0) {
          kg_pend = x;
          kg_pend_lo = xlo;
        } else {
          const int64_t off = (8 * (i >> 2) + g) * kC + 16 * w + 4 * t;
          *reinterpret_cast<uint2*>(kgt + off) = quad_sector_pair(kg_pend, x, t);
          if (kgt_lo) *reinterpret_cast<uint2*>(kgt_lo + off) = quad_sector_pair(kg_pend_lo, xlo, t);  // [backward, split]
        }
      }
    }
  }
  warpgroup_sync<1>();  // every read of the raw k tile is done

  // ---- 16-byte pieces (token i, channels d0..d0+7): e1 = e^{γ_i - R_I} <= 1; L_q = q e1 and
  // L_k = k e1 for the products, Qg = s r_q q e^γ to the workspace, r_k k e^γ (W's B) in place of k
  {
    const int d0 = 8 * (tid & 15);
    O* qgw = static_cast<O*>(p.Qg) + blk * kC * kK;
#pragma unroll 2
    for (int it = 0; it < kC * kK / 8 / kThreads; ++it) {
      const int i = (tid >> 4) + 8 * it, I = it >> 1;  // i >> 4 == it >> 1
      T* qp = reinterpret_cast<T*>(sm.q) + kmajor_off<kC>(i, d0);
      T* kp = reinterpret_cast<T*>(sm.k) + mnmajor_off(d0, i);
      const uint4 qv = *reinterpret_cast<const uint4*>(qp);
      const uint4 kv = *reinterpret_cast<const uint4*>(kp);
      const T* qe = reinterpret_cast<const T*>(&qv);
      const T* ke = reinterpret_cast<const T*>(&kv);
      float gm[8], rr[8], e0[8];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float4 a = *reinterpret_cast<const float4*>(sm.gam + i * kLdG + d0 + 4 * h);
        float4 b = make_float4(0.f, 0.f, 0.f, 0.f), e = make_float4(1.f, 1.f, 1.f, 1.f);
        if (I > 0) {
          b = *reinterpret_cast<const float4*>(sm.gam + (16 * I - 1) * kLdG + d0 + 4 * h);
          e = *reinterpret_cast<const float4*>(sm.er + rpair(I, 0) * kK + d0 + 4 * h);
        }
        gm[4 * h] = a.x; gm[4 * h + 1] = a.y; gm[4 * h + 2] = a.z; gm[4 * h + 3] = a.w;
        rr[4 * h] = b.x; rr[4 * h + 1] = b.y; rr[4 * h + 2] = b.z; rr[4 * h + 3] = b.w;
        e0[4 * h] = e.x; e0[4 * h + 1] = e.y; e0[4 * h + 2] = e.z; e0[4 * h + 3] = e.w;
      }
      const float sq = p.scale * sm.rq[i];
      uint4 lq, lk, qo, lqlo, lklo;
      uint32_t* lqw = reinterpret_cast<uint32_t*>(&lq);
      uint32_t* lkw = reinterpret_cast<uint32_t*>(&lk);
      uint32_t* qow = reinterpret_cast<uint32_t*>(&qo);
      float qf[8];  // WIDE: Qg in float32
#pragma unroll
      for (int m = 0; m < 8; m += 2) {
        const float e1a = __expf(gm[m] - rr[m]), e1b = __expf(gm[m + 1] - rr[m + 1]);
        const float qa = to_f(qe[m]) * e1a, qb = to_f(qe[m + 1]) * e1b;
        const float ka = to_f(ke[m]) * e1a, kb = to_f(ke[m + 1]) * e1b;
        lqw[m / 2] = pack2<T>(qa, qb);
        lkw[m / 2] = pack2<T>(ka, kb);
        if constexpr (WIDE) {
          reinterpret_cast<uint32_t*>(&lqlo)[m / 2] = pack2<T>(qa - to_f(from_f<T>(qa)), qb - to_f(from_f<T>(qb)));
          reinterpret_cast<uint32_t*>(&lklo)[m / 2] = pack2<T>(ka - to_f(from_f<T>(ka)), kb - to_f(from_f<T>(kb)));
          qf[m] = qa * e0[m] * sq;
          qf[m + 1] = qb * e0[m + 1] * sq;
        } else {
          qow[m / 2] = pack2<T>(qa * e0[m] * sq, qb * e0[m + 1] * sq);
        }
      }
      *reinterpret_cast<uint4*>(qp) = lq;
      if constexpr (DELTA) *reinterpret_cast<uint4*>(kp) = lk;
      if constexpr (WIDE) {
        const int off_q = kmajor_off<kC>(i, d0), off_k = mnmajor_off(d0, i);
        *reinterpret_cast<uint4*>(reinterpret_cast<T*>(sm.qlo) + off_q) = lqlo;
        if constexpr (DELTA) *reinterpret_cast<uint4*>(reinterpret_cast<T*>(sm.klo) + off_k) = lklo;
        *reinterpret_cast<float4*>(qgw + i * kK + d0) = make_float4(qf[0], qf[1], qf[2], qf[3]);
        *reinterpret_cast<float4*>(qgw + i * kK + d0 + 4) = make_float4(qf[4], qf[5], qf[6], qf[7]);
      } else {
        *reinterpret_cast<uint4*>(qgw + i * kK + d0) = qo;
      }
    }
  }
  cutlass::arch::fence_view_async_shared();  // L_q, L_k -> the wgmmas
  warpgroup_sync<1>();

  // ---- (A_I)ᵀ for the four row blocks: RS wgmma m64n16k128, P_I from registers, L's block-I rows
  auto mma16 = make_tiled_mma(typename At::N16{});
  auto thr16 = mma16.get_thread_slice(tid);
  Tensor sLk = make_tensor(make_smem_ptr(sm.k), typename L::TokByKChFirst{});
  Tensor sLq = make_tensor(make_smem_ptr(sm.q), typename L::TokByK{});
  using Acc16 = decltype(partition_fragment_C(mma16, Shape<_64, _16>{}));
  using FragA = decltype(make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kK / 16>>{}));
  Acc16 accK[4], accQ[4];
  // One P_I register buffer, built after the previous block's products have read it: with the
  // delta rule its registers hold accK; without it a second buffer (to build P_I while the previous
  // products run) spilled base[] at three CTAs' 168 registers and was 4% slower (GLA, H100, session
  // 24). WIDE: one buffer of hi + lo halves.
  FragA Pa;
  FragA Plo;  // WIDE's low halves (unused otherwise)
  // P_I's build is one runtime loop over the blocks (its code once, not four times: this kernel is
  // straight-line code at two or three CTAs an SM, and instruction fetch was a third of the WIDE
  // form's stall cycles, session 34); the products, which need I at compile time for the
  // accumulators and the B tiles, are a switch.
  auto gemms = [&](auto Ic) {
    constexpr int I = decltype(Ic)::value;
    FragA& A = Pa;
    [[maybe_unused]] FragA& Alo = Plo;
    Tensor tBk = thr16.partition_fragment_B(local_tile(sLk, Shape<_16, Int<kK>>{}, make_coord(I, 0)));
    Tensor tBq = thr16.partition_fragment_B(local_tile(sLq, Shape<_16, Int<kK>>{}, make_coord(I, 0)));
    fence_regs(A);
    if constexpr (WIDE) fence_regs(Alo);
    fence_regs(accK[I]);
    fence_regs(accQ[I]);
    warpgroup_arrive();
    if constexpr (DELTA) wg_gemm<true>(mma16, A, tBk, accK[I]);
    wg_gemm<true>(mma16, A, tBq, accQ[I]);
    if constexpr (WIDE) {  // + hi·lo + lo·hi
      Tensor sLklo = make_tensor(make_smem_ptr(sm.klo), typename L::TokByKChFirst{});
      Tensor sLqlo = make_tensor(make_smem_ptr(sm.qlo), typename L::TokByK{});
      Tensor tBklo = thr16.partition_fragment_B(local_tile(sLklo, Shape<_16, Int<kK>>{}, make_coord(I, 0)));
      Tensor tBqlo = thr16.partition_fragment_B(local_tile(sLqlo, Shape<_16, Int<kK>>{}, make_coord(I, 0)));
      if constexpr (DELTA) {
        wg_gemm<false>(mma16, A, tBklo, accK[I]);
        wg_gemm<false>(mma16, Alo, tBk, accK[I]);
      }
      wg_gemm<false>(mma16, A, tBqlo, accQ[I]);
      wg_gemm<false>(mma16, Alo, tBq, accQ[I]);
    }
    warpgroup_commit_batch();
  };
  auto block = [&](int I) {
    FragA& A = Pa;
    [[maybe_unused]] FragA& Alo = Plo;
    // w > I: zero rows (j past block I); w == I: the diagonal block's factor; w < I: e^{R_I - R_{w+1}}
    const float* f = w == I ? sm.ed + I * kK : (w + 1 < I ? sm.er + rpair(I, w + 1) * kK : nullptr);
    if (w <= I) {  // warp-uniform
#pragma unroll
      for (int i = 0; i < kK / 2; i += 2) {
        const int d = 8 * (i >> 2) + 2 * t;
        const float2 fv = f ? *reinterpret_cast<const float2*>(f + d) : make_float2(1.f, 1.f);
        if constexpr (WIDE) {
          split2(base[i] * fv.x, A(i), Alo(i));
          split2(base[i + 1] * fv.y, A(i + 1), Alo(i + 1));
        } else {
          A(i) = E(base[i] * fv.x);
          A(i + 1) = E(base[i + 1] * fv.y);
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < kK / 2; ++i) {
        A(i) = E(0.f);
        if constexpr (WIDE) Alo(i) = E(0.f);
      }
    }
    switch (I) {
      case 0: gemms(Int<0>{}); break;
      case 1: gemms(Int<1>{}); break;
      case 2: gemms(Int<2>{}); break;
      default: gemms(Int<3>{}); break;
    }
    warpgroup_wait<0>();  // block I's products have read the buffer
  };
  // Every form loops, the delta rule's 16-bit forward too: at its 168 registers (three CTAs an SM)
  // it spills 28 bytes (a 32-byte stack frame; `-Xptxas -v`, with the one-body wide block below),
  // the two together took the static code from 10616 to 8056 instructions.
#pragma unroll 1
  for (int I = 0; I < 4; ++I) block(I);
#pragma unroll
  for (int I = 0; I < 4; ++I) {
    fence_regs(accK[I]);
    fence_regs(accQ[I]);
  }

  // ---- a wide diagonal block (warp w's, block w): exact per-element decays e^{γ_i - γ_j}, the
  // raw rows read from global memory 8 channels at a time (16-byte loads), γ from shared memory.
  // One body for the four warps (block w at run time), its results moved into accK[w] / accQ[w]
  // by a switch: unrolled over the blocks, each warp ran its own copy of ~2.3 K instructions.
  if (sm.wide[w] | sm.wide[4 + w] | sm.wide[8 + w] | sm.wide[12 + w]) {  // warp-uniform
    float sk[8] = {}, sqv[8] = {};
    const int j0 = 16 * w + g, i0 = 16 * w + 2 * t;  // rows j0 + 8 h; columns i0 + 8 (m >> 1) + (m & 1)
#pragma unroll 1
    for (int d0 = 0; d0 < kK; d0 += 8) {
      uint4 kj[2], ki[4], qi[4];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int j = j0 + 8 * h;
        kj[h] = j < Lc ? __ldg(reinterpret_cast<const uint4*>(kg + j * rs + d0)) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const int i = i0 + 8 * (m >> 1) + (m & 1);
        ki[m] = i < Lc ? __ldg(reinterpret_cast<const uint4*>(kg + i * rs + d0)) : make_uint4(0, 0, 0, 0);
        qi[m] = i < Lc ? __ldg(reinterpret_cast<const uint4*>(qg + i * rs + d0)) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int cc = 0; cc < 8; ++cc) {
        float x[2], gi[4];
#pragma unroll
        for (int h = 0; h < 2; ++h) x[h] = to_f(reinterpret_cast<const T*>(&kj[h])[cc]);
#pragma unroll
        for (int m = 0; m < 4; ++m) gi[m] = sm.gam[(i0 + 8 * (m >> 1) + (m & 1)) * kLdG + d0 + cc];
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const int h = (e >> 1) & 1, m = 2 * (e >> 2) + (e & 1);
          const int j = j0 + 8 * h, i = i0 + 8 * (e >> 2) + (e & 1);
          const float gj = sm.gam[j * kLdG + d0 + cc];
          const float y = j <= i ? __expf(gi[m] - gj) * x[h] : 0.f;
          sk[e] = fmaf(to_f(reinterpret_cast<const T*>(&ki[m])[cc]), y, sk[e]);
          sqv[e] = fmaf(to_f(reinterpret_cast<const T*>(&qi[m])[cc]), y, sqv[e]);
        }
      }
    }
    auto put = [&](auto Ic) {
      constexpr int I = decltype(Ic)::value;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        accK[I](e) = sk[e];
        accQ[I](e) = sqv[e];
      }
    };
    switch (w) {
      case 0: put(Int<0>{}); break;
      case 1: put(Int<1>{}); break;
      case 2: put(Int<2>{}); break;
      default: put(Int<3>{}); break;
    }
  }
  warpgroup_sync<1>();  // every warp's products have read L_q, L_k and γ: their tiles are free

  E* v0 = reinterpret_cast<E*>(reinterpret_cast<unsigned char*>(sm.gam) + kVOff);
  E* v1 = v0 + kC * kVT;
  if constexpr (DELTA) {
    // the v tiles into γ's buffer behind T's blocks (landed by the time the inverse is done), and
    // W's B operand in place of L_k: r_k,i L_k e^{R_I} = r_k,i k_i e^{γ_i}
    const int64_t vs = static_cast<int64_t>(HV) * V;
    const T* vrow = static_cast<const T*>(p.v) + static_cast<int64_t>(t0) * vs + static_cast<int64_t>(hv) * V;
    copy_kmajor<T, kC, kVT, true>(reinterpret_cast<T*>(v0), vrow, vs, tid, Lc);
    if (V > kVT) copy_kmajor<T, kC, kVT, true>(reinterpret_cast<T*>(v1), vrow + kVT, vs, tid, Lc);
    cp_commit();
    const int d0 = 8 * (tid & 15);
#pragma unroll 2
    for (int it = 0; it < kC * kK / 8 / kThreads; ++it) {
      const int i = (tid >> 4) + 8 * it, I = it >> 1;  // i >> 4 == it >> 1
      T* kp = reinterpret_cast<T*>(sm.k) + mnmajor_off(d0, i);
      uint4 kv = *reinterpret_cast<const uint4*>(kp);
      uint32_t* kw = reinterpret_cast<uint32_t*>(&kv);
      const float rki = sm.rk[i];
      float f[8];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float4 e = I > 0 ? *reinterpret_cast<const float4*>(sm.er + rpair(I, 0) * kK + d0 + 4 * h)
                               : make_float4(1.f, 1.f, 1.f, 1.f);
        f[4 * h] = e.x * rki; f[4 * h + 1] = e.y * rki; f[4 * h + 2] = e.z * rki; f[4 * h + 3] = e.w * rki;
      }
      if constexpr (WIDE) {  // from L_k's hi + lo, into both halves again
        T* klp = reinterpret_cast<T*>(sm.klo) + mnmajor_off(d0, i);
        uint4 lv = *reinterpret_cast<const uint4*>(klp);
        uint32_t* lw = reinterpret_cast<uint32_t*>(&lv);
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const T* x = reinterpret_cast<const T*>(&kw[m]);
          const T* y = reinterpret_cast<const T*>(&lw[m]);
          const float a = (to_f(x[0]) + to_f(y[0])) * f[2 * m], b = (to_f(x[1]) + to_f(y[1])) * f[2 * m + 1];
          kw[m] = pack2<T>(a, b);
          lw[m] = pack2<T>(a - to_f(from_f<T>(a)), b - to_f(from_f<T>(b)));
        }
        *reinterpret_cast<uint4*>(klp) = lv;
      } else {
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const T* x = reinterpret_cast<const T*>(&kw[m]);
          kw[m] = pack2<T>(to_f(x[0]) * f[2 * m], to_f(x[1]) * f[2 * m + 1]);
        }
      }
      *reinterpret_cast<uint4*>(kp) = kv;
    }
    cutlass::arch::fence_view_async_shared();  // W's B -> its wgmma
  }

  // ---- epilogue: Aqk = s r_q,i r_k,j (Q Kᵀ ⊙ D) (j <= i) to the workspace, transposed back by
  // movmatrix; A = β_i r_k,i r_k,j (K Kᵀ ⊙ D) (j < i) into the compact blocks
  float* Ab = reinterpret_cast<float*>(sm.q);
  float* Tb = sm.gam;
  float* X = sm.gam + 6 * kTriBlock + w * kTriBlock;
  {
    O* aq = static_cast<O*>(p.Aqk) + blk * kC * kC;
    const float rkj[2] = {sm.rk[16 * w + g], sm.rk[16 * w + g + 8]};
    uint32_t aq_pend = 0;
#pragma unroll
    for (int I = 0; I < 4; ++I) {
#pragma unroll
      for (int e = 0; e < 8; e += 2) {
        const int h = (e >> 1) & 1, j = 16 * w + g + 8 * h, i = 16 * I + 8 * (e >> 2) + 2 * t;
        const float2 rq2 = *reinterpret_cast<const float2*>(sm.rq + i);
        const float qa = j <= i ? p.scale * rq2.x * rkj[h] * accQ[I](e) : 0.f;
        const float qb = j <= i + 1 ? p.scale * rq2.y * rkj[h] * accQ[I](e + 1) : 0.f;
        if constexpr (WIDE) {  // float32 (i, j) and (i + 1, j)
          aq[i * kC + j] = qa;
          aq[(i + 1) * kC + j] = qb;
        } else if constexpr (DELTA) {  // 4-byte stores (as KgT's, above)
          *reinterpret_cast<uint32_t*>(aq + (16 * I + 8 * (e >> 2) + g) * kC + 16 * w + 8 * h + 2 * t) =
              movmatrix_trans(pack2<T>(qa, qb));
        } else {  // h = 0's word waits for h = 1's: the row's 16 columns leave together
          const uint32_t x = movmatrix_trans(pack2<T>(qa, qb));
          if (h == 0) aq_pend = x;
          else
            *reinterpret_cast<uint2*>(aq + (16 * I + 8 * (e >> 2) + g) * kC + 16 * w + 4 * t) = quad_sector_pair(aq_pend, x, t);
        }
        if (DELTA && w <= I) {  // warp-uniform: block (I, w) of the lower triangle
          const float2 b2 = *reinterpret_cast<const float2*>(sm.bet + i);
          const float2 k2 = *reinterpret_cast<const float2*>(sm.rk + i);
          float* dst = Ab + tri_block(I, w) + (i & 15) * kTriLd + (j & 15);
          dst[0] = j < i ? b2.x * k2.x * rkj[h] * accK[I](e) : 0.f;
          dst[kTriLd] = j < i + 1 ? b2.y * k2.y * rkj[h] * accK[I](e + 1) : 0.f;
        }
      }
    }
  }
  if constexpr (!DELTA) return;  // GLA: Qg, KgT, Aqk and exp(γ_C) are all it needs
  warpgroup_sync<1>();

  // ---- T = (I + A)⁻¹: diagonal blocks, then three levels of off-diagonal blocks
  if (tid < kC) tri_diag_compact(Ab, tid >> 4, tid & 15);
  warpgroup_sync<1>();
  if (w < 3) tri_offdiag_compact<false>(Ab, Tb, X, w + 1, w);
  warpgroup_sync<1>();
  if (w < 2) tri_offdiag_compact<false>(Ab, Tb, X, w + 2, w);
  warpgroup_sync<1>();
  if (w == 0) tri_offdiag_compact<false>(Ab, Tb, X, 3, 0);
  cp_wait<0>();  // the v tiles
  cutlass::arch::fence_view_async_shared();
  warpgroup_sync<1>();
  if (p.Ainv) store_inverse<O>(Ab, Tb, w, g, t, static_cast<O*>(p.Ainv) + blk * kC * kC);

  // ---- W = (T diag(β)) (r_k k ⊙ e^γ) and U = (T diag(β)) v: one register A operand for both
  // (WIDE: with its low halves)
  Tensor Tv = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kC / 16>>{});
  Tensor Tvlo = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kC / 16>>{});
  if constexpr (WIDE) scaled_inverse_a<true>(Ab, Tb, w, g, t, Tv, sm.bet, &Tvlo, nullptr);
  else scaled_inverse_a(Ab, Tb, w, g, t, Tv, sm.bet, static_cast<decltype(Tv)*>(nullptr), nullptr);
  auto mmaW = make_tiled_mma(typename At::N128MN{});
  auto mmaU = make_tiled_mma(typename At::N64MN{});
  Tensor tKw = mmaW.get_thread_slice(tid).partition_fragment_B(make_tensor(make_smem_ptr(sm.k), typename L::ChByTokMN{}));
  Tensor tV0 = mmaU.get_thread_slice(tid).partition_fragment_B(make_tensor(make_smem_ptr(v0), typename L::VcByTokMN{}));
  Tensor tV1 = mmaU.get_thread_slice(tid).partition_fragment_B(make_tensor(make_smem_ptr(v1), typename L::VcByTokMN{}));
  Tensor accW = partition_fragment_C(mmaW, Shape<_64, Int<kK>>{});
  Tensor accU = partition_fragment_C(mmaU, Shape<_64, _64>{});
  fence_regs(Tv);
  if constexpr (WIDE) fence_regs(Tvlo);
  fence_regs(accW);
  fence_regs(accU);
  warpgroup_arrive();
  wg_gemm<true>(mmaW, Tv, tKw, accW);
  wg_gemm<true>(mmaU, Tv, tV0, accU);
  if constexpr (WIDE) {
    Tensor tKwlo = mmaW.get_thread_slice(tid).partition_fragment_B(make_tensor(make_smem_ptr(sm.klo), typename L::ChByTokMN{}));
    wg_gemm<false>(mmaW, Tv, tKwlo, accW);
    wg_gemm<false>(mmaW, Tvlo, tKw, accW);
    wg_gemm<false>(mmaU, Tvlo, tV0, accU);
  }
  warpgroup_commit_batch();
  warpgroup_wait<0>();
  fence_regs(accW);
  fence_regs(accU);
  O* Wo = static_cast<O*>(p.W) + blk * kC * kK;
  O* Uo = static_cast<O*>(p.U) + blk * kC * V;
  // an accumulator's (row, even column) pairs to a row-major output: packed 16-bit, or float2 (WIDE)
  auto store_acc = [&](const auto& acc, O* out, int ld) {
    if constexpr (WIDE) {
#pragma unroll
      for (int i = 0; i < size(acc); i += 2)
        *reinterpret_cast<float2*>(out + acc_row(w, g, i) * ld + acc_col(t, i)) = make_float2(acc(i), acc(i + 1));
    } else {
      acc_pairs<T>(acc, w, g, t, [&](int r, int cc, uint32_t x) { *reinterpret_cast<uint32_t*>(out + r * ld + cc) = x; });
    }
  };
  store_acc(accW, Wo, kK);
  store_acc(accU, Uo, V);
  T* Ulo = !WIDE && p.U_lo ? static_cast<T*>(p.U_lo) + blk * kC * V : nullptr;  // [backward, split]
  if (Ulo) acc_lo_pairs<T>(accU, w, g, t, [&](int r, int cc, uint32_t x) { *reinterpret_cast<uint32_t*>(Ulo + r * V + cc) = x; });
  if (V > kVT) {
    fence_regs(accU);
    warpgroup_arrive();
    wg_gemm<true>(mmaU, Tv, tV1, accU);
    if constexpr (WIDE) wg_gemm<false>(mmaU, Tvlo, tV1, accU);
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    fence_regs(accU);
    store_acc(accU, Uo + kVT, V);
    if (Ulo)
      acc_lo_pairs<T>(accU, w, g, t, [&](int r, int cc, uint32_t x) { *reinterpret_cast<uint32_t*>(Ulo + r * V + kVT + cc) = x; });
  }
#endif
}

template <class T, bool DELTA, bool WIDE = false>
cudaError_t launch_prep_vector_wgmma(const PrepParams& p, cudaStream_t s) {
  auto kernel = chunk_prep_vector_wgmma_kernel<T, DELTA, WIDE>;
  using E = typename Atoms<T>::E;
  constexpr int smem = smem_bytes_of<std::conditional_t<WIDE, VectorGateWideSmem<E>, VectorGateSmem<E>>>();
  static_assert((WIDE ? 2 : 3) * (smem + 1024) <= 228 * 1024, "three CTAs an SM (WIDE: two), each with its 1 KB reserved");
  return launch_chunk_heads(kernel, smem, p, s);
}

}  // namespace wgmma_recurrence
}  // namespace linattn::cuda::kern

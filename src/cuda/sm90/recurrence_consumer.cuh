// The consumer side of the forward's wgmma kernels: one warpgroup runs the sequential recurrence of
// one (sequence, value head, 64-column V tile) over the chunk operands a producer stages, with the
// state never leaving registers:
//   per chunk  V_new = U - W S,  O = Qg S + Aqk V_new,  S = exp(γ_C) S + KgT V_new
// (without the delta rule V_new = V and W is not read).
//
// Why transposed: every product of the chunk has S or V_new on its left once written as
//   V_newᵀ = Uᵀ - Sᵀ Wᵀ,   Oᵀ = Sᵀ Qgᵀ + V_newᵀ Aqkᵀ,   Sᵀ = Sᵀ diag(e^γ_C) + V_newᵀ Kg,
// and a wgmma takes its A operand from registers in exactly the layout of an accumulator
// (16-bit, the same element order). So Sᵀ (64 columns x K, the float32 accumulator of an m64n128
// wgmma) and V_newᵀ feed the next products straight from registers, and the chunk's operands W,
// Qg, Kg, Aqk are B operands read from shared memory once per warpgroup instruction.
//
// Raw-row mode (scalar gate: GDN, simple GLA): raw q rows with O's row factors and raw k rows
// (an MN-major B operand: channel contiguous) against f ⊙ V_new.
#pragma once

#include "cuda/common/chunk_fwd.hpp"
#include "cuda/sm90/wgmma_tiles.cuh"

namespace linattn::cuda::kern {
namespace wgmma_recurrence {

// What a pass writes (the kernel's and the consumer's template argument).
enum class PassOut {
  kOutput,      // the forward: O per chunk, the final states
  kTransition,  // the sequence-split pass's first kernel (docs/sequence_split.md): the state update
                // alone, the segments' end states
  kRecompute,   // the backward's recompute: the state before each chunk (float32, StateParams::h)
                // and V_new (StateParams::vnew); with StateParams::U_lo, U and V_new as hi + lo
  kSaved,       // a forward that fills a saved buffer (disable_recompute): kRecompute's writes and
                // O in the same pass (no 16-bit copy of the states for a separate output kernel)
};

// What a pass of kind OUT computes: O (the forward, the saving forward), the recompute's writes.
constexpr bool writes_o(PassOut out) { return out == PassOut::kOutput || out == PassOut::kSaved; }
constexpr bool writes_recompute(PassOut out) { return out == PassOut::kRecompute || out == PassOut::kSaved; }

// One stage of the chunk operands the consumer reads (bf16 / fp16 E): 65 KB with the delta rule.
template <class E, bool DELTA>
struct alignas(1024) RecurrenceStage {
  static constexpr bool kLo = false;
  alignas(1024) E w[DELTA ? kC * kK : 8];  // W (tok, ch): kmajor_off<64>
  alignas(1024) E q[kC * kK];              // Qg or the raw q rows (tok, ch): kmajor_off<64>
  alignas(1024) E k[kK * kC];              // KgT (ch, tok): kmajor_off<128>; raw k rows: mnmajor_off
  alignas(1024) E a[kC * kC];              // Aqk (tok, tok'): kmajor_off<64>
  alignas(1024) E u[kC * kVT];             // U or V, this CTA's 64 columns (tok, vcol): kmajor_off<64>
  alignas(16) float ge[kK];                // exp(γ_C) per channel
  alignas(16) float rf[2 * kC];            // raw-row mode: O's row factors [0, 64), V_new's [64, 128)
};

// The recompute's stage (no O: no Qg, Aqk, row factors; U's low half with the delta rule): 49 KB.
template <class E, bool DELTA>
struct alignas(1024) RecomputeStage {
  static constexpr bool kLo = DELTA;
  alignas(1024) E w[DELTA ? kC * kK : 8];
  alignas(1024) E k[kK * kC];
  alignas(1024) E u[kC * kVT];
  alignas(1024) E ulo[DELTA ? kC * kVT : 8];  // U's low half (the split form), as u
  alignas(16) float ge[kK];
};

// The saving forward's stage: the forward's operands and, with the delta rule, U's low half (the
// split form's V_new low half goes to the saved buffer): 73 KB with the delta rule.
template <class E, bool DELTA>
struct alignas(1024) SavedStage : RecurrenceStage<E, DELTA> {
  static constexpr bool kLo = DELTA;
  alignas(1024) E ulo[DELTA ? kC * kVT : 8];
};

template <class E, bool DELTA, PassOut OUT>
using StageOf = std::conditional_t<OUT == PassOut::kRecompute, RecomputeStage<E, DELTA>,
                                   std::conditional_t<OUT == PassOut::kSaved, SavedStage<E, DELTA>, RecurrenceStage<E, DELTA>>>;

// The state of one chain and the chunk step. Constructed by the 128 threads of the consumer
// warpgroup (tid: the index within it).
// OUT without O (writes_o): Qg S, Aqk V_new and the O stores dropped. SPLIT (the recompute's
// split form, U and V_new as hi + lo) is a compile-time choice: a runtime test between a
// warpgroup's wgmmas made ptxas serialise them (C7520, a divergent path). STAGE_O: a chunk of 64
// tokens leaves O in the stage's U / V tile (kmajor_off<64>, (token, V column)) for the caller to
// store by TMA, instead of storing O's rows itself (shorter chunks still do: a whole tile would
// write the next sequence's rows); the tile is free once V_new is in registers, and each warp
// reads and writes only its own 16 columns of it.
template <class T, bool DELTA, bool RAW, PassOut OUT = PassOut::kOutput, bool SPLIT = false, bool STAGE_O = false>
struct RecurrenceConsumer {
  static constexpr bool kO = writes_o(OUT);
  static constexpr bool kRe = writes_recompute(OUT);
  using A = Atoms<T>;
  using E = typename A::E;
  using L = Layouts<E>;
  using Stage = StageOf<E, DELTA, OUT>;
  using Mma64 = decltype(make_tiled_mma(typename A::N64{}));
  using MmaS = decltype(make_tiled_mma(std::conditional_t<RAW, typename A::N128MN, typename A::N128K>{}));
  using AccS = decltype(partition_fragment_C(std::declval<MmaS>(), Shape<_64, Int<kK>>{}));
  using Acc64 = decltype(partition_fragment_C(std::declval<Mma64>(), Shape<_64, _64>{}));

  Mma64 mma64;
  MmaS mmaS;
  AccS S;    // Sᵀ: (V column, channel)
  Acc64 P;   // Sᵀ Wᵀ: (V column, token)
  Acc64 Oi;  // Oᵀ: (V column, token)
  int tid, warp, g, t;

  __device__ static uint32_t raw_pair(E a, E b) {
    return static_cast<uint32_t>(a.raw()) | (static_cast<uint32_t>(b.raw()) << 16);
  }
  __device__ int row_of(int i) const { return acc_row(warp, g, i); }
  __device__ int col_of(int i) const { return acc_col(t, i); }
  // A per-column factor f[col] on accumulator-ordered x: elements 4 j .. 4 j + 3 are columns
  // (c, c + 1) of rows r and r + 8, so one 8-byte load serves four (c even, f 8-byte aligned).
  template <class Frag>
  __device__ __forceinline__ void scale_cols(Frag& x, const float* f) const {
#pragma unroll
    for (int i = 0; i < size(x); i += 4) {
      const float2 c = *reinterpret_cast<const float2*>(f + col_of(i));
      x(i) *= c.x;
      x(i + 1) *= c.y;
      x(i + 2) *= c.x;
      x(i + 3) *= c.y;
    }
  }

  // Sᵀ from h0 (zero without it or with read_h0 false), for value columns v0..v0+63 of head hv of
  // map entry n.
  __device__ __forceinline__ void init(const StateParams& p, int n, int hv, int v0, int tid_, bool read_h0 = true) {
    tid = tid_;
    warp = tid >> 5;
    g = (tid & 31) >> 2;
    t = tid & 3;
    S = partition_fragment_C(mmaS, Shape<_64, Int<kK>>{});
    P = partition_fragment_C(mma64, Shape<_64, _64>{});
    Oi = partition_fragment_C(mma64, Shape<_64, _64>{});
    const int64_t base = (static_cast<int64_t>(n) * p.HV + hv) * kK * p.V;
#pragma unroll
    for (int i = 0; i < size(S); ++i)
      S(i) = read_h0 && p.h0 ? load_state(p.h0, p.h0_dt, base + kern::state_index<kK>(p.V, p.v_first, col_of(i), v0 + row_of(i))) : 0.f;
  }
  // A transition tile (the sequence-split pass's M): Sᵀ = rows j0..j0+63 of the identity, so that
  // the pass carries columns j0.. of M with S_end = M S_start + C.
  __device__ __forceinline__ void init_identity(int j0) {
#pragma unroll
    for (int i = 0; i < size(S); ++i) S(i) = col_of(i) == j0 + row_of(i) ? 1.f : 0.f;
  }
  // The final state of sequence n.
  __device__ __forceinline__ void store(const StateParams& p, int n, int hv, int v0) {
    if (!p.ht) return;
    const int64_t base = (static_cast<int64_t>(n) * p.HV + hv) * kK * p.V;
#pragma unroll
    for (int i = 0; i < size(S); ++i) store_state(p.ht, p.ht_dt, base + kern::state_index<kK>(p.V, p.v_first, col_of(i), v0 + row_of(i)), S(i));
  }
  // The state map's final state M of sequence n, columns j0.. (StateParams::map_ht).
  __device__ __forceinline__ void store_map(const StateParams& p, int n, int hv, int j0) {
    if (!p.map_ht) return;
    const int64_t base = (static_cast<int64_t>(n) * p.HV + hv) * kK * kK;
#pragma unroll
    for (int i = 0; i < size(S); ++i) p.map_ht[base + kern::state_index<kK>(kK, p.v_first, col_of(i), j0 + row_of(i))] = S(i);
  }
  // The sequence-split pass: the end state of map entry n into columns col0.. of its transition
  // [K][V + K] ([K][V] without the delta rule; StateParams::trans).
  __device__ __forceinline__ void store_trans(const StateParams& p, int n, int hv, int col0) {
    const int W = p.V + (DELTA ? kK : 0);
    float* base = p.trans + (static_cast<int64_t>(n) * p.HV + hv) * kK * W + col0;
#pragma unroll
    for (int i = 0; i < size(S); ++i) base[static_cast<int64_t>(col_of(i)) * W + row_of(i)] = S(i);
  }

  // The recompute's outputs for one chunk: the state before it (float32, StateParams::h's layout,
  // from this CTA's column v0) and V_new's 64 rows at column v0 (row stride V), its low halves
  // where vnew_lo is set (the split form: then U's low half is staged too).
  struct RecomputeOut {
    float* h;       // the state at (channel 0, column v0): + state_index<kK>(V, v_first, ch, column)
                    // (null when h16 is set)
    T* vnew;        // row 0, column v0
    T* vnew_lo;     // null: not split
    T* hs;          // null, or the 16-bit state before the chunk at its row v0 ([V][K])
    int V, v_first;
    T* h16;         // or the state in the compute type, [K][V] (row stride V), at (channel 0, column v0)
  };

  // A (V column, token) tile in the accumulators' order as token rows: pair(i) packs elements i and
  // i + 1; each 8x8 block is transposed in registers (a lane then holds two adjacent columns of one
  // token) and a token's two blocks are exchanged across the quad (quad_sector_pair), so that a
  // lane stores 8 bytes and a quad the warp's whole 32-byte sector of the row; rows below Lc only;
  // predicated, no branch.
  // NB: the accumulator's 8-column blocks (kC / 8 for a token tile, kK / 8 for the state's channels).
  template <int NB = kC / 8, class Pair>
  __device__ __forceinline__ void store_rows(Pair&& pair, T* row0, int64_t stride, int Lc) const {
    T* row = row0 + static_cast<int64_t>(g) * stride + 16 * warp + 4 * t;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      const uint2 x = quad_sector_pair(movmatrix_trans(pair(4 * nb)), movmatrix_trans(pair(4 * nb + 2)), t);
      asm volatile(
          "{\n .reg .pred p;\n setp.lt.s32 p, %0, %1;\n @p st.global.v2.b32 [%2], {%3, %4};\n}\n" ::"r"(8 * nb + g),
          "r"(Lc), "l"(row + 8 * nb * stride), "r"(x.x), "r"(x.y)
          : "memory");
    }
  }

  // One chunk: reads stage st (whose tiles the caller made visible to the async proxy), then
  // stores O's Lc rows at orow0 (token t0's element (hv, v0), row stride ostride); the recompute
  // (OUT = kRecompute) writes ro instead, the saving forward (kSaved) both. The stage's last read
  // is complete when this returns (its wgmmas waited). zero_u: U taken as 0 (a transition tile;
  // st.u is not read).
  __device__ __forceinline__ void chunk(const Stage& st, T* orow0, int64_t ostride, int Lc, bool zero_u = false,
                                        const RecomputeOut* ro = nullptr) {
    auto thr64 = mma64.get_thread_slice(tid);
    auto thrS = mmaS.get_thread_slice(tid);
    E* sk = const_cast<E*>(st.k);
    auto tK = [&] {
      if constexpr (RAW) return thrS.partition_fragment_B(make_tensor(make_smem_ptr(sk), typename L::ChByTokMN{}));
      else return thrS.partition_fragment_B(make_tensor(make_smem_ptr(sk), typename L::ChByTok{}));
    }();
    // A operands from registers: (values, 1, k-blocks of 16), the accumulators' element order
    Tensor Sa = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kK / 16>>{});
    Tensor Va = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kC / 16>>{});
    Tensor Vk = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kC / 16>>{});  // f ⊙ V_new (raw rows)
    Tensor Vl = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kC / 16>>{});  // V_new's low half (recompute)
    const T* Us = reinterpret_cast<const T*>(st.u);
    static_assert(!SPLIT || (Stage::kLo && kRe), "the split form is the recompute's, with U's low half staged");

    acc_to_a(Sa, S);  // S before this chunk, 16-bit, as the A operand of W S and Qg S
    if constexpr (kRe) {  // S before this chunk, float32 or (h16) in the compute type
      if (ro->h16) {
        // a channel's row of 16-bit columns: the 8x8 blocks transposed in registers (store_rows),
        // two adjacent columns a lane
        store_rows<kK / 8>([&](int i) { return raw_pair(Sa(i), Sa(i + 1)); }, ro->h16, ro->V, kK);
      } else {
        // element i at (channel 2t + 8 (i >> 2) + (i & 1), column 16 warp + g + 8 ((i >> 1) & 1))
        const int64_t hc = ro->v_first ? 1 : ro->V, hv = ro->v_first ? kK : 1;  // a channel's, a column's step
        float* hb = ro->h + kern::state_index<kK>(ro->V, ro->v_first, 2 * t, 16 * warp + g);
#pragma unroll
        for (int i = 0; i < size(S); ++i) hb[(8 * (i >> 2) + (i & 1)) * hc + 8 * ((i >> 1) & 1) * hv] = S(i);
      }
      if (ro->hs) {  // for the output kernel of a forward that saves these (disable_recompute)
#pragma unroll
        for (int i = 0; i < size(S); i += 2)
          *reinterpret_cast<uint32_t*>(ro->hs + row_of(i) * kK + col_of(i)) = raw_pair(Sa(i), Sa(i + 1));
      }
    }
    // then S = exp(γ_C) S (Sᵀ: columns are channels), before any wgmma of this chunk is in flight
    if constexpr (RAW) {  // raw rows come with a scalar gate only: every channel's exp(γ_C) is one value
      const float e = st.ge[0];
#pragma unroll
      for (int i = 0; i < size(S); ++i) S(i) *= e;
    } else {
      scale_cols(S, st.ge);
    }
    fence_regs(Sa);
    fence_regs(P);
    fence_regs(Oi);
    warpgroup_arrive();
    if constexpr (DELTA) {
      Tensor tW = thr64.partition_fragment_B(make_tensor(make_smem_ptr(const_cast<E*>(st.w)), typename L::TokByK{}));
      wg_gemm<true>(mma64, Sa, tW, P);
      warpgroup_commit_batch();
    }
    if constexpr (kO) {
      Tensor tQ = thr64.partition_fragment_B(make_tensor(make_smem_ptr(const_cast<E*>(st.q)), typename L::TokByK{}));
      wg_gemm<true>(mma64, Sa, tQ, Oi);
      warpgroup_commit_batch();
    }
    if constexpr (DELTA) {
      warpgroup_wait<kO ? 1 : 0>();  // W S (Qg S may still run)
      fence_regs(P);
    }
    // V_newᵀ (V column, token) = Uᵀ - (S Wᵀ)ᵀ, in the accumulators' order; its 16-bit form for
    // O and (times the row factor in raw-row mode) for the state update
    if constexpr (!DELTA && !SPLIT) {
      // Without the delta rule V_new = V: Va's pairs straight from the tile by ldmatrix.trans (an
      // 8 x 8 block of token rows, transposed, is a lane's (column g, tokens 2t, 2t + 1) pair in
      // the accumulators' order), four x4 loads in place of 32 16-bit ones and their conversions.
      // Matrix m of load j: token block 2 j + (m >> 1), columns 16 warp + 8 (m & 1), i.e. the
      // elements i = 8 j + 2 m, 8 j + 2 m + 1.
      const int l = tid & 31, tok = 8 * (l >> 4) + (l & 7), vc = 16 * warp + 8 * ((l >> 3) & 1);
#pragma unroll
      for (int j = 0; j < kC / 16; ++j) {
        uint32_t x[4];
        ldsm_x4_t(x, st.u + kmajor_off<kC>(16 * j + tok, vc));
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const uint32_t y = zero_u ? 0u : x[m];
          Va(8 * j + 2 * m) = E::bitcast(static_cast<uint16_t>(y & 0xffffu));
          Va(8 * j + 2 * m + 1) = E::bitcast(static_cast<uint16_t>(y >> 16));
        }
      }
      if constexpr (RAW) {
#pragma unroll
        for (int i = 0; i < size(P); i += 4) {
          const float2 c = *reinterpret_cast<const float2*>(st.rf + kC + col_of(i));
#pragma unroll
          for (int m = 0; m < 4; ++m) Vk(i + m) = E(static_cast<float>(Va(i + m)) * (m & 1 ? c.y : c.x));
        }
      }
    } else {
      // kmajor_off<64>(tok, c) + (c & 7) for tok = col_of(i), c = row_of(i), as one base and
      // compile-time steps: (c >> 3) ^ (tok & 7) = 2 (warp ^ t) + (((i >> 1) ^ i) & 1)
      const int uoff = 128 * t + ((warp ^ t) << 4) + g;
#pragma unroll
      for (int i = 0; i < size(P); ++i) {
        const int tok = col_of(i);
        const int ui = uoff + (i >> 2) * 512 + 64 * (i & 1) + 8 * (((i >> 1) ^ i) & 1);
        float vn = zero_u ? 0.f : to_f(Us[ui]);
        if constexpr (DELTA) vn -= P(i);
        if constexpr (SPLIT) vn += to_f(reinterpret_cast<const T*>(st.ulo)[ui]);
        Va(i) = E(vn);
        if constexpr (SPLIT) Vl(i) = E(vn - static_cast<float>(Va(i)));
        if constexpr (RAW) Vk(i) = E(vn * st.rf[kC + tok]);
      }
    }
    if constexpr (kRe) {
      // V_new always with the delta rule: a runtime test there made ptxas serialize the wgmmas
      // (C7520, a divergent path); without it V_new is written only for a saving forward's output
      if constexpr (DELTA) store_rows([&](int i) { return raw_pair(Va(i), Va(i + 1)); }, ro->vnew, ro->V, kC);
      else if (ro->vnew) store_rows([&](int i) { return raw_pair(Va(i), Va(i + 1)); }, ro->vnew, ro->V, kC);
      if constexpr (SPLIT) store_rows([&](int i) { return raw_pair(Vl(i), Vl(i + 1)); }, ro->vnew_lo, ro->V, kC);
    }
    // S += Kg V_new (+ Kg V_new's low half, split)
    fence_regs(S);
    fence_regs(Va);
    fence_regs(Vk);
    fence_regs(Vl);
    warpgroup_arrive();
    wg_gemm<false>(mmaS, RAW ? Vk : Va, tK, S);
    if constexpr (SPLIT) wg_gemm<false>(mmaS, Vl, tK, S);
    warpgroup_commit_batch();
    if constexpr (!kO) {
      warpgroup_wait<0>();
      fence_regs(S);
    } else {
      out_step(st, orow0, ostride, Lc, Va);
    }
  }

  // The rest of a forward chunk: O = Qg S (in flight) + Aqk V_new, O's rows out.
  template <class Frag>
  __device__ __forceinline__ void out_step(const Stage& st, T* orow0, int64_t ostride, int Lc, Frag& Va) {
    auto thr64 = mma64.get_thread_slice(tid);
    warpgroup_wait<1>();  // Qg S (groups complete in order)
    fence_regs(Oi);
    if constexpr (RAW) {  // raw q rows: Qg's row factor on Qg S, before Aqk V_new joins it
      scale_cols(Oi, st.rf);
    }
    fence_regs(Oi);
    Tensor tA = thr64.partition_fragment_B(make_tensor(make_smem_ptr(const_cast<E*>(st.a)), typename L::TokByTok{}));
    warpgroup_arrive();
    wg_gemm<false>(mma64, Va, tA, Oi);
    warpgroup_commit_batch();
    warpgroup_wait<0>();
    fence_regs(Oi);
    fence_regs(S);

    if constexpr (STAGE_O) {
      if (Lc == kC) {
        stage_o(const_cast<E*>(st.u));
        return;
      }
    }
    store_rows([&](int i) { return pack2<T>(Oi(i), Oi(i + 1)); }, orow0, ostride, Lc);  // O's rows
  }

  // Oᵀ (V column, token) into a (token, V column) tile at kmajor_off<64> by stmatrix .trans: the
  // inverse of the V tile's ldmatrix .trans above (matrix m of store j: token block 2 j + (m >> 1),
  // columns 16 warp + 8 (m & 1), the elements 8 j + 2 m, 8 j + 2 m + 1).
  __device__ __forceinline__ void stage_o(E* tile) const {
    const int l = tid & 31, tok = 8 * (l >> 4) + (l & 7), vc = 16 * warp + 8 * ((l >> 3) & 1);
#pragma unroll
    for (int j = 0; j < kC / 16; ++j) {
      uint32_t x[4];
#pragma unroll
      for (int m = 0; m < 4; ++m) x[m] = pack2<T>(Oi(8 * j + 2 * m), Oi(8 * j + 2 * m + 1));
      stsm_x4_t(x, tile + kmajor_off<kC>(16 * j + tok, vc));
    }
  }
};

}  // namespace wgmma_recurrence
}  // namespace linattn::cuda::kern

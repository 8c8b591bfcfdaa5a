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

// The backward's forms (config::Compute) this pass runs: the 16-bit operands alone; the split
// form (KgT and dS⁺ as hi + lo halves, dN written as hi + lo); and the float32 form on bfloat16
// inputs (kWide: every operand the float32 recompute wrote split into bf16 hi + lo as the
// producer stages it, three products per pair, dO exact in bf16, dN written in float32).
enum class DhForm : int { kSixteen, kSplit, kWide };

// One chunk's tiles as the consumer reads them (E: the 16-bit element); null lo halves where the
// form has none.
template <class E>
struct DhTiles {
  const E *w, *wlo;  // W (tok, ch): mnmajor_off, the MN-major B (ch, tok) of dNᵀ W
  const E *q, *qlo;  // Qg (tok, ch): mnmajor_off, the B of dOᵀ Qg
  const E *k, *klo;  // KgT (ch, tok): kmajor_off<128> = TokByChMN, the B of dS⁺ᵀ Kgᵀ
  const E *a, *alo;  // Aqk (i, j): kmajor_off<64> = VcByTokMN (j, i), the B of dOᵀ Aqk
  const E* o;        // dO (tok, vcol): kmajor_off<64> = VcByTokMN (vcol, tok), the shared A
  const float* ge;   // exp(γ_C) per channel
};

// A stage of the 16-bit forms, copied by cp.async: 64.5 KB, 80.5 KB split.
template <class E, bool DELTA, bool SPLIT>
struct alignas(1024) DhStage {
  alignas(1024) E w[DELTA ? kC * kK : 8];
  alignas(1024) E q[kC * kK];
  alignas(1024) E k[kK * kC];
  alignas(1024) E klo[SPLIT ? kK * kC : 8];
  alignas(1024) E a[kC * kC];
  alignas(1024) E o[kC * kVT];
  alignas(16) float ge[kK];
  __device__ DhTiles<E> tiles() const { return {w, nullptr, q, nullptr, k, SPLIT ? klo : nullptr, a, nullptr, o, ge}; }
};

// kWide: a chunk's hi + lo tiles (120.5 KB) do not fit twice, so a chunk is two half-stages in a
// ring of three slots (64.5 KB each): X = {Aqk, KgT (hi, lo), dO, exp(γ_C)} for dNᵀ, Y = {Qg, W
// (hi, lo)} for dSᵀ. The consumer holds a chunk's X and Y while the producer fills the third slot
// with the next chunk's X.
template <class E>
struct alignas(1024) DhWideSlot {
  static constexpr int kTile = kC * kK;  // elements of a 64 x 128 tile
  alignas(1024) E t[4 * kTile];          // X: a, alo (64 x 64 each), k, klo, o; Y: q, qlo, w, wlo
  alignas(16) float ge[kK];
  __device__ const E* a() const { return t; }
  __device__ const E* alo() const { return t + kC * kC; }
  __device__ const E* k() const { return t + kTile; }
  __device__ const E* klo() const { return t + 2 * kTile; }
  __device__ const E* o() const { return t + 3 * kTile; }
  __device__ const E* q() const { return t; }
  __device__ const E* qlo() const { return t + kTile; }
  __device__ const E* w() const { return t + 2 * kTile; }
  __device__ const E* wlo() const { return t + 3 * kTile; }
};

template <class E, bool DELTA, DhForm FORM, int STAGES>
struct alignas(1024) DhSmem {
  DhStage<E, DELTA, FORM == DhForm::kSplit> st[STAGES];
  alignas(8) uint64_t full[STAGES];
  alignas(8) uint64_t empty[STAGES];
};
template <class E, bool DELTA, int STAGES>
struct alignas(1024) DhSmem<E, DELTA, DhForm::kWide, STAGES> {
  DhWideSlot<E> st[STAGES];
  alignas(8) uint64_t full[STAGES];
  alignas(8) uint64_t empty[STAGES];
};

// The reverse recurrence of one chain, by the 128 threads of the consumer warpgroup (T: the 16-bit
// element type of the operands).
template <class T, bool DELTA, DhForm FORM>
struct DhConsumer {
  static constexpr bool kLoS = FORM != DhForm::kSixteen;  // dS⁺ and KgT as hi + lo
  static constexpr bool kWide = FORM == DhForm::kWide;
  using DhT = std::conditional_t<kWide, float, T>;  // dh's element type: the compute type
  using A = Atoms<T>;
  using E = typename A::E;
  using L = Layouts<E>;
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
      D(i) = p.dht ? load_state(p.dht, p.dht_dt, base + kern::state_index<kK>(p.V, p.v_first, col_of(i), v0 + row_of(i))) : 0.f;
  }
  // dh0 = dS before the first chunk.
  __device__ __forceinline__ void store(const bwd::DhParams& p, int n, int hv, int v0) {
    if (!p.dh0) return;
    const int64_t base = (static_cast<int64_t>(n) * p.HV + hv) * kK * p.V;
#pragma unroll
    for (int i = 0; i < size(D); ++i) store_state(p.dh0, p.dh0_dt, base + kern::state_index<kK>(p.V, p.v_first, col_of(i), v0 + row_of(i)), D(i));
  }

  // One chunk: dh ([K][V] in DhT, this CTA's columns at dhc) and dN as [64][V] rows at dn (the
  // compute type: T, float for kWide) and dnlo (kSplit). `second(tiles)` is called before the
  // first read of q / w and may wait for them (kWide's Y half-stage). The tiles' last read is
  // complete when this returns.
  template <class Second>
  __device__ __forceinline__ void chunk(DhTiles<E> x, Second&& second, DhT* dhc, void* dn, T* dnlo, int V,
                                        int64_t dn_ld, int dn_rows) {
    auto thrN = mmaN.get_thread_slice(tid);
    auto thrNss = mmaNss.get_thread_slice(tid);
    auto thrD = mmaD.get_thread_slice(tid);
    auto thrDss = mmaDss.get_thread_slice(tid);
    auto smem = [](const E* e) { return make_smem_ptr(const_cast<E*>(e)); };
    Tensor tOn = thrNss.partition_fragment_A(make_tensor(smem(x.o), typename L::VcByTokMN{}));
    Tensor tA = thrNss.partition_fragment_B(make_tensor(smem(x.a), typename L::VcByTokMN{}));
    Tensor tK = thrN.partition_fragment_B(make_tensor(smem(x.k), typename L::TokByChMN{}));
    Tensor tOd = thrDss.partition_fragment_A(make_tensor(smem(x.o), typename L::VcByTokMN{}));
    // register A operands, the accumulators' element order: dS⁺ᵀ (hi, lo) and −dNᵀ (hi, lo)
    Tensor Sa = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kK / 16>>{});
    Tensor Sl = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kLoS ? kK / 16 : 1>>{});
    Tensor Na = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kC / 16>>{});
    Tensor Nl = make_tensor<E>(Shape<Shape<_2, _2, _2>, _1, Int<kWide ? kC / 16 : 1>>{});

    // dh[c] = dS⁺ ([K][V]: a channel's V columns contiguous). float32: each warp store covers 4
    // channels x 8 consecutive V columns (32-byte pieces). 16 bits: each 8x8 (V column, channel)
    // block transposed by movmatrix and a channel's two blocks exchanged across the quad
    // (quad_sector_pair), one 8-byte store a lane, a whole 32-byte sector of 8 channel rows a warp
    // store (element stores half-wrote every sector, 64 of them a thread a chunk)
    if constexpr (kWide) {
      DhT* dhw = dhc + static_cast<int64_t>(2 * t) * V + 16 * warp + g;
#pragma unroll
      for (int i = 0; i < size(D); ++i)
        dhw[static_cast<int64_t>(8 * (i >> 2) + (i & 1)) * V + 8 * ((i >> 1) & 1)] = static_cast<DhT>(D(i));
    } else {
      DhT* dhw = dhc + static_cast<int64_t>(g) * V + 16 * warp + 4 * t;
#pragma unroll
      for (int n = 0; n < kK / 8; ++n)
        *reinterpret_cast<uint2*>(dhw + static_cast<int64_t>(8 * n) * V) =
            quad_sector_pair(movmatrix_trans(pack2<T>(D(4 * n), D(4 * n + 1))),
                             movmatrix_trans(pack2<T>(D(4 * n + 2), D(4 * n + 3))), t);
    }
#pragma unroll
    for (int i = 0; i < size(D); ++i) {
      Sa(i) = E(D(i));
      if constexpr (kLoS) Sl(i) = E(D(i) - static_cast<float>(Sa(i)));
    }
    // dS = e^{γ_C} dS⁺ (dSᵀ: columns are channels), before any wgmma of this chunk is in flight
#pragma unroll
    for (int i = 0; i < size(D); ++i) D(i) *= x.ge[col_of(i)];
    fence_regs(Sa);
    if constexpr (kLoS) fence_regs(Sl);
    fence_regs(D);
    fence_regs(Nt);
    warpgroup_arrive();
    wg_gemm<true>(mmaNss, tOn, tA, Nt);  // dNᵀ = dOᵀ Aqk
    if constexpr (kWide) {
      Tensor tAl = thrNss.partition_fragment_B(make_tensor(smem(x.alo), typename L::VcByTokMN{}));
      wg_gemm<false>(mmaNss, tOn, tAl, Nt);
    }
    wg_gemm<false>(mmaN, Sa, tK, Nt);    //      + dS⁺ᵀ Kgᵀ
    if constexpr (kLoS) {
      Tensor tKl = thrN.partition_fragment_B(make_tensor(smem(x.klo), typename L::TokByChMN{}));
      wg_gemm<false>(mmaN, Sl, tK, Nt);
      wg_gemm<false>(mmaN, Sa, tKl, Nt);
    }
    warpgroup_commit_batch();
    second(x);
    {
      Tensor tQ = thrDss.partition_fragment_B(make_tensor(smem(x.q), typename L::ChByTokMN{}));
      warpgroup_arrive();
      wg_gemm<false>(mmaDss, tOd, tQ, D);  // dSᵀ += dOᵀ Qg
      if constexpr (kWide) {
        Tensor tQl = thrDss.partition_fragment_B(make_tensor(smem(x.qlo), typename L::ChByTokMN{}));
        wg_gemm<false>(mmaDss, tOd, tQl, D);
      }
      warpgroup_commit_batch();
    }
    warpgroup_wait<1>();  // dNᵀ (dOᵀ Qg may still run)
    fence_regs(Nt);
    if constexpr (DELTA) {  // dSᵀ −= dNᵀ W: issued before dN's stores, which it overlaps
#pragma unroll
      for (int i = 0; i < size(Nt); ++i) {
        Na(i) = E(-Nt(i));
        if constexpr (kWide) Nl(i) = E(-Nt(i) - static_cast<float>(Na(i)));
      }
      Tensor tW = thrD.partition_fragment_B(make_tensor(smem(x.w), typename L::ChByTokMN{}));
      fence_regs(Na);
      if constexpr (kWide) fence_regs(Nl);
      warpgroup_arrive();
      wg_gemm<false>(mmaD, Na, tW, D);
      if constexpr (kWide) {
        Tensor tWl = thrD.partition_fragment_B(make_tensor(smem(x.wlo), typename L::ChByTokMN{}));
        wg_gemm<false>(mmaD, Nl, tW, D);
        wg_gemm<false>(mmaD, Na, tWl, D);
      }
      warpgroup_commit_batch();
    }
    if constexpr (kWide) {
      // dN in float32: element i is (V column row_of(i), token col_of(i)); a warp store covers 4
      // tokens x 8 consecutive columns
      float* dnw = static_cast<float*>(dn) + static_cast<int64_t>(2 * t) * V + 16 * warp + g;
#pragma unroll
      for (int i = 0; i < size(Nt); ++i) dnw[static_cast<int64_t>(8 * (i >> 2) + (i & 1)) * V + 8 * ((i >> 1) & 1)] = Nt(i);
    } else {
      // dN rows (row stride dn_ld; rows at or past dn_rows not stored: dv's rows past a sequence's
      // end): each 8x8 (V column, token) block transposed in registers (4-byte stores of two
      // adjacent columns of one token)
      const int64_t off = static_cast<int64_t>(g) * dn_ld + 16 * warp + 2 * t;
#pragma unroll
      for (int nb = 0; nb < kC / 8; ++nb)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const float x0 = Nt(4 * nb + 2 * hh), x1 = Nt(4 * nb + 2 * hh + 1);
          const int64_t o = off + static_cast<int64_t>(8 * nb) * dn_ld + 8 * hh;
          const uint32_t tr = movmatrix_trans(pack2<T>(x0, x1));  // warp-wide: before the row test
          if (8 * nb + g < dn_rows) *reinterpret_cast<uint32_t*>(static_cast<T*>(dn) + o) = tr;
          if constexpr (kLoS) {
            const float l0 = x0 - to_f(from_f<T>(x0)), l1 = x1 - to_f(from_f<T>(x1));
            *reinterpret_cast<uint32_t*>(dnlo + o) = movmatrix_trans(pack2<T>(l0, l1));
          }
        }
    }
    warpgroup_wait<0>();
    fence_regs(D);
  }
};

// The 16-bit forms' producer: step it stages chunk nch - 1 - it into stage it % STAGES by cp.async
// once the consumer has released it.
template <class T, bool DELTA, bool SPLIT, int STAGES, class Smem>
__device__ __forceinline__ void produce_stages(const bwd::DhParams& p, Smem& sm, const SeqInfo& si, int nch, int hv,
                                               int v0, int tid) {
  using Bar = cutlass::arch::ClusterBarrier;
  const int V = p.V, HV = p.HV;
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
}

// The float32 form's producer (DhForm::kWide): half-step h stages X (h even) or Y (h odd) of chunk
// nch - 1 - h / 2 into slot h % SLOTS: Aqk, KgT, Qg, W read in float32 and split into bf16 hi + lo,
// dO from the caller's bf16 rows (DhParams::d_o, d_o_dt 1).
template <bool DELTA, int SLOTS, class Smem>
__device__ __forceinline__ void produce_wide(const bwd::DhParams& p, Smem& sm, const SeqInfo& si, int nch, int hv,
                                             int v0, int tid) {
  using T = __nv_bfloat16;
  using E = cutlass::bfloat16_t;
  using Bar = cutlass::arch::ClusterBarrier;
  constexpr int kTile = DhWideSlot<E>::kTile;
  const int V = p.V, HV = p.HV;
  const int64_t os = static_cast<int64_t>(HV) * V;
  const float* Aqk = static_cast<const float*>(p.Aqk);
  const float* KgT = static_cast<const float*>(p.KgT);
  const float* Qg = static_cast<const float*>(p.Qg);
  const float* W = static_cast<const float*>(p.W);
  for (int h = 0; h < 2 * nch; ++h) {
    if (h >= SLOTS) Bar::wait(&sm.empty[h % SLOTS], ((h / SLOTS) - 1) & 1);
    auto& sl = sm.st[h % SLOTS];
    E* t = sl.t;
    const int ci = nch - 1 - h / 2;
    const int64_t blk = static_cast<int64_t>(si.chunk0 + ci) * HV + hv;
    if ((h & 1) == 0) {
      // dO rows (zero past the sequence's end) and exp(γ_C) by plain loads, like the split
      // tiles: every write to a slot is then this thread's own shared store, released by its
      // arrive below (cp.async data would need the barrier to track it, and a slot's bytes
      // belong to different threads in X and Y)
      const int valid = min(kC, si.len - ci * kC);
      const T* o0 = static_cast<const T*>(p.d_o) + static_cast<int64_t>(si.t0 + ci * kC) * os +
                    static_cast<int64_t>(hv) * V + v0;
      uint4 ov[kC * kVT / 8 / kThreads];
#pragma unroll
      for (int j = 0; j < kC * kVT / 8 / kThreads; ++j) {
        const int e = j * kThreads + tid, r = e >> 3, c = (e & 7) * 8;
        ov[j] = r < valid ? __ldg(reinterpret_cast<const uint4*>(o0 + r * os + c)) : make_uint4(0, 0, 0, 0);
      }
      float4 gv = make_float4(0.f, 0.f, 0.f, 0.f);
      if (tid < kK / 4) gv = __ldg(reinterpret_cast<const float4*>(p.gexp + blk * kK) + tid);
      split_tile<kC, kC>(t, t + kC * kC, Aqk + blk * kC * kC, tid, [](int r, int c) { return kmajor_off<kC>(r, c); });
      split_tile<kK, kC>(t + kTile, t + 2 * kTile, KgT + blk * kK * kC, tid,
                         [](int r, int c) { return kmajor_off<kK>(r, c); });
#pragma unroll
      for (int j = 0; j < kC * kVT / 8 / kThreads; ++j) {
        const int e = j * kThreads + tid;
        *reinterpret_cast<uint4*>(t + 3 * kTile + kmajor_off<kC>(e >> 3, (e & 7) * 8)) = ov[j];
      }
      if (tid < kK / 4) reinterpret_cast<float4*>(sl.ge)[tid] = gv;
    } else {
      split_tile<kC, kK>(t, t + kTile, Qg + blk * kC * kK, tid, [](int r, int c) { return mnmajor_off(c, r); });
      if constexpr (DELTA)
        split_tile<kC, kK>(t + 2 * kTile, t + 3 * kTile, W + blk * kC * kK, tid,
                           [](int r, int c) { return mnmajor_off(c, r); });
    }
    cutlass::arch::fence_view_async_shared();  // this thread's shared stores -> the consumer's wgmmas
    Bar::arrive(&sm.full[h % SLOTS]);
  }
}

// The dh chain of one (sequence n, value head, V tile): warpgroup ct.wg 0 stages chunks last to
// first (produce_stages, or produce_wide for kWide, whose STAGES are half-stage slots), 1 runs
// DhConsumer. INIT: it initialises its ring's barriers (the block's last __syncthreads); a kernel
// that runs it beside another chain (ct.wg, ct.tid relative to this chain's two warpgroups)
// initialises every ring itself first.
template <class T, bool DELTA, DhForm FORM, int STAGES, bool INIT = true, int ROLE = -1>
__device__ __forceinline__ void dh_chain(const bwd::DhParams& p,
                                         DhSmem<typename DhConsumer<T, DELTA, FORM>::E, DELTA, FORM, STAGES>& sm,
                                         const ChainTile& ct) {
  constexpr bool kWide = FORM == DhForm::kWide;
  static_assert(!kWide || std::is_same_v<T, __nv_bfloat16>, "the float32 form splits into bfloat16");
  using Consumer = DhConsumer<T, DELTA, FORM>;
  using E = typename Consumer::E;
  const int V = p.V, HV = p.HV;
  const int v0 = ct.v0, hv = ct.hv, n = ct.n, wg = ct.wg, tid = ct.tid, nch = ct.nch;
  const SeqInfo si = ct.si;
  using Bar = cutlass::arch::ClusterBarrier;
  if constexpr (INIT) init_ring_barriers(sm.full, sm.empty);  // the block's last __syncthreads

  // ROLE 0 / 1: only the producer's / the consumer's code (setmaxnreg per role); -1: by warpgroup
  if (ROLE == 0 || (ROLE < 0 && wg == 0)) {
    if constexpr (kWide) produce_wide<DELTA, STAGES>(p, sm, si, nch, hv, v0, tid);
    else produce_stages<T, DELTA, FORM == DhForm::kSplit, STAGES>(p, sm, si, nch, hv, v0, tid);
    return;
  }

  Consumer cons;
  cons.init(p, n, hv, v0, tid);
  for (int it = 0; it < nch; ++it) {
    const int ci = nch - 1 - it;
    const int64_t blk = static_cast<int64_t>(si.chunk0 + ci) * HV + hv;
    auto* dhc = static_cast<typename Consumer::DhT*>(p.dh) + blk * kK * V + v0;
    if constexpr (kWide) {  // chunk it is half-steps 2 it (X) and 2 it + 1 (Y)
      const int hx = 2 * it, hy = 2 * it + 1;
      const auto& X = sm.st[hx % STAGES];
      const auto& Y = sm.st[hy % STAGES];
      Bar::wait(&sm.full[hx % STAGES], (hx / STAGES) & 1);
      cutlass::arch::fence_view_async_shared();
      DhTiles<E> x{Y.w(), Y.wlo(), Y.q(), Y.qlo(), X.k(), X.klo(), X.a(), X.alo(), X.o(), X.ge};
      auto second = [&](const DhTiles<E>&) {
        Bar::wait(&sm.full[hy % STAGES], (hy / STAGES) & 1);
        cutlass::arch::fence_view_async_shared();
      };
      cons.chunk(x, second, dhc, static_cast<float*>(p.dN) + blk * kC * V + v0, nullptr, V, V, kC);
      Bar::arrive(&sm.empty[hx % STAGES]);
      Bar::arrive(&sm.empty[hy % STAGES]);
    } else {
      Bar::wait(&sm.full[it % STAGES], (it / STAGES) & 1);
      cutlass::arch::fence_view_async_shared();  // the producer's cp.async data -> this thread's wgmmas
      T* dn = static_cast<T*>(p.dN) + blk * kC * V + v0;
      int64_t dn_ld = V;
      int dn_rows = kC;
      if (!DELTA && p.dv) {  // dN is dv: straight into its rows (DhParams::dv)
        dn_ld = static_cast<int64_t>(HV) * V;
        dn = static_cast<T*>(p.dv) + static_cast<int64_t>(si.t0 + ci * kC) * dn_ld + static_cast<int64_t>(hv) * V + v0;
        dn_rows = min(kC, si.len - ci * kC);
      }
      T* dnlo = FORM == DhForm::kSplit ? static_cast<T*>(p.dN_lo) + blk * kC * V + v0 : nullptr;
      cons.chunk(sm.st[it % STAGES].tiles(), [](const auto&) {}, dhc, dn, dnlo, V, dn_ld, dn_rows);
      Bar::arrive(&sm.empty[it % STAGES]);
    }
  }
  cons.store(p, n, hv, v0);
}

// One CTA per (sequence n, value head, V tile): dh_chain on its two warpgroups.
template <class T, bool DELTA, DhForm FORM, int STAGES>
__global__ void __launch_bounds__(2 * kThreads, 1) chunk_dh_wgmma_kernel(const bwd::DhParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Smem = DhSmem<typename DhConsumer<T, DELTA, FORM>::E, DELTA, FORM, STAGES>;
  extern __shared__ unsigned char smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>(smem_base_1024(smem_raw));
  dh_chain<T, DELTA, FORM, STAGES>(p, sm, ChainTile::get(p.seqs));
#endif
}

template <class T, bool DELTA, DhForm FORM, int STAGES>
cudaError_t launch_dh(const bwd::DhParams& p, cudaStream_t s) {
  return launch_with_smem(chunk_dh_wgmma_kernel<T, DELTA, FORM, STAGES>,
                          smem_bytes_of<DhSmem<typename Atoms<T>::E, DELTA, FORM, STAGES>>(), SequentialScheduler<kVT>::grid_shape(p.V, p.HV, p.N),
                          2 * kThreads, p, s);
}

// The instantiations of one 16-bit type (chunk_dh_wgmma_{bf16,fp16}.cu): three stages (two chunks
// in flight), two in the split form (a stage is 80.5 KB). The split form has the delta rule only
// (config::compute_of: GLA and simple GLA never split); the float32 form reads float32 operands
// (d_o_dt 1: bf16 inputs only).
template <class T>
cudaError_t launch_dh_type(const bwd::DhParams& p, cudaStream_t s) {
  if (p.d_o_dt == 1) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>)
      return p.delta ? launch_dh<T, true, DhForm::kWide, 3>(p, s) : launch_dh<T, false, DhForm::kWide, 3>(p, s);
    return cudaErrorInvalidValue;
  }
  if (p.delta)
    return p.KgT_lo ? launch_dh<T, true, DhForm::kSplit, 2>(p, s) : launch_dh<T, true, DhForm::kSixteen, 3>(p, s);
  return launch_dh<T, false, DhForm::kSixteen, 3>(p, s);
}

}  // namespace wgmma_recurrence
}  // namespace linattn::cuda::kern

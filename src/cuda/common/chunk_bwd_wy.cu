// The chunked (WY-form) backward of KDA / GDN on tensor cores: pass 1 (sequential dS / dV_new)
// and pass 2 (chunk-parallel dq, dk, dv, dβ, dγ). docs/chunked_backward.md derives every formula;
// src/cpu/common/chunk_bwd.cpp is the float64-tested CPU twin. Design notes in chunk_bwd.cuh.
#include <cstdint>
#include <type_traits>

#include "cuda/common/chunk_bwd.cuh"
#include "cuda/common/gate.cuh"
#include "cuda/common/copy.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/scheduler.cuh"
#include "cuda/common/state_tile.cuh"
#include "cuda/config/heuristics.hpp"

namespace linattn::cuda::bwd {
namespace {

using kern::cp_commit;
using kern::cp_wait;
using kern::from_f;
using kern::kIs16;
using kern::load_any;
using kern::pad_of;
using kern::store2;
using kern::to_f;
using kern::WarpStateTile;
using kern::zero_acc;

constexpr int kThreads = 256;

// ---------------------------------------------------------------- tensor-core helpers
// acc[MI][NI] += A[m0 .., k0 : k1] * B[k0 : k1, n0 ..]. A is k-major when AK (A(m, k) at
// pa[k * lda + m]) else row-major; B is k-major when BK (B(k, n) at pb[k * ldb + n]) else n-major.
// 16-bit: ldmatrix from shared memory (16-byte aligned rows, offsets multiples of 8, NI even,
// k0/k1 multiples of 16). float: 3xTF32 through the loaders (shared or global memory); A_TF32:
// A holds TF32 values already (the caller's 16-bit inputs widened: kern::warp_mma), two products.
template <class T, int MI, int NI, bool AK, bool BK, bool A_TF32 = false>
__device__ __forceinline__ void mma_op(float (&acc)[MI][NI][4], const T* pa, int lda, const T* pb, int ldb,
                                       int m0, int n0, int k0, int k1) {
  if constexpr (kIs16<T>) {
    kern::warp_mma_sm<T, MI, NI, AK, BK>(acc, pa, lda, pb, ldb, m0, n0, k0, k1);
  } else {
    // a k-major A(m, k) = p[k * ld + m] reads like an n-major B (ColOp), a k-major B like a
    // row-major A (RowOp)
    using AOp = std::conditional_t<AK, kern::ColOp<T>, kern::RowOp<T>>;
    using BOp = std::conditional_t<BK, kern::RowOp<T>, kern::ColOp<T>>;
    kern::warp_mma<T, MI, NI, AOp, BOp, A_TF32>(acc, AOp{pa, lda}, BOp{pb, ldb}, m0, n0, k0, k1);
  }
}

// float only: acc1 += A1 * B, acc2 += A2 * B with B's fragments split once (kern::warp_mma_pair_tf32);
// A1, A2 row-major, B n-major (the phase-B layout), A1_TF32 as mma_op's A_TF32.
template <int MI, int NI, bool A1_TF32>
__device__ __forceinline__ void mma_op_pair(float (&acc1)[MI][NI][4], float (&acc2)[MI][NI][4], const float* pa1,
                                            const float* pa2, int lda, const float* pb, int ldb, int m0, int n0,
                                            int k0, int k1) {
  using AOp = kern::RowOp<float>;
  using BOp = kern::ColOp<float>;
  kern::warp_mma_pair_tf32<MI, NI, AOp, AOp, BOp, A1_TF32>(acc1, acc2, AOp{pa1, lda}, AOp{pa2, lda}, BOp{pb, ldb}, m0,
                                                           n0, k0, k1);
}

// rows x cols tile (global row stride gld) into shared memory (stride sld) by cp.async; rows at or
// past `valid` are zero-filled.
template <class T>
__device__ __forceinline__ void tile_async(T* dst, int sld, const T* src, int64_t gld, int rows, int cols,
                                           int valid) {
  kern::tile_copy_rt<T, kThreads>(dst, sld, src, gld, rows, cols, valid);
}

// 64 x 64 tile copy of a workspace tile (global row stride gld -> shared stride sld) by cp.async,
// every row valid (the per-chunk tiles are zero past a chunk's end). A group of them is landed by
// land() before the barrier that publishes them, so all of a group's loads are in flight at once.
template <class T>
__device__ __forceinline__ void tile64(T* dst, int sld, const T* src, int64_t gld) {
  kern::tile_copy<T, 64, 64, kThreads>(dst, sld, src, gld, threadIdx.x);
}
__device__ __forceinline__ void land() {
  cp_commit();
  cp_wait<0>();
}
// A ROWS x COLS tile of the caller's rows (element type In) into a tile of the compute type T:
// cp.async when the two agree (landed by land()), else (the float32 form on 16-bit inputs)
// converting loads, complete at the next barrier. PRED: rows at or past `valid` are zero.
template <class T, int ROWS, int COLS, bool PRED = false, class In>
__device__ __forceinline__ void tile_in(T* dst, int sld, const In* src, int64_t gld, int valid = ROWS) {
  if constexpr (std::is_same_v<T, In>) kern::tile_copy<T, ROWS, COLS, kThreads, PRED>(dst, sld, src, gld, threadIdx.x, valid);
  else kern::tile_widen<In, ROWS, COLS, kThreads, PRED>(dst, sld, src, gld, threadIdx.x, valid);
}


// ================================================================ pass 1
// One CTA per (V tile, value head, sequence), chunks last to first. The dS tile (K x VT, float32)
// lives in registers like chunk_state's S; per chunk
//   dh[c] = dS⁺ (stored, compute type);  dN = Aqkᵀ dO + Kg dS⁺  (stored, compute type)
//   dS    = e^{γ_C} ⊙ dS⁺ + Qgᵀ dO − Wᵀ dN   (no −Wᵀ dN without the delta rule: DhParams::delta = 0,
//           where V_new = V and dN is dv itself)
// with Aqk = s·P and Qg = s·Q⊙E (the scale is already inside). The next chunk's operands are
// prefetched by cp.async (double-buffered where shared memory allows).
template <class T, int K, int VT>
struct DhLayout {
  static constexpr int P = pad_of<T>();
  static constexpr int lda = kC + P;   // Aqk [64][64]
  static constexpr int ldkt = kC + P;  // KgT [K][64]
  static constexpr int ldw = K + P;    // Qg, W [64][K]
  static constexpr int ldo = VT + P;   // dO [64][VT]
  static constexpr int lds = K + P;    // dS⁺ᵀ [VT][K]
  static constexpr int ldn = kC + P;   // -dNᵀ [VT][64]
  static constexpr int es = sizeof(T);
  static constexpr int a_off = 0;
  static constexpr int kt_off = a_off + kC * lda * es;
  static constexpr int q_off = kt_off + K * ldkt * es;
  static constexpr int w_off = q_off + kC * ldw * es;
  static constexpr int o_off = w_off + kC * ldw * es;
  static constexpr int ge_off = o_off + kC * ldo * es;
  static constexpr int stage = ge_off + K * 4;
  // split mode (16-bit, DhParams::KgT_lo): KgT's low half staged after the rest
  static constexpr int ktlo_off = stage;
  static constexpr int stage_split = ktlo_off + K * ldkt * es;
  static constexpr int ds_bytes = VT * lds * es;
  static constexpr int dn_bytes = VT * ldn * es;
  static constexpr int o0_bytes = kC * ldo * es;  // dO when not staged (stages == 0)
  // shared memory: stages x stage (+ KgT lo), dS⁺ᵀ (+ its low half), -dNᵀ, dO when not staged
  static constexpr int bytes(int stages, bool split) {
    return stages * (split ? stage_split : stage) + ds_bytes * (split ? 2 : 1) + dn_bytes +
           (stages == 0 ? o0_bytes : 0);
  }
};

// In: dO's element type (T, or the caller's 16-bit type for the float32 form: DhParams::d_o_dt).
template <class T, int K, int VT, class In = T>
__global__ void __launch_bounds__(kThreads, 1) dh_kernel(const DhParams p) {
  using Lay = DhLayout<T, K, VT>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int V = p.V, HV = p.HV;
  const auto bc = kern::SequentialScheduler<VT>::block_coord();
  const int v0 = bc.v0, hv = bc.hv, n = bc.n;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const SeqInfo si = p.seqs[n];
  const int nch = (si.len + kC - 1) / kC;
  const int stages = p.stages;
  // split (16-bit): dN = Aqkᵀ dO + (Kg_hi + Kg_lo)(dS⁺_hi + dS⁺_lo) without the lo·lo term, and dN
  // leaves as hi + lo halves (docs/chunked_backward.md, "Precision on 16-bit inputs")
  const bool split = kIs16<T> && p.KgT_lo != nullptr;
  const int stage_bytes = split ? Lay::stage_split : Lay::stage;

  unsigned char* fixed = smem + stages * stage_bytes;
  T* dSt = reinterpret_cast<T*>(fixed);                                     // dS⁺ᵀ [VT][K]
  T* dStlo = reinterpret_cast<T*>(fixed + Lay::ds_bytes);                   // its low half (split)
  unsigned char* after_ds = fixed + Lay::ds_bytes * (split ? 2 : 1);
  T* dNt = reinterpret_cast<T*>(after_ds);                                  // -dNᵀ [VT][64]
  T* dO0 = reinterpret_cast<T*>(after_ds + Lay::dn_bytes);                  // dO (stages == 0)

  using Tile = WarpStateTile<K, VT>;
  constexpr int MI = Tile::MI, NI = Tile::NI;
  const Tile tile(warp, lane);
  const int sm0 = tile.m0, sn0 = tile.n0;
  constexpr int NT = VT / 16;
  const int tm0 = (warp & 3) * 16, tn0 = (warp >> 2) * (VT / 2);

  const int64_t state_base = (static_cast<int64_t>(n) * HV + hv) * K * V;
  float D[MI][NI][4];
  tile.load(D, p.dht, p.dht_dt, state_base, V, p.v_first, v0);
  tile.stage_transposed(D, dSt, Lay::lds, split, dStlo);

  const T* Ag = static_cast<const T*>(p.Aqk);
  const T* KTg = static_cast<const T*>(p.KgT);
  const T* KTlg = static_cast<const T*>(p.KgT_lo);
  const T* Qgg = static_cast<const T*>(p.Qg);
  const T* Wg = static_cast<const T*>(p.W);
  const In* dOg = static_cast<const In*>(p.d_o);

  auto issue = [&](int ci) {
    unsigned char* st = smem + (stages == 2 ? (ci & 1) : 0) * stage_bytes;
    const int64_t blk = static_cast<int64_t>(si.chunk0 + ci) * HV + hv;
    const int t0 = si.t0 + ci * kC, Lc = min(kC, si.len - ci * kC);
    tile_async<T>(reinterpret_cast<T*>(st + Lay::a_off), Lay::lda, Ag + blk * kC * kC, kC, kC, kC, kC);
    tile_async<T>(reinterpret_cast<T*>(st + Lay::kt_off), Lay::ldkt, KTg + blk * K * kC, kC, K, kC, K);
    if (split) {
      tile_async<T>(reinterpret_cast<T*>(st + Lay::ktlo_off), Lay::ldkt, KTlg + blk * K * kC, kC, K, kC, K);
    }
    tile_async<T>(reinterpret_cast<T*>(st + Lay::q_off), Lay::ldw, Qgg + blk * kC * K, K, kC, K, kC);
    if (p.delta) tile_async<T>(reinterpret_cast<T*>(st + Lay::w_off), Lay::ldw, Wg + blk * kC * K, K, kC, K, kC);
    const In* orow = dOg + (static_cast<int64_t>(t0) * HV + hv) * V + v0;
    if constexpr (std::is_same_v<T, In>) {
      tile_async<T>(reinterpret_cast<T*>(st + Lay::o_off), Lay::ldo, orow, static_cast<int64_t>(HV) * V, kC, VT, Lc);
    } else {  // converting loads: complete before the barrier that follows the wait
      kern::tile_widen_rt<In, kThreads>(reinterpret_cast<T*>(st + Lay::o_off), Lay::ldo, orow, static_cast<int64_t>(HV) * V,
                                        kC, VT, Lc);
    }
    tile_async<float>(reinterpret_cast<float*>(st + Lay::ge_off), K, p.gexp + blk * K, K, 1, K, 1);
    cp_commit();
  };

  if (stages > 0 && nch > 0) issue(nch - 1);

  for (int ci = nch - 1; ci >= 0; --ci) {
    const int c = si.chunk0 + ci;
    const int t0 = si.t0 + ci * kC;
    const int Lc = min(kC, si.len - ci * kC);
    const int64_t blk = static_cast<int64_t>(c) * HV + hv;

    {  // dh[c] = dS⁺ ([K][V], compute type)
      T* dh = static_cast<T*>(p.dh) + blk * K * V;
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int kk = sm0 + 16 * mi + g + 8 * hh, vv = v0 + sn0 + 8 * ni + 2 * t;
            store2<T>(dh + static_cast<int64_t>(kk) * V + vv, D[mi][ni][2 * hh], D[mi][ni][2 * hh + 1]);
          }
    }

    const T *pA, *pKT, *pKTlo = nullptr, *pQ, *pW, *pO;
    int lA, lKT, lQ, lW;
    const float* gex;
    if (stages > 0) {
      if (stages == 2 && ci > 0) {
        issue(ci - 1);
        cp_wait<1>();
      } else {
        if (stages == 1 && ci < nch - 1) issue(ci);
        cp_wait<0>();
      }
      unsigned char* st = smem + (stages == 2 ? (ci & 1) : 0) * stage_bytes;
      pA = reinterpret_cast<const T*>(st + Lay::a_off);
      pKT = reinterpret_cast<const T*>(st + Lay::kt_off);
      pKTlo = reinterpret_cast<const T*>(st + Lay::ktlo_off);
      pQ = reinterpret_cast<const T*>(st + Lay::q_off);
      pW = reinterpret_cast<const T*>(st + Lay::w_off);
      pO = reinterpret_cast<const T*>(st + Lay::o_off);
      lA = Lay::lda;
      lKT = Lay::ldkt;
      lQ = lW = Lay::ldw;
      gex = reinterpret_cast<const float*>(st + Lay::ge_off);
    } else {
      // big operands straight from global memory (float K = 256 only); dO staged with zero rows
      constexpr int per = 16 / sizeof(In);
      const int ppr = VT / per;
      for (int e = tid; e < kC * ppr; e += kThreads) {
        const int r = e / ppr, cpc = (e - r * ppr) * per;
        uint4 u = make_uint4(0, 0, 0, 0);
        if (r < Lc) u = *reinterpret_cast<const uint4*>(dOg + (static_cast<int64_t>(t0 + r) * HV + hv) * V + v0 + cpc);
        if constexpr (std::is_same_v<T, In>) *reinterpret_cast<uint4*>(dO0 + r * Lay::ldo + cpc) = u;
        else kern::store_widened<In>(dO0 + r * Lay::ldo + cpc, u);
      }
      pA = Ag + blk * kC * kC;
      pKT = KTg + blk * K * kC;
      pQ = Qgg + blk * kC * K;
      pW = Wg + blk * kC * K;
      pO = dO0;
      lA = kC;
      lKT = kC;
      lQ = lW = K;
      gex = p.gexp + blk * K;
    }
    __syncthreads();

    // dN = Aqkᵀ dO + Kg dS⁺   (Aqkᵀ is upper triangular: rows i take j >= i)
    {
      float acc[1][NT][4];
      zero_acc(acc);
      mma_op<T, 1, NT, true, true>(acc, pA, lA, pO, Lay::ldo, tm0, tn0, tm0, kC);
      mma_op<T, 1, NT, true, false>(acc, pKT, lKT, dSt, Lay::lds, tm0, tn0, 0, K);
      if (split) {  // stages > 0 here (the host never splits unstaged)
        mma_op<T, 1, NT, true, false>(acc, pKT, lKT, dStlo, Lay::lds, tm0, tn0, 0, K);
        mma_op<T, 1, NT, true, false>(acc, pKTlo, lKT, dSt, Lay::lds, tm0, tn0, 0, K);
      }
      T* dNg = static_cast<T*>(p.dN) + blk * kC * V;
      T* dNlg = split ? static_cast<T*>(p.dN_lo) + blk * kC * V : nullptr;
#pragma unroll
      for (int ni = 0; ni < NT; ++ni)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int i = tm0 + g + 8 * hh, vv = tn0 + 8 * ni + 2 * t;
          const float x0 = acc[0][ni][2 * hh], x1 = acc[0][ni][2 * hh + 1];
          store2<T>(dNg + static_cast<int64_t>(i) * V + v0 + vv, x0, x1);
          if (split) {
            store2<T>(dNlg + static_cast<int64_t>(i) * V + v0 + vv, x0 - to_f(from_f<T>(x0)),
                      x1 - to_f(from_f<T>(x1)));
          }
          dNt[vv * Lay::ldn + i] = from_f<T>(-x0);
          dNt[(vv + 1) * Lay::ldn + i] = from_f<T>(-x1);
        }
    }
    __syncthreads();
    // dS = e^{γ_C} dS⁺ + Qgᵀ dO + Wᵀ (−dN)
    tile.decay(D, gex);
    mma_op<T, MI, NI, true, true>(D, pQ, lQ, pO, Lay::ldo, sm0, sn0, 0, kC);
    if (p.delta) mma_op<T, MI, NI, true, false>(D, pW, lW, dNt, Lay::ldn, sm0, sn0, 0, kC);
    __syncthreads();
    tile.stage_transposed(D, dSt, Lay::lds, split, dStlo);
  }

  if (p.dh0) tile.store(D, p.dh0, p.dh0_dt, state_base, V, p.v_first, v0);
}

// ================================================================ pass 2
// One CTA per (chunk, value head), 8 warps; warp w owns rows 16 (w & 3) .. +16 and the columns
// 32 (w >> 2) .. +32 of every 64-wide tile (m16n8 fragments, acc[1][4][4]).
//
// A. over V tiles of 64: dY = Bᵀ dN (B = M⁻¹ from the forward's prep), dv = β dY, dβ += ⟨dY, v⟩,
//    A1 = s·Lo(dO Nᵀ), dM = −SLo(dY Nᵀ), dR = diag(β) dM. dM needs no dX: with dX = −dY Sᵀ and
//    W S = U − N, dX Wᵀ + dY Uᵀ = dY Nᵀ.
// B. over K tiles of 64 channels:
//    - over V tiles: dO Sᵀ, N dS⁺ᵀ, dY Sᵀ (= −dX), and rowsum(S ⊙ dS⁺);
//    - the decayed products: dq += (A1 ⊙ Γ) K, Z = (dM ⊙ Γ) K, dK⁻ += (A1 ⊙ Γ)ᵀ Q + (dR ⊙ Γ)ᵀ K.
//      Off-diagonal 16-row blocks on tensor cores, the per-channel decay split at a reference row
//      r = 16 b: rows i >= r carry e^{γ_i − γ_r} <= 1, rows j < r carry e^{γ_r − γ_j} <= 1, so no
//      factor ever exceeds 1 (no overflow whatever the gate). The 4 diagonal 16x16 blocks use
//      exact per-element exps (so no "wide block" special case is needed).
//    - per element: dK⁺ = β (dX ⊙ E + Z), dK⁻ += F ⊙ (N dS⁺ᵀ), dβ += k·(dX⊙E + Z),
//      dγ = q⊙dq + k⊙(dK⁺ − dK⁻) (seed 001), plus the chunk-end term on the last row
//      e^{γ_C} ⊙ rowsum(S⊙dS⁺) + Σ_i k_i ⊙ F_i ⊙ (N dS⁺ᵀ)_i; reverse cumsum → dg.
//    Writes this value head's float32 partials dq, dk (w.r.t. the normalised q, k) for the finish
//    kernels (NS = 1), dβ, and dg (the identity gate transform) or its partial (WyParams::dg_direct).
// Without the delta rule (GLA, simple GLA) there is no phase A: A1 accumulates over the first K
// tile's V sub-tiles, and in the 16-bit types those sub-tiles are 64 columns wide with h's float32
// rows and dS⁺ staged by cp.async (kStageH). docs/backward_v2_plan.md, session 27, has the numbers.
//
// exp(x) as one MUFU.EX2 with denormals flushed (x <= 0 here: decays; a flushed result is 0).
__device__ __forceinline__ float exp_ftz(float x) { return gate::ex2_ftz(x * gate::kLog2e); }

// Element e of the 16-byte vector x of a row of T (e a compile-time constant once unrolled): 8
// elements for the 16-bit types, 4 for float.
template <class T>
__device__ __forceinline__ float vec_elem(const uint4& x, int e) {
  const int w = kIs16<T> ? e >> 1 : e;
  const uint32_t u = w == 0 ? x.x : (w == 1 ? x.y : (w == 2 ? x.z : x.w));
  if constexpr (std::is_same_v<T, float>) return __uint_as_float(u);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __uint_as_float((e & 1) ? (u & 0xffff0000u) : (u << 16));
  else return __half2float(__ushort_as_half(static_cast<unsigned short>((e & 1) ? (u >> 16) : (u & 0xffffu))));
}

// The four diagonal 16x16 blocks of the decayed products with exact per-element decays
// Γ_ij = e^{γ_i − γ_j} (j <= i in the same block). One thread per (row block, channel): warp w
// takes block w / 2 and channels 32 (w % 2) .. +32, the block's 16 rows of k in registers,
// A1_ij / dM_ij broadcast from shared memory. Writes float tiles [64][ldg]:
//   Dq_i = Σ_j A1_ij k_j Γ_ij,  Dz_i = Σ_{j<i} dM_ij k_j Γ_ij,  Dk_j = Σ_i Γ_ij (A1_ij q_i + β_i dM_ij k_i)
// (q, k normalised by rq, rk). A pair's two contributions use the same 16-bit A1 / dM and the same
// Γ_ij, so its gate gradient terms cancel in the sums over rows as in exact arithmetic. DM false
// (no delta rule: dM and β are 0): the dM terms are not formed and Dz is not written.
// Γ is carried down the rows as a running product, Γ_ij = Γ_{i−1,j} e^{γ_i − γ_{i−1}}: 15 exps a
// thread, not 120 (every factor <= 1, so a product only ever decreases and flushes to 0 where the
// exp of the whole difference would; the differences of consecutive cumulative sums telescope to
// γ_i − γ_j). A row's A1 / dM entries arrive as 16-byte vectors (ld keeps rows 16-byte aligned).
template <class T, int ld, int ldg, bool DM>
__device__ __forceinline__ void diag_blocks(const T* A1s, const T* dMs, const T* qs, const T* ks, const float* gs,
                                            const float* rq, const float* rk, const float* bet, float* Dq,
                                            float* Dz, float* Dk) {
  static_assert((ld * sizeof(T)) % 16 == 0, "16-byte aligned rows");
  constexpr int kPer = 16 / static_cast<int>(sizeof(T));  // elements a vector
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int r0 = 16 * (warp >> 1), cc = 32 * (warp & 1) + lane;
  float kh[16], dk[16], G[16];
#pragma unroll
  for (int m = 0; m < 16; ++m) {
    kh[m] = to_f(ks[(r0 + m) * ld + cc]) * rk[r0 + m];
    dk[m] = 0.f;
  }
  float gprev = gs[r0 * ldg + cc];
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int row = r0 + i;
    if (i > 0) {
      const float gi = gs[row * ldg + cc];
      const float d = exp_ftz(gi - gprev);
      gprev = gi;
#pragma unroll
      for (int j = 0; j < i; ++j) G[j] *= d;
    }
    G[i] = 1.f;
    uint4 av[16 / kPer], mv[16 / kPer];
#pragma unroll
    for (int v = 0; v <= i / kPer; ++v) {
      av[v] = reinterpret_cast<const uint4*>(A1s + row * ld + r0)[v];
      if (DM) mv[v] = reinterpret_cast<const uint4*>(dMs + row * ld + r0)[v];
    }
    const float qi = to_f(qs[row * ld + cc]) * rq[row], kbi = kh[i] * bet[row];
    float dq = 0.f, z = 0.f;
#pragma unroll
    for (int j = 0; j <= i; ++j) {
      const float a = vec_elem<T>(av[j / kPer], j % kPer) * G[j];
      dq = fmaf(a, kh[j], dq);
      dk[j] = fmaf(a, qi, dk[j]);
      if (DM && j < i) {
        const float mm = vec_elem<T>(mv[j / kPer], j % kPer) * G[j];
        z = fmaf(mm, kh[j], z);
        dk[j] = fmaf(mm, kbi, dk[j]);
      }
    }
    Dq[row * ldg + cc] = dq;
    if constexpr (DM) Dz[row * ldg + cc] = z;
  }
#pragma unroll
  for (int m = 0; m < 16; ++m) Dk[(r0 + m) * ldg + cc] = dk[m];
}

// Scalar gate (GDN): dg_t straight from the terms that straddle t, each of which carries e^{g_t},
// instead of the reverse cumsum Σ_{i≥t} dγ_i. At a strongly decayed token the true dg_t is nearly
// 0, and the cumsum reaches it by cancelling O(1) float32 terms: an absolute error that dA_log
// weights by g_t (docs/chunked_backward.md, "The scalar gate's dg"; tools/precision --dg-pairs).
//   dg_t = Σ_c e^{γ_L} rowsum(S ⊙ dS⁺) + Σ_{j<t} ct_j + Σ_{i≥t} rt_i + Σ_{j<t≤i} X_ij
//   X_ij = Γ_ij (A1_ij ⟨q̂_i, k̂_j⟩ + β_i dM_ij ⟨k̂_i, k̂_j⟩)  (j < i; the pairs of the decayed products)
// rt, ct, cacc were gathered over the K tiles (the V-side products); the Gram matrices are formed
// here over K. Writes dg_t as pg's row for (token, value head) ([tokens][HV]), which finish_gb reads.
// DM false (no delta rule: β dM is 0): no K Kᵀ Gram matrix.
template <class T, int ld, int ldg, class In, bool DM>
__device__ __forceinline__ void scalar_gate_dg(const WyParams& p, const T* A1s, const T* dMs, T* qs, T* ks,
                                               const In* qbase, const In* kbase, int64_t qk_row, const float* gsc,
                                               const float* rq, const float* rk, const float* bet,
                                               const float* rtacc, const float* ctacc, const float* cacc,
                                               float* Xs, float* dgt, int t0, int Lc, int hv) {
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int tm0 = 16 * (warp & 3), n0 = 32 * (warp >> 2);
  float gq[1][4][4], gk[1][4][4];
  zero_acc(gq);
  zero_acc(gk);
  __syncthreads();  // every warp is done with the last K tile's qs, ks
  for (int c0 = 0; c0 < p.K; c0 += 64) {
    tile_in<T, 64, 64, true>(qs, ld, qbase + c0, qk_row, Lc);
    tile_in<T, 64, 64, true>(ks, ld, kbase + c0, qk_row, Lc);
    land();
    __syncthreads();
    mma_op<T, 1, 4, false, false>(gq, qs, ld, ks, ld, tm0, n0, 0, 64);
    if constexpr (DM) mma_op<T, 1, 4, false, false>(gk, ks, ld, ks, ld, tm0, n0, 0, 64);
    __syncthreads();
  }
#pragma unroll
  for (int ni = 0; ni < 4; ++ni)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = tm0 + g + (e >= 2 ? 8 : 0), j = n0 + 8 * ni + 2 * t + (e & 1);
      float xv = 0.f;
      if (j < i) {
        const float G = __expf(gsc[i] - gsc[j]);
        xv = G * rk[j] * (to_f(A1s[i * ld + j]) * rq[i] * gq[0][ni][e] +
                          (DM ? bet[i] * to_f(dMs[i * ld + j]) * rk[i] * gk[0][ni][e] : 0.f));
      }
      Xs[i * ldg + j] = xv;
    }
  __syncthreads();
  if (tid < kC) {  // column suffix sums in place: Xs[i][j] = Σ_{i' ≥ i} X_i'j
    float run = 0.f;
    for (int i = kC - 1; i > tid; --i) {
      run += Xs[i * ldg + tid];
      Xs[i * ldg + tid] = run;
    }
  }
  __syncthreads();
  if (tid < kC) {
    float pair = 0.f, col = 0.f, row = 0.f, cend = 0.f;
    for (int j = 0; j < tid; ++j) {
      pair += Xs[tid * ldg + j];
      col += ctacc[j];
    }
    for (int i = kC - 1; i >= tid; --i) row += rtacc[i];
    for (int c = 0; c < kC; ++c) cend += cacc[c];
    dgt[tid] = cend + col + row + pair;
  }
  __syncthreads();
  if (p.dg_direct) {  // dg straight out (identity transform), no partial rows
    if (p.dg && tid < Lc) {
      const int64_t r = static_cast<int64_t>(t0 + tid) * p.HV + hv;
      const float raw = load_any(p.gate.g, p.gate.g_dt, r), d = dgt[tid];
      stf(p.dg, p.dg_dt, r, gate::identity_bwd(raw <= gate::kFloor, d));
    }
    return;
  }
  // pg's scalar-gate rows are one float a (token, value head): [tokens][HV] (Partials::pg_ld = 1)
  if (tid < Lc) p.pg[static_cast<int64_t>(t0 + tid) * p.HV + hv] = dgt[tid];
}

// dv's pair at element offset di, in the caller's dtype (float32 compute on 16-bit inputs rounds
// once, here)
template <class T>
__device__ __forceinline__ void store_dv(const WyParams& p, int64_t di, float d0, float d1) {
  if constexpr (kIs16<T>) store2<T>(static_cast<T*>(p.dv) + di, d0, d1);
  else if (p.dv_dt == 1) store2<__nv_bfloat16>(static_cast<__nv_bfloat16*>(p.dv) + di, d0, d1);
  else if (p.dv_dt == 0) store2<__half>(static_cast<__half*>(p.dv) + di, d0, d1);
  else store2<float>(static_cast<float*>(p.dv) + di, d0, d1);
}

template <class T>
struct WyLayout {
  static constexpr int P = pad_of<T>();
  static constexpr int ld = 64 + P;  // 64-wide tiles of the compute type
  static constexpr int ldg = 68;     // float tiles
  static constexpr int es = sizeof(T);
  static constexpr int tile = 64 * ld * es;
  static constexpr int a1 = 0, dm = a1 + tile, qs = dm + tile, ks = qs + tile;
  static constexpr int gs = ks + tile;
  static constexpr int un = gs + 64 * ldg * 4;
  // the union: phase A 6 tiles; phase B 6 tiles (dO, N, dY, S hi, S lo, dS⁺), for 16-bit types 8
  // tiles of 32 columns (the split form adds N and dY lo); the decayed
  // operands (192 rows); dγ (float)
  static constexpr int u_tiles = 6 * tile, u_decay = 192 * ld * es, u_dg = 64 * ldg * 4;
  static constexpr int un_bytes = u_tiles > u_decay ? (u_tiles > u_dg ? u_tiles : u_dg) : (u_decay > u_dg ? u_decay : u_dg);
  static constexpr int small = un + un_bytes;  // 19 arrays of 64 floats
  static constexpr int total = small + 19 * 64 * 4;
};
// bf16: 4 tiles 36864 + γ 17408 + union 55296 + 4864 = 114432 B: two CTAs per SM.

// DELTA: WyParams::delta as a template argument (the kernel runs at its register limit; the
// delta-rule instantiations keep their code and allocation).
// In: the element type of q, k, v, dO (T, or the caller's 16-bit type for the float32 form:
// WyParams::in_dt).
template <class T, bool VEC, bool DELTA, class In = T>
__global__ void __launch_bounds__(kThreads, kIs16<T> ? 2 : 1) wy_kernel(const WyParams p) {
  using L = WyLayout<T>;
  constexpr int ld = L::ld, ldg = L::ldg;
  // the caller's q, k, v, dO in the float32 form on 16-bit inputs: TF32 values, whose tiles (dO, and
  // v without the delta rule) enter the 3xTF32 products unsplit (mma_op's A_TF32)
  constexpr bool kInTf32 = !std::is_same_v<T, In> && kIs16<In>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int K = p.K, V = p.V, HV = p.HV, H = p.H;
  const auto bc = kern::ChunkParallelScheduler<>::block_coord();
  const int c = bc.c, hv = bc.hv, h = hv / p.G;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int mt = warp & 3, nh = warp >> 2, tm0 = 16 * mt, n0 = 32 * nh;
  const kern::ChunkInfo ci = p.chunks[c];
  const int t0 = ci.t0, Lc = ci.len;
  const int64_t blk = static_cast<int64_t>(c) * HV + hv;
  const float scale = p.scale;

  T* A1s = reinterpret_cast<T*>(smem + L::a1);
  T* dMs = reinterpret_cast<T*>(smem + L::dm);
  T* qs = reinterpret_cast<T*>(smem + L::qs);
  T* ks = reinterpret_cast<T*>(smem + L::ks);
  float* gs = reinterpret_cast<float*>(smem + L::gs);
  unsigned char* un = smem + L::un;
  float* sm = reinterpret_cast<float*>(smem + L::small);
  float* bet = sm;            // [64]
  float* rq = sm + 64;        // [64]
  float* rk = sm + 128;       // [64]
  float* gsc = sm + 192;      // [64] scalar gate cumsum
  float* tmp = sm + 256;      // [64]
  // the vector gate (gsc, tmp unused): per thread of phase B's gate loads, which of its 16 tokens
  // have a floored identity gate (WyParams::dg_direct)
  unsigned short* floored = reinterpret_cast<unsigned short*>(gsc);
  float* dbacc = sm + 320;    // [64]
  float* rsum = sm + 384;     // [64]
  float* red = sm + 448;      // [2][64]
  float* colred = sm + 576;   // [4][64]
  float* segtot = sm + 832;   // [4][64]
  float* dbp = sm + 1088;     // [2][64] (ends at 1216 = 19 x 64)

  const In* qg = static_cast<const In*>(p.q);
  const In* kg = static_cast<const In*>(p.k);
  const In* vg = static_cast<const In*>(p.v);
  const In* dOg = static_cast<const In*>(p.d_o);
  const int64_t qk_row = static_cast<int64_t>(H) * K;
  const int64_t v_row = static_cast<int64_t>(HV) * V;
  const In* qbase = qg + static_cast<int64_t>(t0) * qk_row + static_cast<int64_t>(h) * K;
  const In* kbase = kg + static_cast<int64_t>(t0) * qk_row + static_cast<int64_t>(h) * K;
  const In* vbase = vg + static_cast<int64_t>(t0) * v_row + static_cast<int64_t>(hv) * V;
  const In* dObase = dOg + static_cast<int64_t>(t0) * v_row + static_cast<int64_t>(hv) * V;

  // ---- 0. β, l2 norms (over all K), the gate transform
  const WyGate& ga = p.gate;
  // The forward's gate transform (gate.cuh: kind and regularity decided once per block, the
  // element loops branch-free), then the gate floor: the fast transforms on 16-bit inputs (In), as
  // the forward, the recompute and finish_gb's derivative take them, the precise ones otherwise.
  gate::HeadGate hgate;
  hgate.kind = ga.kind;
  hgate.has_alog = ga.kind != 0 && ga.has_alog;
  hgate.alog = hgate.has_alog ? load_any(ga.A_log, ga.alog_dt, hv) : 0.f;
  hgate.ea = hgate.has_alog ? expf(hgate.alog) : 1.f;
  hgate.lower_bound = ga.lower_bound;
  hgate.gamma = (!VEC && ga.g_gamma) ? load_any(ga.g_gamma, ga.gg_dt, hv) : 0.f;  // simple GLA's g_gamma
  const bool use_dtb = ga.kind != 0 && ga.has_dtb;
  if (tid < kC) {
    float b = 0.f;  // 0 without the delta rule: every β-weighted term below vanishes
    if (tid < Lc && DELTA) {
      b = load_any(p.beta, p.beta_dt, static_cast<int64_t>(t0 + tid) * HV + hv);
      if (p.beta_mode != 0) b = (p.beta_mode == 2 ? 2.f : 1.f) * gate::sigmoid_precise(b);
    }
    bet[tid] = b;
    if constexpr (!VEC) {
      float x = 0.f;
      if (tid < Lc) {
        const float dtb = use_dtb ? load_any(ga.dt_bias, ga.dtb_dt, hv) : 0.f;
        const float raw = ga.g ? load_any(ga.g, ga.g_dt, static_cast<int64_t>(t0 + tid) * HV + hv) : 0.f;
        gate::with_head_gate(hgate, [&](auto kind, auto regular) {
          x = gate::head_gate<decltype(kind)::value, decltype(regular)::value, kIs16<In>>(hgate, raw, dtb);
        });
      }
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const float y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
      }
      tmp[tid] = x;
    }
  }
  if (!p.l2norm) {  // no norms to form: q, k are first read by phase B's tiles
    if (tid < kC) rq[tid] = rk[tid] = 1.f;
  } else {  // warp w takes rows w, w + 8, ...: the loads of all its rows are in flight together
    constexpr int kRows = kC / (kThreads / 32);
    float sq[kRows], sk[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) sq[r] = sk[r] = 0.f;
    bool vec_done = false;
    if constexpr (kIs16<In>) {
      if (K == 128) {
        // a lane's four consecutive channels of each row as one 8-byte load: the warp's sixteen
        // rows in one round trip (2-byte loads took two, the kernel's start: ncu, session 33)
        uint2 xq[kRows], xk[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const int i = warp + (kThreads / 32) * r;
          xq[r] = xk[r] = make_uint2(0u, 0u);
          if (i < Lc) {
            xq[r] = *reinterpret_cast<const uint2*>(qbase + i * qk_row + 4 * lane);  // 16-byte aligned rows
            xk[r] = *reinterpret_cast<const uint2*>(kbase + i * qk_row + 4 * lane);
          }
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const In* a = reinterpret_cast<const In*>(&xq[r]);
          const In* b = reinterpret_cast<const In*>(&xk[r]);
#pragma unroll
          for (int m = 0; m < 4; ++m) {
            sq[r] += to_f(a[m]) * to_f(a[m]);
            sk[r] += to_f(b[m]) * to_f(b[m]);
          }
        }
        vec_done = true;
      }
    }
    if (!vec_done) {
#pragma unroll 2
      for (int d = lane; d < K; d += 32) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const int i = warp + (kThreads / 32) * r;
          if (i < Lc) {
            const float a = to_f(qbase[i * qk_row + d]), b = to_f(kbase[i * qk_row + d]);
            sq[r] += a * a;
            sk[r] += b * b;
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        sq[r] += __shfl_xor_sync(0xffffffffu, sq[r], o);
        sk[r] += __shfl_xor_sync(0xffffffffu, sk[r], o);
      }
      if (lane == 0) {
        const int i = warp + (kThreads / 32) * r;
        rq[i] = gate::l2_rnorm(sq[r]);
        rk[i] = gate::l2_rnorm(sk[r]);
      }
    }
  }
  __syncthreads();
  if constexpr (!VEC) {
    if (tid < kC) gsc[tid] = tmp[tid] + (tid >= 32 ? tmp[31] : 0.f);
  }

  // ---- A (the delta rule's). dY, dv, dβ (v part), A1, dM, dR
  // split (16-bit): dY = Bᵀ (dN_hi + dN_lo), dY's low half to scratch for dX below.
  // Without the delta rule (GLA, simple GLA) there is no phase A: V_new = V, so dv = dN, and there
  // is no M⁻¹, dY, dM or dX; A1 = s·Lo(dO Vᵀ) is formed from phase B's first K tile's V sub-tiles
  // (the same dO, V tiles, the same k-step order), and dv = dN is copied here, before phase B,
  // unless pass 1 wrote it (WyParams::dv_written).
  const bool split = kIs16<T> && DELTA && p.dN_lo != nullptr;
  const bool dv_done = !DELTA && p.dv_written;
  T* Bs = reinterpret_cast<T*>(un);
  T* dNs = Bs + 64 * ld;
  T* Ns = dNs + 64 * ld;
  T* dOs = Ns + 64 * ld;
  T* dYs = dOs + 64 * ld;
  T* dNlos = dYs + 64 * ld;  // the union's sixth tile (split)
  const T* dNg = static_cast<const T*>(p.dN) + blk * kC * V;
  const T* dNlg = split ? static_cast<const T*>(p.dN_lo) + blk * kC * V : nullptr;
  const T* Ng = static_cast<const T*>(p.vnew) + blk * kC * V;
  T* dYg = static_cast<T*>(p.dY) + blk * kC * V;
  T* dYlg = split ? static_cast<T*>(p.dY_lo) + blk * kC * V : nullptr;
  const T* Nlg = split ? static_cast<const T*>(p.vnew_lo) + blk * kC * V : nullptr;
  float accA[1][4][4], accM[1][4][4];
  // A1 = s·Lo(dO Nᵀ) and dM = −SLo(dY Nᵀ) from their accumulators into shared memory (dM: the
  // delta rule's)
  auto store_a1_dm = [&]() {
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int i = tm0 + g + 8 * hh, j = n0 + 8 * ni + 2 * t;
        float a[2], m[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int jj = j + e;
          a[e] = jj <= i ? scale * accA[0][ni][2 * hh + e] : 0.f;
          m[e] = jj < i ? -accM[0][ni][2 * hh + e] : 0.f;
        }
        store2<T>(A1s + i * ld + j, a[0], a[1]);
        if constexpr (DELTA) store2<T>(dMs + i * ld + j, m[0], m[1]);
      }
  };
  // split: V_new's low half staged in the q tile (free until phase B)
  T* Nlos = qs;
  if constexpr (DELTA) {
    tile64<T>(Bs, ld, static_cast<const T*>(p.Ainv) + blk * kC * kC, kC);
    zero_acc(accA);
    zero_acc(accM);
    float dby[2] = {0.f, 0.f};
    for (int v0 = 0; v0 < V; v0 += 64) {
      tile64<T>(dNs, ld, dNg + v0, V);
      if (split) {
        tile64<T>(dNlos, ld, dNlg + v0, V);
        tile64<T>(Nlos, ld, Nlg + v0, V);
      }
      tile64<T>(Ns, ld, Ng + v0, V);  // V_new: the state pass's rows
      tile_in<T, 64, 64, true>(dOs, ld, dObase + v0, v_row, Lc);
      // v's rows for dβ's ⟨dY, v⟩, in the k tile (free until phase B): read from global memory
      // element by element after the products, they were the phase's largest stall (ncu, session 33)
      tile_in<T, 64, 64, true>(ks, ld, vbase + v0, v_row, Lc);
      land();
      __syncthreads();
      float y[1][4][4];
      zero_acc(y);
      mma_op<T, 1, 4, true, true>(y, Bs, ld, dNs, ld, tm0, n0, tm0, kC);  // Bᵀ is upper triangular
      if (split) mma_op<T, 1, 4, true, true>(y, Bs, ld, dNlos, ld, tm0, n0, tm0, kC);
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int i = tm0 + g + 8 * hh, vv = n0 + 8 * ni + 2 * t;
          const float y0 = y[0][ni][2 * hh], y1 = y[0][ni][2 * hh + 1];
          store2<T>(dYs + i * ld + vv, y0, y1);
          store2<T>(dYg + static_cast<int64_t>(i) * V + v0 + vv, y0, y1);
          if (split) {
            store2<T>(dYlg + static_cast<int64_t>(i) * V + v0 + vv, y0 - to_f(from_f<T>(y0)),
                      y1 - to_f(from_f<T>(y1)));
          }
          if (i < Lc) {
            // dβ's ⟨dY, v⟩. It and ⟨dX, E k⟩ nearly cancel when v ≈ Sᵀ(E k), so both must see the
            // same dY: the rounded one, or in split mode the float one (dX then uses hi + lo)
            const T* vr = ks + i * ld + vv;  // v exactly (the float32 form widens it)
            const float ya = split ? y0 : to_f(from_f<T>(y0)), yb = split ? y1 : to_f(from_f<T>(y1));
            dby[hh] += ya * to_f(vr[0]) + yb * to_f(vr[1]);
            const int64_t di = (static_cast<int64_t>(t0 + i) * HV + hv) * V + v0 + vv;
            store_dv<T>(p, di, bet[i] * y0, bet[i] * y1);
          }
        }
      __syncthreads();
      mma_op<T, 1, 4, false, false, kInTf32>(accA, dOs, ld, Ns, ld, tm0, n0, 0, 64);
      mma_op<T, 1, 4, false, false>(accM, dYs, ld, Ns, ld, tm0, n0, 0, 64);
      if (split) {
        mma_op<T, 1, 4, false, false>(accA, dOs, ld, Nlos, ld, tm0, n0, 0, 64);
        mma_op<T, 1, 4, false, false>(accM, dYs, ld, Nlos, ld, tm0, n0, 0, 64);
      }
      __syncthreads();
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      dby[hh] += __shfl_xor_sync(0xffffffffu, dby[hh], 1);
      dby[hh] += __shfl_xor_sync(0xffffffffu, dby[hh], 2);
      if (t == 0) red[nh * 64 + tm0 + g + 8 * hh] = dby[hh];
    }
    store_a1_dm();
  } else {
    if (tid < kC) red[tid] = red[64 + tid] = 0.f;  // no dβ
    if (!dv_done) {  // dv = dN, rows before the chunk's end, in the caller's dtype
      // 16-byte loads of the workspace rows, a thread's U in flight together (a 64 x 128 chunk is
      // one round): the loop's stores may alias its loads for the compiler, so a loop of single
      // loads waited on each (+0.37 ms of simple GLA's float32 form, call 3 of session 27)
      constexpr int per = 16 / static_cast<int>(sizeof(T)), U = kIs16<T> ? 4 : 8;
      const int rv = V / per, nvec = Lc * rv;
      for (int e0 = tid; e0 < nvec; e0 += U * kThreads) {
        uint4 x[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int e = e0 + u * kThreads, i = e / rv;
          if (e < nvec) x[u] = *reinterpret_cast<const uint4*>(dNg + static_cast<int64_t>(i) * V + (e - i * rv) * per);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int e = e0 + u * kThreads, i = e / rv, c = (e - i * rv) * per;
          if (e < nvec) {
            const T* xe = reinterpret_cast<const T*>(&x[u]);
            const int64_t di = (static_cast<int64_t>(t0 + i) * HV + hv) * V + c;
#pragma unroll
            for (int m = 0; m < per; m += 2) store_dv<T>(p, di + m, to_f(xe[m]), to_f(xe[m + 1]));
          }
        }
      }
    }
  }
  __syncthreads();
  // Scalar gate: dg_t is formed at the end from the terms that straddle t (see the end of the
  // kernel); these gather its per-row parts over the K tiles: rtacc_i (plus side, rows i >= t),
  // ctacc_j (minus side, rows j < t), cacc (the chunk-end term, every t), per channel slot.
  float* rtacc = red;
  float* ctacc = red + 64;
  float* cacc = tmp;
  if (tid < kC) {
    dbacc[tid] = red[tid] + red[64 + tid];
    if constexpr (!VEC) red[tid] = red[64 + tid] = tmp[tid] = 0.f;
  }

  // ---- B. per K tile of 64 channels
  // The V-side products run over V in sub-tiles of kVB columns: 32 for the 16-bit types with the
  // delta rule, so that the split form's eight tiles (dO, N and its low half, dY and its low half,
  // S hi and lo, dS⁺) fit the union, 5 KB each (their low halves were read from global memory by
  // the mma steps, which stalled on them: ncu, bench/logs/2026-11-25-h100-s18-a-*). Without the
  // delta rule (16-bit) four tiles of 64 columns and S's float32 rows (kStageH) fit instead: every
  // load of a sub-tile is a cp.async, none holds registers, and a K tile takes two round trips
  // to memory, not four.
  constexpr bool kStageH = kIs16<T> && !DELTA;
  constexpr int kVB = kIs16<T> && DELTA ? 32 : 64;
  constexpr int ldb = kVB + L::P;
  constexpr int ldh = kVB + 4;  // S's float32 rows (kStageH)
  static_assert(8 * 64 * ldb * L::es <= L::un_bytes || !kIs16<T> || !DELTA, "phase B's tiles fit the union");
  static_assert(4 * 64 * ldb * L::es + 64 * ldh * 4 <= L::un_bytes || !kStageH, "phase B's tiles fit the union");
  auto vtile = [&](int n) { return reinterpret_cast<T*>(un) + n * 64 * ldb; };
  T* Ss = vtile(0);
  T* dSs = vtile(1);
  Ns = vtile(2);
  dOs = vtile(3);
  dYs = vtile(4);
  T* Slo = vtile(5);  // S − hi(S): dX = −dY Sᵀ at ~float32 accuracy in S (16-bit types)
  Nlos = vtile(6);
  T* dYlos = vtile(7);
  const float* hg = static_cast<const float*>(p.h) + blk * K * V;
  const T* hsg = static_cast<const T*>(p.h) + blk * K * V;  // h16
  const T* dhg = static_cast<const T*>(p.dh) + blk * K * V;
  const T* dYr = dYg;
  float* hf = reinterpret_cast<float*>(vtile(4));  // kStageH: h's 64 x kVB block as stored
  for (int c0 = 0; c0 < K; c0 += 64) {
    // no delta rule: the first K tile's V sub-tiles also form A1 (phase A's product)
    const bool form_a1 = !DELTA && c0 == 0;
    tile_in<T, 64, 64, true>(qs, ld, qbase + c0, qk_row, Lc);
    tile_in<T, 64, 64, true>(ks, ld, kbase + c0, qk_row, Lc);
    {
      const int cc = tid & 63, seg = tid >> 6;
      if constexpr (VEC) {
        const float dtb = use_dtb ? load_any(ga.dt_bias, ga.dtb_dt, static_cast<int64_t>(hv) * K + c0 + cc) : 0.f;
        // the 16 raw gates first (the dtype branch outside the loads: all in flight together)
        float vals[16];
        const int64_t gstride = static_cast<int64_t>(HV) * K;
        const int64_t gbase = (static_cast<int64_t>(t0 + 16 * seg) * HV + hv) * K + c0 + cc;
        if (ga.g_dt == 2) {  // 32-bit token offsets (HV K < 2^31), as chunk_prep's gate loads
          const float* gf = static_cast<const float*>(ga.g) + gbase;
          const int gs = HV * K;
#pragma unroll
          for (int m = 0; m < 16; ++m) vals[m] = 16 * seg + m < Lc ? __ldg(gf + m * gs) : 0.f;
        } else {
#pragma unroll
          for (int m = 0; m < 16; ++m)
            vals[m] = 16 * seg + m < Lc ? load_any(ga.g, ga.g_dt, gbase + m * gstride) : 0.f;
        }
        if (p.dg_direct) {  // the identity gate's floored tokens, for dg at the tile's end
          unsigned fl = 0;
#pragma unroll
          for (int m = 0; m < 16; ++m) fl |= (vals[m] <= gate::kFloor ? 1u : 0u) << m;
          floored[tid] = static_cast<unsigned short>(fl);
        }
        // tokens past the chunk hold 0.f (their transforms discarded by the sum)
        gate::with_head_gate(hgate, [&](auto kind, auto regular) {
          gate::head_gate_each<decltype(kind)::value, decltype(regular)::value, kIs16<In>>(hgate, vals, dtb);
        });
        float run = 0.f;
        gate::running_sum_below(vals, 16 * seg, Lc, run, [&](int m, float r) { vals[m] = r; });
        segtot[seg * 64 + cc] = run;
        __syncthreads();
        float off = 0.f;
        for (int s2 = 0; s2 < seg; ++s2) off += segtot[s2 * 64 + cc];
#pragma unroll
        for (int m = 0; m < 16; ++m) gs[(16 * seg + m) * ldg + cc] = vals[m] + off;
      } else {
#pragma unroll
        for (int m = 0; m < 16; ++m) gs[(16 * seg + m) * ldg + cc] = gsc[16 * seg + m];
      }
    }
    land();  // q, k tiles
    __syncthreads();

    // dO Sᵀ, N dS⁺ᵀ, dY Sᵀ over V; rowsum(S ⊙ dS⁺) per channel
    float aq[1][4][4], an[1][4][4], ax[1][4][4];
    zero_acc(aq);
    zero_acc(an);
    zero_acc(ax);
    if constexpr (!DELTA) zero_acc(accA);
    float rs = 0.f;
    for (int v0 = 0; v0 < V; v0 += kVB) {
      tile_in<T, 64, kVB, true>(dOs, ldb, dObase + v0, v_row, Lc);
      if constexpr (DELTA) kern::tile_copy<T, 64, kVB, kThreads>(Ns, ldb, Ng + v0, V, tid);
      else tile_in<T, 64, kVB, true>(Ns, ldb, vbase + v0, v_row, Lc);
      if (DELTA) kern::tile_copy<T, 64, kVB, kThreads>(dYs, ldb, dYr + v0, V, tid);
      if (split) {  // the low halves (dY's written by this CTA in phase A)
        kern::tile_copy<T, 64, kVB, kThreads>(Nlos, ldb, Nlg + v0, V, tid);
        kern::tile_copy<T, 64, kVB, kThreads>(dYlos, ldb, dYlg + v0, V, tid);
      }
      if constexpr (kStageH) {  // h and dS⁺ by cp.async; S and the rowsum from shared memory
        kern::tile_copy<T, 64, kVB, kThreads>(dSs, ldb, dhg + static_cast<int64_t>(c0) * V + v0, V, tid);
        if (p.h16) kern::tile_copy<T, 64, kVB, kThreads>(Ss, ldb, hsg + static_cast<int64_t>(c0) * V + v0, V, tid);
        else if (p.h_vfirst) kern::tile_copy<float, kVB, 64, kThreads>(hf, ldh, hg + static_cast<int64_t>(v0) * K + c0, K, tid);
        else kern::tile_copy<float, 64, kVB, kThreads>(hf, ldh, hg + static_cast<int64_t>(c0) * V + v0, V, tid);
        land();
        __syncthreads();
        constexpr int NV = kVB / 4;  // this thread's columns of row ch
        const int ch = tid >> 2, vq = (tid & 3) * NV;
        if (!p.h16) {  // S from float32 h (h16: S arrived as the 16-bit operand itself)
#pragma unroll
          for (int m = 0; m < NV; m += 2) {
            const int va = vq + m;
            const float s0 = p.h_vfirst ? hf[va * ldh + ch] : hf[ch * ldh + va];
            const float s1 = p.h_vfirst ? hf[(va + 1) * ldh + ch] : hf[ch * ldh + va + 1];
            store2<T>(Ss + ch * ldb + va, s0, s1);
          }
        }
        // the rowsum from the 16-bit S either way (this thread's own stores, or landed above): a
        // saved buffer's float32 h and the recompute's 16-bit h give the same bits. 16-byte
        // shared loads (rows of ldb = 72 elements: 16-byte aligned, conflict-free per 8 lanes).
        static_assert(NV % 8 == 0 && (ldb * 2) % 16 == 0, "16-byte rows of S and dS+");
        const uint4* s4 = reinterpret_cast<const uint4*>(Ss + ch * ldb + vq);
        const uint4* d4 = reinterpret_cast<const uint4*>(dSs + ch * ldb + vq);
#pragma unroll
        for (int w = 0; w < NV / 8; ++w) {
          const uint4 a = s4[w], b = d4[w];
#pragma unroll
          for (int e = 0; e < 8; ++e) rs += vec_elem<T>(a, e) * vec_elem<T>(b, e);
        }
      } else {
        constexpr int NV = kVB / 4;  // this thread's columns of row ch
        const int ch = tid >> 2, vq = (tid & 3) * NV;
        const T* drow = dhg + static_cast<int64_t>(c0 + ch) * V + v0 + vq;
        float sv[NV], dv[NV];
        if (p.h_vfirst) {
#pragma unroll
          for (int m = 0; m < NV; ++m) sv[m] = hg[static_cast<int64_t>(v0 + vq + m) * K + c0 + ch];
        } else {
          const float4* s4 = reinterpret_cast<const float4*>(hg + static_cast<int64_t>(c0 + ch) * V + v0 + vq);
#pragma unroll
          for (int m = 0; m < NV / 4; ++m) {
            const float4 x = s4[m];
            sv[4 * m] = x.x; sv[4 * m + 1] = x.y; sv[4 * m + 2] = x.z; sv[4 * m + 3] = x.w;
          }
        }
        if constexpr (kIs16<T>) {  // NV = 8: one 16-byte load
          static_assert(NV == 8, "a 16-bit thread row is 16 bytes");
          const uint4 x = *reinterpret_cast<const uint4*>(drow);
          const T* xe = reinterpret_cast<const T*>(&x);
#pragma unroll
          for (int m = 0; m < NV; ++m) dv[m] = to_f(xe[m]);
        } else {
          const float4* d4 = reinterpret_cast<const float4*>(drow);
#pragma unroll
          for (int m = 0; m < NV / 4; ++m) {
            const float4 x = d4[m];
            dv[4 * m] = x.x; dv[4 * m + 1] = x.y; dv[4 * m + 2] = x.z; dv[4 * m + 3] = x.w;
          }
        }
#pragma unroll
        for (int m = 0; m < NV; m += 2) {
          rs += sv[m] * dv[m] + sv[m + 1] * dv[m + 1];
          store2<T>(Ss + ch * ldb + vq + m, sv[m], sv[m + 1]);
          store2<T>(dSs + ch * ldb + vq + m, dv[m], dv[m + 1]);
          if constexpr (kIs16<T> && DELTA) {  // dX's operand only
            store2<T>(Slo + ch * ldb + vq + m, sv[m] - to_f(from_f<T>(sv[m])), sv[m + 1] - to_f(from_f<T>(sv[m + 1])));
          }
        }
      }
      land();
      __syncthreads();
      if constexpr (DELTA && !kIs16<T>) {  // dO Sᵀ and dX = dY Sᵀ from one split of S
        mma_op_pair<1, 4, kInTf32>(aq, ax, dOs, dYs, ldb, Ss, ldb, tm0, n0, 0, kVB);
      } else {
        mma_op<T, 1, 4, false, false, kInTf32>(aq, dOs, ldb, Ss, ldb, tm0, n0, 0, kVB);
      }
      mma_op<T, 1, 4, false, false, kInTf32 && !DELTA>(an, Ns, ldb, dSs, ldb, tm0, n0, 0, kVB);  // N = v
      if constexpr (DELTA) {
        if constexpr (kIs16<T>) mma_op<T, 1, 4, false, false>(ax, dYs, ldb, Ss, ldb, tm0, n0, 0, kVB);  // dX
        if constexpr (kIs16<T>) {
          mma_op<T, 1, 4, false, false>(ax, dYs, ldb, Slo, ldb, tm0, n0, 0, kVB);
          if (split) {
            mma_op<T, 1, 4, false, false>(ax, dYlos, ldb, Ss, ldb, tm0, n0, 0, kVB);
            mma_op<T, 1, 4, false, false>(an, Nlos, ldb, dSs, ldb, tm0, n0, 0, kVB);
          }
        }
      } else if (form_a1) {
        mma_op<T, 1, 4, false, false, kInTf32>(accA, dOs, ldb, Ns, ldb, tm0, n0, 0, kVB);
      }
      __syncthreads();
    }
    if (form_a1) {  // A1 complete: to shared memory for the decayed products
      store_a1_dm();
      __syncthreads();
    }
    rs += __shfl_xor_sync(0xffffffffu, rs, 1);
    rs += __shfl_xor_sync(0xffffffffu, rs, 2);
    if ((tid & 3) == 0) rsum[tid >> 2] = rs;

    // The decayed products (A1 = s·Lo(dO Nᵀ), dM; dR = diag(β) dM):
    //   dq_i += Σ_j A1_ij k_j Γ_ij,  Z_i = Σ_{j<i} dM_ij k_j Γ_ij,  dK⁻_j += Σ_i Γ_ij (A1_ij q_i + β_i dM_ij k_i).
    // The four diagonal 16x16 blocks first, exact per-element decays, into the (now free) union
    // as float tiles Dq, Dz, Dk.
    float* Dq = reinterpret_cast<float*>(un);
    float* Dz = Dq + 64 * ldg;
    float* Dk = Dz + 64 * ldg;
    diag_blocks<T, ld, ldg, DELTA>(A1s, dMs, qs, ks, gs, rq, rk, bet, Dq, Dz, Dk);
    __syncthreads();

    // fold the V-side products and the diagonal blocks: dq = s E (dO Sᵀ) + Dq, x = dX ⊙ E + Dz,
    // km = F ⊙ (N dS⁺ᵀ) + Dk
    const float* gL = gs + 63 * ldg;
    float dq[2][8], x[2][8], km[2][8], colp[8];
    float rt[2] = {0.f, 0.f}, ct[2] = {0.f, 0.f};  // scalar gate: this thread's row parts
#pragma unroll
    for (int m = 0; m < 8; ++m) colp[m] = 0.f;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int i = tm0 + g + 8 * hh;
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int c2 = n0 + 8 * ni + 2 * t;
        const float2 dqd = *reinterpret_cast<const float2*>(Dq + i * ldg + c2);
        const float2 dzd = DELTA ? *reinterpret_cast<const float2*>(Dz + i * ldg + c2) : make_float2(0.f, 0.f);
        const float2 dkd = *reinterpret_cast<const float2*>(Dk + i * ldg + c2);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int cc = c2 + e, m = 2 * ni + e, f = 2 * hh + e;
          const float gi = gs[i * ldg + cc];
          const float E = __expf(gi), F = __expf(gL[cc] - gi);
          const float kh = to_f(ks[i * ld + cc]) * rk[i];
          const float kmv = F * an[0][ni][f];
          colp[m] += kh * kmv;
          const float dqv = scale * E * aq[0][ni][f], xv = DELTA ? -E * ax[0][ni][f] : 0.f;
          if constexpr (!VEC) {
            rt[hh] += to_f(qs[i * ld + cc]) * rq[i] * dqv + (DELTA ? kh * bet[i] * xv : 0.f);
            ct[hh] += kh * kmv;
          }
          dq[hh][m] = dqv + (e ? dqd.y : dqd.x);
          x[hh][m] = xv + (e ? dzd.y : dzd.x);
          km[hh][m] = kmv + (e ? dkd.y : dkd.x);
        }
      }
    }
    if constexpr (!VEC) {  // per row over this warp's 32 channels, to segtot (summed at the tile's end)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
#pragma unroll
        for (int o = 1; o < 4; o <<= 1) {
          rt[hh] += __shfl_xor_sync(0xffffffffu, rt[hh], o);
          ct[hh] += __shfl_xor_sync(0xffffffffu, ct[hh], o);
        }
        if (t == 0) {
          segtot[nh * 64 + tm0 + g + 8 * hh] = rt[hh];
          segtot[128 + nh * 64 + tm0 + g + 8 * hh] = ct[hh];
        }
      }
    }
    // seed 001 on everything but the off-diagonal blocks: dγ = q⊙dq + k⊙(dK⁺ − dK⁻), dK⁺ = β (x + z);
    // from here km holds dk = dK⁺ + dK⁻.
    float dgam[2][8], dbr[2] = {0.f, 0.f};
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int i = tm0 + g + 8 * hh;
      const float bi = bet[i];
#pragma unroll
      for (int m = 0; m < 8; ++m) {
        const int cc = n0 + 8 * (m >> 1) + 2 * t + (m & 1);
        const float qh = to_f(qs[i * ld + cc]) * rq[i], kh = to_f(ks[i * ld + cc]) * rk[i];
        const float dkp = bi * x[hh][m];
        dbr[hh] += kh * x[hh][m];
        dgam[hh][m] = qh * dq[hh][m] + kh * (dkp - km[hh][m]);
        km[hh][m] += dkp;
      }
    }

    // Off-diagonal blocks on tensor cores. Pair (i in block I, j in block J < I) uses the
    // reference row r = 16 I on both sides: Kmin_I[j] = k_j e^{γ_r − γ_j}, Qd_I[i] = q_i e^{γ_i − γ_r},
    // Kd_I[i] = β_i k_i e^{γ_i − γ_r}; every factor is <= 1 (no overflow for any gate). The gate
    // gradient of a pair enters row i as +Qd_I[i]·A1_ij·Kmin_I[j] and row j as −Kmin_I[j]·A1_ij·Qd_I[i]
    // (likewise for dM with Kd): the same rounded operands on both sides, so the two cancel
    // in the sums over rows (dA_log, ddt_bias) as they do in exact arithmetic.
    __syncthreads();  // every warp has read Dq, Dz, Dk: the union takes the decayed operands
    T* Kmin = reinterpret_cast<T*>(un);  // 96 rows: I = 1, 2, 3 -> rows j < 16 I at offsets 0, 16, 48
    T* Qd = Kmin + 96 * ld;              // 48 rows: I = 1, 2, 3 -> rows 16 I .. 16 I + 15 at 16 (I - 1)
    T* Kd = Qd + 48 * ld;                // 48 rows, same, β folded in
    constexpr int kDecayRows = DELTA ? 192 : 144;  // Kd (β folded in) only with the delta rule
    // Thread tid takes channels 4 (tid % 16) .. +4 of row tid / 16 of each 16-row group of the
    // operands; the group index it fixes which operand, block and reference row a row belongs to
    // at compile time (no per-element index arithmetic or branches: ncu, session 28).
    static_assert(kThreads == 256, "16 rows of 16 threads a group");
    const int cc = (tid & 15) * 4, rb = tid >> 4;
#pragma unroll
    for (int it = 0; it < kDecayRows / 16; ++it) {
      const int R = rb + 16 * it;
      int row, r;
      const T* src;
      float sc;
      const bool minus = it < 6;  // Kmin rows (96): groups 0 (I = 1), 1-2 (I = 2), 3-5 (I = 3)
      if (minus) {
        const int I = it == 0 ? 1 : (it < 3 ? 2 : 3);
        r = 16 * I;
        row = R - (I == 1 ? 0 : (I == 2 ? 16 : 48));
        src = ks;
        sc = rk[row];
      } else {  // Qd (groups 6-8), Kd (9-11): block I = (it - 6) % 3 + 1
        const int which = (it - 6) / 3;
        r = 16 * ((it - 6) % 3 + 1);
        row = r + rb;
        src = which == 0 ? qs : ks;
        sc = which == 0 ? rq[row] : rk[row] * bet[row];
      }
      float xv[4];
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const float d = minus ? gs[r * ldg + cc + m] - gs[row * ldg + cc + m] : gs[row * ldg + cc + m] - gs[r * ldg + cc + m];
        xv[m] = to_f(src[row * ld + cc + m]) * sc * __expf(d);
      }
      T* dst = reinterpret_cast<T*>(un) + R * ld + cc;
      store2<T>(dst, xv[0], xv[1]);
      store2<T>(dst + 2, xv[2], xv[3]);
    }
    __syncthreads();
    auto kmin_ofs = [](int I) { return I == 1 ? 0 : (I == 2 ? 16 : 48); };
    if (mt >= 1) {  // row side of row block I = mt
      const int r = tm0;
      const T* Kb = Kmin + kmin_ofs(mt) * ld;
      const T* Qb = Qd + (r - 16) * ld;
      const T* Kdb = Kd + (r - 16) * ld;
      float a[1][4][4];
      zero_acc(a);
      mma_op<T, 1, 4, false, true>(a, A1s, ld, Kb, ld, r, n0, 0, r);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int i = tm0 + g + 8 * hh;
#pragma unroll
        for (int m = 0; m < 8; ++m) {
          const int cc = n0 + 8 * (m >> 1) + 2 * t + (m & 1);
          const float v = a[0][m >> 1][2 * hh + (m & 1)];
          dq[hh][m] += v * __expf(gs[i * ldg + cc] - gs[r * ldg + cc]);
          dgam[hh][m] += to_f(Qb[(g + 8 * hh) * ld + cc]) * v;
        }
      }
      if constexpr (DELTA) {
      zero_acc(a);
      mma_op<T, 1, 4, false, true>(a, dMs, ld, Kb, ld, r, n0, 0, r);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int i = tm0 + g + 8 * hh;
        const float bi = bet[i];
#pragma unroll
        for (int m = 0; m < 8; ++m) {
          const int cc = n0 + 8 * (m >> 1) + 2 * t + (m & 1);
          const float v = a[0][m >> 1][2 * hh + (m & 1)];
          const float z = v * __expf(gs[i * ldg + cc] - gs[r * ldg + cc]);
          km[hh][m] += bi * z;
          dbr[hh] += to_f(ks[i * ld + cc]) * rk[i] * z;
          dgam[hh][m] += to_f(Kdb[(g + 8 * hh) * ld + cc]) * v;
        }
      }
      }  // DELTA
    }
    for (int I = mt + 1; I < 4; ++I) {  // column side of column block mt, one row block I at a time
      const int r = 16 * I;
      float a[1][4][4];
      zero_acc(a);
      mma_op<T, 1, 4, true, true>(a, A1s + r * ld, ld, Qd + (r - 16) * ld, ld, tm0, n0, 0, 16);
      if constexpr (DELTA) mma_op<T, 1, 4, true, true>(a, dMs + r * ld, ld, Kd + (r - 16) * ld, ld, tm0, n0, 0, 16);
      const T* Kb = Kmin + kmin_ofs(I) * ld;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int j = tm0 + g + 8 * hh;
#pragma unroll
        for (int m = 0; m < 8; ++m) {
          const int cc = n0 + 8 * (m >> 1) + 2 * t + (m & 1);
          const float v = a[0][m >> 1][2 * hh + (m & 1)];
          km[hh][m] += v * __expf(gs[r * ldg + cc] - gs[j * ldg + cc]);
          dgam[hh][m] -= to_f(Kb[j * ld + cc]) * v;
        }
      }
    }
    // dq, dk out
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int i = tm0 + g + 8 * hh;
      if (i < Lc) {
        const int64_t orow = (static_cast<int64_t>(t0 + i) * HV + hv) * K + c0;
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
          const int cc = n0 + 8 * ni + 2 * t;
          if (p.dq) {  // the gradients themselves (WyParams::dq): [tokens][H = HV][K] in q's dtype
            store2<In>(static_cast<In*>(p.dq) + orow + cc, dq[hh][2 * ni], dq[hh][2 * ni + 1]);
            store2<In>(static_cast<In*>(p.dk) + orow + cc, km[hh][2 * ni], km[hh][2 * ni + 1]);
          } else {  // the partials for finish_qk, in PartialQK<In> (chunk_bwd.cuh says why)
            using P = PartialQK<In>;
            store2<P>(static_cast<P*>(p.pq) + orow + cc, dq[hh][2 * ni], dq[hh][2 * ni + 1]);
            store2<P>(static_cast<P*>(p.pk) + orow + cc, km[hh][2 * ni], km[hh][2 * ni + 1]);
          }
        }
      }
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      dbr[hh] += __shfl_xor_sync(0xffffffffu, dbr[hh], 1);
      dbr[hh] += __shfl_xor_sync(0xffffffffu, dbr[hh], 2);
      if (t == 0) dbp[nh * 64 + tm0 + g + 8 * hh] = dbr[hh];
    }
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      colp[m] += __shfl_xor_sync(0xffffffffu, colp[m], 4);
      colp[m] += __shfl_xor_sync(0xffffffffu, colp[m], 8);
      colp[m] += __shfl_xor_sync(0xffffffffu, colp[m], 16);
    }
    if (g == 0) {
#pragma unroll
      for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e) colred[mt * 64 + n0 + 8 * ni + 2 * t + e] = colp[2 * ni + e];
    }
    if constexpr (VEC) {
      __syncthreads();  // every warp is done with the decayed operands: dγ takes the union
      float* dgs = reinterpret_cast<float*>(un);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int i = tm0 + g + 8 * hh;
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
          *reinterpret_cast<float2*>(dgs + i * ldg + n0 + 8 * ni + 2 * t) =
              make_float2(dgam[hh][2 * ni], dgam[hh][2 * ni + 1]);
      }
      __syncthreads();
      {  // the reverse cumsum dg_i = (chunk-end term) + Σ_{i' >= i} dγ_i', four 16-row segments at once
        const int cc = tid & 63, seg = tid >> 6;
        float tot = 0.f;
#pragma unroll
        for (int m = 0; m < 16; ++m) tot += dgs[(16 * seg + m) * ldg + cc];
        segtot[seg * 64 + cc] = tot;
        if (tid < kC) dbacc[tid] += dbp[tid] + dbp[64 + tid];
        __syncthreads();
        // chunk-end term e^{γ_C} rowsum(S ⊙ dS⁺) + Σ_i k_i F_i (N dS⁺ᵀ)_i
        float run = __expf(gL[cc]) * rsum[cc] + colred[cc] + colred[64 + cc] + colred[128 + cc] + colred[192 + cc];
        for (int s2 = 3; s2 > seg; --s2) run += segtot[s2 * 64 + cc];
        const int64_t gofs = (static_cast<int64_t>(t0) * HV + hv) * K + c0 + cc;
        if (p.dg_direct) {  // dg straight out (identity transform: 0 on floored tokens), no partials
          if (p.dg) {
            const unsigned fl = floored[tid];
            const int64_t step = static_cast<int64_t>(HV) * K;
            // the dtype dispatched once, the row pointer stepped (not a switch and an index product
            // a token: 8% of the GLA kernel's instructions, ncu session 28)
            // The row address steps as an integer: rows past the chunk's end (not stored) and the
            // step past row 0 after the last store would be out-of-range pointers.
            auto walk = [&](auto* out0) {
              using Out = std::remove_pointer_t<decltype(out0)>;
              const std::uintptr_t bstep = static_cast<std::uintptr_t>(step) * sizeof(Out);
              std::uintptr_t a = reinterpret_cast<std::uintptr_t>(out0) +
                                 static_cast<std::uintptr_t>(gofs + static_cast<int64_t>(16 * seg + 15) * step) * sizeof(Out);
#pragma unroll 1  // rolled: the kernel's code size is its instruction-fetch stall (ncu)
              for (int m = 15; m >= 0; --m, a -= bstep) {
                const int i = 16 * seg + m;
                run += dgs[i * ldg + cc];
                const float d = gate::identity_bwd((fl >> m) & 1u, run);
                if (i < Lc) {
                  Out* out = reinterpret_cast<Out*>(a);
                  if constexpr (std::is_same_v<Out, double>) *out = static_cast<double>(d);
                  else *out = kern::from_f<Out>(d);
                }
              }
            };
            switch (p.dg_dt) {
              case 0: walk(static_cast<__half*>(p.dg)); break;
              case 1: walk(static_cast<__nv_bfloat16*>(p.dg)); break;
              case 2: walk(static_cast<float*>(p.dg)); break;
              default: walk(static_cast<double*>(p.dg)); break;
            }
          }
        } else {
          float* pgo = p.pg + gofs;
#pragma unroll
          for (int m = 15; m >= 0; --m) {
            const int i = 16 * seg + m;
            run += dgs[i * ldg + cc];
            if (i < Lc) pgo[static_cast<int64_t>(i) * HV * K] = run;
          }
        }
      }
      __syncthreads();
    } else {
      __syncthreads();  // segtot, rsum complete
      if (tid < kC) {
        dbacc[tid] += dbp[tid] + dbp[64 + tid];
        rtacc[tid] += segtot[tid] + segtot[64 + tid];
        ctacc[tid] += segtot[128 + tid] + segtot[192 + tid];
        cacc[tid] += __expf(gL[tid]) * rsum[tid];
      }
      __syncthreads();
    }
  }
  if constexpr (!VEC) scalar_gate_dg<T, ld, ldg, In, DELTA>(p, A1s, dMs, qs, ks, qbase, kbase, qk_row, gsc, rq, rk, bet, rtacc,
                                                 ctacc, cacc, reinterpret_cast<float*>(un), rsum, t0, Lc, hv);
  if (DELTA && tid < Lc) {  // dβ: the delta rule's
    const int64_t r = static_cast<int64_t>(t0 + tid) * HV + hv;
    if (p.dbeta) {  // through the sigmoid as finish_gb would (β's dtype)
      float der = 1.f;
      if (p.beta_mode != 0) der = gate::beta_sigmoid_grad(p.beta_mode, load_any(p.beta, p.beta_dt, r));
      stf(p.dbeta, p.beta_dt, r, dbacc[tid] * der);
    } else {
      p.pb[r] = dbacc[tid];
    }
  }
}

template <class T, int K, int VT, class In>
cudaError_t launch_dh_t(const DhParams& p, int smem, cudaStream_t s) {
  auto kernel = dh_kernel<T, K, VT, In>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  const dim3 grid = kern::SequentialScheduler<VT>::grid_shape(p.V, p.HV, p.N);
  kernel<<<grid, kThreads, smem, s>>>(p);
  return cudaGetLastError();
}

template <class T, int VT, class In = T>
cudaError_t launch_dh_k(const DhParams& p, int smem, cudaStream_t s) {
  switch (p.K) {
    case 64: return launch_dh_t<T, 64, VT, In>(p, smem, s);
    case 128: return launch_dh_t<T, 128, VT, In>(p, smem, s);
    default: return launch_dh_t<T, 256, VT, In>(p, smem, s);
  }
}

template <class T, int VT>
std::size_t dh_smem_k(int K, int stages, bool split) {
  auto f = [&](auto lay) -> std::size_t {
    using Ly = decltype(lay);
    return static_cast<std::size_t>(Ly::bytes(stages, split && kIs16<T>));
  };
  switch (K) {
    case 64: return f(DhLayout<T, 64, VT>{});
    case 128: return f(DhLayout<T, 128, VT>{});
    default: return f(DhLayout<T, 256, VT>{});
  }
}

template <class T, bool VEC, bool DELTA, class In = T>
cudaError_t launch_wy_t(const WyParams& p, cudaStream_t s) {
  auto kernel = wy_kernel<T, VEC, DELTA, In>;
  const int smem = WyLayout<T>::total;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  const dim3 grid = kern::ChunkParallelScheduler<>::grid_shape(p.num_chunks, p.HV);
  kernel<<<grid, kThreads, smem, s>>>(p);
  return cudaGetLastError();
}

template <bool VEC, bool DELTA>
cudaError_t launch_wy_v(int dtype, const WyParams& p, cudaStream_t s) {
  switch (dtype) {
    case 0: return launch_wy_t<__half, VEC, DELTA>(p, s);
    case 1: return launch_wy_t<__nv_bfloat16, VEC, DELTA>(p, s);
    default:  // float32 compute on float32 rows, or on the caller's 16-bit rows (p.in_dt)
      if (p.in_dt == 0) return launch_wy_t<float, VEC, DELTA, __half>(p, s);
      if (p.in_dt == 1) return launch_wy_t<float, VEC, DELTA, __nv_bfloat16>(p, s);
      return launch_wy_t<float, VEC, DELTA>(p, s);
  }
}

}  // namespace

std::size_t dh_smem_bytes(int dtype, int K, int stages, bool split) {
  switch (dtype) {
    case 0: return dh_smem_k<__half, config::dh_v_tile(0)>(K, stages, split);
    case 1: return dh_smem_k<__nv_bfloat16, config::dh_v_tile(1)>(K, stages, split);
    default: return dh_smem_k<float, config::dh_v_tile(2)>(K, stages, split);
  }
}

cudaError_t launch_dh(int dtype, const DhParams& p, int smem, cudaStream_t s) {
  switch (dtype) {
    case 0: return launch_dh_k<__half, config::dh_v_tile(0)>(p, smem, s);
    case 1: return launch_dh_k<__nv_bfloat16, config::dh_v_tile(1)>(p, smem, s);
    default:  // float32 compute; dO float32 or the caller's 16-bit rows (p.d_o_dt)
      if (p.d_o_dt == 0) return launch_dh_k<float, config::dh_v_tile(2), __half>(p, smem, s);
      if (p.d_o_dt == 1) return launch_dh_k<float, config::dh_v_tile(2), __nv_bfloat16>(p, smem, s);
      return launch_dh_k<float, config::dh_v_tile(2)>(p, smem, s);
  }
}

std::size_t wy_smem_bytes(int dtype) {
  return dtype == 0 ? WyLayout<__half>::total : dtype == 1 ? WyLayout<__nv_bfloat16>::total : WyLayout<float>::total;
}

cudaError_t launch_wy(int dtype, bool vec, const WyParams& p, cudaStream_t s) {
  if (p.delta) return vec ? launch_wy_v<true, true>(dtype, p, s) : launch_wy_v<false, true>(dtype, p, s);
  return vec ? launch_wy_v<true, false>(dtype, p, s) : launch_wy_v<false, false>(dtype, p, s);
}

}  // namespace linattn::cuda::bwd

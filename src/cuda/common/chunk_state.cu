// Kernels 2 and 3 of the chunked forward (see chunk_fwd.hpp):
//   chunk_state_kernel  the sequential pass over chunks, one CTA per (V tile of 32, value head,
//                       sequence), the K x 32 state tile in registers: V_new = U - W S (U alone
//                       without the delta rule, StateParams::delta = 0),
//                       S = exp(γ_C) S + Kgᵀ V_new; writes V_new and the state before each chunk.
//   chunk_out_kernel    O = Qg S_c + Aqk V_new, one CTA per (chunk, V tile of 64, value head).
#include "cuda/common/chunk_fwd.hpp"
#include "cuda/common/chunk_stage.cuh"
#include "cuda/common/copy.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/scheduler.cuh"
#include "cuda/common/state_tile.cuh"
#include "cuda/config/limits.hpp"

namespace linattn::cuda::kern {
namespace {

constexpr int kC = config::kChunk;
constexpr int kThreads = 256;
constexpr int kVT = 32;           // V tile of the recurrence
constexpr int kOutThreads = 128;  // output kernel: 4 warps, 16 rows each
constexpr int kVO = 64;           // V tile of the output kernel

template <class T, int K, int VT>
struct StateLayout {
  static constexpr int P = pad_of<T>();
  static constexpr int ldw = K + P;      // W rows [64][K]
  static constexpr int ldkt = kC + P;    // KgT rows [K][64]
  static constexpr int ldu = VT + P;     // U rows [64][VT]
  static constexpr int lds = K + P;      // S^T [VT][K]
  static constexpr int ldv = kC + P;     // V_new^T [VT][64]
  static constexpr int es = sizeof(T);
  static constexpr int w_off = 0;
  static constexpr int kt_off = w_off + kC * ldw * es;
  static constexpr int u_off = kt_off + K * ldkt * es;
  static constexpr int ulo_off = u_off + kC * ldu * es;  // U's low half (the backward's, 16-bit)
  static constexpr int ge_off = ulo_off + kC * ldu * es;
  static constexpr int stage = ge_off + K * 4;
  static constexpr int fixed = VT * lds * es + 2 * VT * ldv * es;  // S^T, V_new^T and its low half
};

template <class T, int K, int VT>
struct FusedLayout : ChunkStageLayout<T, K, VT> {
  using Stage = ChunkStageLayout<T, K, VT>;
  static constexpr int lds = K + Stage::P;   // S^T [VT][K]
  static constexpr int ldv = kC + Stage::P;  // V_new^T [VT][64] (and f ⊙ V_new, raw-row mode)
  static constexpr int fixed = VT * lds * Stage::es + VT * ldv * Stage::es;
  static constexpr int fixed_rows = fixed + VT * ldv * Stage::es;  // + (f ⊙ V_new)^T in raw-row mode
};

template <class T, int K>
struct OutLayout {
  static constexpr int P = pad_of<T>();
  static constexpr int ldq = K + P;    // Qg [64][K] (then the output tile, per warp)
  static constexpr int ldh = K + P;    // S_c [VO][K]
  static constexpr int lda = kC + P;   // Aqk [64][64]
  static constexpr int ldn = kVO + P;  // V_new [64][VO]
  static constexpr int es = sizeof(T);
  static constexpr int q_off = 0;
  static constexpr int h_off = q_off + kC * ldq * es;
  static constexpr int a_off = h_off + kVO * ldh * es;
  static constexpr int n_off = a_off + kC * lda * es;
  static constexpr int total = n_off + kC * ldn * es;
};

template <class T, int K, int VT>
__global__ void __launch_bounds__(kThreads, 2) chunk_state_kernel(const StateParams p) {
  using Lay = StateLayout<T, K, VT>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int V = p.V, HV = p.HV;
  const auto bc = SequentialScheduler<VT>::block_coord();
  const int v0 = bc.v0, hv = bc.hv, n = bc.n;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const SeqInfo si = p.seqs[n];
  const int nch = (si.len + kC - 1) / kC;
  const int stages = p.stages;
  // 16-bit operands staged in shared memory: fragments by ldmatrix
  const bool smem_ops = kIs16<T> && stages > 0;

  unsigned char* fixed = smem + (stages > 0 ? stages * Lay::stage : 0);
  T* Ss = reinterpret_cast<T*>(fixed);                                  // S^T [VT][K]
  T* Vs = reinterpret_cast<T*>(fixed + VT * Lay::lds * Lay::es);        // V_new^T [VT][64]
  T* Vslo = Vs + VT * Lay::ldv;                                         // its low half (split)

  using Tile = WarpStateTile<K, VT>;
  constexpr int MI = Tile::MI, NI = Tile::NI;
  const Tile tile(warp, lane);
  const int sm0 = tile.m0, sn0 = tile.n0;
  // V_new = U - W S: 4 x 2 warps, tiles 16 x (VT/2)
  constexpr int NT = VT / 16;
  const int tm0 = (warp & 3) * 16, tn0 = (warp >> 2) * (VT / 2);

  const int64_t state_base = (static_cast<int64_t>(n) * HV + hv) * K * V;
  float S[MI][NI][4];
  tile.load(S, p.h0, p.h0_dt, state_base, V, p.v_first, v0);
  tile.stage_transposed(S, Ss, Lay::lds);

  const T* Wg = static_cast<const T*>(p.W);
  const T* Ug = static_cast<const T*>(p.U);
  const T* Ulg = static_cast<const T*>(p.U_lo);  // null: U alone
  // split (the backward's 16-bit recompute): U and V_new as hi + lo halves
  const bool split = smem_ops && Ulg != nullptr;
  const T* KTg = static_cast<const T*>(p.KgT);

  auto issue = [&](int ci) {
    unsigned char* st = smem + (stages == 2 ? (ci & 1) : 0) * Lay::stage;
    const int64_t blk = static_cast<int64_t>(si.chunk0 + ci) * HV + hv;
    if (p.delta) tile_copy<T, kC, K, kThreads>(reinterpret_cast<T*>(st + Lay::w_off), Lay::ldw, Wg + blk * kC * K, K, tid);
    tile_copy<T, K, kC, kThreads>(reinterpret_cast<T*>(st + Lay::kt_off), Lay::ldkt, KTg + blk * K * kC, kC, tid);
    tile_copy<T, kC, VT, kThreads>(reinterpret_cast<T*>(st + Lay::u_off), Lay::ldu, Ug + blk * kC * V + v0, V, tid);
    if (Ulg) {
      tile_copy<T, kC, VT, kThreads>(reinterpret_cast<T*>(st + Lay::ulo_off), Lay::ldu, Ulg + blk * kC * V + v0, V,
                                     tid);
    }
    tile_copy<float, 1, K, kThreads>(reinterpret_cast<float*>(st + Lay::ge_off), K, p.gexp + blk * K, K, tid);
    cp_commit();
  };

  if (stages == 2 && nch > 0) issue(0);

  for (int ci = 0; ci < nch; ++ci) {
    const int c = si.chunk0 + ci;
    const int64_t blk = static_cast<int64_t>(c) * HV + hv;

    // chunk ci's operands in shared memory; every warp is done with chunk ci - 1 past the barrier
    if (stages == 1) {
      if (ci > 0) __syncthreads();
      issue(ci);
      cp_wait<0>();
    } else if (stages == 2) {
      cp_wait<0>();
    }
    __syncthreads();
    if (stages == 2 && ci + 1 < nch) issue(ci + 1);

    // the state before chunk c: h (float32/64, asked for), hs (compute type, for the output kernel)
    if (p.h) tile.store(S, p.h, p.h_dt, blk * K * V, V, p.v_first, v0);
    if (p.hs) {
      constexpr int per = 16 / sizeof(T), ppr = K / per;
      T* hb = static_cast<T*>(p.hs) + (blk * V + v0) * K;
#pragma unroll
      for (int it = 0; it < (VT * ppr + kThreads - 1) / kThreads; ++it) {
        const int e = it * kThreads + tid;
        if ((VT * ppr) % kThreads == 0 || e < VT * ppr) {
          const int r = e / ppr, cp = (e % ppr) * per;
          *reinterpret_cast<uint4*>(hb + r * K + cp) = *reinterpret_cast<const uint4*>(Ss + r * Lay::lds + cp);
        }
      }
    }

    // operand views for this chunk
    RowOp<T> Wop, KTop, Uop, Ulop;
    const float* gex;
    if (stages > 0) {
      unsigned char* st = smem + (stages == 2 ? (ci & 1) : 0) * Lay::stage;
      Wop = {reinterpret_cast<const T*>(st + Lay::w_off), Lay::ldw};
      KTop = {reinterpret_cast<const T*>(st + Lay::kt_off), Lay::ldkt};
      Uop = {reinterpret_cast<const T*>(st + Lay::u_off), Lay::ldu};
      Ulop = {reinterpret_cast<const T*>(st + Lay::ulo_off), Lay::ldu};
      gex = reinterpret_cast<const float*>(st + Lay::ge_off);
    } else {
      Wop = {Wg + blk * kC * K, K};
      KTop = {KTg + blk * K * kC, kC};
      Uop = {Ug + blk * kC * V + v0, V};
      Ulop = {Ulg ? Ulg + blk * kC * V + v0 : nullptr, V};
      gex = p.gexp + blk * K;
    }

    const ColOp<T> Sop{Ss, Lay::lds};  // B(k = key channel, n = value column)
    const ColOp<T> Vop{Vs, Lay::ldv};  // B(k = token, n = value column)

    // V_new = U - W S (to Vs, transposed, and to p.vnew)
    {
      float acc[1][NT][4];
      zero_acc(acc);
      if (!p.delta) {  // no delta rule: V_new = U
      } else if (smem_ops) {
        warp_mma_sm<T, 1, NT>(acc, Wop.p, Wop.ld, Ss, Lay::lds, tm0, tn0, 0, K);
      } else {
        warp_mma<T, 1, NT>(acc, Wop, Sop, tm0, tn0, 0, K);
      }
#pragma unroll
      for (int ni = 0; ni < NT; ++ni)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int i = tm0 + g + 8 * hh, vv = tn0 + 8 * ni + 2 * t;
          float vn0 = Uop.at(i, vv) - acc[0][ni][2 * hh];
          float vn1 = Uop.at(i, vv + 1) - acc[0][ni][2 * hh + 1];
          if (split) {
            vn0 += Ulop.at(i, vv);
            vn1 += Ulop.at(i, vv + 1);
          }
          Vs[vv * Lay::ldv + i] = from_f<T>(vn0);
          Vs[(vv + 1) * Lay::ldv + i] = from_f<T>(vn1);
          if (p.vnew) store2<T>(static_cast<T*>(p.vnew) + (blk * kC + i) * V + v0 + vv, vn0, vn1);
          if (split) {
            const float l0 = vn0 - to_f(from_f<T>(vn0)), l1 = vn1 - to_f(from_f<T>(vn1));
            Vslo[vv * Lay::ldv + i] = from_f<T>(l0);
            Vslo[(vv + 1) * Lay::ldv + i] = from_f<T>(l1);
            if (p.vnew_lo) store2<T>(static_cast<T*>(p.vnew_lo) + (blk * kC + i) * V + v0 + vv, l0, l1);
          }
        }
    }
    __syncthreads();
    // S = exp(γ_C) S + KgT V_new; Ss for the next chunk (its readers are past the barrier above)
    tile.decay(S, gex);
    if (smem_ops) warp_mma_sm<T, MI, NI>(S, KTop.p, KTop.ld, Vs, Lay::ldv, sm0, sn0, 0, kC);
    else warp_mma<T, MI, NI>(S, KTop, Vop, sm0, sn0, 0, kC);
    if (split) warp_mma_sm<T, MI, NI>(S, KTop.p, KTop.ld, Vslo, Lay::ldv, sm0, sn0, 0, kC);
    tile.stage_transposed(S, Ss, Lay::lds);
  }

  if (p.ht) tile.store(S, p.ht, p.ht_dt, state_base, V, p.v_first, v0);
}

// O = Qg S_c + Aqk V_new for one (chunk, V tile of 64, value head); warp w: rows 16w..16w+15.
template <class T, int K>
__global__ void __launch_bounds__(kOutThreads) chunk_out_kernel(const StateParams p) {
  using Lay = OutLayout<T, K>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int V = p.V, HV = p.HV;
  const auto bc = ChunkParallelScheduler<kVO>::block_coord(V);
  const int c = bc.c, v0 = bc.v0, hv = bc.hv;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const ChunkInfo ci = p.chunks[c];
  const int64_t blk = static_cast<int64_t>(c) * HV + hv;
  T* Qs = reinterpret_cast<T*>(smem + Lay::q_off);
  T* Hs = reinterpret_cast<T*>(smem + Lay::h_off);
  T* As = reinterpret_cast<T*>(smem + Lay::a_off);
  T* Ns = reinterpret_cast<T*>(smem + Lay::n_off);
  tile_copy<T, kC, K, kOutThreads>(Qs, Lay::ldq, static_cast<const T*>(p.Qg) + blk * kC * K, K, tid);
  tile_copy<T, kVO, K, kOutThreads>(Hs, Lay::ldh, static_cast<const T*>(p.hs) + (blk * V + v0) * K, K, tid);
  tile_copy<T, kC, kC, kOutThreads>(As, Lay::lda, static_cast<const T*>(p.Aqk) + blk * kC * kC, kC, tid);
  tile_copy<T, kC, kVO, kOutThreads>(Ns, Lay::ldn, static_cast<const T*>(p.vnew) + blk * kC * V + v0, V, tid);
  cp_commit();
  cp_wait<0>();
  __syncthreads();

  const int m0 = 16 * warp;
  float acc[1][kVO / 8][4];
  zero_acc(acc);
  if constexpr (kIs16<T>) {
    warp_mma_sm<T, 1, kVO / 8>(acc, Qs, Lay::ldq, Hs, Lay::ldh, m0, 0, 0, K);  // S_c stored n-major
    for (int k0 = 0; k0 < m0 + 16; k0 += 16) {                                 // Aqk is lower triangular
      uint32_t a[4];
      ldsm_a(a, As, Lay::lda, m0, k0);
#pragma unroll
      for (int nj = 0; nj < kVO / 16; ++nj) {
        uint32_t b[2][2];
        ldsm_b_k(b, Ns, Lay::ldn, k0, 16 * nj);  // V_new stored k-major (token rows)
        mma16<T>(acc[0][2 * nj], a, b[0]);
        mma16<T>(acc[0][2 * nj + 1], a, b[1]);
      }
    }
  } else {
    warp_mma<T, 1, kVO / 8>(acc, RowOp<T>{Qs, Lay::ldq}, ColOp<T>{Hs, Lay::ldh}, m0, 0, 0, K);
    warp_mma<T, 1, kVO / 8>(acc, RowOp<T>{As, Lay::lda}, RowOp<T>{Ns, Lay::ldn}, m0, 0, 0, m0 + 16);
  }
  // the warp's output rows through its own (no longer read) Qg rows, then 16-byte stores
  T* Os = Qs + m0 * Lay::ldq;
  __syncwarp();
#pragma unroll
  for (int ni = 0; ni < kVO / 8; ++ni) {
    const int col = 8 * ni + 2 * t;
    store2<T>(Os + g * Lay::ldq + col, acc[0][ni][0], acc[0][ni][1]);
    store2<T>(Os + (g + 8) * Lay::ldq + col, acc[0][ni][2], acc[0][ni][3]);
  }
  __syncwarp();
  if constexpr (!kIs16<T>) {
    if (p.o_dt == 0 || p.o_dt == 1) {  // float32 compute, 16-bit O: two columns a lane and step
      for (int e = lane; e < 16 * kVO / 2; e += 32) {
        const int r = e / (kVO / 2), col = 2 * (e % (kVO / 2));
        if (m0 + r >= ci.len) continue;
        const int64_t at = (static_cast<int64_t>(ci.t0 + m0 + r) * HV + hv) * V + v0 + col;
        const float x0 = Os[r * Lay::ldq + col], x1 = Os[r * Lay::ldq + col + 1];
        if (p.o_dt == 1) store2<__nv_bfloat16>(static_cast<__nv_bfloat16*>(p.o) + at, x0, x1);
        else store2<__half>(static_cast<__half*>(p.o) + at, x0, x1);
      }
      return;
    }
  }
  constexpr int per = 16 / sizeof(T), ppr = kVO / per;
  T* og = static_cast<T*>(p.o);
#pragma unroll
  for (int it = 0; it < 16 * ppr / 32; ++it) {
    const int e = it * 32 + lane, r = e / ppr, cp = (e % ppr) * per;
    if (m0 + r < ci.len) {
      *reinterpret_cast<uint4*>(og + (static_cast<int64_t>(ci.t0 + m0 + r) * HV + hv) * V + v0 + cp) =
          *reinterpret_cast<const uint4*>(Os + r * Lay::ldq + cp);
    }
  }
}

// The fused variant (the forward's default): V_new, O = Qg S + Aqk V_new and the S update in one
// sequential pass (V tiles of 64 or 32 for 16-bit types, 32 for float32; one CTA per SM). In
// raw-row mode (GDN, 16-bit) Qg and KgT are replaced by the raw q / k rows and their row factors. Measured faster
// than the split recurrence + output kernel at the reference shape (0.52 vs 0.39 + 0.20 ms, H200):
// it moves half the bytes (no S_c / V_new round trip).
template <class T, int K, int VT>
__global__ void __launch_bounds__(kThreads, 1) chunk_fused_kernel(const StateParams p) {
  using Lay = FusedLayout<T, K, VT>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int V = p.V, HV = p.HV;
  const auto bc = SequentialScheduler<VT>::block_coord();
  const int v0 = bc.v0, hv = bc.hv, n = bc.n;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const SeqInfo si = p.seqs[n];
  const int nch = (si.len + kC - 1) / kC;
  const int stages = p.stages;
  // 16-bit operands staged in shared memory: fragments by ldmatrix
  const bool smem_ops = kIs16<T> && stages > 0;

  unsigned char* fixed = smem + (stages > 0 ? stages * Lay::stage : 0);
  T* Ss = reinterpret_cast<T*>(fixed);                                  // S^T [VT][K]
  T* Vs = reinterpret_cast<T*>(fixed + VT * Lay::lds * Lay::es);        // V_new^T [VT][64]
  T* Vk = Vs + VT * Lay::ldv;                                           // (f ⊙ V_new)^T, raw-row mode
  // raw-row mode (scalar gate, 16-bit): q / k rows and row factors instead of Qg / KgT
  const bool rows = kIs16<T> && stages > 0 && p.q_raw != nullptr;
  const int hk = hv / p.G;

  using Tile = WarpStateTile<K, VT>;
  constexpr int MI = Tile::MI, NI = Tile::NI;
  const Tile tile(warp, lane);
  const int sm0 = tile.m0, sn0 = tile.n0;
  // token-side products: 4 x 2 warps, tiles 16 x (VT/2)
  constexpr int NT = VT / 16;
  const int tm0 = (warp & 3) * 16, tn0 = (warp >> 2) * (VT / 2);

  const int64_t state_base = (static_cast<int64_t>(n) * HV + hv) * K * V;
  float S[MI][NI][4];
  tile.load(S, p.h0, p.h0_dt, state_base, V, p.v_first, v0);
  tile.stage_transposed(S, Ss, Lay::lds);

  const T* Wg = static_cast<const T*>(p.W);
  const T* Ug = static_cast<const T*>(p.U);
  const T* Qgg = static_cast<const T*>(p.Qg);
  const T* KTg = static_cast<const T*>(p.KgT);
  const T* Ag = static_cast<const T*>(p.Aqk);

  auto issue = [&](int ci) {
    copy_chunk_stage<T, K, VT, kThreads>(smem + (stages == 2 ? (ci & 1) : 0) * Lay::stage, p, si, ci, HV, hv, hk, V,
                                         v0, p.delta != 0, rows, false, tid);
  };

  if (stages > 0 && nch > 0) issue(0);

  for (int ci = 0; ci < nch; ++ci) {
    const int c = si.chunk0 + ci;
    const int t0 = si.t0 + ci * kC;
    const int Lc = min(kC, si.len - ci * kC);
    const int64_t blk = static_cast<int64_t>(c) * HV + hv;

    if (p.h) tile.store(S, p.h, p.h_dt, (static_cast<int64_t>(c) * HV + hv) * K * V, V, p.v_first, v0);  // state before chunk c

    // operand views for this chunk
    RowOp<T> Wop, Qop, KTop, Aop, Uop;
    const float* gex;
    const float* rf = nullptr;  // raw-row mode: [0, 64) O's row factors, [64, 128) V_new's
    if (stages > 0) {
      if (stages == 2 && ci + 1 < nch) {
        issue(ci + 1);
        cp_wait<1>();
      } else {
        if (stages == 1 && ci > 0) issue(ci);
        cp_wait<0>();
      }
      unsigned char* st = smem + (stages == 2 ? (ci & 1) : 0) * Lay::stage;
      Wop = {reinterpret_cast<const T*>(st + Lay::w_off), Lay::ldw};
      Qop = {reinterpret_cast<const T*>(st + Lay::q_off), Lay::ldw};
      KTop = {reinterpret_cast<const T*>(st + Lay::kt_off), Lay::ldkt};
      Aop = {reinterpret_cast<const T*>(st + Lay::a_off), Lay::lda};
      Uop = {reinterpret_cast<const T*>(st + Lay::u_off), Lay::ldu};
      gex = reinterpret_cast<const float*>(st + Lay::ge_off);
      rf = reinterpret_cast<const float*>(st + Lay::rf_off);
      if (rows) KTop.ld = Lay::ldw;  // k rows, token-major
    } else {
      Wop = {Wg + blk * kC * K, K};
      Qop = {Qgg + blk * kC * K, K};
      KTop = {KTg + blk * K * kC, kC};
      Aop = {Ag + blk * kC * kC, kC};
      Uop = {Ug + blk * kC * V + v0, V};
      gex = p.gexp + blk * K;
    }
    __syncthreads();

    const ColOp<T> Sop{Ss, Lay::lds};  // B(k = key channel, n = value column)
    const ColOp<T> Vop{Vs, Lay::ldv};  // B(k = token, n = value column)

    // V_new = U - W S
    {
      float acc[1][NT][4];
      zero_acc(acc);
      if (!p.delta) {  // no delta rule: V_new = U
      } else if (smem_ops) {
        warp_mma_sm<T, 1, NT>(acc, Wop.p, Wop.ld, Ss, Lay::lds, tm0, tn0, 0, K);
      } else {
        warp_mma<T, 1, NT>(acc, Wop, Sop, tm0, tn0, 0, K);
      }
#pragma unroll
      for (int ni = 0; ni < NT; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = tm0 + g + (e >= 2 ? 8 : 0), vv = tn0 + 8 * ni + 2 * t + (e & 1);
          const float vn = Uop.at(i, vv) - acc[0][ni][e];
          Vs[vv * Lay::ldv + i] = from_f<T>(vn);
          if (rows) Vk[vv * Lay::ldv + i] = from_f<T>(rf[kC + i] * vn);
          if (p.vnew) static_cast<T*>(p.vnew)[(blk * kC + i) * V + v0 + vv] = from_f<T>(vn);  // [backward]
        }
    }
    __syncthreads();
    // O = Qg S + Aqk V_new (skipped when o is null: the backward's recompute)
    if (p.o) {
      float acc[1][NT][4];
      zero_acc(acc);
      if (smem_ops) {
        warp_mma_sm<T, 1, NT>(acc, Qop.p, Qop.ld, Ss, Lay::lds, tm0, tn0, 0, K);
        if (rows) {  // raw q rows: Qg's row factor on the product
          const float f0 = rf[tm0 + g], f1 = rf[tm0 + g + 8];
#pragma unroll
          for (int ni = 0; ni < NT; ++ni) {
            acc[0][ni][0] *= f0; acc[0][ni][1] *= f0;
            acc[0][ni][2] *= f1; acc[0][ni][3] *= f1;
          }
        }
        warp_mma_sm<T, 1, NT>(acc, Aop.p, Aop.ld, Vs, Lay::ldv, tm0, tn0, 0, tm0 + 16);
      } else {
        warp_mma<T, 1, NT>(acc, Qop, Sop, tm0, tn0, 0, K);
        warp_mma<T, 1, NT>(acc, Aop, Vop, tm0, tn0, 0, tm0 + 16);
      }
      T* og = static_cast<T*>(p.o);
#pragma unroll
      for (int ni = 0; ni < NT; ++ni)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int i = tm0 + g + 8 * hh, vv = v0 + tn0 + 8 * ni + 2 * t;
          if (i < Lc) {
            store2<T>(og + (static_cast<int64_t>(t0 + i) * HV + hv) * V + vv, acc[0][ni][2 * hh],
                      acc[0][ni][2 * hh + 1]);
          }
        }
    }
    // S = exp(γ_C) S + KgT V_new
    tile.decay(S, gex);
    if (rows) warp_mma_sm<T, MI, NI, true>(S, KTop.p, KTop.ld, Vk, Lay::ldv, sm0, sn0, 0, kC);  // kᵀ (f ⊙ V_new)
    else if (smem_ops) warp_mma_sm<T, MI, NI>(S, KTop.p, KTop.ld, Vs, Lay::ldv, sm0, sn0, 0, kC);
    else warp_mma<T, MI, NI>(S, KTop, Vop, sm0, sn0, 0, kC);
    __syncthreads();
    tile.stage_transposed(S, Ss, Lay::lds);
  }

  if (p.ht) tile.store(S, p.ht, p.ht_dt, state_base, V, p.v_first, v0);
}

template <class T, int K, int VF>
cudaError_t launch_fused(const StateParams& p, int smem, cudaStream_t s) {
  auto kernel = chunk_fused_kernel<T, K, VF>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  const dim3 grid = SequentialScheduler<VF>::grid_shape(p.V, p.HV, p.N);
  kernel<<<grid, kThreads, smem, s>>>(p);
  return cudaGetLastError();
}

// wgmma_recurrence: the recurrence already ran on the Hopper kernel (its recompute form, which
// writes the same h, hs and V_new); only the output kernel is left.
template <class T, int K>
cudaError_t launch_t(const StateParams& p, int smem, cudaStream_t s, bool wgmma_recurrence) {
  if (p.o && !p.hs) {  // fused: V_new, O and the S update in one pass
    if constexpr (kIs16<T>) {
      if (p.fused_vt == 64) return launch_fused<T, K, 64>(p, smem, s);
    }
    if (p.fused_vt != 32) return cudaErrorInvalidValue;
    return launch_fused<T, K, 32>(p, smem, s);
  }
  if (!wgmma_recurrence) {
    auto kernel = chunk_state_kernel<T, K, kVT>;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    const dim3 grid = SequentialScheduler<kVT>::grid_shape(p.V, p.HV, p.N);
    kernel<<<grid, kThreads, smem, s>>>(p);
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  if (p.o && p.num_chunks > 0) {  // split: O from hs and V_new, chunk-parallel
    if (!p.vnew || !p.chunks) return cudaErrorInvalidValue;
    auto kernel = chunk_out_kernel<T, K>;
    constexpr int osmem = OutLayout<T, K>::total;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, osmem);
    if (e != cudaSuccess) return e;
    const dim3 grid = ChunkParallelScheduler<kVO>::grid_shape(p.num_chunks, p.HV, p.V);
    kernel<<<grid, kOutThreads, osmem, s>>>(p);
    return cudaGetLastError();
  }
  return cudaSuccess;
}

template <class T>
cudaError_t launch_k(const StateParams& p, int smem, cudaStream_t s, bool wgmma_recurrence) {
  switch (p.K) {
    case 64: return launch_t<T, 64>(p, smem, s, wgmma_recurrence);
    case 128: return launch_t<T, 128>(p, smem, s, wgmma_recurrence);
    default: return launch_t<T, 256>(p, smem, s, wgmma_recurrence);
  }
}

template <class L>
std::size_t smem_of(int stages) {
  return static_cast<std::size_t>(stages) * L::stage + L::fixed;
}

template <class T, int K>
std::size_t smem_kk(int stages, int fused_vt, bool raw_rows) {
  auto fused = [&](auto lay) -> std::size_t {
    using L = decltype(lay);
    return static_cast<std::size_t>(stages) * L::stage + (raw_rows ? L::fixed_rows : L::fixed);
  };
  if (fused_vt == 64) return fused(FusedLayout<T, K, 64>{});
  if (fused_vt == 32) return fused(FusedLayout<T, K, 32>{});
  return smem_of<StateLayout<T, K, kVT>>(stages);
}

template <class T>
std::size_t smem_k(int K, int stages, int fused_vt, bool raw_rows) {
  switch (K) {
    case 64: return smem_kk<T, 64>(stages, fused_vt, raw_rows);
    case 128: return smem_kk<T, 128>(stages, fused_vt, raw_rows);
    default: return smem_kk<T, 256>(stages, fused_vt, raw_rows);
  }
}

}  // namespace

int state_v_tile(int) { return kVT; }

std::size_t state_smem_bytes(int dtype, int K, int stages, int fused_vt, bool raw_rows) {
  switch (dtype) {
    case 0: return smem_k<__half>(K, stages, fused_vt, raw_rows);
    case 1: return smem_k<__nv_bfloat16>(K, stages, fused_vt, raw_rows);
    default: return smem_k<float>(K, stages, fused_vt, raw_rows);
  }
}

cudaError_t launch_state(int dtype, const StateParams& p, int smem, cudaStream_t s) {
  bool wgmma = false;
  if (recurrence_wgmma_applies(dtype, p)) {
    const cudaError_t e = launch_recurrence_wgmma(dtype, p, s);
    // the forward's fused pass, a saving forward's (O in the pass), or no O
    if (e != cudaSuccess || !p.o || p.hs == nullptr) return e;
    wgmma = true;  // the float32 form's recompute with hs: the output kernel next
  } else if (p.h && p.h_dt != 2 && p.h_dt != 3) {
    return cudaErrorInvalidValue;  // 16-bit chunk states: the Hopper recompute's alone
  } else if (p.h && p.o && p.vnew && !p.hs) {
    // a saving forward (vnew set; a plain forward returning its chunk states has none) planned
    // without hs: O in the recompute's pass is the wgmma pass's alone
    return cudaErrorInvalidValue;
  } else if (fused_warp_applies(dtype, p)) {
    return launch_fused_warp(dtype, p, s);
  }
  switch (dtype) {
    case 0: return launch_k<__half>(p, smem, s, wgmma);
    case 1: return launch_k<__nv_bfloat16>(p, smem, s, wgmma);
    default: return launch_k<float>(p, smem, s, wgmma);
  }
}

}  // namespace linattn::cuda::kern

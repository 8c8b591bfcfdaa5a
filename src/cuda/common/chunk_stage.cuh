// One chunk's operands as the mma.sync forward state passes stage them (chunk_state.cu's fused
// kernel, chunk_fused_warp.cu's warp-split kernel): W, Qg (or the raw q rows), KgT (or the raw k
// rows), Aqk, U (or the v rows), exp(γ_C) and the row factors, copied by cp.async into one stage
// of shared memory while the previous chunk is computed. One layout and one copy for both kernels.
#pragma once

#include <cstdint>

#include "cuda/common/chunk_fwd.hpp"
#include "cuda/common/copy.cuh"
#include "cuda/config/limits.hpp"

namespace linattn::cuda::kern {

// A stage's layout (byte offsets, row strides in elements), V tile VT.
template <class T, int K, int VT>
struct ChunkStageLayout {
  static constexpr int kC = config::kChunk;
  static constexpr int P = pad_of<T>();
  static constexpr int ldw = K + P;    // W, Qg (or raw q) rows [64][K]; raw k rows [64][K] at kt_off
  static constexpr int ldkt = kC + P;  // KgT rows [K][64]
  static constexpr int lda = kC + P;   // Aqk rows [64][64]
  static constexpr int ldu = VT + P;   // U (or v) rows [64][VT]
  static constexpr int es = sizeof(T);
  static constexpr int w_off = 0;
  static constexpr int q_off = w_off + kC * ldw * es;
  static constexpr int kt_off = q_off + kC * ldw * es;
  static constexpr int a_off = kt_off + K * ldkt * es;
  static constexpr int u_off = a_off + kC * lda * es;
  static constexpr int ge_off = u_off + kC * ldu * es;
  static constexpr int rf_off = ge_off + K * 4;  // row factors [2][64] (raw-row mode)
  static constexpr int stage = rf_off + 2 * kC * 4;
  static_assert(kC * ldw <= K * ldkt, "raw k rows fit KgT's area");
};

// Chunk ci of sequence si (value head hv of HV, key head hk, V tile at v0 of V; the kernel's
// registers, not re-read from p) into stage st by NT threads,
// as one cp.async group. delta: W; rows (16-bit): the raw q / k rows and their row factors instead
// of Qg / KgT; v_rows: V_new = V from the token-major v rows (rows past the chunk's end zero, as
// U's) instead of U.
template <class T, int K, int VT, int NT>
__device__ __forceinline__ void copy_chunk_stage(unsigned char* st, const StateParams& p, const SeqInfo& si, int ci,
                                                 int HV, int hv, int hk, int V, int v0, bool delta, bool rows,
                                                 bool v_rows, int tid) {
  using Lay = ChunkStageLayout<T, K, VT>;
  constexpr int kC = Lay::kC;
  const int64_t blk = static_cast<int64_t>(si.chunk0 + ci) * HV + hv;
  if (delta)
    tile_copy<T, kC, K, NT>(reinterpret_cast<T*>(st + Lay::w_off), Lay::ldw, static_cast<const T*>(p.W) + blk * kC * K,
                            K, tid);
  if constexpr (kIs16<T>) {
    if (rows) {
      const int valid = min(kC, si.len - ci * kC);
      const int64_t rs = static_cast<int64_t>(p.H) * K;
      const int64_t r0 = static_cast<int64_t>(si.t0 + ci * kC) * rs + static_cast<int64_t>(hk) * K;
      tile_copy<T, kC, K, NT, true>(reinterpret_cast<T*>(st + Lay::q_off), Lay::ldw,
                                    static_cast<const T*>(p.q_raw) + r0, rs, tid, valid);
      tile_copy<T, kC, K, NT, true>(reinterpret_cast<T*>(st + Lay::kt_off), Lay::ldw,
                                    static_cast<const T*>(p.k_raw) + r0, rs, tid, valid);
      tile_copy<float, 1, 2 * kC, NT>(reinterpret_cast<float*>(st + Lay::rf_off), 2 * kC, p.rowfac + blk * 2 * kC,
                                      2 * kC, tid);
    }
  }
  if (!rows) {
    tile_copy<T, kC, K, NT>(reinterpret_cast<T*>(st + Lay::q_off), Lay::ldw,
                            static_cast<const T*>(p.Qg) + blk * kC * K, K, tid);
    tile_copy<T, K, kC, NT>(reinterpret_cast<T*>(st + Lay::kt_off), Lay::ldkt,
                            static_cast<const T*>(p.KgT) + blk * K * kC, kC, tid);
  }
  tile_copy<T, kC, kC, NT>(reinterpret_cast<T*>(st + Lay::a_off), Lay::lda,
                           static_cast<const T*>(p.Aqk) + blk * kC * kC, kC, tid);
  if (v_rows) {
    const int64_t vs = static_cast<int64_t>(HV) * V;
    tile_copy<T, kC, VT, NT, true>(reinterpret_cast<T*>(st + Lay::u_off), Lay::ldu,
                                   static_cast<const T*>(p.v_raw) + static_cast<int64_t>(si.t0 + ci * kC) * vs +
                                       static_cast<int64_t>(hv) * V + v0,
                                   vs, tid, min(kC, si.len - ci * kC));
  } else {
    tile_copy<T, kC, VT, NT>(reinterpret_cast<T*>(st + Lay::u_off), Lay::ldu,
                             static_cast<const T*>(p.U) + blk * kC * V + v0, V, tid);
  }
  tile_copy<float, 1, K, NT>(reinterpret_cast<float*>(st + Lay::ge_off), K, p.gexp + blk * K, K, tid);
  cp_commit();
}

}  // namespace linattn::cuda::kern

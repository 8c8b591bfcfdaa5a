// The forward's sequential pass with the state owned by warps (16-bit compute, K <= 128):
//   per chunk  V_new = U - W S,  O = Qg S + Aqk V_new,  S = exp(γ_C) S + KgT V_new
// (without the delta rule, StateParams::delta = 0: V_new = U = V, W not read)
// one CTA of 8 warps per (sequence, value head, V tile); warp (c, h) owns rows [h K/2, (h+1) K/2)
// of the tile's columns [c VT/4, (c+1) VT/4) as float32 mma C fragments in registers.
//
// Why: chunk_fused_kernel (chunk_state.cu) spreads the state tile over its warps so that each
// product needs the other warps' S or V_new: both go through shared memory every chunk, with
// three barriers. Here every B operand a warp needs from S or V_new comes from its own C
// fragments by an 8x8 transpose in registers (movmatrix); the two warps of a column group (the
// two halves of K) exchange only their partial sums of W S and Qg S (one pair barrier), and each
// finalises half of O's rows. The chunk's operands (W, Qg, KgT, Aqk, U, exp(γ_C)) are staged,
// double-buffered by cp.async, and read by ldmatrix. Raw-row mode (GDN, scalar gate) reads raw
// q / k rows and their row factors instead of Qg / KgT, as chunk_fused_kernel does.
#include "cuda/common/chunk_fwd.hpp"
#include "cuda/common/chunk_stage.cuh"
#include "cuda/common/copy.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/scheduler.cuh"
#include "cuda/config/device_info.hpp"
#include "cuda/config/limits.hpp"

namespace linattn::cuda::kern {
namespace {

constexpr int kC = config::kChunk;
constexpr int kWarps = 8;  // 4 column groups x 2 halves of K
constexpr int kThreads = 32 * kWarps;

template <class T, int K, int VT>
struct WarpLayout : ChunkStageLayout<T, K, VT> {
  using Stage = ChunkStageLayout<T, K, VT>;
  // partial sums exchanged by the two K halves of a column group, in C fragment order:
  // W S [4 groups][2 halves][64 x VT/4], and the Qg S rows the other half finalises [..][32 x VT/4]
  static constexpr int vx_off = 2 * Stage::stage;
  static constexpr int ox_off = vx_off + 4 * 2 * kC * (VT / 4) * 4;
  static constexpr int total = ox_off + 4 * 2 * (kC / 2) * (VT / 4) * 4;
};

// The 8x8 16-bit matrix whose row g, columns 2t, 2t+1 this lane holds, transposed (same layout).
__device__ __forceinline__ uint32_t transpose8x8(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// B fragments (m16n8k16: k = the C tile's rows, n = its columns) of a 16 x 8 C fragment tile.
template <class T>
__device__ __forceinline__ void c_to_b(uint32_t (&b)[2], const float (&c)[4], float s0 = 1.f, float s1 = 1.f) {
  b[0] = transpose8x8(pack2<T>(c[0] * s0, c[1] * s0));
  b[1] = transpose8x8(pack2<T>(c[2] * s1, c[3] * s1));
}

// DELTA (StateParams::delta, a template argument here: this is the forward's hot loop, and the
// delta-rule instantiation stays exactly the code it was): false drops W and W S (V_new = U = V).
template <class T, int K, int VT, bool DELTA>
__global__ void __launch_bounds__(kThreads, 1) chunk_fused_warp_kernel(const StateParams p) {
  using Lay = WarpLayout<T, K, VT>;
  constexpr int CPW = VT / 4;     // columns of a column group
  constexpr int NI = CPW / 8;
  constexpr int KH = K / 2;       // state rows a warp owns
  constexpr int MKH = KH / 16;    // their 16-row blocks
  constexpr int MT = kC / 16;     // 16-token blocks of a chunk
  constexpr int NF = MT * NI;     // C fragments of a 64 x CPW tile
  extern __shared__ __align__(16) unsigned char smem[];
  const int V = p.V, HV = p.HV;
  const auto bc = SequentialScheduler<VT>::block_coord();
  const int v0 = bc.v0, hv = bc.hv, n = bc.n;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int grp = warp & 3, half = warp >> 2;
  const int wc0 = grp * CPW;   // the group's first column within the tile
  const int kr0 = half * KH;   // the warp's first state row
  const SeqInfo si = p.seqs[n];
  const int nch = (si.len + kC - 1) / kC;
  const bool rows = p.q_raw != nullptr;
  const int hk = hv / p.G;
  float4* vx = reinterpret_cast<float4*>(smem + Lay::vx_off);  // [grp][half][NF][32]
  float4* ox = reinterpret_cast<float4*>(smem + Lay::ox_off);  // [grp][half][NF / 2][32]
  auto pair_sync = [&]() { asm volatile("bar.sync %0, 64;\n" ::"r"(1 + grp) : "memory"); };

  const int64_t state_base = (static_cast<int64_t>(n) * HV + hv) * K * V;
  auto sidx = [&](int kk, int vv) { return state_index<K>(V, p.v_first, kk, vv); };
  // element e of C fragment (mk, ni): state row, column (absolute)
  auto srow = [&](int mk, int e) { return kr0 + 16 * mk + g + (e >= 2 ? 8 : 0); };
  auto scol = [&](int ni, int e) { return v0 + wc0 + 8 * ni + 2 * t + (e & 1); };

  float S[MKH][NI][4];
#pragma unroll
  for (int mk = 0; mk < MKH; ++mk)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        S[mk][ni][e] = p.h0 ? load_state(p.h0, p.h0_dt, state_base + sidx(srow(mk, e), scol(ni, e))) : 0.f;

  auto issue = [&](int ci) {
    copy_chunk_stage<T, K, VT, kThreads>(smem + (ci & 1) * Lay::stage, p, si, ci, HV, hv, hk, V, v0, DELTA,
                                         rows, !DELTA && p.v_raw, tid);
  };

  if (nch > 0) issue(0);
  for (int ci = 0; ci < nch; ++ci) {
    const int t0 = si.t0 + ci * kC;
    const int Lc = min(kC, si.len - ci * kC);

    if (p.h) {  // state before chunk c
      const int64_t hb = (static_cast<int64_t>(si.chunk0 + ci) * HV + hv) * K * V;
#pragma unroll
      for (int mk = 0; mk < MKH; ++mk)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
          for (int e = 0; e < 4; ++e) store_state(p.h, p.h_dt, hb + sidx(srow(mk, e), scol(ni, e)), S[mk][ni][e]);
    }

    // every warp is done with stage (ci + 1) & 1 and with the exchange buffers of chunk ci - 1
    __syncthreads();
    if (ci + 1 < nch) {
      issue(ci + 1);
      cp_wait<1>();
    } else {
      cp_wait<0>();
    }
    __syncthreads();  // chunk ci's operands, from every thread's copies
    const unsigned char* st = smem + (ci & 1) * Lay::stage;
    const T* Ws = reinterpret_cast<const T*>(st + Lay::w_off);
    const T* Qs = reinterpret_cast<const T*>(st + Lay::q_off);
    const T* KTs = reinterpret_cast<const T*>(st + Lay::kt_off);
    const T* As = reinterpret_cast<const T*>(st + Lay::a_off);
    const T* Us = reinterpret_cast<const T*>(st + Lay::u_off);
    const float* gex = reinterpret_cast<const float*>(st + Lay::ge_off);
    const float* rf = reinterpret_cast<const float*>(st + Lay::rf_off);

    // S as B fragments (k = state row, n = column): the warp's own C fragments, transposed
    uint32_t Sb[MKH][NI][2];
#pragma unroll
    for (int mk = 0; mk < MKH; ++mk)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) c_to_b<T>(Sb[mk][ni], S[mk][ni]);

    // partial W S and Qg S over this warp's half of K
    float P[MT][NI][4], Q[MT][NI][4];
    zero_acc(P);
    zero_acc(Q);
#pragma unroll
    for (int kb = 0; kb < MKH; ++kb) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        uint32_t a[4], b[4];
        if constexpr (DELTA) {
          ldsm_a(a, Ws, Lay::ldw, 16 * mt, kr0 + 16 * kb);
          ldsm_a(b, Qs, Lay::ldw, 16 * mt, kr0 + 16 * kb);
#pragma unroll
          for (int ni = 0; ni < NI; ++ni) {
            mma16<T>(P[mt][ni], a, Sb[kb][ni]);
            mma16<T>(Q[mt][ni], b, Sb[kb][ni]);
          }
        } else {
          ldsm_a(b, Qs, Lay::ldw, 16 * mt, kr0 + 16 * kb);
#pragma unroll
          for (int ni = 0; ni < NI; ++ni) mma16<T>(Q[mt][ni], b, Sb[kb][ni]);
        }
      }
    }
    // exchange with the other half: all of W S, and the Qg S rows the other half finalises
    // (this half finalises O's token blocks 2 half, 2 half + 1)
    {
      float4* mine_v = vx + (grp * 2 + half) * NF * 32;
      float4* mine_o = ox + (grp * 2 + half) * (NF / 2) * 32;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          if constexpr (DELTA) mine_v[(mt * NI + ni) * 32 + lane] = make_float4(P[mt][ni][0], P[mt][ni][1], P[mt][ni][2], P[mt][ni][3]);
          if ((mt >> 1) != half)
            mine_o[((mt & 1) * NI + ni) * 32 + lane] = make_float4(Q[mt][ni][0], Q[mt][ni][1], Q[mt][ni][2], Q[mt][ni][3]);
        }
    }
    pair_sync();
    float Vn[MT][NI][4];
    {
      const float4* other_v = vx + (grp * 2 + (1 - half)) * NF * 32;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          if constexpr (DELTA) {
            const float4 x = other_v[(mt * NI + ni) * 32 + lane];
            const float xo[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int i = 16 * mt + g + (e >= 2 ? 8 : 0), c = wc0 + 8 * ni + 2 * t + (e & 1);
              // the same sum in both halves (addition commutes bitwise): V_new agrees exactly
              Vn[mt][ni][e] = to_f(Us[i * Lay::ldu + c]) - (P[mt][ni][e] + xo[e]);
            }
          } else {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int i = 16 * mt + g + (e >= 2 ? 8 : 0), c = wc0 + 8 * ni + 2 * t + (e & 1);
              Vn[mt][ni][e] = to_f(Us[i * Lay::ldu + c]);
            }
          }
        }
    }
    // V_new as B fragments (k = token): for O, and (times the row factors in raw-row mode) for S
    uint32_t Vb[MT][NI][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) c_to_b<T>(Vb[mt][ni], Vn[mt][ni]);

    // O rows of token blocks 2 half + j: Qg S (both halves' partials) + Aqk V_new
    {
      const float4* other_o = ox + (grp * 2 + (1 - half)) * (NF / 2) * 32;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if ((mt >> 1) != half) continue;  // (static indices into Q: no local-memory copy)
        const int j = mt & 1;
        float Oc[NI][4];
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          const float4 x = other_o[(j * NI + ni) * 32 + lane];
          const float xo[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) Oc[ni][e] = Q[mt][ni][e] + xo[e];
          if (rows) {  // raw q rows: Qg's row factor on the product
            const float f0 = rf[16 * mt + g], f1 = rf[16 * mt + g + 8];
            Oc[ni][0] *= f0; Oc[ni][1] *= f0;
            Oc[ni][2] *= f1; Oc[ni][3] *= f1;
          }
        }
#pragma unroll
        for (int kb = 0; kb <= mt; ++kb) {  // Aqk is lower triangular (diagonal included)
          uint32_t a[4];
          ldsm_a(a, As, Lay::lda, 16 * mt, 16 * kb);
#pragma unroll
          for (int ni = 0; ni < NI; ++ni) mma16<T>(Oc[ni], a, Vb[kb][ni]);
        }
        T* og = static_cast<T*>(p.o);
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int i = 16 * mt + g + 8 * hh, vv = v0 + wc0 + 8 * ni + 2 * t;
            if (i < Lc) {
              store2<T>(og + (static_cast<int64_t>(t0 + i) * HV + hv) * V + vv, Oc[ni][2 * hh], Oc[ni][2 * hh + 1]);
            }
          }
      }
    }

    // S = exp(γ_C) S + KgT V_new over this warp's rows   (raw-row mode: kᵀ (f ⊙ V_new))
    if (rows) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const float f0 = rf[kC + 16 * mt + g], f1 = rf[kC + 16 * mt + g + 8];
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) c_to_b<T>(Vb[mt][ni], Vn[mt][ni], f0, f1);
      }
    }
#pragma unroll
    for (int mk = 0; mk < MKH; ++mk) {
      const float d0 = gex[kr0 + 16 * mk + g], d1 = gex[kr0 + 16 * mk + g + 8];
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        S[mk][ni][0] *= d0; S[mk][ni][1] *= d0;
        S[mk][ni][2] *= d1; S[mk][ni][3] *= d1;
      }
    }
#pragma unroll
    for (int kb = 0; kb < MT; ++kb) {
#pragma unroll
      for (int mk = 0; mk < MKH; ++mk) {
        uint32_t a[4];
        if (rows) ldsm_a_k(a, KTs, Lay::ldw, kr0 + 16 * mk, 16 * kb);  // kᵀ from token-major k rows
        else ldsm_a(a, KTs, Lay::ldkt, kr0 + 16 * mk, 16 * kb);
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) mma16<T>(S[mk][ni], a, Vb[kb][ni]);
      }
    }
  }

  if (p.ht) {
#pragma unroll
    for (int mk = 0; mk < MKH; ++mk)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          store_state(p.ht, p.ht_dt, state_base + sidx(srow(mk, e), scol(ni, e)), S[mk][ni][e]);
  }
}

template <class T, int K, int VT, bool DELTA>
cudaError_t launch_vt(const StateParams& p, cudaStream_t s) {
  auto kernel = chunk_fused_warp_kernel<T, K, VT, DELTA>;
  constexpr int smem = WarpLayout<T, K, VT>::total;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  const dim3 grid = SequentialScheduler<VT>::grid_shape(p.V, p.HV, p.N);
  kernel<<<grid, kThreads, smem, s>>>(p);
  return cudaGetLastError();
}

template <class T, bool DELTA>
cudaError_t launch_d(const StateParams& p, cudaStream_t s) {
  if (p.K == 64) return p.fused_vt == 64 ? launch_vt<T, 64, 64, DELTA>(p, s) : launch_vt<T, 64, 32, DELTA>(p, s);
  return p.fused_vt == 64 ? launch_vt<T, 128, 64, DELTA>(p, s) : launch_vt<T, 128, 32, DELTA>(p, s);
}

template <class T>
cudaError_t launch_t(const StateParams& p, cudaStream_t s) {
  return p.delta ? launch_d<T, true>(p, s) : launch_d<T, false>(p, s);
}

}  // namespace

std::size_t fused_warp_smem_bytes(int K, int vt) {
  if (K == 64) return vt == 64 ? WarpLayout<__nv_bfloat16, 64, 64>::total : WarpLayout<__nv_bfloat16, 64, 32>::total;
  return vt == 64 ? WarpLayout<__nv_bfloat16, 128, 64>::total : WarpLayout<__nv_bfloat16, 128, 32>::total;
}

bool fused_warp_applies(int dtype, const StateParams& p) {
  if (!((dtype == 0 || dtype == 1) && (p.K == 64 || p.K == 128) && p.o != nullptr && p.hs == nullptr &&
        p.vnew == nullptr && p.U_lo == nullptr && (p.fused_vt == 64 || p.fused_vt == 32) && p.V % p.fused_vt == 0))
    return false;
  // the launch's device (the caller's DeviceGuard); the Hopper limits when it cannot be asked
  return fused_warp_smem_bytes(p.K, p.fused_vt) <= config::current_device_info().smem.block;
}

cudaError_t launch_fused_warp(int dtype, const StateParams& p, cudaStream_t s) {
  return dtype == 0 ? launch_t<__half>(p, s) : launch_t<__nv_bfloat16>(p, s);
}

}  // namespace linattn::cuda::kern

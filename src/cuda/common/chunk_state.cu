// Kernel 2 of the chunked delta-rule forward: the sequential pass over chunks (see chunk_fwd.hpp).
// One CTA per (value tile, value head, sequence); the K x VT state tile lives in registers.
#include "cuda/common/chunk_fwd.hpp"
#include "cuda/common/mma.cuh"

namespace linattn::cuda::kern {
namespace {

constexpr int kC = 64;
constexpr int kThreads = 256;

template <class T>
constexpr int pad_of() { return 16 / static_cast<int>(sizeof(T)); }

template <class T, int K, int VT>
struct StateLayout {
  static constexpr int P = pad_of<T>();
  static constexpr int ldw = K + P;      // W, Qg rows [64][K]
  static constexpr int ldkt = kC + P;    // KgT rows [K][64]
  static constexpr int lda = kC + P;     // Aqk rows [64][64]
  static constexpr int ldu = VT + P;     // U rows [64][VT]
  static constexpr int lds = K + P;      // S^T [VT][K]
  static constexpr int ldv = kC + P;     // V_new^T [VT][64]
  static constexpr int es = sizeof(T);
  static constexpr int w_off = 0;
  static constexpr int q_off = w_off + kC * ldw * es;
  static constexpr int kt_off = q_off + kC * ldw * es;
  static constexpr int a_off = kt_off + K * ldkt * es;
  static constexpr int u_off = a_off + kC * lda * es;
  static constexpr int ge_off = u_off + kC * ldu * es;
  static constexpr int stage = ge_off + K * 4;
  static constexpr int fixed = VT * lds * es + VT * ldv * es;
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// Copies a rows x cols tile (row-major, global stride gld) into smem (stride sld), 16B pieces.
template <class T>
__device__ __forceinline__ void tile_copy(T* dst, int sld, const T* src, int64_t gld, int rows, int cols) {
  constexpr int per = 16 / sizeof(T);
  const int pieces_per_row = cols / per;
  const int total = rows * pieces_per_row;
  for (int e = threadIdx.x; e < total; e += kThreads) {
    const int r = e / pieces_per_row, cp = e - r * pieces_per_row;
    cp_async16(dst + r * sld + cp * per, src + r * gld + cp * per);
  }
}

template <class T, int K, int VT>
__global__ void __launch_bounds__(kThreads, 1) chunk_state_kernel(const StateParams p) {
  using Lay = StateLayout<T, K, VT>;
  extern __shared__ __align__(16) unsigned char smem[];
  const int V = p.V, HV = p.HV;
  const int v0 = blockIdx.x * VT, hv = blockIdx.y, n = blockIdx.z;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const SeqInfo si = p.seqs[n];
  const int nch = (si.len + kC - 1) / kC;
  const int stages = p.stages;
  // 16-bit operands staged in shared memory: fragments by ldmatrix
  const bool smem_ops = kIs16<T> && stages > 0;

  unsigned char* fixed = smem + (stages > 0 ? stages * Lay::stage : 0);
  T* Ss = reinterpret_cast<T*>(fixed);                                  // S^T [VT][K]
  T* Vs = reinterpret_cast<T*>(fixed + VT * Lay::lds * Lay::es);        // V_new^T [VT][64]

  // state tile layout over warps: WM x WN warps, each MI x NI m16n8 tiles
  constexpr int WM = (K / 16) < 8 ? (K / 16) : 8;
  constexpr int WN = 8 / WM;
  constexpr int MI = (K / 16) / WM;
  constexpr int NI = (VT / 8) / WN;
  const int sm0 = (warp % WM) * 16 * MI, sn0 = (warp / WM) * 8 * NI;
  // token-side products: 4 x 2 warps, tiles 16 x (VT/2)
  constexpr int NT = VT / 16;
  const int tm0 = (warp & 3) * 16, tn0 = (warp >> 2) * (VT / 2);

  const int64_t state_base = (static_cast<int64_t>(n) * HV + hv) * K * V;
  auto sidx = [&](int kk, int vv) -> int64_t {
    return p.v_first ? static_cast<int64_t>(vv) * K + kk : static_cast<int64_t>(kk) * V + vv;
  };

  float S[MI][NI][4];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int kk = sm0 + 16 * mi + g + (e >= 2 ? 8 : 0), vv = v0 + sn0 + 8 * ni + 2 * t + (e & 1);
        S[mi][ni][e] = p.h0 ? load_state(p.h0, p.h0_dt, state_base + sidx(kk, vv)) : 0.f;
      }
  auto write_ss = [&]() {
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int kk = sm0 + 16 * mi + g + (e >= 2 ? 8 : 0), vv = sn0 + 8 * ni + 2 * t + (e & 1);
          Ss[vv * Lay::lds + kk] = from_f<T>(S[mi][ni][e]);
        }
  };
  write_ss();

  const T* Wg = static_cast<const T*>(p.W);
  const T* Ug = static_cast<const T*>(p.U);
  const T* Qgg = static_cast<const T*>(p.Qg);
  const T* KTg = static_cast<const T*>(p.KgT);
  const T* Ag = static_cast<const T*>(p.Aqk);

  auto issue = [&](int ci) {
    unsigned char* st = smem + (stages == 2 ? (ci & 1) : 0) * Lay::stage;
    const int64_t blk = static_cast<int64_t>(si.chunk0 + ci) * HV + hv;
    tile_copy<T>(reinterpret_cast<T*>(st + Lay::w_off), Lay::ldw, Wg + blk * kC * K, K, kC, K);
    tile_copy<T>(reinterpret_cast<T*>(st + Lay::q_off), Lay::ldw, Qgg + blk * kC * K, K, kC, K);
    tile_copy<T>(reinterpret_cast<T*>(st + Lay::kt_off), Lay::ldkt, KTg + blk * K * kC, kC, K, kC);
    tile_copy<T>(reinterpret_cast<T*>(st + Lay::a_off), Lay::lda, Ag + blk * kC * kC, kC, kC, kC);
    tile_copy<T>(reinterpret_cast<T*>(st + Lay::u_off), Lay::ldu, Ug + blk * kC * V + v0, V, kC, VT);
    tile_copy<float>(reinterpret_cast<float*>(st + Lay::ge_off), K, p.gexp + blk * K, K, 1, K);
    cp_commit();
  };

  if (stages > 0 && nch > 0) issue(0);

  for (int ci = 0; ci < nch; ++ci) {
    const int c = si.chunk0 + ci;
    const int t0 = si.t0 + ci * kC;
    const int Lc = min(kC, si.len - ci * kC);
    const int64_t blk = static_cast<int64_t>(c) * HV + hv;

    if (p.h) {  // state before chunk c
      const int64_t hb = (static_cast<int64_t>(c) * HV + hv) * K * V;
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int kk = sm0 + 16 * mi + g + (e >= 2 ? 8 : 0), vv = v0 + sn0 + 8 * ni + 2 * t + (e & 1);
            store_state(p.h, p.h_dt, hb + sidx(kk, vv), S[mi][ni][e]);
          }
    }

    // operand views for this chunk
    RowOp<T> Wop, Qop, KTop, Aop, Uop;
    const float* gex;
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
      if (smem_ops) warp_mma_sm<T, 1, NT>(acc, Wop.p, Wop.ld, Ss, Lay::lds, tm0, tn0, 0, K);
      else warp_mma<T, 1, NT>(acc, Wop, Sop, tm0, tn0, 0, K);
#pragma unroll
      for (int ni = 0; ni < NT; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = tm0 + g + (e >= 2 ? 8 : 0), vv = tn0 + 8 * ni + 2 * t + (e & 1);
          const float vn = Uop.at(i, vv) - acc[0][ni][e];
          Vs[vv * Lay::ldv + i] = from_f<T>(vn);
        }
    }
    __syncthreads();
    // O = Qg S + Aqk V_new
    {
      float acc[1][NT][4];
      zero_acc(acc);
      if (smem_ops) {
        warp_mma_sm<T, 1, NT>(acc, Qop.p, Qop.ld, Ss, Lay::lds, tm0, tn0, 0, K);
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
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      const float d0 = gex[sm0 + 16 * mi + g], d1 = gex[sm0 + 16 * mi + g + 8];
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        S[mi][ni][0] *= d0; S[mi][ni][1] *= d0;
        S[mi][ni][2] *= d1; S[mi][ni][3] *= d1;
      }
    }
    if (smem_ops) warp_mma_sm<T, MI, NI>(S, KTop.p, KTop.ld, Vs, Lay::ldv, sm0, sn0, 0, kC);
    else warp_mma<T, MI, NI>(S, KTop, Vop, sm0, sn0, 0, kC);
    __syncthreads();
    write_ss();
  }

  if (p.ht) {
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int kk = sm0 + 16 * mi + g + (e >= 2 ? 8 : 0), vv = v0 + sn0 + 8 * ni + 2 * t + (e & 1);
          store_state(p.ht, p.ht_dt, state_base + sidx(kk, vv), S[mi][ni][e]);
        }
  }
}

template <class T, int K, int VT>
cudaError_t launch_t(const StateParams& p, int smem, cudaStream_t s) {
  auto kernel = chunk_state_kernel<T, K, VT>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  dim3 grid(p.V / VT, p.HV, p.N);
  kernel<<<grid, kThreads, smem, s>>>(p);
  return cudaGetLastError();
}

template <class T, int VT>
cudaError_t launch_k(const StateParams& p, int smem, cudaStream_t s) {
  switch (p.K) {
    case 64: return launch_t<T, 64, VT>(p, smem, s);
    case 128: return launch_t<T, 128, VT>(p, smem, s);
    default: return launch_t<T, 256, VT>(p, smem, s);
  }
}

template <class T, int VT>
std::size_t smem_k(int K, int stages) {
  auto f = [&](auto lay) -> std::size_t {
    using L = decltype(lay);
    return static_cast<std::size_t>(stages) * L::stage + L::fixed;
  };
  switch (K) {
    case 64: return f(StateLayout<T, 64, VT>{});
    case 128: return f(StateLayout<T, 128, VT>{});
    default: return f(StateLayout<T, 256, VT>{});
  }
}

}  // namespace

int state_v_tile(int dtype) { return dtype == 2 ? 32 : 64; }

std::size_t state_smem_bytes(int dtype, int K, int stages) {
  switch (dtype) {
    case 0: return smem_k<__half, 64>(K, stages);
    case 1: return smem_k<__nv_bfloat16, 64>(K, stages);
    default: return smem_k<float, 32>(K, stages);
  }
}

cudaError_t launch_state(int dtype, const StateParams& p, int smem, cudaStream_t s) {
  switch (dtype) {
    case 0: return launch_k<__half, 64>(p, smem, s);
    case 1: return launch_k<__nv_bfloat16, 64>(p, smem, s);
    default: return launch_k<float, 32>(p, smem, s);
  }
}

}  // namespace linattn::cuda::kern

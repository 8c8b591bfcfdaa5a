// The token replay of the CUDA delta-rule backward (Problem::token_replay, a test oracle; see
// chunk_bwd.cuh): the token-parallel preparation (q̂, k̂, e^g̃, β̃), the forward replay that stores
// the chunk-boundary states h, the reverse-time gradient kernel, and its host side
// (chunk_bwd_stages.hpp).
// Templated on K only (64, 128, 256): one thread per key channel, 16 value columns per thread.
#include <algorithm>

#include "cuda/common/chunk_bwd.cuh"
#include "cuda/common/chunk_bwd_stages.hpp"
#include "cuda/common/gate.cuh"
#include "cuda/common/host_util.hpp"
#include "cuda/common/mma.cuh"
#include "cuda/config/heuristics.hpp"
#include "cuda/config/limits.hpp"

namespace linattn::cuda::bwd {
namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kRedLd = 20;  // floats per warp in the reduction buffer (16 columns + extra, padded)

// Transposing warp reduction of 16 per-lane values: afterwards x[0] of an even lane l holds the
// warp's sum of column l >> 1 (fixed order: bitwise reproducible).
__device__ __forceinline__ void warp_transpose16(float (&x)[16], int lane) {
  {
    const bool up = lane & 16;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float send = up ? x[i] : x[i + 8], keep = up ? x[i + 8] : x[i];
      x[i] = keep + __shfl_xor_sync(kFull, send, 16);
    }
  }
  {
    const bool up = lane & 8;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float send = up ? x[i] : x[i + 4], keep = up ? x[i + 4] : x[i];
      x[i] = keep + __shfl_xor_sync(kFull, send, 8);
    }
  }
  {
    const bool up = lane & 4;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float send = up ? x[i] : x[i + 2], keep = up ? x[i + 2] : x[i];
      x[i] = keep + __shfl_xor_sync(kFull, send, 4);
    }
  }
  {
    const bool up = lane & 2;
    const float send = up ? x[0] : x[1], keep = up ? x[1] : x[0];
    x[0] = keep + __shfl_xor_sync(kFull, send, 2);
  }
  x[0] += __shfl_xor_sync(kFull, x[0], 1);
}

// Sum over the block's K threads of 16 per-thread values (and optionally one extra scalar).
// Every thread receives the totals in out[] (same order everywhere: identical values). One
// __syncthreads; `red` is double-buffered ([2][NW][kRedLd]) so back-to-back calls are safe.
// Returns the buffer used, for colsum().
template <int NW, bool EXTRA>
__device__ __forceinline__ const float* block_reduce(float (&x)[16], float extra, float* red, int& rb,
                                                     float (&out)[16], float* extra_out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  warp_transpose16(x, lane);
  if constexpr (EXTRA) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) extra += __shfl_xor_sync(kFull, extra, o);
  }
  float* buf = red + rb * (NW * kRedLd);
  rb ^= 1;
  if (!(lane & 1)) buf[warp * kRedLd + (lane >> 1)] = x[0];
  if (EXTRA && lane == 0) buf[warp * kRedLd + 16] = extra;
  __syncthreads();
#pragma unroll
  for (int j = 0; j < 16; ++j) out[j] = 0.f;
  float ex = 0.f;
#pragma unroll
  for (int w = 0; w < NW; ++w) {
    const float4* b4 = reinterpret_cast<const float4*>(buf + w * kRedLd);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float4 v = b4[q];
      out[4 * q] += v.x;
      out[4 * q + 1] += v.y;
      out[4 * q + 2] += v.z;
      out[4 * q + 3] += v.w;
    }
    if constexpr (EXTRA) ex += buf[w * kRedLd + 16];
  }
  if constexpr (EXTRA) *extra_out = ex;
  return buf;
}

// Column j's total from a reduction buffer, summed in block_reduce's order (bitwise equal).
template <int NW>
__device__ __forceinline__ float colsum(const float* buf, int j) {
  float s = 0.f;
#pragma unroll
  for (int w = 0; w < NW; ++w) s += buf[w * kRedLd + j];
  return s;
}

__device__ __forceinline__ void load16(float (&x)[16], const float* p) {
  const float4* p4 = reinterpret_cast<const float4*>(p);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float4 v = p4[q];
    x[4 * q] = v.x;
    x[4 * q + 1] = v.y;
    x[4 * q + 2] = v.z;
    x[4 * q + 3] = v.w;
  }
}
__device__ __forceinline__ void store16(float* p, const float (&x)[16]) {
  float4* p4 = reinterpret_cast<float4*>(p);
#pragma unroll
  for (int q = 0; q < 4; ++q) p4[q] = make_float4(x[4 * q], x[4 * q + 1], x[4 * q + 2], x[4 * q + 3]);
}

__device__ __forceinline__ int64_t state_idx(const TokenParams& p, int n, int hv, int kk, int vv) {
  const int64_t base = (static_cast<int64_t>(n) * p.HV + hv) * p.K * p.V;
  return base + (p.v_first ? static_cast<int64_t>(vv) * p.K + kk : static_cast<int64_t>(kk) * p.V + vv);
}

// Loads the chunk's v (and optionally dO) tile [64][16] and β̃ into shared memory.
template <int K>
__device__ __forceinline__ void load_chunk(const TokenParams& p, int t0, int Lc, int hv, int v0, float* vs,
                                           float* dos, float* bs) {
  const int c = threadIdx.x;
  for (int e = c; e < kC * kVT; e += K) {
    const int i = e >> 4, j = e & 15;
    const int64_t gi = (static_cast<int64_t>(t0 + i) * p.HV + hv) * p.V + v0 + j;
    vs[e] = i < Lc ? kern::load_any(p.v, p.v_dt, gi) : 0.f;
    if (dos) dos[e] = i < Lc ? kern::load_any(p.d_o, p.v_dt, gi) : 0.f;
  }
  for (int i = c; i < kC; i += K) bs[i] = i < Lc ? p.bt[static_cast<int64_t>(t0 + i) * p.HV + hv] : 0.f;
}

// ---------------------------------------------------------------- chunk-boundary states
template <int K>
__global__ void __launch_bounds__(K) state_fwd_kernel(const TokenParams p) {
  constexpr int NW = K / 32;
  __shared__ __align__(16) float vs[kC * kVT];
  __shared__ float bs[kC];
  __shared__ __align__(16) float red[2 * NW * kRedLd];
  const int vt = blockIdx.x, hv = blockIdx.y, n = blockIdx.z, c = threadIdx.x;
  const int h = hv / p.G, v0 = vt * kVT, HV = p.HV;
  const SeqInfo si = p.seqs[n];
  float S[16];
#pragma unroll
  for (int j = 0; j < 16; ++j) S[j] = p.h0 ? kern::load_any(p.h0, p.h0_dt, state_idx(p, n, hv, c, v0 + j)) : 0.f;
  int rb = 0;
  const int nch = (si.len + kC - 1) / kC;
  for (int ci = 0; ci < nch; ++ci) {
    const int chunk = si.chunk0 + ci, t0 = si.t0 + ci * kC, Lc = min(kC, si.len - ci * kC);
    store16(p.h + ((static_cast<int64_t>(chunk) * HV + hv) * K + c) * p.V + v0, S);
    __syncthreads();
    load_chunk<K>(p, t0, Lc, hv, v0, vs, nullptr, bs);
    __syncthreads();
    for (int i = 0; i < Lc; ++i) {
      const int64_t t = t0 + i;
      const float kc = p.kn[(t * p.H + h) * K + c];
      const float ec = p.e[(t * HV + hv) * p.KG + (p.KG > 1 ? c : 0)];
      float x[16], r[16];
      const float ek = ec * kc;
#pragma unroll
      for (int j = 0; j < 16; ++j) x[j] = ek * S[j];
      block_reduce<NW, false>(x, 0.f, red, rb, r, nullptr);
      const float bk = bs[i] * kc;
      const float* vr = vs + i * kVT;
#pragma unroll
      for (int j = 0; j < 16; ++j) S[j] = ec * S[j] + bk * (vr[j] - r[j]);
    }
  }
}

// ---------------------------------------------------------------- reverse-time gradients
template <int K>
struct BwdSmem {
  static constexpr int ck = 0;                              // [kC/kCk][16][K] checkpoints
  static constexpr int us = ck + (kC / kCk) * kVT * K;      // [64][16]
  static constexpr int vs = us + kC * kVT;                  // [64][16]
  static constexpr int dos = vs + kC * kVT;                 // [64][16]
  static constexpr int bs = dos + kC * kVT;                 // [64]
  static constexpr int red = bs + kC;                       // [2][NW][kRedLd]
  static constexpr int total = red + 2 * (K / 32) * kRedLd;  // floats
};

template <int K>
__global__ void __launch_bounds__(K) token_bwd_kernel(const TokenParams p) {
  constexpr int NW = K / 32;
  using L = BwdSmem<K>;
  extern __shared__ __align__(16) float sm[];
  float* ck = sm + L::ck;
  float* us = sm + L::us;
  float* vs = sm + L::vs;
  float* dos = sm + L::dos;
  float* bs = sm + L::bs;
  float* red = sm + L::red;

  const int split = blockIdx.x, hv = blockIdx.y, n = blockIdx.z, c = threadIdx.x;
  const int h = hv / p.G, HV = p.HV, H = p.H, KG = p.KG;
  const SeqInfo si = p.seqs[n];
  const int nch = (si.len + kC - 1) / kC;
  const int NV = p.V / kVT;
  const int tb = split * p.tiles_per_split, te = min(NV, tb + p.tiles_per_split);
  const float scale = p.scale;
  int rb = 0;

  for (int vt = tb; vt < te; ++vt) {
    const bool first = vt == tb;
    const int v0 = vt * kVT;
    float D[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) D[j] = p.dht ? kern::load_any(p.dht, p.dht_dt, state_idx(p, n, hv, c, v0 + j)) : 0.f;

    for (int ci = nch - 1; ci >= 0; --ci) {
      const int chunk = si.chunk0 + ci, t0 = si.t0 + ci * kC, Lc = min(kC, si.len - ci * kC);
      __syncthreads();  // the previous chunk's shared tiles are no longer read
      load_chunk<K>(p, t0, Lc, hv, v0, vs, dos, bs);
      float S[16];
      load16(S, p.h + ((static_cast<int64_t>(chunk) * HV + hv) * K + c) * p.V + v0);
      __syncthreads();

      auto kn_at = [&](int i) { return p.kn[((static_cast<int64_t>(t0) + i) * H + h) * K + c]; };
      auto e_at = [&](int i) {
        return p.e[((static_cast<int64_t>(t0) + i) * HV + hv) * KG + (KG > 1 ? c : 0)];
      };

      // forward replay over the chunk: u_t into shared memory, checkpoints every kCk tokens
      for (int i = 0; i < Lc; ++i) {
        if ((i & (kCk - 1)) == 0) {
#pragma unroll
          for (int j = 0; j < 16; ++j) ck[((i / kCk) * kVT + j) * K + c] = S[j];
        }
        const float kc = kn_at(i), ec = e_at(i);
        float x[16], r[16];
        const float ek = ec * kc;
#pragma unroll
        for (int j = 0; j < 16; ++j) x[j] = ek * S[j];
        const float* buf = block_reduce<NW, false>(x, 0.f, red, rb, r, nullptr);
        const float bk = bs[i] * kc;
        const float* vr = vs + i * kVT;
        if (c < kVT) us[i * kVT + c] = vr[c] - colsum<NW>(buf, c);
#pragma unroll
        for (int j = 0; j < 16; ++j) S[j] = ec * S[j] + bk * (vr[j] - r[j]);
      }
      __syncthreads();

      auto replay = [&](int i, float(&s)[16]) {
        const float kc = kn_at(i), ec = e_at(i);
        const float bk = bs[i] * kc;
        float u[16];
        load16(u, us + i * kVT);
#pragma unroll
        for (int j = 0; j < 16; ++j) s[j] = ec * s[j] + bk * u[j];
      };

      const int nsb = (Lc + kSub - 1) / kSub;
      for (int sb = nsb - 1; sb >= 0; --sb) {
        const int i0 = sb * kSub, m = i0 / kCk;
#pragma unroll
        for (int j = 0; j < 16; ++j) S[j] = ck[(m * kVT + j) * K + c];
        for (int i = m * kCk; i < i0; ++i) replay(i, S);
        float St[kSub][16];
#pragma unroll
        for (int r = 0; r < kSub; ++r) {
#pragma unroll
          for (int j = 0; j < 16; ++j) St[r][j] = S[j];
          if (r + 1 < kSub && i0 + r < Lc) replay(i0 + r, S);
        }
#pragma unroll
        for (int r = kSub - 1; r >= 0; --r) {
          const int i = i0 + r;
          if (i >= Lc) continue;  // uniform over the block
          const float(&s)[16] = St[r];
          const int64_t t = static_cast<int64_t>(t0) + i;
          const float kc = kn_at(i), ec = e_at(i), b = bs[i];
          const float qc = scale * p.qn[(t * H + h) * K + c];
          float dO[16], u[16];
          load16(dO, dos + i * kVT);
          load16(u, us + i * kVT);
          float a = 0.f, w = 0.f, udo = 0.f;
#pragma unroll
          for (int j = 0; j < 16; ++j) {
            D[j] += qc * dO[j];
            a += s[j] * dO[j];
            udo += u[j] * dO[j];
            w += D[j] * u[j];
          }
          float x[16], r16[16], dbt = 0.f;
#pragma unroll
          for (int j = 0; j < 16; ++j) x[j] = kc * D[j];
          const float* buf = block_reduce<NW, true>(x, kc * w, red, rb, r16, &dbt);
          if (c < kVT) {
            stf(p.dv, p.v_dt, (t * HV + hv) * p.V + v0 + c, b * colsum<NW>(buf, c));
          }
          float sdu = 0.f, gs = 0.f;
#pragma unroll
          for (int j = 0; j < 16; ++j) {
            const float du = b * r16[j];
            sdu += s[j] * du;
            const float dp = D[j] - kc * du;
            gs += s[j] * dp;
            D[j] = ec * dp;
          }
          const float dq = scale * (ec * a + b * kc * udo);
          const float dk = b * w - ec * sdu;
          const float dg = ec * gs;
          const int64_t pi = (static_cast<int64_t>(split) * p.tokens + t) * HV + hv;
          float* pq = p.pq + pi * K + c;
          float* pk = p.pk + pi * K + c;
          float* pg = p.pg + pi * K + c;
          if (first) {
            *pq = dq;
            *pk = dk;
            *pg = dg;
            if (c == 0) p.pb[pi] = dbt;
          } else {
            *pq += dq;
            *pk += dk;
            *pg += dg;
            if (c == 0) p.pb[pi] += dbt;
          }
        }
      }
    }
    if (p.dh0) {
#pragma unroll
      for (int j = 0; j < 16; ++j) stf(p.dh0, p.dh0_dt, state_idx(p, n, hv, c, v0 + j), D[j]);
    }
  }
}

template <int K>
cudaError_t launch_fwd_k(const TokenParams& p, cudaStream_t s) {
  dim3 grid(p.V / kVT, p.HV, p.N);
  state_fwd_kernel<K><<<grid, K, 0, s>>>(p);
  return cudaGetLastError();
}

template <int K>
cudaError_t launch_bwd_k(const TokenParams& p, cudaStream_t s) {
  const int smem = BwdSmem<K>::total * static_cast<int>(sizeof(float));
  auto kernel = token_bwd_kernel<K>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  dim3 grid(p.NS, p.HV, p.N);
  kernel<<<grid, K, smem, s>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_state_fwd(const TokenParams& p, cudaStream_t s) {
  switch (p.K) {
    case 64: return launch_fwd_k<64>(p, s);
    case 128: return launch_fwd_k<128>(p, s);
    default: return launch_fwd_k<256>(p, s);
  }
}

cudaError_t launch_token_bwd(const TokenParams& p, cudaStream_t s) {
  switch (p.K) {
    case 64: return launch_bwd_k<64>(p, s);
    case 128: return launch_bwd_k<128>(p, s);
    default: return launch_bwd_k<256>(p, s);
  }
}

// ---- the token replay's preparation and its host side (chunk_bwd_stages.hpp)
namespace {

// The gate transform (forward and backward: gate.cuh) with this call's arguments.
__device__ __forceinline__ float gate_fwd(const GateArgs& ga, float raw, float dtb, float alog) {
  return gate::floor_gate(gate::transform_raw(ga.kind, ga.has_alog, ga.lower_bound, raw, dtb, alog));
}

// ---- 1a. q̂, k̂ (float32, l2-normalised when asked): one warp per (token, q/k head)
__global__ void prep_qk_kernel(const void* q, const void* k, int dt, float* qn, float* kn, int64_t rows, int K,
                               int l2) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int64_t base = row * K;
  float xq[kMaxKPerLane], xk[kMaxKPerLane], sq = 0.f, sk = 0.f;
#pragma unroll
  for (int m = 0; m < kMaxKPerLane; ++m) {
    const int c = lane + 32 * m;
    xq[m] = c < K ? kern::load_any(q, dt, base + c) : 0.f;
    xk[m] = c < K ? kern::load_any(k, dt, base + c) : 0.f;
    sq += xq[m] * xq[m];
    sk += xk[m] * xk[m];
  }
  float rq = 1.f, rk = 1.f;
  if (l2) {
    rq = gate::l2_rnorm(warp_sum(sq));
    rk = gate::l2_rnorm(warp_sum(sk));
  }
#pragma unroll
  for (int m = 0; m < kMaxKPerLane; ++m) {
    const int c = lane + 32 * m;
    if (c < K) {
      qn[base + c] = xq[m] * rq;
      kn[base + c] = xk[m] * rk;
    }
  }
}

// ---- 1b. e = exp(g̃) and β̃: one warp per (token, value head)
__global__ void prep_gate_kernel(const void* g, int g_dt, int has_g, const void* beta, int beta_dt, int beta_mode,
                                 GateArgs ga, float* e, float* bt, int64_t rows, int HV, int KG) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int hv = static_cast<int>(row % HV);
  const float alog = (ga.kind != 0 && ga.has_alog) ? kern::load_any(ga.A_log, ga.alog_dt, hv) : 0.f;
  for (int c = lane; c < KG; c += 32) {
    float val = 1.f;
    if (has_g) {
      const float raw = kern::load_any(g, g_dt, row * KG + c);
      const float dtb = (ga.kind != 0 && ga.has_dtb) ? kern::load_any(ga.dt_bias, ga.dtb_dt, static_cast<int64_t>(hv) * KG + c) : 0.f;
      val = expf(gate_fwd(ga, raw, dtb, alog));
    }
    e[row * KG + c] = val;
  }
  if (lane == 0) {
    float b = kern::load_any(beta, beta_dt, row);
    if (beta_mode != 0) b = (beta_mode == 2 ? 2.f : 1.f) * gate::sigmoid_precise(b);
    bt[row] = b;
  }
}

using config::align_up;

struct Plan {
  int NV = 0, NS = 1, tps = 1, KG = 1;
  int64_t tokens = 0;
  std::size_t seqs = 0, qn = 0, kn = 0, e = 0, bt = 0, h = 0, pq = 0, pk = 0, pg = 0, pb = 0, draw = 0, da = 0,
              total = 0;
  explicit Plan(const detail::Problem& p) {
    NV = static_cast<int>(p.V / kVT);
    KG = p.vector_gate ? static_cast<int>(p.K) : 1;
    tokens = p.B * p.T;
    config::token_v_splits(NV, p.N * p.HV, &NS, &tps);
    const std::size_t T = static_cast<std::size_t>(tokens);
    const std::size_t qk = T * p.H * p.K * 4, tv = T * p.HV * p.K * 4, th = T * p.HV * 4;
    std::size_t o = 0;
    seqs = o; o = align_up(o + sizeof(SeqInfo) * std::max<int64_t>(p.N, 1));
    qn = o; o = align_up(o + qk);
    kn = o; o = align_up(o + qk);
    e = o; o = align_up(o + T * p.HV * KG * 4);
    bt = o; o = align_up(o + th);
    h = o; o = align_up(o + static_cast<std::size_t>(p.num_chunks) * p.HV * p.K * p.V * 4);
    pq = o; o = align_up(o + NS * tv);
    pk = o; o = align_up(o + NS * tv);
    pg = o; o = align_up(o + NS * tv);
    pb = o; o = align_up(o + NS * th);
    draw = o; o = align_up(o + T * p.HV * KG * 4);
    da = o; o = align_up(o + th);
    total = o;
  }
};

}  // namespace

std::size_t token_replay_workspace_bytes(const detail::Problem& p) { return Plan(p).total; }

// The token replay (Problem::token_replay, a test hook): q̂, k̂, e, β̃ token-parallel, the float32
// chunk-boundary states, then the token recurrence backward; the partials in *parts.
Status run_token_replay(const detail::Problem& p, const BackwardInputs& in, const BackwardOutputs& out,
                        unsigned char* base, cudaStream_t st, Partials* parts) {
  const ForwardInputs& f = in.fwd;
  cudaError_t e = cudaSuccess;
  const int dt = dtype_code(p.dtype);
  const int64_t tokens = p.B * p.T;
  const GateArgs ga = gate_args(p, f);
  const int beta_mode = beta_mode_code(p);
  const int l2 = p.opt.use_qk_l2norm_in_kernel ? 1 : 0;
  float *&pq = parts->pq, *&pk = parts->pk, *&pg = parts->pg, *&pb = parts->pb, *&draw = parts->draw, *&da = parts->da;
  int &NS = parts->NS, &KG = parts->KG;
  const Plan pl(p);
  NS = pl.NS;
  KG = pl.KG;
  parts->pg_ld = static_cast<int>(p.K);
  if ((e = build_maps(p, base + pl.seqs, nullptr, st)) != cudaSuccess) return cuda_error("sequence map launch", e);
  float* qn = reinterpret_cast<float*>(base + pl.qn);
  float* kn = reinterpret_cast<float*>(base + pl.kn);
  float* ev = reinterpret_cast<float*>(base + pl.e);
  float* bt = reinterpret_cast<float*>(base + pl.bt);
  if (tokens > 0) {
    prep_qk_kernel<<<blocks_for(tokens * p.H), 256, 0, st>>>(f.q.data, f.k.data, dt, qn, kn, tokens * p.H,
                                                              static_cast<int>(p.K), l2);
    if ((e = cudaGetLastError()) != cudaSuccess) return cuda_error("prep_qk launch", e);
    prep_gate_kernel<<<blocks_for(tokens * p.HV), 256, 0, st>>>(
        p.has_g ? f.g.data : nullptr, p.has_g ? dtype_code(f.g.dtype) : 2, p.has_g ? 1 : 0, f.beta.data,
        dtype_code(f.beta.dtype), beta_mode, ga, ev, bt, tokens * p.HV, static_cast<int>(p.HV), pl.KG);
    if ((e = cudaGetLastError()) != cudaSuccess) return cuda_error("prep_gate launch", e);
  }
  TokenParams tp{};
  tp.seqs = reinterpret_cast<const SeqInfo*>(base + pl.seqs);
  tp.qn = qn;
  tp.kn = kn;
  tp.e = ev;
  tp.bt = bt;
  tp.v = f.v.data;
  tp.d_o = in.d_o.data;
  tp.v_dt = dt;
  tp.h0 = p.has_h0 ? f.initial_state.data : nullptr;
  tp.h0_dt = p.has_h0 ? dtype_code(f.initial_state.dtype) : 2;
  tp.dht = in.dht.present() ? in.dht.data : nullptr;
  tp.dht_dt = in.dht.present() ? dtype_code(in.dht.dtype) : 2;
  tp.h = reinterpret_cast<float*>(base + pl.h);
  tp.dv = out.dv.data;
  tp.dh0 = out.dh0.present() ? out.dh0.data : nullptr;
  tp.dh0_dt = out.dh0.present() ? dtype_code(out.dh0.dtype) : 2;
  tp.pq = reinterpret_cast<float*>(base + pl.pq);
  tp.pk = reinterpret_cast<float*>(base + pl.pk);
  tp.pg = reinterpret_cast<float*>(base + pl.pg);
  tp.pb = reinterpret_cast<float*>(base + pl.pb);
  tp.tokens = tokens;
  tp.N = static_cast<int>(p.N);
  tp.H = static_cast<int>(p.H);
  tp.HV = static_cast<int>(p.HV);
  tp.G = static_cast<int>(p.G);
  tp.K = static_cast<int>(p.K);
  tp.V = static_cast<int>(p.V);
  tp.KG = pl.KG;
  tp.NS = pl.NS;
  tp.tiles_per_split = pl.tps;
  tp.v_first = p.opt.state_v_first ? 1 : 0;
  tp.scale = static_cast<float>(p.scale);
  if (p.N > 0) {
    if (tokens > 0 && (e = launch_state_fwd(tp, st)) != cudaSuccess) return cuda_error("state_fwd launch", e);
    if ((e = launch_token_bwd(tp, st)) != cudaSuccess) return cuda_error("token_bwd launch", e);
  }
  pq = tp.pq;
  pk = tp.pk;
  pg = tp.pg;
  pb = tp.pb;
  draw = reinterpret_cast<float*>(base + pl.draw);
  da = reinterpret_cast<float*>(base + pl.da);
  return Status::Ok();
}

}  // namespace linattn::cuda::bwd

// The recurrent decode kernel: one CTA per (sequence, value head, 32-wide V tile) keeps its
// K x 32 slice of the state in registers for the sequence's few tokens, so each state byte is
// read once and written once (the work is bandwidth-bound: ~4 flops per state element per token).
//
// Per token, with S' = Diag(e) S the decayed state:
//   a = S'^T k,  b = S'^T q  (one pass over the registers, one reduction for both)
//   u = beta (v - a)  (delta rule; u = v without it)
//   o = S_t^T q = b + (q.k) u,   S_t = S' + k u^T
// q, k are staged unnormalised; the l2 norms and the scale are applied to the reduced sums.
//
// Two register layouts, chosen by the state's memory layout so every thread moves 16-byte pieces:
//   [K, V] (V contiguous): a thread holds 4 adjacent columns of KB/16 rows; the reduction over K
//       runs over lanes (shuffles) and then the 4 warps (shared memory, fixed order).
//   [V, K] (state_v_first): a thread holds 4 (or 8) adjacent K entries of several V rows; the
//       reduction over K stays within a row's lanes (shuffles only).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace linattn::cuda::recurrent {

constexpr int kThreads = 128;
constexpr int kTileV = 32;

// Every pointer and size the kernel reads; built once by the launcher (decode_launch.cu).
struct Params {
  const void* q;
  const void* k;
  const void* v;
  const void* g;
  const void* g_gamma;
  const void* beta;
  const void* A_log;
  const void* dt_bias;
  void* o;
  void* state;        // initial states / pool (ST), written in place when `inplace`
  void* final_state;  // separate output (final_dt), or null
  const void* indices;
  const void* accepted;
  const void* cu;
  int* status;
  long long state_stride;  // elements between slots of `state`
  long long pool_slots;
  long long index_cols;
  long long T;             // tokens per sequence (fixed length)
  long long total_tokens;  // B * T
  int N, H, HV, G, K, V;
  float scale, lower_bound;
  int g_dt, gg_dt, beta_dt, alog_dt, dtb_dt, final_dt;  // 0 fp16, 1 bf16, 2 fp32
  int gate_kind;  // 0 identity, 1 -exp(A_log) softplus, 2 lower bound
  int beta_mode;  // 0 identity, 1 sigmoid, 2 2 sigmoid
  bool has_g, vector_gate, has_gamma, has_alog, has_dtb, delta, beta_per_v, l2norm;
  bool varlen, cu64, has_indices, indices_2d, idx64, has_accepted, acc64;
  bool has_state, inplace, has_final;
  bool vec_state, vec_final, vec_o, vec_v;  // 16-byte (or 8-byte) pieces allowed
};

// ---------------------------------------------------------------- element access
__device__ __forceinline__ float ld_any(const void* p, int dt, long long i) {
  switch (dt) {
    case 0: return __half2float(static_cast<const __half*>(p)[i]);
    case 1: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}
__device__ __forceinline__ long long ld_index(const void* p, bool i64, long long i) {
  return i64 ? static_cast<const long long*>(p)[i] : static_cast<long long>(static_cast<const int*>(p)[i]);
}

template <typename T> __device__ __forceinline__ float to_f(T x);
template <> __device__ __forceinline__ float to_f(float x) { return x; }
template <> __device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_f(float x) { return __float2half_rn(x); }

// 4 consecutive elements; `nv` of them valid (the rest read as 0 / not written). One 16-byte
// (float) or 8-byte (16-bit) access when all 4 are valid and `vec` says the address is aligned.
template <typename T>
__device__ __forceinline__ float4 ld4(const T* p, bool vec, int nv) {
  if (vec && nv == 4) {
    if constexpr (sizeof(T) == 4) {
      return *reinterpret_cast<const float4*>(p);
    } else {
      const uint2 raw = *reinterpret_cast<const uint2*>(p);
      const T* e = reinterpret_cast<const T*>(&raw);
      return make_float4(to_f(e[0]), to_f(e[1]), to_f(e[2]), to_f(e[3]));
    }
  }
  float r[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int j = 0; j < 4; ++j)
    if (j < nv) r[j] = to_f(p[j]);
  return make_float4(r[0], r[1], r[2], r[3]);
}
template <typename T>
__device__ __forceinline__ void st4(T* p, float4 x, bool vec, int nv) {
  if (vec && nv == 4) {
    if constexpr (sizeof(T) == 4) {
      *reinterpret_cast<float4*>(p) = x;
    } else {
      uint2 raw;
      T* e = reinterpret_cast<T*>(&raw);
      e[0] = from_f<T>(x.x);
      e[1] = from_f<T>(x.y);
      e[2] = from_f<T>(x.z);
      e[3] = from_f<T>(x.w);
      *reinterpret_cast<uint2*>(p) = raw;
    }
    return;
  }
  const float r[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
  for (int j = 0; j < 4; ++j)
    if (j < nv) p[j] = from_f<T>(r[j]);
}
__device__ __forceinline__ void st4_any(void* p, int dt, long long off, float4 x, bool vec, int nv) {
  if (dt == 1) {
    st4(static_cast<__nv_bfloat16*>(p) + off, x, vec, nv);
  } else {
    st4(static_cast<float*>(p) + off, x, vec, nv);
  }
}
__device__ __forceinline__ float& f4(float4& x, int j) { return reinterpret_cast<float*>(&x)[j]; }
__device__ __forceinline__ float f4(const float4& x, int j) { return reinterpret_cast<const float*>(&x)[j]; }

__device__ __forceinline__ int clamp_nv(int valid) { return valid < 0 ? 0 : (valid > 4 ? 4 : valid); }

// ---------------------------------------------------------------- gate and beta
__device__ __forceinline__ float sigmoidf_(float x) { return 1.f / (1.f + expf(-x)); }
__device__ __forceinline__ float softplusf_(float x) { return x > 20.f ? x : log1pf(expf(x)); }

// Log decay of channel c (or the head's scalar) at token `tok`: SPEC.md's gate transforms.
__device__ __forceinline__ float log_decay(const Params& p, long long tok, int hv, int c) {
  float lg = 0.f;
  if (p.has_g) {
    const long long gi = p.vector_gate ? (tok * p.HV + hv) * p.K + c : tok * p.HV + hv;
    const float raw = ld_any(p.g, p.g_dt, gi);
    if (p.gate_kind == 0) {
      lg = raw;
    } else {
      const float x = raw + (p.has_dtb ? ld_any(p.dt_bias, p.dtb_dt, p.vector_gate ? (long long)hv * p.K + c : hv) : 0.f);
      if (p.gate_kind == 1) {
        const float sp = softplusf_(x);
        // exp(A_log) may overflow to inf; a zero softplus then means no decay, not inf * 0.
        lg = sp > 0.f ? -expf(ld_any(p.A_log, p.alog_dt, hv)) * sp : 0.f;
      } else {
        const float z = p.has_alog ? expf(ld_any(p.A_log, p.alog_dt, hv)) * x : x;
        lg = p.lower_bound * sigmoidf_(z);
      }
    }
  }
  if (p.has_gamma) lg += ld_any(p.g_gamma, p.gg_dt, hv);
  return lg;
}

__device__ __forceinline__ float beta_at(const Params& p, long long tok, int hv, int col) {
  const long long bi = p.beta_per_v ? (tok * p.HV + hv) * p.V + col : tok * p.HV + hv;
  const float b = ld_any(p.beta, p.beta_dt, bi);
  return p.beta_mode == 0 ? b : (p.beta_mode == 2 ? 2.f : 1.f) * sigmoidf_(b);
}

template <int W>
__device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int m = W / 2; m > 0; m >>= 1) x += __shfl_xor_sync(0xffffffffu, x, m);
  return x;
}

// ---------------------------------------------------------------- the kernel
// IO: q/k/v/o element type; ST: the state's; VFirst: [V, K] state layout; KB: K rounded up to
// 64, 128 or 256.
//
// Every thread loads the token inputs it needs itself (its rows' q, k and gate; its columns' v
// and beta), together with the state, so the loads overlap and a token needs at most one barrier
// (the [K, V] layout's cross-warp reduction, which also carries the l2 norms and q.k).
template <typename IO, typename ST, bool VFirst, int KB>
__global__ void __launch_bounds__(kThreads, KB <= 128 ? 4 : 2) recurrent_decode_kernel(const Params p) {
  constexpr int kWarps = kThreads / 32;
  // [K, V] reduction scratch, double-buffered by token parity: a, b per column; |q|^2, |k|^2, q.k
  __shared__ float4 red_ab[2][kWarps][2][kTileV / 4];
  __shared__ float4 red_n[2][kWarps];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int nvt = (p.V + kTileV - 1) / kTileV;
  const long long blk = blockIdx.x;
  const int vt = static_cast<int>(blk % nvt);
  const int hv = static_cast<int>((blk / nvt) % p.HV);
  const int n = static_cast<int>(blk / nvt / p.HV);
  const int h = hv / p.G;
  const int v0 = vt * kTileV;
  const long long KV = static_cast<long long>(p.K) * p.V;

  // ---- the sequence's tokens (device cu_seqlens are checked here: no host copy needed)
  long long bos, len;
  if (p.varlen) {
    bos = ld_index(p.cu, p.cu64, n);
    const long long eos = ld_index(p.cu, p.cu64, n + 1);
    if (bos < 0 || eos < bos || eos > p.total_tokens) {
      if (tid == 0 && p.status) atomicOr(p.status, 8);
      return;
    }
    len = eos - bos;
  } else {
    bos = static_cast<long long>(n) * p.T;
    len = p.T;
  }
  if (len == 0) return;

  auto zero_o = [&]() {  // a skipped sequence's o rows (this head, this V tile)
    IO* o = static_cast<IO*>(p.o);
    for (long long i = tid; i < len * kTileV; i += kThreads) {
      const int c = v0 + static_cast<int>(i % kTileV);
      if (c < p.V) o[((bos + i / kTileV) * p.HV + hv) * p.V + c] = from_f<IO>(0.f);
    }
  };
  auto flag = [&](int bit) {
    if (tid == 0 && p.status) atomicOr(p.status, bit);
  };

  // ---- the slot to start from
  long long rslot = n;
  if (p.has_indices) {
    if (p.indices_2d && len > p.index_cols) {
      flag(4);
      zero_o();
      return;
    }
    long long a = 1;
    if (p.has_accepted) {
      a = ld_index(p.accepted, p.acc64, n);
      if (a < 1 || a > p.index_cols) {
        flag(2);
        zero_o();
        return;
      }
    }
    rslot = ld_index(p.indices, p.idx64, static_cast<long long>(n) * p.index_cols + (a - 1));
    if (rslot < 0 || rslot >= p.pool_slots) {
      if (rslot >= 0) flag(1);
      zero_o();
      return;
    }
  }

  // ---- register layout
  // [K, V]: lane = 8 column groups (4 columns each) x 4 row groups; row of slot i: i*16 + warp*4 + lane/8.
  // [V, K]: LK lanes per V row (4 K entries each, twice for KB = 256), RPW rows per warp pass.
  constexpr int LK = VFirst ? (KB / 4 < 32 ? KB / 4 : 32) : 1;
  constexpr int EPL = VFirst ? KB / (4 * LK) : 1;  // 4-wide pieces per row per lane
  constexpr int RPW = VFirst ? 32 / LK : 1;
  constexpr int NR = VFirst ? kTileV / (4 * RPW) : KB / 16;  // rows a thread holds
  constexpr int NP = VFirst ? NR * EPL : NR;                // pieces a thread holds
  float4 S[NP];

  const int cg = lane & 7, rsub = lane >> 3;  // [K, V]
  const int lk = lane % LK, rw = lane / LK;   // [V, K]
  auto kv_row = [&](int i) { return i * 16 + warp * 4 + rsub; };         // K index
  auto vk_row = [&](int i) { return i * (4 * RPW) + warp * RPW + rw; };  // V index within the tile
  auto vk_col = [&](int e) { return e * 4 * LK + lk * 4; };              // K index

  // Whole tile inside the state and 4-wide pieces aligned: every piece one vector access at a
  // constant stride (the common case; the general path masks each piece).
  const bool full = VFirst ? (p.K == KB && v0 + kTileV <= p.V) : (p.K == KB && v0 + kTileV <= p.V);
  // element offset of piece `pi` inside one [HV, K, V] state, and how many of its 4 are valid
  auto piece = [&](int pi, long long* off, int* nv) {
    if constexpr (!VFirst) {
      const int r = kv_row(pi), c = v0 + cg * 4;
      *off = static_cast<long long>(r) * p.V + c;
      *nv = r < p.K ? clamp_nv(p.V - c) : 0;
    } else {
      const int i = pi / EPL, e = pi % EPL;
      const int j = v0 + vk_row(i), c = vk_col(e);
      *off = static_cast<long long>(j) * p.K + c;
      *nv = j < p.V ? clamp_nv(p.K - c) : 0;
    }
  };
  auto store_state = [&](void* base, int dt, long long slot_off, bool vec) {
    if (full && vec) {
      long long off0;
      int nv;
      piece(0, &off0, &nv);
      const long long step = VFirst ? 0 : 16LL * p.V;
#pragma unroll
      for (int pi = 0; pi < NP; ++pi) {
        long long off = off0 + pi * step;
        if constexpr (VFirst) piece(pi, &off, &nv);
        st4_any(base, dt, slot_off + off, S[pi], true, 4);
      }
      return;
    }
#pragma unroll
    for (int pi = 0; pi < NP; ++pi) {
      long long off;
      int nv;
      piece(pi, &off, &nv);
      if (nv > 0) st4_any(base, dt, slot_off + off, S[pi], vec, nv);
    }
  };

  // ---- load the state (issued first: the token inputs' loads overlap it)
  {
    const ST* src = static_cast<const ST*>(p.state) + rslot * p.state_stride + hv * KV;
    if (!p.has_state) {
#pragma unroll
      for (int pi = 0; pi < NP; ++pi) S[pi] = make_float4(0.f, 0.f, 0.f, 0.f);
    } else if (full && p.vec_state) {
      long long off0;
      int nv;
      piece(0, &off0, &nv);
#pragma unroll
      for (int pi = 0; pi < NP; ++pi) {
        long long off = off0 + (VFirst ? 0 : pi * 16LL * p.V);
        if constexpr (VFirst) piece(pi, &off, &nv);
        S[pi] = ld4(src + off, true, 4);
      }
    } else {
#pragma unroll
      for (int pi = 0; pi < NP; ++pi) {
        long long off;
        int nv;
        piece(pi, &off, &nv);
        S[pi] = nv > 0 ? ld4(src + off, p.vec_state, nv) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
  }

  const IO* q = static_cast<const IO*>(p.q);
  const IO* k = static_cast<const IO*>(p.k);
  const IO* v = static_cast<const IO*>(p.v);
  IO* o = static_cast<IO*>(p.o);
  for (long long t = 0; t < len; ++t) {
    const long long tok = bos + t;
    const long long qk0 = (tok * p.H + h) * p.K;
    const float e_scalar = p.vector_gate ? 1.f : expf(log_decay(p, tok, hv, 0));
    auto decay = [&](int c) { return p.vector_gate ? expf(log_decay(p, tok, hv, c)) : e_scalar; };

    if constexpr (!VFirst) {
      // ---- this thread's rows: q, k, decay; its columns: v, beta
      float qr[NR], kr[NR], er[NR];
#pragma unroll
      for (int i = 0; i < NR; ++i) {
        const int r = kv_row(i);
        const bool ok = r < p.K;
        qr[i] = ok ? to_f(q[qk0 + r]) : 0.f;
        kr[i] = ok ? to_f(k[qk0 + r]) : 0.f;
        er[i] = ok ? decay(r) : 1.f;
      }
      const int c0 = v0 + cg * 4;
      const int ncol = clamp_nv(p.V - c0);
      const float4 vv = ld4(v + (tok * p.HV + hv) * p.V + c0, p.vec_v, ncol);
      float bb[4] = {0.f, 0.f, 0.f, 0.f};
      if (p.delta) {
#pragma unroll
        for (int j = 0; j < 4; ++j) bb[j] = j < ncol ? beta_at(p, tok, hv, c0 + j) : 0.f;
      }
      // ---- decay, then a = S'^T k, b = S'^T q over these rows; the norms' partial sums
      float a[4] = {0.f, 0.f, 0.f, 0.f}, b[4] = {0.f, 0.f, 0.f, 0.f};
      float nq = 0.f, nk = 0.f, nqk = 0.f;
#pragma unroll
      for (int i = 0; i < NR; ++i) {
        nq += qr[i] * qr[i];
        nk += kr[i] * kr[i];
        nqk += qr[i] * kr[i];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          f4(S[i], j) *= er[i];
          a[j] += kr[i] * f4(S[i], j);
          b[j] += qr[i] * f4(S[i], j);
        }
      }
#pragma unroll
      for (int m = 8; m <= 16; m <<= 1) {  // over the warp's 4 row groups
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          a[j] += __shfl_xor_sync(0xffffffffu, a[j], m);
          b[j] += __shfl_xor_sync(0xffffffffu, b[j], m);
        }
        nq += __shfl_xor_sync(0xffffffffu, nq, m);
        nk += __shfl_xor_sync(0xffffffffu, nk, m);
        nqk += __shfl_xor_sync(0xffffffffu, nqk, m);
      }
      const int buf = static_cast<int>(t & 1);
      if (rsub == 0) {
        red_ab[buf][warp][0][cg] = make_float4(a[0], a[1], a[2], a[3]);
        red_ab[buf][warp][1][cg] = make_float4(b[0], b[1], b[2], b[3]);
        if (cg == 0) red_n[buf][warp] = make_float4(nq, nk, nqk, 0.f);
      }
      __syncthreads();
      float4 A = make_float4(0.f, 0.f, 0.f, 0.f), B = A, Nn = A;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {  // fixed order: deterministic
        const float4 x = red_ab[buf][w][0][cg], y = red_ab[buf][w][1][cg], z = red_n[buf][w];
        A = make_float4(A.x + x.x, A.y + x.y, A.z + x.z, A.w + x.w);
        B = make_float4(B.x + y.x, B.y + y.y, B.z + y.z, B.w + y.w);
        Nn = make_float4(Nn.x + z.x, Nn.y + z.y, Nn.z + z.z, 0.f);
      }
      const float rq = p.l2norm ? rsqrtf(Nn.x + 1e-6f) : 1.f;
      const float rk = p.l2norm ? rsqrtf(Nn.y + 1e-6f) : 1.f;
      const float qs = rq * p.scale;
      const float qk = Nn.z * qs * rk;
      float4 u, ov;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float uj = p.delta ? bb[j] * (f4(vv, j) - f4(A, j) * rk) : f4(vv, j);
        f4(u, j) = uj;
        f4(ov, j) = f4(B, j) * qs + qk * uj;
      }
#pragma unroll
      for (int i = 0; i < NR; ++i) {
        const float kn = kr[i] * rk;
#pragma unroll
        for (int j = 0; j < 4; ++j) f4(S[i], j) += kn * f4(u, j);
      }
      if (warp == 0 && rsub == 0 && ncol > 0) st4(o + (tok * p.HV + hv) * p.V + c0, ov, p.vec_o, ncol);
    } else {
      // ---- [V, K]: this thread's K entries (q, k, decay) and V rows (v, beta); every
      // reduction stays within a row's LK lanes, which hold all of K: no barrier
      float qq[EPL][4], kk[EPL][4], ek[EPL][4];
      float nq = 0.f, nk = 0.f, nqk = 0.f;
#pragma unroll
      for (int e = 0; e < EPL; ++e) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int c = vk_col(e) + j;
          const bool ok = c < p.K;
          qq[e][j] = ok ? to_f(q[qk0 + c]) : 0.f;
          kk[e][j] = ok ? to_f(k[qk0 + c]) : 0.f;
          ek[e][j] = ok ? decay(c) : 1.f;
          nq += qq[e][j] * qq[e][j];
          nk += kk[e][j] * kk[e][j];
          nqk += qq[e][j] * kk[e][j];
        }
      }
      float vr[NR], br[NR];
#pragma unroll
      for (int i = 0; i < NR; ++i) {
        const int jv = v0 + vk_row(i);
        vr[i] = jv < p.V ? to_f(v[(tok * p.HV + hv) * p.V + jv]) : 0.f;
        br[i] = p.delta && jv < p.V ? beta_at(p, tok, hv, jv) : 0.f;
      }
      nq = group_sum<LK>(nq);
      nk = group_sum<LK>(nk);
      nqk = group_sum<LK>(nqk);
      const float rq = p.l2norm ? rsqrtf(nq + 1e-6f) : 1.f;
      const float rk = p.l2norm ? rsqrtf(nk + 1e-6f) : 1.f;
      const float qs = rq * p.scale;
      const float qk = nqk * qs * rk;
#pragma unroll
      for (int i = 0; i < NR; ++i) {
        float a = 0.f, b = 0.f;
#pragma unroll
        for (int e = 0; e < EPL; ++e) {
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            float& s = f4(S[i * EPL + e], j);
            s *= ek[e][j];
            a += kk[e][j] * s;
            b += qq[e][j] * s;
          }
        }
        a = group_sum<LK>(a);
        b = group_sum<LK>(b);
        const float uj = p.delta ? br[i] * (vr[i] - a * rk) : vr[i];
#pragma unroll
        for (int e = 0; e < EPL; ++e) {
#pragma unroll
          for (int j = 0; j < 4; ++j) f4(S[i * EPL + e], j) += kk[e][j] * rk * uj;
        }
        const int jv = v0 + vk_row(i);
        if (lk == 0 && jv < p.V) o[(tok * p.HV + hv) * p.V + jv] = from_f<IO>(b * qs + qk * uj);
      }
    }

    // ---- per-token states (speculative decoding), in place
    if (p.indices_2d) {
      const long long w = ld_index(p.indices, p.idx64, static_cast<long long>(n) * p.index_cols + t);
      if (w >= p.pool_slots) {
        flag(1);
      } else if (w >= 0) {
        store_state(p.state, sizeof(ST) == 4 ? 2 : 1, w * p.state_stride + hv * KV, p.vec_state);
      }
    }
  }

  // ---- the final state: back into the pool / initial-state buffer, or to final_state
  if (!p.indices_2d) {
    if (p.inplace) {
      store_state(p.state, sizeof(ST) == 4 ? 2 : 1, rslot * p.state_stride + hv * KV, p.vec_state);
    } else if (p.has_final) {
      store_state(p.final_state, p.final_dt, static_cast<long long>(n) * p.HV * KV + hv * KV, p.vec_final);
    }
  }
}

// Launches the kernel for IO element type `io` (instantiated one dtype per translation unit).
cudaError_t launch_fp16(const Params& p, int st_bf16, bool v_first, int kb, cudaStream_t stream);
cudaError_t launch_bf16(const Params& p, int st_bf16, bool v_first, int kb, cudaStream_t stream);
cudaError_t launch_fp32(const Params& p, int st_bf16, bool v_first, int kb, cudaStream_t stream);

template <typename IO>
cudaError_t launch_io(const Params& p, int st_bf16, bool v_first, int kb, cudaStream_t stream) {
  const long long blocks = static_cast<long long>(p.N) * p.HV * ((p.V + kTileV - 1) / kTileV);
  auto go = [&](auto kernel) {
    kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
    return cudaGetLastError();
  };
#define LINATTN_DECODE_KB(ST, VF)                                                         \
  switch (kb) {                                                                           \
    case 64: return go(recurrent_decode_kernel<IO, ST, VF, 64>);                          \
    case 128: return go(recurrent_decode_kernel<IO, ST, VF, 128>);                        \
    default: return go(recurrent_decode_kernel<IO, ST, VF, 256>);                         \
  }
  if (st_bf16) {
    if (v_first) { LINATTN_DECODE_KB(__nv_bfloat16, true) } else { LINATTN_DECODE_KB(__nv_bfloat16, false) }
  } else {
    if (v_first) { LINATTN_DECODE_KB(float, true) } else { LINATTN_DECODE_KB(float, false) }
  }
#undef LINATTN_DECODE_KB
  return cudaErrorInvalidValue;
}

}  // namespace linattn::cuda::recurrent

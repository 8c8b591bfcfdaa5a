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

#include <algorithm>
#include <cstdint>
#include <type_traits>

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
// The decode is bandwidth-bound only if every SM keeps state bytes in flight while its CTAs go
// through their latency-bound phases (index loads, input staging, reductions). So the grid is
// persistent: a CTA walks tiles (sequence, value head, 32-wide V tile) and, while it computes one
// tile, the next tile's state is already on its way into shared memory (cp.async, two stages).
// Each thread copies and reads back only its own pieces ([stage][piece][thread]): no barrier for
// the state. Per token of a tile:
//   stage   thread r: q_r, k_r, decay_r (+ the l2 norms' and q.k partial sums); warp 0: v, beta
//   pass 1  S' = Diag(e) S, a = S'^T k, b = S'^T q          (S' recomputed in pass 2, bitwise)
//   reduce  [K, V]: shuffles over the warp's row groups, then the warps in a fixed order
//   pass 2  u = beta (v - a), o = b + (q.k) u, S = S' + k u^T: kept for the next token and/or
//           stored to the pool / final_state
template <bool VFirst, int KB>
struct Geometry {
  // [K, V]: lane = 8 column groups (4 columns each) x 4 row groups; thread rows r0 .. r0 + NR - 1
  //         with r0 = (warp * 4 + lane / 8) * NR (consecutive: the staged inputs load as float4).
  // [V, K]: LK lanes per V row (4 K entries each, twice for KB = 256), RPW rows per warp pass.
  static constexpr int LK = VFirst ? (KB / 4 < 32 ? KB / 4 : 32) : 1;
  static constexpr int EPL = VFirst ? KB / (4 * LK) : 1;
  static constexpr int RPW = VFirst ? 32 / LK : 1;
  static constexpr int NR = VFirst ? kTileV / (4 * RPW) : KB / 16;
  static constexpr int NP = VFirst ? NR * EPL : NR;  // 4-wide pieces a thread holds
};

// Dynamic shared memory of one CTA: two raw state stages (ST), a float32 work copy when ST is not
// float32 (the state between a tile's tokens), the staged token inputs and reduction scratch.
template <typename ST, bool VFirst, int KB>
constexpr int smem_bytes() {
  constexpr int NP = Geometry<VFirst, KB>::NP;
  return 2 * NP * kThreads * 4 * static_cast<int>(sizeof(ST)) + (sizeof(ST) == 4 ? 0 : NP * kThreads * 16) +
         3 * KB * 4 + 2 * kTileV * 4 + (kThreads / 32) * 16 + 2 * (kThreads / 32) * 2 * (kTileV / 4) * 16;
}

struct Tile {
  int n, hv, v0;
  long long bos, len, rslot;
  int skip;  // 0: process; 1: zero its o rows; 2: nothing to do
};

__device__ __forceinline__ void cp_async(void* smem, const void* gmem, int bytes) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  if (bytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(s), "l"(gmem));
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_1() { asm volatile("cp.async.wait_group 1;\n" ::); }

template <typename IO, typename ST, bool VFirst, int KB>
__global__ void __launch_bounds__(kThreads, KB <= 128 ? 5 : 3) recurrent_decode_kernel(const Params p) {
  using Geo = Geometry<VFirst, KB>;
  constexpr int kWarps = kThreads / 32;
  constexpr int kRowsPerThread = KB / kThreads;  // staging: rows a thread (0 means 1, r < KB)
  constexpr int LK = Geo::LK, EPL = Geo::EPL, RPW = Geo::RPW, NR = Geo::NR, NP = Geo::NP;
  using Raw = typename std::conditional<sizeof(ST) == 4, float4, uint2>::type;  // 4 elements of ST
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Raw(*sRaw)[NP][kThreads] = reinterpret_cast<Raw(*)[NP][kThreads]>(smem_raw);
  unsigned char* cursor = smem_raw + 2 * NP * kThreads * sizeof(Raw);
  // float32 state between tokens: the stage itself for float32 pools, else its own buffer
  float4(*sWork)[kThreads] = nullptr;
  if constexpr (sizeof(ST) != 4) {
    sWork = reinterpret_cast<float4(*)[kThreads]>(cursor);
    cursor += NP * kThreads * 16;
  }
  float* sq = reinterpret_cast<float*>(cursor);
  float* sk = sq + KB;
  float* se = sk + KB;
  float* sv = se + KB;
  float* sb = sv + kTileV;
  float4* red_n = reinterpret_cast<float4*>(sb + kTileV);                          // [kWarps]
  float4(*red_ab)[kWarps][2][kTileV / 4] = reinterpret_cast<float4(*)[kWarps][2][kTileV / 4]>(red_n + kWarps);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned nvt = (static_cast<unsigned>(p.V) + kTileV - 1) / kTileV;
  const unsigned num_tiles = nvt * static_cast<unsigned>(p.HV) * static_cast<unsigned>(p.N);
  const long long KV = static_cast<long long>(p.K) * p.V;
  auto flag = [&](int bit) {
    if (tid == 0 && p.status) atomicOr(p.status, bit);
  };

  // ---- a tile's sequence, slot and fate (device cu_seqlens and indices are checked here)
  auto resolve = [&](unsigned tile) {
    Tile T;
    T.v0 = static_cast<int>(tile % nvt) * kTileV;
    const unsigned rest = tile / nvt;
    T.hv = static_cast<int>(rest % static_cast<unsigned>(p.HV));
    T.n = static_cast<int>(rest / static_cast<unsigned>(p.HV));
    T.skip = 0;
    T.rslot = T.n;
    if (p.varlen) {
      T.bos = ld_index(p.cu, p.cu64, T.n);
      const long long eos = ld_index(p.cu, p.cu64, T.n + 1);
      if (T.bos < 0 || eos < T.bos || eos > p.total_tokens) {
        flag(8);
        T.skip = 2;
        T.len = 0;
        return T;
      }
      T.len = eos - T.bos;
    } else {
      T.bos = static_cast<long long>(T.n) * p.T;
      T.len = p.T;
    }
    if (T.len == 0) {
      T.skip = 2;
      return T;
    }
    if (p.has_indices) {
      if (p.indices_2d && T.len > p.index_cols) {
        flag(4);
        T.skip = 1;
        return T;
      }
      long long a = 1;
      if (p.has_accepted) {
        a = ld_index(p.accepted, p.acc64, T.n);
        if (a < 1 || a > p.index_cols) {
          flag(2);
          T.skip = 1;
          return T;
        }
      }
      T.rslot = ld_index(p.indices, p.idx64, static_cast<long long>(T.n) * p.index_cols + (a - 1));
      if (T.rslot < 0 || T.rslot >= p.pool_slots) {
        if (T.rslot >= 0) flag(1);
        T.skip = 1;
      }
    }
    return T;
  };

  const int cg = lane & 7, rsub = lane >> 3;  // [K, V]
  const int r0 = (warp * 4 + rsub) * NR;      // [K, V]: first row
  const int lk = lane % LK, rw = lane / LK;   // [V, K]
  auto vk_row = [&](int i) { return i * (4 * RPW) + warp * RPW + rw; };  // V index within the tile
  auto vk_col = [&](int e) { return e * 4 * LK + lk * 4; };              // K index
  // offset (elements, inside one [HV, K, V] state) and valid count of piece pi of a tile at v0
  auto piece_off = [&](int v0, int pi) -> int {
    if constexpr (!VFirst) {
      return (r0 + pi) * p.V + v0 + cg * 4;
    } else {
      return (v0 + vk_row(pi / EPL)) * p.K + vk_col(pi % EPL);
    }
  };
  auto piece_nv = [&](int v0, int pi) -> int {
    if (p.K == KB && v0 + kTileV <= p.V) return 4;  // whole tile inside the state
    if constexpr (!VFirst) {
      return r0 + pi < p.K ? clamp_nv(p.V - v0 - cg * 4) : 0;
    } else {
      return v0 + vk_row(pi / EPL) < p.V ? clamp_nv(p.K - vk_col(pi % EPL)) : 0;
    }
  };
  // ---- a tile's state into stage `st`: cp.async when every piece is whole and aligned
  auto prefetch = [&](const Tile& T, int st) {
    if (T.skip == 0 && p.has_state) {
      const ST* src = static_cast<const ST*>(p.state) + T.rslot * p.state_stride + T.hv * KV;
      const bool whole = p.vec_state && p.K == KB && T.v0 + kTileV <= p.V;
#pragma unroll
      for (int pi = 0; pi < NP; ++pi) {
        if (whole) {
          cp_async(&sRaw[st][pi][tid], src + piece_off(T.v0, pi), static_cast<int>(sizeof(Raw)));
        } else {
          const int nv = piece_nv(T.v0, pi);
          const float4 x = nv > 0 ? ld4(src + piece_off(T.v0, pi), p.vec_state, nv) : make_float4(0.f, 0.f, 0.f, 0.f);
          if constexpr (sizeof(ST) == 4) {
            sRaw[st][pi][tid] = x;
          } else {
            ST* e = reinterpret_cast<ST*>(&sRaw[st][pi][tid]);
            e[0] = from_f<ST>(x.x);
            e[1] = from_f<ST>(x.y);
            e[2] = from_f<ST>(x.z);
            e[3] = from_f<ST>(x.w);
          }
        }
      }
    }
    cp_async_commit();  // (an empty group when nothing was copied: the wait counts stay aligned)
  };
  auto raw_piece = [&](int st, int pi) -> float4 {
    if (!p.has_state) return make_float4(0.f, 0.f, 0.f, 0.f);
    if constexpr (sizeof(ST) == 4) {
      return sRaw[st][pi][tid];
    } else {
      const uint2 r = sRaw[st][pi][tid];
      const ST* e = reinterpret_cast<const ST*>(&r);
      return make_float4(to_f(e[0]), to_f(e[1]), to_f(e[2]), to_f(e[3]));
    }
  };

  const IO* q = static_cast<const IO*>(p.q);
  const IO* k = static_cast<const IO*>(p.k);
  const IO* v = static_cast<const IO*>(p.v);
  IO* o = static_cast<IO*>(p.o);

  unsigned tile = blockIdx.x;
  Tile cur = resolve(tile < num_tiles ? tile : 0);
  prefetch(cur, 0);
  for (int it = 0; tile < num_tiles; ++it, tile += gridDim.x) {
    const int st = it & 1;
    // the next tile's slot, then its state on the way while this tile computes
    const unsigned next_tile = tile + gridDim.x;
    Tile nxt;
    nxt.skip = 2;
    if (next_tile < num_tiles) nxt = resolve(next_tile);
    prefetch(nxt, st ^ 1);
    cp_async_wait_1();  // this thread's pieces of the current stage have landed

    const Tile T = cur;
    cur = nxt;
    if (T.skip == 1) {  // padding or a flagged slot: o rows 0, nothing else written
      for (long long i = tid; i < T.len * kTileV; i += kThreads) {
        const int c = T.v0 + static_cast<int>(i % kTileV);
        if (c < p.V) o[((T.bos + i / kTileV) * p.HV + T.hv) * p.V + c] = from_f<IO>(0.f);
      }
      continue;
    }
    if (T.skip == 2) continue;
    const int h = T.hv / p.G;
    const int hv = T.hv;
    const int v0 = T.v0;
    const int c0 = v0 + cg * 4;
    for (long long t = 0; t < T.len; ++t) {
      const long long tok = T.bos + t;
      __syncthreads();  // the previous token's (or tile's) readers of the staged inputs are done
      // ---- stage: rows (q, k, decay) with the norms' partial sums; warp 0 also v and beta
      {
        const long long qk0 = (tok * p.H + h) * p.K;
        const float e_scalar = p.vector_gate ? 1.f : expf(log_decay(p, tok, hv, 0));
        float nq = 0.f, nk = 0.f, nqk = 0.f;
#pragma unroll
        for (int j = 0; j < (kRowsPerThread > 0 ? kRowsPerThread : 1); ++j) {
          const int r = tid + j * kThreads;
          if (r < KB) {
            float qr = 0.f, kr = 0.f, er = 1.f;
            if (r < p.K) {
              qr = to_f(q[qk0 + r]);
              kr = to_f(k[qk0 + r]);
              er = p.vector_gate ? expf(log_decay(p, tok, hv, r)) : e_scalar;
            }
            sq[r] = qr;
            sk[r] = kr;
            se[r] = er;
            nq += qr * qr;
            nk += kr * kr;
            nqk += qr * kr;
          }
        }
        nq = group_sum<32>(nq);
        nk = group_sum<32>(nk);
        nqk = group_sum<32>(nqk);
        if (lane == 0) red_n[warp] = make_float4(nq, nk, nqk, 0.f);
        if (tid < kTileV) {
          const int c = v0 + tid;
          sv[tid] = c < p.V ? to_f(v[(tok * p.HV + hv) * p.V + c]) : 0.f;
          sb[tid] = p.delta && c < p.V ? beta_at(p, tok, hv, c) : 0.f;
        }
      }
      __syncthreads();
      float4 nn = red_n[0];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) {  // fixed order: deterministic
        const float4 x = red_n[w];
        nn = make_float4(nn.x + x.x, nn.y + x.y, nn.z + x.z, 0.f);
      }
      const float rq = p.l2norm ? rsqrtf(nn.x + 1e-6f) : 1.f;
      const float rk = p.l2norm ? rsqrtf(nn.y + 1e-6f) : 1.f;
      const float qs = rq * p.scale;
      const float qk = nn.z * qs * rk;

      // where pass 2 sends the new state: the work copy (more tokens), the pool / final_state
      const bool last = t + 1 == T.len;
      bool to_global = false;
      bool to_pool = true;
      long long dst_off = 0;
      if (p.indices_2d) {
        const long long w = ld_index(p.indices, p.idx64, static_cast<long long>(T.n) * p.index_cols + t);
        if (w >= p.pool_slots) {
          flag(1);
        } else if (w >= 0) {
          to_global = true;
          dst_off = w * p.state_stride + hv * KV;
        }
      } else if (last && p.inplace) {
        to_global = true;
        dst_off = T.rslot * p.state_stride + hv * KV;
      } else if (last && p.has_final) {
        to_global = true;
        to_pool = false;
        dst_off = static_cast<long long>(T.n) * p.HV * KV + hv * KV;
      }
      auto load = [&](int pi) -> float4 {  // the state before this token
        if constexpr (sizeof(ST) == 4) {
          return t == 0 ? raw_piece(st, pi) : sRaw[st][pi][tid];
        } else {
          return t == 0 ? raw_piece(st, pi) : sWork[pi][tid];
        }
      };
      auto emit = [&](int pi, const float4& x) {  // the new state's piece pi
        if (!last) {
          if constexpr (sizeof(ST) == 4) {
            sRaw[st][pi][tid] = x;
          } else {
            sWork[pi][tid] = x;
          }
        }
        if (to_global) {
          const int nv = piece_nv(v0, pi);
          if (to_pool) {
            if (nv > 0) st4(static_cast<ST*>(p.state) + dst_off + piece_off(v0, pi), x, p.vec_state, nv);
          } else if (nv > 0) {
            st4_any(p.final_state, p.final_dt, dst_off + piece_off(v0, pi), x, p.vec_final, nv);
          }
        }
      };

      if constexpr (!VFirst) {
        float qr[NR], kr[NR], er[NR];
#pragma unroll
        for (int i = 0; i < NR; i += 4) {
          const float4 x = *reinterpret_cast<const float4*>(sq + r0 + i);
          const float4 y = *reinterpret_cast<const float4*>(sk + r0 + i);
          const float4 z = *reinterpret_cast<const float4*>(se + r0 + i);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            qr[i + j] = f4(x, j);
            kr[i + j] = f4(y, j);
            er[i + j] = f4(z, j);
          }
        }
        // ---- pass 1: a = S'^T k, b = S'^T q over this thread's rows
        float a[4] = {0.f, 0.f, 0.f, 0.f}, b[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int i = 0; i < NR; ++i) {
          const float4 x = load(i);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const float sd = f4(x, j) * er[i];
            a[j] += kr[i] * sd;
            b[j] += qr[i] * sd;
          }
        }
#pragma unroll
        for (int m = 8; m <= 16; m <<= 1) {  // over the warp's 4 row groups
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            a[j] += __shfl_xor_sync(0xffffffffu, a[j], m);
            b[j] += __shfl_xor_sync(0xffffffffu, b[j], m);
          }
        }
        const int buf = static_cast<int>(t & 1);
        if (rsub == 0) {
          red_ab[buf][warp][0][cg] = make_float4(a[0], a[1], a[2], a[3]);
          red_ab[buf][warp][1][cg] = make_float4(b[0], b[1], b[2], b[3]);
        }
        __syncthreads();
        float4 A = red_ab[buf][0][0][cg], B = red_ab[buf][0][1][cg];
#pragma unroll
        for (int w = 1; w < kWarps; ++w) {  // fixed order: deterministic
          const float4 x = red_ab[buf][w][0][cg], y = red_ab[buf][w][1][cg];
          A = make_float4(A.x + x.x, A.y + x.y, A.z + x.z, A.w + x.w);
          B = make_float4(B.x + y.x, B.y + y.y, B.z + y.z, B.w + y.w);
        }
        const float4 vv = *reinterpret_cast<const float4*>(sv + cg * 4);
        const float4 bb = *reinterpret_cast<const float4*>(sb + cg * 4);
        float4 u, ov;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float uj = p.delta ? f4(bb, j) * (f4(vv, j) - f4(A, j) * rk) : f4(vv, j);
          f4(u, j) = uj;
          f4(ov, j) = f4(B, j) * qs + qk * uj;
        }
        const int ncol = clamp_nv(p.V - c0);
        if (warp == 0 && rsub == 0 && ncol > 0) st4(o + (tok * p.HV + hv) * p.V + c0, ov, p.vec_o, ncol);
        // ---- pass 2: S = S' + k u^T
#pragma unroll
        for (int i = 0; i < NR; ++i) {
          const float kn = kr[i] * rk;
          float4 x = load(i);
#pragma unroll
          for (int j = 0; j < 4; ++j) f4(x, j) = f4(x, j) * er[i] + kn * f4(u, j);
          emit(i, x);
        }
      } else {
        // ---- [V, K]: a row's LK lanes hold all of K: every reduction is a shuffle
        float qq[EPL][4], kk[EPL][4], ek[EPL][4];
#pragma unroll
        for (int e = 0; e < EPL; ++e) {
          const float4 x = *reinterpret_cast<const float4*>(sq + vk_col(e));
          const float4 y = *reinterpret_cast<const float4*>(sk + vk_col(e));
          const float4 z = *reinterpret_cast<const float4*>(se + vk_col(e));
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            qq[e][j] = f4(x, j);
            kk[e][j] = f4(y, j) * rk;
            ek[e][j] = f4(z, j);
          }
        }
#pragma unroll
        for (int i = 0; i < NR; ++i) {
          float a = 0.f, b = 0.f;
#pragma unroll
          for (int e = 0; e < EPL; ++e) {
            const float4 x = load(i * EPL + e);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              const float sd = f4(x, j) * ek[e][j];
              a += kk[e][j] * sd;
              b += qq[e][j] * sd;
            }
          }
          a = group_sum<LK>(a);
          b = group_sum<LK>(b);
          const int jr = vk_row(i);
          const float uj = p.delta ? sb[jr] * (sv[jr] - a) : sv[jr];
          if (lk == 0 && v0 + jr < p.V) o[(tok * p.HV + hv) * p.V + v0 + jr] = from_f<IO>(b * qs + qk * uj);
#pragma unroll
          for (int e = 0; e < EPL; ++e) {
            float4 x = load(i * EPL + e);
#pragma unroll
            for (int j = 0; j < 4; ++j) f4(x, j) = f4(x, j) * ek[e][j] + kk[e][j] * uj;
            emit(i * EPL + e, x);
          }
        }
      }
    }
  }
  asm volatile("cp.async.wait_all;\n" ::);
}

// Launches the kernel for IO element type `io` (instantiated one dtype per translation unit).
cudaError_t launch_fp16(const Params& p, int st_bf16, bool v_first, int kb, cudaStream_t stream);
cudaError_t launch_bf16(const Params& p, int st_bf16, bool v_first, int kb, cudaStream_t stream);
cudaError_t launch_fp32(const Params& p, int st_bf16, bool v_first, int kb, cudaStream_t stream);

template <typename IO>
cudaError_t launch_io(const Params& p, int st_bf16, bool v_first, int kb, cudaStream_t stream) {
  const long long tiles = static_cast<long long>(p.N) * p.HV * ((p.V + kTileV - 1) / kTileV);
  auto go = [&](auto kernel, int smem) -> cudaError_t {
    // Once per instantiation and device: the dynamic shared-memory limit and how many CTAs share
    // an SM (the persistent grid's size).
    struct Setup {
      cudaError_t err = cudaErrorNotReady;
      int per_sm = 1, sms = 132;
    };
    constexpr int kMaxDevices = 64;
    static Setup setups[kMaxDevices];
    int dev = 0;
    if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
    if (dev < 0 || dev >= kMaxDevices) return cudaErrorInvalidDevice;
    Setup& setup = setups[dev];
    if (setup.err != cudaSuccess) {  // benign race: every thread computes the same values
      Setup s;
      s.err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
      if (s.err == cudaSuccess) s.err = cudaDeviceGetAttribute(&s.sms, cudaDevAttrMultiProcessorCount, dev);
      if (s.err == cudaSuccess) s.err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&s.per_sm, kernel, kThreads, smem);
      if (s.err != cudaSuccess) return s.err;
      if (s.per_sm < 1) s.per_sm = 1;
      setup = s;
    }
    const long long grid = std::min<long long>(tiles, static_cast<long long>(setup.per_sm) * setup.sms);
    kernel<<<static_cast<unsigned>(grid), kThreads, smem, stream>>>(p);
    return cudaGetLastError();
  };
#define LINATTN_DECODE_KB(ST, VF)                                                                     \
  switch (kb) {                                                                                       \
    case 64: return go(recurrent_decode_kernel<IO, ST, VF, 64>, smem_bytes<ST, VF, 64>());            \
    case 128: return go(recurrent_decode_kernel<IO, ST, VF, 128>, smem_bytes<ST, VF, 128>());         \
    default: return go(recurrent_decode_kernel<IO, ST, VF, 256>, smem_bytes<ST, VF, 256>());          \
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

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

#include "cuda/common/gate.cuh"

namespace linattn::cuda::recurrent {

constexpr int kThreads = 128;
constexpr int kTileV = 32;  // V columns a CTA: 32, or 64 for the wide bfloat16-pool form (CW = 8)

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
// The transforms are gate.cuh's float32 ones (the chunked backward's transform_raw and
// sigmoid_precise): one home for SPEC.md's gate and beta transforms, the limits of the formulas
// when exp(A_log) over- or underflows included.

// The raw gate value of channel c (or the head's scalar) at token `tok` (0 without g).
__device__ __forceinline__ float gate_raw(const Params& p, long long tok, int hv, int c) {
  if (!p.has_g) return 0.f;
  return ld_any(p.g, p.g_dt, p.vector_gate ? (tok * p.HV + hv) * p.K + c : tok * p.HV + hv);
}

// Log decay from the raw gate: SPEC.md's gate transforms, plus simple GLA's g_gamma.
__device__ __forceinline__ float log_decay_from(const Params& p, float raw, int hv, int c) {
  float lg = 0.f;
  if (p.has_g) {
    lg = raw;
    if (p.gate_kind != 0) {
      const float dtb = p.has_dtb ? ld_any(p.dt_bias, p.dtb_dt, p.vector_gate ? (long long)hv * p.K + c : hv) : 0.f;
      const float alog = p.gate_kind == 1 || p.has_alog ? ld_any(p.A_log, p.alog_dt, hv) : 0.f;
      lg = gate::transform_raw(p.gate_kind, p.has_alog, p.lower_bound, raw, dtb, alog);
    }
  }
  if (p.has_gamma) lg += ld_any(p.g_gamma, p.gg_dt, hv);
  return lg;
}

__device__ __forceinline__ float beta_at(const Params& p, long long tok, int hv, int col) {
  const long long bi = p.beta_per_v ? (tok * p.HV + hv) * p.V + col : tok * p.HV + hv;
  const float b = ld_any(p.beta, p.beta_dt, bi);
  return p.beta_mode == 0 ? b : (p.beta_mode == 2 ? 2.f : 1.f) * gate::sigmoid_precise(b);
}

template <int W>
__device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int m = W / 2; m > 0; m >>= 1) x += __shfl_xor_sync(0xffffffffu, x, m);
  return x;
}

// ---------------------------------------------------------------- the prologue both kernels share
// The tokens of sequence n: [bos, bos + len). Device cu_seqlens are checked here (no host copy is
// needed); a bad one raises flag 8. False: nothing to do for this sequence.
__device__ __forceinline__ bool seq_span(const Params& p, int n, int tid, long long* bos, long long* len) {
  if (p.varlen) {
    *bos = ld_index(p.cu, p.cu64, n);
    const long long eos = ld_index(p.cu, p.cu64, n + 1);
    if (*bos < 0 || eos < *bos || eos > p.total_tokens) {
      if (tid == 0 && p.status) atomicOr(p.status, 8);
      return false;
    }
    *len = eos - *bos;
  } else {
    *bos = static_cast<long long>(n) * p.T;
    *len = p.T;
  }
  return *len > 0;
}

// The slot sequence n starts from (n itself without state indices) into *rslot. Returns -1 to go
// on; otherwise the sequence is skipped (the caller zeroes its o rows) and the value is the flag
// the caller raises after that: more tokens than index columns (4), an accepted count outside
// [1, T_max] (2), a slot past the pool (1), or 0 for a negative slot (padding, no flag).
// (An int rather than bool + out-flag: the latter made ptxas spill 11 words in the 64-column
// kernel at K = 128, none here.) The caller raises the flag after zeroing the rows, not
// before: thread 0's atomic in a branch of its own ahead of the zeroing loop (which ptxas turns
// into a warp-aggregated atomic on uniform registers) left the other 31 threads of warp 0 with
// wrong o addresses in that loop in the sm_80 build JIT-compiled on an H100 (memcheck, session 50;
// docs/cuda_architecture.md, "Other GPUs").
__device__ __forceinline__ int start_slot(const Params& p, int n, long long len, long long* rslot) {
  *rslot = n;
  if (!p.has_indices) return -1;
  if (p.indices_2d && len > p.index_cols) return 4;
  long long a = 1;
  if (p.has_accepted) {
    a = ld_index(p.accepted, p.acc64, n);
    if (a < 1 || a > p.index_cols) return 2;
  }
  *rslot = ld_index(p.indices, p.idx64, static_cast<long long>(n) * p.index_cols + (a - 1));
  if (*rslot < 0) return 0;
  if (*rslot >= p.pool_slots) return 1;
  return -1;
}

// A skipped sequence's o rows (this head, columns v0 .. v0 + TV - 1), by NT threads.
// Then the flag `bit` of start_slot, if any (thread 0).
template <typename IO, int NT>
__device__ __forceinline__ void skip_sequence(const Params& p, long long bos, long long len, int hv, int v0, int TV,
                                              int bit) {
  IO* o = static_cast<IO*>(p.o);
  for (long long i = threadIdx.x; i < len * TV; i += NT) {
    const int c = v0 + static_cast<int>(i % TV);
    if (c < p.V) o[((bos + i / TV) * p.HV + hv) * p.V + c] = from_f<IO>(0.f);
  }
  if (bit != 0 && threadIdx.x == 0 && p.status) atomicOr(p.status, bit);
}

// 4 consecutive state elements in shared memory as float (16 bytes of float32, 8 of bfloat16).
__device__ __forceinline__ float4 load_piece(const float* x) { return *reinterpret_cast<const float4*>(x); }
__device__ __forceinline__ float4 load_piece(const __nv_bfloat16* x) { return ld4(x, true, 4); }
__device__ __forceinline__ void store_piece(float* x, float4 y) { *reinterpret_cast<float4*>(x) = y; }
__device__ __forceinline__ void store_piece(__nv_bfloat16* x, float4 y) { st4(x, y, true, 4); }

// ---------------------------------------------------------------- the kernel
// IO: q/k/v/o element type; ST: the state's; VFirst: [V, K] state layout; KB: K rounded up to
// 64, 128 or 256.
//
// The decode is bandwidth-bound only if enough state bytes are in flight on every SM while each
// CTA goes through its latency-bound phases (index loads, input staging, reductions). So the
// state tile lives in shared memory (float32, each thread's pieces at [piece][thread]), not in
// registers: a CTA needs ~64 registers a thread and 8 or more CTAs share an SM. Each thread
// reads back only the pieces it loaded itself (no barrier for that). Per token:
//   stage   thread r: q_r, k_r, decay_r (+ the l2 norms' and q.k partial sums); warp 0: v, beta
//   pass 1  S' = Diag(e) S, a = S'^T k, b = S'^T q          (S' recomputed in pass 2, bitwise)
//   reduce  [K, V]: shuffles over the warp's row groups, then the warps in a fixed order
//   pass 2  u = beta (v - a), o = b + (q.k) u, S = S' + k u^T, written back / stored
// Fast: every tile whole and every 4-wide piece an aligned vector (K = KB, V a multiple of 32,
// aligned tensors: the common 64/128/256 head sizes), so the masks and their branches compile away.
//
// CW: columns of a thread's piece in the [K, V] layout, 4 (16 bytes of float32, 8 of bfloat16) or,
// for a bfloat16 pool on the fast path, 8 (16 bytes): a 64-column tile, so the per-tile work
// (slot, staging, gates, reductions) is amortised over as many pool bytes as a float32 tile's.
template <typename IO, typename ST, bool VFirst, int KB, bool Fast, int CW = 4>
__global__ void __launch_bounds__(kThreads, CW == 8 ? 6 : (KB <= 128 ? 8 : 4)) recurrent_decode_kernel(const Params p) {
  static_assert(CW == 4 || (CW == 8 && Fast && !VFirst && sizeof(ST) == 2), "wide pieces: bf16 pool, [K, V], fast path");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  // The wide form at KB = 256 holds 71 KB of static shared memory, past the 48 KB sm_8x allows:
  // compiled for those only as a trap (decode_launch.cu picks 32-column tiles there).
  if constexpr (CW == 8 && KB == 256) {
    __trap();
  } else
#endif
  {
  constexpr int kWarps = kThreads / 32;
  constexpr int TV = 8 * CW;   // the tile's V columns
  constexpr int NQ = CW / 4;   // float4s of a piece
  constexpr int kRowsPerThread = KB / kThreads;  // staging: rows a thread (0 means 1, r < KB)
  // [K, V]: lane = 8 column groups (4 columns each) x 4 row groups; thread rows r0 .. r0 + NR - 1
  //         with r0 = (warp * 4 + lane / 8) * NR (consecutive: the staged inputs load as float4).
  // [V, K]: LK lanes per V row (4 K entries each, twice for KB = 256), RPW rows per warp pass.
  constexpr int LK = VFirst ? (KB / 4 < 32 ? KB / 4 : 32) : 1;
  constexpr int EPL = VFirst ? KB / (4 * LK) : 1;
  constexpr int RPW = VFirst ? 32 / LK : 1;
  constexpr int NR = VFirst ? TV / (4 * RPW) : KB / 16;
  constexpr int NP = VFirst ? NR * EPL : NR;  // 4-wide pieces a thread holds
  __shared__ float4 sS[NP * NQ][kThreads];
  __shared__ __align__(16) float sq[KB], sk[KB], se[KB];
  __shared__ __align__(16) float sv[TV], sb[TV];
  __shared__ float4 red_n[kWarps];                // per warp: |q|^2, |k|^2, q.k partials
  // [K, V]: a, b partials per warp; one buffer (the barrier at the top of each token separates
  // a token's readers from the next token's writers)
  __shared__ float4 red_ab[kWarps][2][TV / 4];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned nvt = (static_cast<unsigned>(p.V) + TV - 1) / TV;
  const unsigned blk = blockIdx.x;
  const int vt = static_cast<int>(blk % nvt);
  const unsigned rest = blk / nvt;
  const int hv = static_cast<int>(rest % static_cast<unsigned>(p.HV));
  const int n = static_cast<int>(rest / static_cast<unsigned>(p.HV));
  const int h = hv / p.G;
  const int v0 = vt * TV;
  const long long KV = static_cast<long long>(p.K) * p.V;

  // ---- the sequence's tokens
  long long bos, len;
  if (!seq_span(p, n, tid, &bos, &len)) return;

  // ---- the first token's inputs, requested before the slot index is resolved (their latency
  // overlaps the index load and the state copy); staged in the token loop
  constexpr int kRows = kRowsPerThread > 0 ? kRowsPerThread : 1;
  const IO* q = static_cast<const IO*>(p.q);
  const IO* k = static_cast<const IO*>(p.k);
  const IO* v = static_cast<const IO*>(p.v);
  IO* o = static_cast<IO*>(p.o);
  float in_q[kRows], in_k[kRows], in_g[kRows], in_v = 0.f, in_b = 0.f;
  auto request = [&](long long tok) {
    const long long qk0 = (tok * p.H + h) * p.K;
    const float g0 = p.vector_gate ? 0.f : gate_raw(p, tok, hv, 0);
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      const int r = tid + j * kThreads;
      const bool ok = r < p.K;
      in_q[j] = ok ? to_f(q[qk0 + r]) : 0.f;
      in_k[j] = ok ? to_f(k[qk0 + r]) : 0.f;
      in_g[j] = ok ? (p.vector_gate ? gate_raw(p, tok, hv, r) : g0) : 0.f;
    }
    if (tid < TV && v0 + tid < p.V) {
      in_v = to_f(v[(tok * p.HV + hv) * p.V + v0 + tid]);
      in_b = p.delta ? beta_at(p, tok, hv, v0 + tid) : 0.f;
    }
  };
  request(bos);

  // ---- the slot to start from
  long long rslot;
  if (const int bit = start_slot(p, n, len, &rslot); bit >= 0) {
    skip_sequence<IO, kThreads>(p, bos, len, hv, v0, TV, bit);
    return;
  }

  const int cg = lane & 7, rsub = lane >> 3;  // [K, V]
  const int r0 = (warp * 4 + rsub) * NR;      // [K, V]: first row
  const int c0 = v0 + cg * CW;                // [K, V]: first column
  const int lk = lane % LK, rw = lane / LK;   // [V, K]
  auto vk_row = [&](int i) { return i * (4 * RPW) + warp * RPW + rw; };  // V index within the tile
  auto vk_col = [&](int e) { return e * 4 * LK + lk * 4; };              // K index
  // offset (elements, inside one [HV, K, V] state) and valid count of piece pi
  auto piece_off = [&](int pi) -> int {
    if constexpr (!VFirst) {
      return (r0 + pi) * p.V + c0;
    } else {
      return (v0 + vk_row(pi / EPL)) * p.K + vk_col(pi % EPL);
    }
  };
  // Whole tile inside the state: every piece valid (the general path masks each piece).
  const bool full = Fast || (p.K == KB && v0 + TV <= p.V);
  auto piece_nv = [&](int pi) -> int {
    if (full) return 4;
    if constexpr (!VFirst) {
      return r0 + pi < p.K ? clamp_nv(p.V - c0) : 0;
    } else {
      return v0 + vk_row(pi / EPL) < p.V ? clamp_nv(p.K - vk_col(pi % EPL)) : 0;
    }
  };

  // ---- the state into shared memory (its loads overlap the first token's staging)
  if constexpr (CW == 4) {
    const ST* src = static_cast<const ST*>(p.state) + rslot * p.state_stride + hv * KV;
    float4 x[NP];
#pragma unroll
    for (int pi = 0; pi < NP; ++pi) {
      const int nv = piece_nv(pi);
      x[pi] = p.has_state && nv > 0 ? ld4(src + piece_off(pi), Fast || p.vec_state, nv) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int pi = 0; pi < NP; ++pi) sS[pi][tid] = x[pi];
  } else {  // 8 bfloat16 a piece: one 16-byte load each, widened on the way into shared memory
    const ST* src = static_cast<const ST*>(p.state) + rslot * p.state_stride + hv * KV;
    uint4 x[NP];
#pragma unroll
    for (int pi = 0; pi < NP; ++pi)
      x[pi] = p.has_state ? *reinterpret_cast<const uint4*>(src + piece_off(pi)) : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
    for (int pi = 0; pi < NP; ++pi) {
      const ST* e = reinterpret_cast<const ST*>(&x[pi]);
      sS[2 * pi][tid] = make_float4(to_f(e[0]), to_f(e[1]), to_f(e[2]), to_f(e[3]));
      sS[2 * pi + 1][tid] = make_float4(to_f(e[4]), to_f(e[5]), to_f(e[6]), to_f(e[7]));
    }
  }

  int late_bits = 0;  // a write slot past the pool: raised after the token loop (see start_slot)
  for (long long t = 0; t < len; ++t) {
    const long long tok = bos + t;
    if (t > 0) __syncthreads();  // the previous token's readers of the staged inputs are done
    // ---- stage: rows (q, k, decay) with the norms' partial sums; warp 0 also v and beta
    {
      if (t > 0) request(tok);
      float nq = 0.f, nk = 0.f, nqk = 0.f;
#pragma unroll
      for (int j = 0; j < kRows; ++j) {
        const int r = tid + j * kThreads;
        if (r < KB) {
          sq[r] = in_q[j];
          sk[r] = in_k[j];
          se[r] = r < p.K ? expf(log_decay_from(p, in_g[j], hv, p.vector_gate ? r : 0)) : 1.f;
          nq += in_q[j] * in_q[j];
          nk += in_k[j] * in_k[j];
          nqk += in_q[j] * in_k[j];
        }
      }
      nq = group_sum<32>(nq);
      nk = group_sum<32>(nk);
      nqk = group_sum<32>(nqk);
      if (lane == 0) red_n[warp] = make_float4(nq, nk, nqk, 0.f);
      if (tid < TV) {
        sv[tid] = in_v;
        sb[tid] = in_b;
      }
    }
    __syncthreads();
    float4 nn = red_n[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) {  // fixed order: deterministic
      const float4 x = red_n[w];
      nn = make_float4(nn.x + x.x, nn.y + x.y, nn.z + x.z, 0.f);
    }
    const float rq = p.l2norm ? gate::l2_rnorm(nn.x) : 1.f;
    const float rk = p.l2norm ? gate::l2_rnorm(nn.y) : 1.f;
    const float qs = rq * p.scale;
    const float qk = nn.z * qs * rk;

    // where pass 2 sends the new state: shared memory (more tokens), the pool / final_state
    const bool last = t + 1 == len;
    bool to_global = false, to_pool = true;
    long long dst_off = 0;
    if (p.indices_2d) {
      const long long w = ld_index(p.indices, p.idx64, static_cast<long long>(n) * p.index_cols + t);
      if (w >= p.pool_slots) {
        late_bits |= 1;
      } else if (w >= 0) {
        to_global = true;
        dst_off = w * p.state_stride + hv * KV;
      }
    } else if (last && p.inplace) {
      to_global = true;
      dst_off = rslot * p.state_stride + hv * KV;
    } else if (last && p.has_final) {
      to_global = true;
      to_pool = false;
      dst_off = static_cast<long long>(n) * p.HV * KV + hv * KV;
    }
    auto emit = [&](int pi, const float4& x) {  // the new state's piece pi (CW = 4)
      if (!last) sS[pi][tid] = x;
      if (to_global) {
        const int nv = piece_nv(pi);
        if (nv <= 0) return;
        if (to_pool) {
          st4(static_cast<ST*>(p.state) + dst_off + piece_off(pi), x, Fast || p.vec_state, nv);
        } else {
          st4_any(p.final_state, p.final_dt, dst_off + piece_off(pi), x, Fast || p.vec_final, nv);
        }
      }
    };

    auto emit8 = [&](int pi, const float* x) {  // the new state's piece pi (CW = 8: bfloat16 pool)
      if (!last) {
        sS[2 * pi][tid] = make_float4(x[0], x[1], x[2], x[3]);
        sS[2 * pi + 1][tid] = make_float4(x[4], x[5], x[6], x[7]);
      }
      if (to_global) {
        if (to_pool) {
          uint4 raw;
          ST* e = reinterpret_cast<ST*>(&raw);
#pragma unroll
          for (int j = 0; j < 8; ++j) e[j] = from_f<ST>(x[j]);
          *reinterpret_cast<uint4*>(static_cast<ST*>(p.state) + dst_off + piece_off(pi)) = raw;
        } else {
          st4_any(p.final_state, p.final_dt, dst_off + piece_off(pi), make_float4(x[0], x[1], x[2], x[3]), true, 4);
          st4_any(p.final_state, p.final_dt, dst_off + piece_off(pi) + 4, make_float4(x[4], x[5], x[6], x[7]), true, 4);
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
      float a[CW], b[CW];
#pragma unroll
      for (int j = 0; j < CW; ++j) a[j] = b[j] = 0.f;
#pragma unroll
      for (int i = 0; i < NR; ++i) {
#pragma unroll
        for (int h4 = 0; h4 < NQ; ++h4) {
          const float4 x = sS[i * NQ + h4][tid];
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const float sd = f4(x, j) * er[i];
            a[4 * h4 + j] += kr[i] * sd;
            b[4 * h4 + j] += qr[i] * sd;
          }
        }
      }
#pragma unroll
      for (int m = 8; m <= 16; m <<= 1) {  // over the warp's 4 row groups
#pragma unroll
        for (int j = 0; j < CW; ++j) {
          a[j] += __shfl_xor_sync(0xffffffffu, a[j], m);
          b[j] += __shfl_xor_sync(0xffffffffu, b[j], m);
        }
      }
      if (rsub == 0) {
#pragma unroll
        for (int h4 = 0; h4 < NQ; ++h4) {
          red_ab[warp][0][cg * NQ + h4] = make_float4(a[4 * h4], a[4 * h4 + 1], a[4 * h4 + 2], a[4 * h4 + 3]);
          red_ab[warp][1][cg * NQ + h4] = make_float4(b[4 * h4], b[4 * h4 + 1], b[4 * h4 + 2], b[4 * h4 + 3]);
        }
      }
      __syncthreads();
      float u[CW];
#pragma unroll
      for (int h4 = 0; h4 < NQ; ++h4) {
        const int quad = cg * NQ + h4;
        float4 A = red_ab[0][0][quad], B = red_ab[0][1][quad];
#pragma unroll
        for (int w = 1; w < kWarps; ++w) {  // fixed order: deterministic
          const float4 x = red_ab[w][0][quad], y = red_ab[w][1][quad];
          A = make_float4(A.x + x.x, A.y + x.y, A.z + x.z, A.w + x.w);
          B = make_float4(B.x + y.x, B.y + y.y, B.z + y.z, B.w + y.w);
        }
        const float4 vv = *reinterpret_cast<const float4*>(sv + quad * 4);
        const float4 bb = *reinterpret_cast<const float4*>(sb + quad * 4);
        float4 ov;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float uj = p.delta ? f4(bb, j) * (f4(vv, j) - f4(A, j) * rk) : f4(vv, j);
          u[4 * h4 + j] = uj;
          f4(ov, j) = f4(B, j) * qs + qk * uj;
        }
        const int ncol = clamp_nv(p.V - c0 - 4 * h4);
        if (warp == 0 && rsub == 0 && ncol > 0)
          st4(o + (tok * p.HV + hv) * p.V + c0 + 4 * h4, ov, Fast || p.vec_o, ncol);
      }
      // ---- pass 2: S = S' + k u^T
#pragma unroll
      for (int i = 0; i < NR; ++i) {
        const float kn = kr[i] * rk;
        if constexpr (CW == 4) {
          float4 x = sS[i][tid];
#pragma unroll
          for (int j = 0; j < 4; ++j) f4(x, j) = f4(x, j) * er[i] + kn * u[j];
          emit(i, x);
        } else {
          float x[CW];
#pragma unroll
          for (int h4 = 0; h4 < NQ; ++h4) {
            const float4 y = sS[i * NQ + h4][tid];
#pragma unroll
            for (int j = 0; j < 4; ++j) x[4 * h4 + j] = f4(y, j) * er[i] + kn * u[4 * h4 + j];
          }
          emit8(i, x);
        }
      }
    } else {
      // ---- [V, K]: a row's LK lanes hold all of K: every reduction is a shuffle, no barrier
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
          const float4 x = sS[i * EPL + e][tid];
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
          float4 x = sS[i * EPL + e][tid];
#pragma unroll
          for (int j = 0; j < 4; ++j) f4(x, j) = f4(x, j) * ek[e][j] + kk[e][j] * uj;
          emit(i * EPL + e, x);
        }
      }
    }
  }
  if (late_bits != 0 && tid == 0 && p.status) atomicOr(p.status, late_bits);
  }
}

// Which kernel a call runs (decode_launch.cu picks it): the tiled kernel above with 32-column
// tiles, its 64-column form for a bfloat16 pool (CW = 8), or the whole-head kernel of
// recurrent_decode_head.cuh (sm_90+, bulk copies of the whole state).
enum class DecodeForm { kTiled, kWide, kHead };

// Launches the decode for IO element type `io` (instantiated one dtype per translation unit).
cudaError_t launch_fp16(const Params& p, int st_bf16, bool v_first, int kb, bool fast, DecodeForm form, cudaStream_t stream);
cudaError_t launch_bf16(const Params& p, int st_bf16, bool v_first, int kb, bool fast, DecodeForm form, cudaStream_t stream);
cudaError_t launch_fp32(const Params& p, int st_bf16, bool v_first, int kb, bool fast, DecodeForm form, cudaStream_t stream);

template <typename IO>
cudaError_t launch_io(const Params& p, int st_bf16, bool v_first, int kb, bool fast, bool wide, cudaStream_t stream) {
  const int tv = wide ? 2 * kTileV : kTileV;
  const long long blocks = static_cast<long long>(p.N) * p.HV * ((p.V + tv - 1) / tv);
  auto go = [&](auto kernel) {
    kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
    return cudaGetLastError();
  };
  if (wide) {
    switch (kb) {
      case 64: return go(recurrent_decode_kernel<IO, __nv_bfloat16, false, 64, true, 8>);
      case 128: return go(recurrent_decode_kernel<IO, __nv_bfloat16, false, 128, true, 8>);
      default: return go(recurrent_decode_kernel<IO, __nv_bfloat16, false, 256, true, 8>);
    }
  }
#define LINATTN_DECODE_KB(ST, VF, F)                                                      \
  switch (kb) {                                                                           \
    case 64: return go(recurrent_decode_kernel<IO, ST, VF, 64, F>);                       \
    case 128: return go(recurrent_decode_kernel<IO, ST, VF, 128, F>);                     \
    default: return go(recurrent_decode_kernel<IO, ST, VF, 256, F>);                      \
  }
#define LINATTN_DECODE_FAST(ST, VF) \
  if (fast) {                       \
    LINATTN_DECODE_KB(ST, VF, true) \
  } else {                          \
    LINATTN_DECODE_KB(ST, VF, false) \
  }
  if (st_bf16) {
    if (v_first) { LINATTN_DECODE_FAST(__nv_bfloat16, true) } else { LINATTN_DECODE_FAST(__nv_bfloat16, false) }
  } else {
    if (v_first) { LINATTN_DECODE_FAST(float, true) } else { LINATTN_DECODE_FAST(float, false) }
  }
#undef LINATTN_DECODE_FAST
#undef LINATTN_DECODE_KB
  return cudaErrorInvalidValue;
}

}  // namespace linattn::cuda::recurrent

// The warp-tile decode kernel: the [K, V] state layout on the fast path (K in {64, 128, 256}, V a
// multiple of the tile width, 16-byte aligned tensors), every Params option else.
//
// Why one warp per tile, with the tile in registers: the decode moves each state byte once in
// and once out, so it is bandwidth-bound only if enough tiles are in flight on every SM while
// each goes through its latency chain (slot index -> state load -> reductions -> store). The
// CTA-per-tile kernel (recurrent_decode.cuh) spends that chain on two CTA barriers a token and a
// float32 copy of the tile in shared memory; here a warp owns a K x 2CL tile outright: no shared
// memory, no barrier, and the four warps of a CTA are independent tiles.
//
// Lane layout: lane = 2 * row block + half. A lane holds KR = K/16 consecutive rows and the CL = 4
// columns of its half as float32 registers (a float32 pool's two lanes of a row block load one
// 32-byte sector of each row together). Per token (S' = Diag(e) S):
//   a = S'^T k, b = S'^T q   partial sums over the lane's rows, then a reduce-scatter over the 16
//                           row blocks (shuffles, fixed order): lane ends with one column's (a, b)
//   u = beta (v - a), o = b + (q.k) u on the lane that owns the column; u gathered back
//   S = S' + k u^T           in registers; stored as 16-byte pieces when the token is written
#pragma once

#include "cuda/decode/recurrent_decode.cuh"

namespace linattn::cuda::recurrent {

constexpr int kWarpKernelThreads = 128;  // 4 independent warps a CTA

// CL columns a lane: 4 for either pool. 8 bfloat16 (16-byte pieces) would hold 64 float32 of state
// a lane at K = 128, and spilled (~190 B at 128 registers) when compiled.
template <typename ST, int KB>
constexpr int warp_cols() {
  return 4;
}
template <typename ST, int KB>
constexpr int warp_tile_v() {
  return 2 * warp_cols<ST, KB>();
}

// N consecutive elements at p (aligned to their size: 4, 8 or a multiple of 16 bytes) as float32.
template <int N, typename T>
__device__ __forceinline__ void load_run(const T* p, float (&out)[N]) {
  constexpr int bytes = N * static_cast<int>(sizeof(T));
  static_assert(bytes == 4 || bytes == 8 || bytes % 16 == 0, "4-, 8- or 16-byte pieces");
  if constexpr (bytes == 4) {
    const unsigned raw = *reinterpret_cast<const unsigned*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = to_f(e[j]);
  } else if constexpr (bytes == 8) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < N; ++j) out[j] = to_f(e[j]);
  } else {
    constexpr int per = 16 / static_cast<int>(sizeof(T));
#pragma unroll
    for (int c = 0; c < bytes / 16; ++c) {
      const uint4 raw = reinterpret_cast<const uint4*>(p)[c];
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int j = 0; j < per; ++j) out[c * per + j] = to_f(e[j]);
    }
  }
}

// N floats stored at p as T (8 or a multiple of 16 bytes, aligned).
template <int N, typename T>
__device__ __forceinline__ void store_run(T* p, const float (&x)[N]) {
  constexpr int bytes = N * static_cast<int>(sizeof(T));
  static_assert(bytes == 8 || bytes % 16 == 0, "8-byte or 16-byte pieces");
  if constexpr (bytes == 8) {
    uint2 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int j = 0; j < N; ++j) e[j] = from_f<T>(x[j]);
    *reinterpret_cast<uint2*>(p) = raw;
  } else {
    constexpr int per = 16 / static_cast<int>(sizeof(T));
#pragma unroll
    for (int c = 0; c < bytes / 16; ++c) {
      uint4 raw;
      T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
      for (int j = 0; j < per; ++j) e[j] = from_f<T>(x[c * per + j]);
      reinterpret_cast<uint4*>(p)[c] = raw;
    }
  }
}

// One reduce-scatter step over lane mask `mask`: of the first 2M (a, b) pairs, a lane keeps the
// lower M (its mask bit clear) or the upper M (set) and adds its partner's copy of them.
template <int M, int CL>
__device__ __forceinline__ void halve_pairs(float (&a)[CL], float (&b)[CL], bool upper, int mask) {
#pragma unroll
  for (int j = 0; j < M; ++j) {
    const float sa = upper ? a[j] : a[j + M], sb = upper ? b[j] : b[j + M];
    const float ka = upper ? a[j + M] : a[j], kb = upper ? b[j + M] : b[j];
    a[j] = ka + __shfl_xor_sync(0xffffffffu, sa, mask);
    b[j] = kb + __shfl_xor_sync(0xffffffffu, sb, mask);
  }
}

// Sum over the 16 row blocks (lane masks 2, 4, 8, 16); x + y == y + x, so every lane of a
// column gets bitwise the same value.
__device__ __forceinline__ float row_block_sum(float x) {
#pragma unroll
  for (int m = 2; m <= 16; m <<= 1) x += __shfl_xor_sync(0xffffffffu, x, m);
  return x;
}

template <typename IO, typename ST, int KB>
__global__ void __launch_bounds__(kWarpKernelThreads, KB <= 128 ? 5 : 3) recurrent_decode_warp_kernel(const Params p) {
  constexpr int KR = KB / 16;             // rows a lane
  constexpr int CL = warp_cols<ST, KB>();  // columns a lane
  constexpr int TV = 2 * CL;              // the warp's tile width
  static_assert(CL == 4 || CL == 8, "4 or 8 columns a lane");
  const int lane = threadIdx.x & 31;
  const long long tile = static_cast<long long>(blockIdx.x) * (kWarpKernelThreads / 32) + (threadIdx.x >> 5);
  const int nvt = p.V / TV;
  if (tile >= static_cast<long long>(p.N) * p.HV * nvt) return;
  const int vt = static_cast<int>(tile % nvt);
  const long long rest = tile / nvt;
  const int hv = static_cast<int>(rest % p.HV);
  const int n = static_cast<int>(rest / p.HV);
  const int h = hv / p.G;
  const int half = lane & 1;
  const int r0 = (lane >> 1) * KR;     // first row
  const int c0 = vt * TV + half * CL;  // first column
  const long long KV = static_cast<long long>(p.K) * p.V;
  // after the reduce-scatter (masks 16, 8 and, for CL = 8, 4) this lane holds column `own` of
  // its half; the column j's owner is the lane with j's bits at those masks
  const int own = CL == 4 ? ((lane >> 4) & 1) * 2 + ((lane >> 3) & 1)
                          : ((lane >> 4) & 1) * 4 + ((lane >> 3) & 1) * 2 + ((lane >> 2) & 1);
  auto owner = [&](int j) {
    return CL == 4 ? (((j >> 1) & 1) << 4) | ((j & 1) << 3) | half
                   : (((j >> 2) & 1) << 4) | (((j >> 1) & 1) << 3) | ((j & 1) << 2) | half;
  };
  const bool writes_o = (lane & (CL == 4 ? 6 : 2)) == 0;  // one lane per column writes o

  auto flag = [&](int bit) {
    if (lane == 0 && p.status) atomicOr(p.status, bit);
  };

  // ---- the sequence's tokens (device cu_seqlens are checked here: no host copy needed)
  long long bos, len;
  if (p.varlen) {
    bos = ld_index(p.cu, p.cu64, n);
    const long long eos = ld_index(p.cu, p.cu64, n + 1);
    if (bos < 0 || eos < bos || eos > p.total_tokens) {
      flag(8);
      return;
    }
    len = eos - bos;
  } else {
    bos = static_cast<long long>(n) * p.T;
    len = p.T;
  }
  if (len == 0) return;

  const IO* q = static_cast<const IO*>(p.q);
  const IO* k = static_cast<const IO*>(p.k);
  const IO* v = static_cast<const IO*>(p.v);
  IO* o = static_cast<IO*>(p.o);
  auto zero_o = [&]() {  // a skipped sequence's o (this head, this tile)
    for (long long i = lane; i < len * TV; i += 32)
      o[((bos + i / TV) * p.HV + hv) * p.V + vt * TV + static_cast<int>(i % TV)] = from_f<IO>(0.f);
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

  // ---- the tile into registers, float32
  float S[KR][CL];
  if (p.has_state) {
    const ST* src = static_cast<const ST*>(p.state) + rslot * p.state_stride + hv * KV + static_cast<long long>(r0) * p.V + c0;
#pragma unroll
    for (int i = 0; i < KR; ++i) load_run<CL>(src + static_cast<long long>(i) * p.V, S[i]);
  } else {
#pragma unroll
    for (int i = 0; i < KR; ++i)
#pragma unroll
      for (int j = 0; j < CL; ++j) S[i][j] = 0.f;
  }

#pragma unroll 1
  for (long long t = 0; t < len; ++t) {
    const long long tok = bos + t;
    // ---- this lane's rows of q, k and their decays; the l2 norms' and q.k's sums
    float qr[KR], kr[KR], er[KR];
    const long long qk0 = (tok * p.H + h) * p.K + r0;
    load_run<KR>(q + qk0, qr);
    load_run<KR>(k + qk0, kr);
    if (p.has_g && p.vector_gate) {
      // the two lanes of a row block transform half of its rows each and swap halves
      constexpr int KH = KR / 2;
      float gr[KH], el[KH];
      const int rh = r0 + half * KH;
      const long long g0 = (tok * p.HV + hv) * p.K + rh;
      if (p.g_dt == 2) {
        load_run<KH>(static_cast<const float*>(p.g) + g0, gr);
      } else if (p.g_dt == 1) {
        load_run<KH>(static_cast<const __nv_bfloat16*>(p.g) + g0, gr);
      } else {
        load_run<KH>(static_cast<const __half*>(p.g) + g0, gr);
      }
#pragma unroll
      for (int i = 0; i < KH; ++i) el[i] = expf(log_decay_from(p, gr[i], hv, rh + i));
#pragma unroll
      for (int i = 0; i < KH; ++i) {
        const float other = __shfl_xor_sync(0xffffffffu, el[i], 1);
        er[i] = half ? other : el[i];
        er[KH + i] = half ? el[i] : other;
      }
    } else {
      const float e = expf(log_decay_from(p, gate_raw(p, tok, hv, 0), hv, 0));
#pragma unroll
      for (int i = 0; i < KR; ++i) er[i] = e;
    }
    float nq = 0.f, nk = 0.f, nqk = 0.f;
#pragma unroll
    for (int i = 0; i < KR; ++i) {
      nq += qr[i] * qr[i];
      nk += kr[i] * kr[i];
      nqk += qr[i] * kr[i];
    }
    nq = row_block_sum(nq);
    nk = row_block_sum(nk);
    nqk = row_block_sum(nqk);
    const float rq = p.l2norm ? rsqrtf(nq + 1e-6f) : 1.f;
    const float rk = p.l2norm ? rsqrtf(nk + 1e-6f) : 1.f;
    const float qs = rq * p.scale;
    const float qk = nqk * qs * rk;

    // ---- pass 1: a = S'^T k, b = S'^T q over this lane's rows, then over the row blocks
    float a[CL], b[CL];
#pragma unroll
    for (int j = 0; j < CL; ++j) a[j] = b[j] = 0.f;
#pragma unroll
    for (int i = 0; i < KR; ++i) {
#pragma unroll
      for (int j = 0; j < CL; ++j) {
        const float sd = S[i][j] * er[i];
        a[j] += kr[i] * sd;
        b[j] += qr[i] * sd;
      }
    }
    halve_pairs<CL / 2>(a, b, lane & 16, 16);
    halve_pairs<CL / 4>(a, b, lane & 8, 8);
    if constexpr (CL == 8) {
      halve_pairs<1>(a, b, lane & 4, 4);
    } else {
      a[0] += __shfl_xor_sync(0xffffffffu, a[0], 4);
      b[0] += __shfl_xor_sync(0xffffffffu, b[0], 4);
    }
    a[0] += __shfl_xor_sync(0xffffffffu, a[0], 2);
    b[0] += __shfl_xor_sync(0xffffffffu, b[0], 2);

    // ---- the owned column: u and o; then every lane gets u of its columns
    const int col = c0 + own;
    const float vv = to_f(v[(tok * p.HV + hv) * p.V + col]);
    const float u = p.delta ? beta_at(p, tok, hv, col) * (vv - a[0] * rk) : vv;
    if (writes_o) o[(tok * p.HV + hv) * p.V + col] = from_f<IO>(b[0] * qs + qk * u);
    float uk[CL];
#pragma unroll
    for (int j = 0; j < CL; ++j) uk[j] = __shfl_sync(0xffffffffu, u, owner(j));

    // ---- pass 2: S = S' + k u^T
#pragma unroll
    for (int i = 0; i < KR; ++i) {
      const float kn = kr[i] * rk;
#pragma unroll
      for (int j = 0; j < CL; ++j) S[i][j] = fmaf(S[i][j], er[i], kn * uk[j]);  // not S' of pass 1: it would stay live
    }

    // ---- where this token's state goes: a per-token slot (speculative), or after the last
    // token the pool slot it came from or final_state
    const bool last = t + 1 == len;
    long long dst = -1;
    bool to_pool = true;
    if (p.indices_2d) {
      const long long w = ld_index(p.indices, p.idx64, static_cast<long long>(n) * p.index_cols + t);
      if (w >= p.pool_slots) {
        flag(1);
      } else if (w >= 0) {
        dst = w * p.state_stride + hv * KV;
      }
    } else if (last && p.inplace) {
      dst = rslot * p.state_stride + hv * KV;
    } else if (last && p.has_final) {
      dst = static_cast<long long>(n) * p.HV * KV + hv * KV;
      to_pool = false;
    }
    if (dst >= 0) {
      const long long off = dst + static_cast<long long>(r0) * p.V + c0;
#pragma unroll
      for (int i = 0; i < KR; ++i) {
        const long long oi = off + static_cast<long long>(i) * p.V;
        if (to_pool) {
          store_run<CL>(static_cast<ST*>(p.state) + oi, S[i]);
        } else if (p.final_dt == 1) {
          store_run<CL>(static_cast<__nv_bfloat16*>(p.final_state) + oi, S[i]);
        } else {
          store_run<CL>(static_cast<float*>(p.final_state) + oi, S[i]);
        }
      }
    }
  }
}

}  // namespace linattn::cuda::recurrent

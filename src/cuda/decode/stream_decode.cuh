// The streaming decode kernel (sm_90): one token per sequence, the state pool moved by TMA.
//
// Why a second kernel: at one token per sequence the decode is a stream over the pool (each state
// byte read once, written once, ~4 flops per element), so it runs at the copy bandwidth only if
// state bytes stay in flight while a CTA resolves slots, stages the token's inputs and reduces.
// recurrent_decode.cuh's CTA does those phases one after another for its single tile; its bytes
// in flight stop during them (87% of copy with a float32 pool, 62% with a bfloat16 one, where the
// per-tile work is the same for half the bytes). Here a persistent CTA walks tiles with a
// producer warp that resolves 32 slots per index load and keeps `Stages` tiles in flight through
// TMA (no registers held for them), while four consumer warps compute the current tile in shared
// memory, update it in place and hand it to a TMA store.
//
// A tile is K rows x 128 bytes of one (sequence, value head): 32 float32 or 64 bfloat16 columns,
// one TMA box of the 4-D pool view [slot][HV][K][V]. Consumer thread (warp w, lane = 8 column
// groups x 4 row groups) owns a 16-byte piece of KB/16 consecutive rows; the math is
// recurrent_decode.cuh's [K, V] path (same gates, same fixed-order reductions):
//   a = S'^T k, b = S'^T q with S' = Diag(e) S;  u = beta (v - a);  o = b + (q.k) u;  S = S' + k u^T
//
// Runs when (decode_launch.cu): compute capability 9.x, [K, V] layout, K in {64, 128, 256},
// V a multiple of the tile, one token per sequence known on the host (fixed length T = 1), a pool
// or initial state given, 1-D or no slot indices, no accepted counts, the new state in place or in
// a final_state of the pool's dtype (or not kept), 16-byte aligned pool, stride and o. Everything
// else runs recurrent_decode.cuh.
#pragma once

#include <cuda.h>  // CUtensorMap (the type only: maps are encoded in decode_launch.cu)
#include <cuda_runtime.h>

#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cutlass/arch/barrier.h>

#include "cuda/decode/recurrent_decode.cuh"

namespace linattn::cuda::recurrent {

constexpr int kStreamConsumers = 128;                     // four warps compute
constexpr int kStreamThreads = kStreamConsumers + 32;     // plus one producer warp
constexpr int stream_stages(int kb) { return kb == 256 ? 3 : 4; }

template <typename ST, int KB>
struct StreamTile {
  static constexpr int kCols = 128 / static_cast<int>(sizeof(ST));  // 32 float32 / 64 bfloat16
  static constexpr int kCW = 16 / static_cast<int>(sizeof(ST));     // columns of a 16-byte piece
  static constexpr int kBytes = KB * 128;
  static constexpr int kStages = stream_stages(KB);
};

// The kernel's shared memory: its size is a compile-time sizeof (the launcher opts in to it).
template <typename ST, int KB>
struct StreamSmem {
  using Tile = StreamTile<ST, KB>;
  alignas(128) ST tile[Tile::kStages][KB][Tile::kCols];
  alignas(16) float sq[KB];
  alignas(16) float sk[KB];
  alignas(16) float se[KB];
  alignas(16) float sv[Tile::kCols];
  alignas(16) float sb[Tile::kCols];
  float4 red_n[4];                         // per warp: |q|^2, |k|^2, q.k partials
  float4 red_ab[2][4][2][Tile::kCols / 4];  // [tile parity][warp][a | b][column quad]
  long long slot[Tile::kStages];           // the stage's slot (-1: skip the tile)
  alignas(8) uint64_t full[Tile::kStages];
  alignas(8) uint64_t empty[Tile::kStages];
};

__device__ __forceinline__ void consumer_sync() { asm volatile("bar.sync 1, %0;" ::"n"(kStreamConsumers) : "memory"); }

// 16 bytes of ST from shared memory as kCW floats, and back.
template <typename ST>
__device__ __forceinline__ void piece_load(const ST* s, float* x) {
  if constexpr (sizeof(ST) == 4) {
    const float4 v = *reinterpret_cast<const float4*>(s);
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
  } else {
    const uint4 raw = *reinterpret_cast<const uint4*>(s);
    const ST* e = reinterpret_cast<const ST*>(&raw);
#pragma unroll
    for (int j = 0; j < 8; ++j) x[j] = to_f(e[j]);
  }
}
template <typename ST>
__device__ __forceinline__ void piece_store(ST* s, const float* x) {
  if constexpr (sizeof(ST) == 4) {
    *reinterpret_cast<float4*>(s) = make_float4(x[0], x[1], x[2], x[3]);
  } else {
    uint4 raw;
    ST* e = reinterpret_cast<ST*>(&raw);
#pragma unroll
    for (int j = 0; j < 8; ++j) e[j] = from_f<ST>(x[j]);
    *reinterpret_cast<uint4*>(s) = raw;
  }
}

// src: the pool (or initial states) as [slot][HV][K][V]; dst: where the new state goes (the pool
// again in place, or final_state as [N][HV][K][V]); has_dst false: the new state is not kept.
template <typename IO, typename ST, int KB>
__global__ void __launch_bounds__(kStreamThreads) stream_decode_kernel(const Params p,
                                                                       const __grid_constant__ CUtensorMap src,
                                                                       const __grid_constant__ CUtensorMap dst,
                                                                       bool has_dst, bool dst_is_pool, int tiles) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Tile = StreamTile<ST, KB>;
  using Smem = StreamSmem<ST, KB>;
  using Barrier = cutlass::arch::ClusterBarrier;
  using TxBarrier = cutlass::arch::ClusterTransactionBarrier;
  constexpr int C = Tile::kCols, CW = Tile::kCW, S = Tile::kStages;
  constexpr int NR = KB / 16;  // rows a consumer thread holds
  constexpr int kRows = KB / kStreamConsumers > 0 ? KB / kStreamConsumers : 1;  // staging rows a thread
  // the pool is streamed once: leave L2 to the token inputs the tiles of one head share
  constexpr uint64_t kEvictFirst = static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_FIRST);

  extern __shared__ __align__(128) unsigned char smem_raw[];
  Smem& s = *reinterpret_cast<Smem*>(smem_raw);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int nvt = p.V / C;

  if (tid == 0) {
#pragma unroll
    for (int i = 0; i < S; ++i) {
      Barrier::init(&s.full[i], 1);
      Barrier::init(&s.empty[i], 1);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  if (warp == 4) {
    // ---- producer: slots for 32 tiles per index load (lane l resolves tile base + l * grid),
    // then lane 0 hands each tile's state to TMA once its stage is free.
    if (lane == 0) cute::prefetch_tma_descriptor(&src);
    int it = 0;
    for (int base = blockIdx.x; base < tiles; base += 32 * gridDim.x) {
      const int mine = base + lane * static_cast<int>(gridDim.x);
      long long slot = -1;
      if (mine < tiles) {
        const int n = mine / (nvt * p.HV);
        slot = p.has_indices ? ld_index(p.indices, p.idx64, n) : n;
        if (slot >= p.pool_slots) {
          if (p.status && mine % nvt == 0) atomicOr(p.status, 1);  // once per (sequence, head)
          slot = -1;
        }
      }
      for (int j = 0; j < 32; ++j) {
        const int t = base + j * static_cast<int>(gridDim.x);
        if (t >= tiles) break;  // the same for every lane
        const long long sl = __shfl_sync(0xffffffffu, slot, j);
        if (lane == 0) {
          const int st = it % S;
          Barrier::wait(&s.empty[st], ((it / S) & 1) ^ 1);
          s.slot[st] = sl;
          if (sl >= 0) {
            const int hv = (t / nvt) % p.HV;
            TxBarrier::arrive_and_expect_tx(&s.full[st], Tile::kBytes);
            cute::SM90_TMA_LOAD_4D::copy(&src, &s.full[st], kEvictFirst, &s.tile[st][0][0], (t % nvt) * C, 0, hv,
                                         static_cast<int>(sl));
          } else {
            Barrier::arrive(&s.full[st]);
          }
        }
        ++it;
      }
    }
    return;
  }

  // ---- consumers
  const IO* q = static_cast<const IO*>(p.q);
  const IO* k = static_cast<const IO*>(p.k);
  const IO* v = static_cast<const IO*>(p.v);
  IO* o = static_cast<IO*>(p.o);
  float in_q[kRows], in_k[kRows], in_g[kRows], in_v = 0.f, in_b = 0.f;
  // The token inputs of tile t, requested one tile ahead (their latency overlaps a tile's work).
  auto request = [&](int t) {
    const int vt = t % nvt, hv = (t / nvt) % p.HV, n = t / (nvt * p.HV);
    const long long tok = n;  // one token per sequence
    const long long qk0 = (tok * p.H + hv / p.G) * p.K;
    const float g0 = p.vector_gate ? 0.f : gate_raw(p, tok, hv, 0);
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      const int r = tid + j * kStreamConsumers;
      const bool ok = r < KB;
      in_q[j] = ok ? to_f(q[qk0 + r]) : 0.f;
      in_k[j] = ok ? to_f(k[qk0 + r]) : 0.f;
      in_g[j] = ok ? (p.vector_gate ? gate_raw(p, tok, hv, r) : g0) : 0.f;
    }
    if (tid < C) {
      in_v = to_f(v[(tok * p.HV + hv) * p.V + vt * C + tid]);
      in_b = p.delta ? beta_at(p, tok, hv, vt * C + tid) : 0.f;
    }
  };

  const int cg = lane & 7, rsub = lane >> 3;
  const int r0 = (warp * 4 + rsub) * NR;  // this thread's first row
  int pending = -1;                       // the stage whose TMA store may still read shared memory
  auto release = [&](int st) { Barrier::arrive(&s.empty[st]); };

  if (static_cast<int>(blockIdx.x) < tiles) request(blockIdx.x);
  int it = 0;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x, ++it) {
    const int vt = t % nvt, hv = (t / nvt) % p.HV, n = t / (nvt * p.HV);
    const long long tok = n;
    const int v0 = vt * C;
    const int st = it % S;
    // ---- stage this tile's inputs (the norms' partial sums with them), then request the next's
    {
      float nq = 0.f, nk = 0.f, nqk = 0.f;
#pragma unroll
      for (int j = 0; j < kRows; ++j) {
        const int r = tid + j * kStreamConsumers;
        if (r < KB) {
          s.sq[r] = in_q[j];
          s.sk[r] = in_k[j];
          s.se[r] = expf(log_decay_from(p, in_g[j], hv, p.vector_gate ? r : 0));
          nq += in_q[j] * in_q[j];
          nk += in_k[j] * in_k[j];
          nqk += in_q[j] * in_k[j];
        }
      }
      nq = group_sum<32>(nq);
      nk = group_sum<32>(nk);
      nqk = group_sum<32>(nqk);
      if (lane == 0) s.red_n[warp] = make_float4(nq, nk, nqk, 0.f);
      if (tid < C) {
        s.sv[tid] = in_v;
        s.sb[tid] = in_b;
      }
    }
    if (t + static_cast<int>(gridDim.x) < tiles) request(t + gridDim.x);
    Barrier::wait(&s.full[st], (it / S) & 1);
    const long long slot = s.slot[st];  // read by every thread before the barrier: a skipped
    consumer_sync();                    // stage may be handed back right after it

    if (slot < 0) {  // padding or a slot past the pool: o rows 0, nothing read or written
      if (tid < C) o[(tok * p.HV + hv) * p.V + v0 + tid] = from_f<IO>(0.f);
      if (tid == 0) {
        if (pending >= 0) {
          cute::tma_store_wait<0>();
          release(pending);
          pending = -1;
        }
        release(st);
      }
      continue;
    }

    float4 nn = s.red_n[0];
#pragma unroll
    for (int w = 1; w < 4; ++w) {  // fixed order: deterministic
      const float4 x = s.red_n[w];
      nn = make_float4(nn.x + x.x, nn.y + x.y, nn.z + x.z, 0.f);
    }
    const float rq = p.l2norm ? rsqrtf(nn.x + 1e-6f) : 1.f;
    const float rk = p.l2norm ? rsqrtf(nn.y + 1e-6f) : 1.f;
    const float qs = rq * p.scale;
    const float qk = nn.z * qs * rk;

    float qr[NR], kr[NR], er[NR];
#pragma unroll
    for (int i = 0; i < NR; i += 4) {
      const float4 x = *reinterpret_cast<const float4*>(s.sq + r0 + i);
      const float4 y = *reinterpret_cast<const float4*>(s.sk + r0 + i);
      const float4 z = *reinterpret_cast<const float4*>(s.se + r0 + i);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        qr[i + j] = f4(x, j);
        kr[i + j] = f4(y, j);
        er[i + j] = f4(z, j);
      }
    }
    ST* tile = &s.tile[st][0][0];
    // ---- pass 1: a = S'^T k, b = S'^T q over this thread's rows
    float a[CW], b[CW];
#pragma unroll
    for (int j = 0; j < CW; ++j) a[j] = b[j] = 0.f;
#pragma unroll
    for (int i = 0; i < NR; ++i) {
      float x[CW];
      piece_load(tile + (r0 + i) * C + cg * CW, x);
#pragma unroll
      for (int j = 0; j < CW; ++j) {
        const float sd = x[j] * er[i];
        a[j] += kr[i] * sd;
        b[j] += qr[i] * sd;
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
    const int buf = it & 1;
    if (rsub == 0) {
#pragma unroll
      for (int h4 = 0; h4 < CW / 4; ++h4) {
        s.red_ab[buf][warp][0][cg * (CW / 4) + h4] = make_float4(a[4 * h4], a[4 * h4 + 1], a[4 * h4 + 2], a[4 * h4 + 3]);
        s.red_ab[buf][warp][1][cg * (CW / 4) + h4] = make_float4(b[4 * h4], b[4 * h4 + 1], b[4 * h4 + 2], b[4 * h4 + 3]);
      }
    }
    consumer_sync();
    float u[CW], ov[CW];
#pragma unroll
    for (int h4 = 0; h4 < CW / 4; ++h4) {
      const int quad = cg * (CW / 4) + h4;
      float4 A = s.red_ab[buf][0][0][quad], B = s.red_ab[buf][0][1][quad];
#pragma unroll
      for (int w = 1; w < 4; ++w) {  // fixed order: deterministic
        const float4 x = s.red_ab[buf][w][0][quad], y = s.red_ab[buf][w][1][quad];
        A = make_float4(A.x + x.x, A.y + x.y, A.z + x.z, A.w + x.w);
        B = make_float4(B.x + y.x, B.y + y.y, B.z + y.z, B.w + y.w);
      }
      const float4 vv = *reinterpret_cast<const float4*>(s.sv + quad * 4);
      const float4 bb = *reinterpret_cast<const float4*>(s.sb + quad * 4);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float uj = p.delta ? f4(bb, j) * (f4(vv, j) - f4(A, j) * rk) : f4(vv, j);
        u[4 * h4 + j] = uj;
        ov[4 * h4 + j] = f4(B, j) * qs + qk * uj;
      }
    }
    if (warp == 0 && rsub == 0) {
      IO* orow = o + (tok * p.HV + hv) * p.V + v0 + cg * CW;
#pragma unroll
      for (int h4 = 0; h4 < CW / 4; ++h4)
        st4(orow + 4 * h4, make_float4(ov[4 * h4], ov[4 * h4 + 1], ov[4 * h4 + 2], ov[4 * h4 + 3]), true, 4);
    }
    // ---- pass 2: S = S' + k u^T, written over the tile (the TMA store's source)
#pragma unroll
    for (int i = 0; i < NR; ++i) {
      const float kn = kr[i] * rk;
      float x[CW];
      ST* piece = tile + (r0 + i) * C + cg * CW;
      piece_load(piece, x);
#pragma unroll
      for (int j = 0; j < CW; ++j) x[j] = x[j] * er[i] + kn * u[j];
      piece_store(piece, x);
    }
    cute::tma_store_fence();  // this thread's writes, visible to the TMA (async) proxy
    consumer_sync();
    if (tid == 0) {
      if (has_dst) {
        cute::SM90_TMA_STORE_4D::copy(&dst, tile, v0, 0, hv, dst_is_pool ? static_cast<int>(slot) : n);
        cute::tma_store_arrive();
        // every store but this one has read its tile: the previous stage goes back to the producer
        cute::tma_store_wait<1>();
        if (pending >= 0) release(pending);
        pending = st;
      } else {
        release(st);
      }
    }
  }
  if (tid == 0) {
    cute::tma_store_wait<0>();  // the tiles must stay until the last store has read them
    if (pending >= 0) release(pending);
  }
#endif
}

// Launches for IO element type `io` (one dtype per translation unit, beside launch_*).
struct StreamLaunch {
  const CUtensorMap* src;
  const CUtensorMap* dst;
  bool has_dst, dst_is_pool;
  int tiles;
  int sms;  // multiprocessors: the grid is the CTAs they hold at once (or the tiles, if fewer)
};
cudaError_t launch_stream_fp16(const Params& p, int st_bf16, int kb, const StreamLaunch& l, cudaStream_t stream);
cudaError_t launch_stream_bf16(const Params& p, int st_bf16, int kb, const StreamLaunch& l, cudaStream_t stream);
cudaError_t launch_stream_fp32(const Params& p, int st_bf16, int kb, const StreamLaunch& l, cudaStream_t stream);

template <typename IO, typename ST, int KB>
cudaError_t launch_stream_one(const Params& p, const StreamLaunch& l, cudaStream_t stream) {
  auto kernel = stream_decode_kernel<IO, ST, KB>;
  constexpr int smem = static_cast<int>(sizeof(StreamSmem<ST, KB>));
  // Opting in to more than 48 KiB of shared memory, and the resident CTAs per SM, once per
  // instantiation (a host-side attribute, allowed during graph capture).
  static const int per_sm = [&] {
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) return 0;
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, kStreamThreads, smem) != cudaSuccess) return 0;
    return b;
  }();
  if (per_sm <= 0) return cudaErrorInvalidConfiguration;
  const long long cap = static_cast<long long>(per_sm) * l.sms;
  const int grid = static_cast<int>(l.tiles < cap ? l.tiles : cap);
  kernel<<<grid, kStreamThreads, smem, stream>>>(p, *l.src, *l.dst, l.has_dst, l.dst_is_pool, l.tiles);
  return cudaGetLastError();
}

template <typename IO>
cudaError_t launch_stream_io(const Params& p, int st_bf16, int kb, const StreamLaunch& l, cudaStream_t stream) {
  if (st_bf16) {
    switch (kb) {
      case 64: return launch_stream_one<IO, __nv_bfloat16, 64>(p, l, stream);
      case 128: return launch_stream_one<IO, __nv_bfloat16, 128>(p, l, stream);
      default: return launch_stream_one<IO, __nv_bfloat16, 256>(p, l, stream);
    }
  }
  switch (kb) {
    case 64: return launch_stream_one<IO, float, 64>(p, l, stream);
    case 128: return launch_stream_one<IO, float, 128>(p, l, stream);
    default: return launch_stream_one<IO, float, 256>(p, l, stream);
  }
}

}  // namespace linattn::cuda::recurrent

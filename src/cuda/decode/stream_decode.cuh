// The streaming decode kernel (sm_90): one token per sequence, the state pool moved by TMA.
//
// Why a second kernel: at one token per sequence the decode is a stream over the pool (each state
// byte read once, written once, ~4 flops per element), so it runs at the copy bandwidth only if
// state bytes stay in flight while the tile being computed goes through its latency-bound steps
// (slot index, token inputs, reductions). recurrent_decode.cuh's CTA does those steps one after
// another for its single tile and its bytes in flight stop meanwhile (87% of copy with a float32
// pool, 62% with a bfloat16 one, where the per-tile work is the same for half the bytes).
//
// Here every warp is an independent pipeline over its own tiles (no barrier between warps): it
// resolves 32 slots per index load, keeps three tile stages in shared memory (computing tile j,
// tile j + 1 arriving by TMA, tile j - 1 being read by its TMA store; tile j + 2's load goes out
// as soon as j - 1's store has read its stage), requests tile j + 1's token inputs while it
// computes tile j, updates the tile in place and stores it by TMA. No registers hold state bytes.
//
// A tile is K rows x 128 bytes of one (sequence, value head): 32 float32 or 64 bfloat16 columns,
// one TMA box of the 4-D pool view [slot][HV][K][V]. Lane = 8 column groups (16 bytes each) x 4
// row groups; the math is recurrent_decode.cuh's [K, V] path (same gates, fixed-order sums):
//   a = S'^T k, b = S'^T q with S' = Diag(e) S;  u = beta (v - a);  o = b + (q.k) u;  S = S' + k u^T
//
// Runs when (decode_launch.cu): compute capability 9.x, [K, V] layout, K in {64, 128}, V a multiple
// of the tile, one token per sequence known on the host (fixed length T = 1), a pool or initial
// state given, 1-D or no slot indices, no accepted counts, the new state in place or in a
// final_state of the pool's dtype (or not kept), 16-byte aligned pool, slot stride and o.
// Everything else runs recurrent_decode.cuh.
#pragma once

#include <cuda.h>  // CUtensorMap (the type only: maps are encoded in decode_launch.cu)
#include <cuda_runtime.h>

#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cutlass/arch/barrier.h>

#include "cuda/decode/recurrent_decode.cuh"

namespace linattn::cuda::recurrent {

constexpr int kStreamWarps = 4;   // independent pipelines a CTA
constexpr int kStreamStages = 3;  // tiles a warp holds: computing, arriving, being stored

template <typename ST, int KB>
struct StreamTile {
  static constexpr int kCols = 128 / static_cast<int>(sizeof(ST));  // 32 float32 / 64 bfloat16
  static constexpr int kCW = 16 / static_cast<int>(sizeof(ST));     // columns of a 16-byte piece
  static constexpr int kBytes = KB * 128;
};

// One warp's shared memory; the kernel's is kStreamWarps of them (a compile-time sizeof).
template <typename ST, int KB>
struct StreamWarpSmem {
  using Tile = StreamTile<ST, KB>;
  alignas(128) ST tile[kStreamStages][KB][Tile::kCols];
  float4 qke[KB];  // per row: q, k, decay e (raw q, k: the l2 norms apply to the sums)
  float sv[Tile::kCols];
  float sb[Tile::kCols];
  alignas(8) uint64_t full[kStreamStages];
};
template <typename ST, int KB>
struct StreamSmem {
  StreamWarpSmem<ST, KB> warp[kStreamWarps];
};

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
__global__ void __launch_bounds__(kStreamWarps * 32) stream_decode_kernel(const Params p,
                                                                         const __grid_constant__ CUtensorMap src,
                                                                         const __grid_constant__ CUtensorMap dst,
                                                                         bool has_dst, bool dst_is_pool, int tiles) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Tile = StreamTile<ST, KB>;
  using Barrier = cutlass::arch::ClusterBarrier;
  using TxBarrier = cutlass::arch::ClusterTransactionBarrier;
  constexpr int C = Tile::kCols, CW = Tile::kCW, S = kStreamStages;
  constexpr int kRows = KB / 32;    // staging: rows a lane (lane + 32 i)
  constexpr int kVCols = C / 32;    // staging: v / beta columns a lane
  constexpr int NR = KB / 4;        // compute: rows a lane (row group + 4 i)
  // the pool is streamed once: leave L2 to the token inputs the tiles of one head share
  constexpr uint64_t kEvictFirst = static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_FIRST);

  extern __shared__ __align__(128) unsigned char smem_raw[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  StreamWarpSmem<ST, KB>& s = reinterpret_cast<StreamSmem<ST, KB>*>(smem_raw)->warp[warp];
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < S; ++i) Barrier::init(&s.full[i], 1);
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();

  const int nvt = p.V / C;
  const int first = static_cast<int>(blockIdx.x) * kStreamWarps + warp;
  const int step = static_cast<int>(gridDim.x) * kStreamWarps;
  auto tile_of = [&](int j) { return first + j * step; };  // this warp's j-th tile

  // ---- slots, 32 tiles per index load (lane l: tile base + l); -1: skip the tile (padding, a
  // slot past the pool, or no such tile)
  auto resolve = [&](int j) -> long long {
    const long long t = first + static_cast<long long>(j) * step;
    if (t >= tiles) return -1;
    const int n = static_cast<int>(t / (nvt * p.HV));
    long long sl = p.has_indices ? ld_index(p.indices, p.idx64, n) : n;
    if (sl >= p.pool_slots) {
      if (p.status && t % nvt == 0) atomicOr(p.status, 1);  // once per (sequence, head)
      sl = -1;
    }
    return sl;
  };
  int base = 0;
  long long slots_cur = resolve(lane), slots_next = resolve(32 + lane);
  auto slot_of = [&](int j) -> long long {  // j in [base, base + 64); every lane calls
    const int d = j - base;
    const long long a = __shfl_sync(0xffffffffu, slots_cur, d & 31);
    const long long b = __shfl_sync(0xffffffffu, slots_next, d & 31);
    return d < 32 ? a : b;
  };
  auto load_tile = [&](int j, long long sl) {  // lane 0: tile j's state into stage j % S
    if (lane == 0 && sl >= 0) {
      const int t = tile_of(j), st = j % S;
      TxBarrier::arrive_and_expect_tx(&s.full[st], Tile::kBytes);
      cute::SM90_TMA_LOAD_4D::copy(&src, &s.full[st], kEvictFirst, &s.tile[st][0][0], (t % nvt) * C, 0,
                                   (t / nvt) % p.HV, static_cast<int>(sl));
    }
  };

  // ---- token inputs of a tile, requested one tile ahead (their latency overlaps a tile's work)
  const IO* q = static_cast<const IO*>(p.q);
  const IO* k = static_cast<const IO*>(p.k);
  const IO* v = static_cast<const IO*>(p.v);
  IO* o = static_cast<IO*>(p.o);
  float in_q[kRows], in_k[kRows], in_g[kRows], in_v[kVCols], in_b[kVCols];
  auto request = [&](int t) {
    const int vt = t % nvt, hv = (t / nvt) % p.HV;
    const long long tok = t / (nvt * p.HV);  // one token per sequence
    const long long qk0 = (tok * p.H + hv / p.G) * p.K;
    const float g0 = p.vector_gate ? 0.f : gate_raw(p, tok, hv, 0);
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int r = lane + 32 * i;
      in_q[i] = to_f(q[qk0 + r]);
      in_k[i] = to_f(k[qk0 + r]);
      in_g[i] = p.vector_gate ? gate_raw(p, tok, hv, r) : g0;
    }
#pragma unroll
    for (int i = 0; i < kVCols; ++i) {
      const int c = vt * C + lane + 32 * i;
      in_v[i] = to_f(v[(tok * p.HV + hv) * p.V + c]);
      in_b[i] = p.delta ? beta_at(p, tok, hv, c) : 0.f;
    }
  };

  if (tile_of(0) >= tiles) return;
  load_tile(0, slot_of(0));
  load_tile(1, slot_of(1));
  request(tile_of(0));
  const int cg = lane & 7, rg = lane >> 3;  // compute: column group, row group
  uint32_t phase = 0;                        // bit st: the parity of stage st's next completion

  for (int j = 0; tile_of(j) < tiles; ++j) {
    if (j - base == 32) {  // the next 32 slots were loaded 32 tiles ago; request the 32 after
      base += 32;
      slots_cur = slots_next;
      slots_next = resolve(base + 32 + lane);
    }
    const int t = tile_of(j), st = j % S;
    const int vt = t % nvt, hv = (t / nvt) % p.HV;
    const long long tok = t / (nvt * p.HV);
    const int v0 = vt * C;
    const long long slot = slot_of(j);
    const long long slot_ahead = slot_of(j + 2);

    // ---- stage this tile's inputs; the norms' sums by shuffles (every lane gets them)
    float nq = 0.f, nk = 0.f, nqk = 0.f;
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int r = lane + 32 * i;
      s.qke[r] = make_float4(in_q[i], in_k[i], expf(log_decay_from(p, in_g[i], hv, p.vector_gate ? r : 0)), 0.f);
      nq += in_q[i] * in_q[i];
      nk += in_k[i] * in_k[i];
      nqk += in_q[i] * in_k[i];
    }
#pragma unroll
    for (int i = 0; i < kVCols; ++i) {
      s.sv[lane + 32 * i] = in_v[i];
      s.sb[lane + 32 * i] = in_b[i];
    }
    nq = group_sum<32>(nq);
    nk = group_sum<32>(nk);
    nqk = group_sum<32>(nqk);
    if (tile_of(j + 1) < tiles) request(tile_of(j + 1));
    __syncwarp();

    if (slot < 0) {  // padding or a slot past the pool: o rows 0, nothing read or written
#pragma unroll
      for (int i = 0; i < kVCols; ++i) o[(tok * p.HV + hv) * p.V + v0 + lane + 32 * i] = from_f<IO>(0.f);
      if (lane == 0) cute::tma_store_wait<0>();  // tile j - 1's store has read stage (j + 2) % S
      __syncwarp();
      load_tile(j + 2, slot_ahead);
      continue;
    }

    const float rq = p.l2norm ? rsqrtf(nq + 1e-6f) : 1.f;
    const float rk = p.l2norm ? rsqrtf(nk + 1e-6f) : 1.f;
    const float qs = rq * p.scale;
    const float qk = nqk * qs * rk;

    Barrier::wait(&s.full[st], (phase >> st) & 1u);
    phase ^= 1u << st;
    ST* tile = &s.tile[st][0][0];
    // ---- pass 1: a = S'^T k, b = S'^T q over this lane's rows (rg + 4 i), then over row groups
    float a[CW], b[CW];
#pragma unroll
    for (int c = 0; c < CW; ++c) a[c] = b[c] = 0.f;
#pragma unroll 8
    for (int i = 0; i < NR; ++i) {
      const int r = rg + 4 * i;
      const float4 f = s.qke[r];
      const float ke = f.y * f.z, qe = f.x * f.z;
      float x[CW];
      piece_load(tile + r * C + cg * CW, x);
#pragma unroll
      for (int c = 0; c < CW; ++c) {
        a[c] += ke * x[c];
        b[c] += qe * x[c];
      }
    }
#pragma unroll
    for (int m = 8; m <= 16; m <<= 1) {  // fixed order: deterministic
#pragma unroll
      for (int c = 0; c < CW; ++c) {
        a[c] += __shfl_xor_sync(0xffffffffu, a[c], m);
        b[c] += __shfl_xor_sync(0xffffffffu, b[c], m);
      }
    }
    float u[CW], ov[CW];
#pragma unroll
    for (int c = 0; c < CW; ++c) {
      const int col = cg * CW + c;
      u[c] = p.delta ? s.sb[col] * (s.sv[col] - a[c] * rk) : s.sv[col];
      ov[c] = b[c] * qs + qk * u[c];
    }
    if (rg == 0) {
      IO* orow = o + (tok * p.HV + hv) * p.V + v0 + cg * CW;
#pragma unroll
      for (int h4 = 0; h4 < CW / 4; ++h4)
        st4(orow + 4 * h4, make_float4(ov[4 * h4], ov[4 * h4 + 1], ov[4 * h4 + 2], ov[4 * h4 + 3]), true, 4);
    }
    // ---- pass 2: S = S' + k u^T, written over the tile (the TMA store's source)
#pragma unroll 8
    for (int i = 0; i < NR; ++i) {
      const int r = rg + 4 * i;
      const float4 f = s.qke[r];
      const float kn = f.y * rk;
      float x[CW];
      ST* piece = tile + r * C + cg * CW;
      piece_load(piece, x);
#pragma unroll
      for (int c = 0; c < CW; ++c) x[c] = x[c] * f.z + kn * u[c];
      piece_store(piece, x);
    }
    cute::tma_store_fence();  // this lane's writes, visible to the TMA (async) proxy
    __syncwarp();
    if (lane == 0) {
      if (has_dst) {
        cute::SM90_TMA_STORE_4D::copy(&dst, tile, v0, 0, hv, dst_is_pool ? static_cast<int>(slot) : static_cast<int>(tok));
        cute::tma_store_arrive();
        cute::tma_store_wait<1>();  // every store but this one has read its tile: j - 1's stage is free
      }
    }
    __syncwarp();
    load_tile(j + 2, slot_ahead);  // into tile j - 1's stage
  }
  if (lane == 0) cute::tma_store_wait<0>();  // the tiles stay until the last store has read them
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
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, kStreamWarps * 32, smem) != cudaSuccess) return 0;
    return b;
  }();
  if (per_sm <= 0) return cudaErrorInvalidConfiguration;
  const long long cap = static_cast<long long>(per_sm) * l.sms;
  const long long want = (static_cast<long long>(l.tiles) + kStreamWarps - 1) / kStreamWarps;
  const int grid = static_cast<int>(want < cap ? want : cap);
  kernel<<<grid, kStreamWarps * 32, smem, stream>>>(p, *l.src, *l.dst, l.has_dst, l.dst_is_pool, l.tiles);
  return cudaGetLastError();
}

template <typename IO>
cudaError_t launch_stream_io(const Params& p, int st_bf16, int kb, const StreamLaunch& l, cudaStream_t stream) {
  if (st_bf16) {
    return kb == 64 ? launch_stream_one<IO, __nv_bfloat16, 64>(p, l, stream)
                    : launch_stream_one<IO, __nv_bfloat16, 128>(p, l, stream);
  }
  return kb == 64 ? launch_stream_one<IO, float, 64>(p, l, stream) : launch_stream_one<IO, float, 128>(p, l, stream);
}

}  // namespace linattn::cuda::recurrent

// Hopper primitives of the wgmma kernels (sm_90a, 16-bit, K = 128): CUTLASS element types and
// wgmma atoms, the 128-byte-swizzled shared-memory layouts of the chunk's tiles with their offsets
// computed by hand, the cp.async copies into them, and the register-operand helpers.
//
// One tile layout serves several products: a token-major tile of 64 tokens x 128 channels stored
// at mnmajor_off (the raw k rows) is the state update's MN-major B operand (channel, token) and,
// read with the atoms ordered channel-block first (ChByTokK), the K-major operand (token, channel)
// of K Kᵀ and Q Kᵀ; a 64 x 64 tile at kmajor_off<64> (U, the v tile) is read element-wise by the
// pass and is the MN-major B operand (value column, token) of U = M⁻¹ (β v).
#pragma once

#include <cute/arch/mma_sm90_gmma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/arch/barrier.h>

#include "cuda/common/chunk_map_host.hpp"
#include "cuda/common/copy.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/scheduler.cuh"
#include "cuda/config/limits.hpp"

namespace linattn::cuda::kern {
namespace wgmma_recurrence {

using namespace cute;

constexpr int kC = config::kChunk;  // 64 tokens
constexpr int kK = 128;             // key head size
constexpr int kVT = 64;             // V tile = the wgmma's M
constexpr int kThreads = 128;       // one warpgroup

// CUTLASS's element type for a CUDA 16-bit type, and the wgmma atoms (float32 accumulators) CuTe's
// selectors pick for it. RS (A from registers): N64 with a K-major B (W, Qg, raw q rows, Aqk),
// N128 with a K-major (KgT) or MN-major (raw k rows) B for the state update; N64MN for U = M⁻¹ (β v).
// SS (both from shared memory): K Kᵀ and Q Kᵀ.
template <class T>
struct Element;
template <>
struct Element<__nv_bfloat16> {
  using type = cutlass::bfloat16_t;
};
template <>
struct Element<__half> {
  using type = cutlass::half_t;
};
template <class T>
struct Atoms {
  using E = typename Element<T>::type;
  template <int N, GMMA::Major MB>
  using RS = decltype(GMMA::rs_op_selector<E, E, float, Shape<_64, Int<N>, _16>, GMMA::Major::K, MB>());
  using N16 = RS<16, GMMA::Major::K>;  // the vector gate's decayed K Kᵀ / Q Kᵀ, one 16-row block a product
  using N64 = RS<64, GMMA::Major::K>;
  using N64MN = RS<64, GMMA::Major::MN>;
  using N128K = RS<128, GMMA::Major::K>;
  using N128MN = RS<128, GMMA::Major::MN>;
  using SS64 = decltype(GMMA::ss_op_selector<E, E, float, Shape<_64, _64, _16>, GMMA::Major::K, GMMA::Major::K>());
  // SS with both operands MN-major: the backward's dOᵀ Aqk and dOᵀ Qg (dO's v tile as A)
  template <int N>
  using SSmn = decltype(GMMA::ss_op_selector<E, E, float, Shape<_64, Int<N>, _16>, GMMA::Major::MN, GMMA::Major::MN>());
};

// Operands in wgmma's 128-byte-swizzled canonical layouts, (rows, cols) as CuTe sees them.
template <class E>
struct Layouts {
  using TokByK = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<E>{}, Shape<_64, Int<kK>>{}));   // W, Qg, q: (tok, ch)
  using ChByTok = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<E>{}, Shape<Int<kK>, _64>{}));  // KgT: (ch, tok)
  using ChByTokMN = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<E>{}, Shape<Int<kK>, _64>{}));  // raw k: (ch, tok)
  // the raw k tile again, as a K-major (tok, ch) operand: its atoms run channel block first
  using TokByKChFirst = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<E>{}, Shape<_64, Int<kK>>{}, Step<_2, _1>{}));
  using TokByTok = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<E>{}, Shape<_64, _64>{}));     // Aqk: (tok, tok')
  using VcByTokMN = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<E>{}, Shape<_64, _64>{}));   // v / U tile: (vcol, tok)
  // the KgT tile (kmajor_off<128>: channel rows, 64 tokens each) read as the MN-major operand
  // (tok, ch): a 64-element row of the K-major tile is one row of the MN-major atom
  using TokByChMN = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<E>{}, Shape<_64, Int<kK>>{}));
};

// Element offsets in the 128-byte-swizzled canonical layouts of Layouts<E> (16-bit E, tile base
// 1024-byte aligned): 8-row x 64-element atoms, tiled down the rows first, each row's 16-byte
// pieces permuted by XOR with the row mod 8. The same offsets as CuTe's tensors over those
// layouts (checked element by element when this was written); by hand so that a thread's copy
// offsets are a base and compile-time steps, not a swizzle evaluated per piece (ncu: the CuTe
// indexing was 35% of the pass's instructions). The offset of the 8-element piece holding (r, c);
// add c & 7 for the element.
template <int ROWS>
__device__ __forceinline__ int kmajor_off(int r, int c) {  // (row, col), col contiguous
  return ((r >> 3) + (c >> 6) * (ROWS / 8)) * 512 + (r & 7) * 64 + ((((c >> 3) & 7) ^ (r & 7)) << 3);
}
__device__ __forceinline__ int mnmajor_off(int d, int j) {  // (channel d < 128, token j), d contiguous
  return ((d >> 6) + 2 * (j >> 3)) * 512 + (j & 7) * 64 + ((((d >> 3) & 7) ^ (j & 7)) << 3);
}

// 16-byte pieces of a row-major global tile (ROWS x COLS, row stride gld) into a K-major swizzled
// shared tile (kmajor_off), by the NT threads of a warpgroup. PRED: rows at or past `valid` are
// zero-filled and not read.
template <class T, int ROWS, int COLS, bool PRED>
__device__ __forceinline__ void copy_kmajor(T* dst, const T* src, int64_t gld, int tid, int valid = ROWS) {
  static_assert(sizeof(T) == 2, "16-bit");
  constexpr int ppr = COLS / 8, rstep = kThreads / ppr, iters = ROWS / rstep;
  static_assert(rstep % 8 == 0 && ROWS % rstep == 0, "whole atoms per pass");
  const int r0 = tid / ppr, c0 = (tid % ppr) * 8;
  T* s0 = dst + kmajor_off<ROWS>(r0, c0);
  const T* g0 = src + r0 * gld + c0;
#pragma unroll
  for (int it = 0; it < iters; ++it) {
    const bool ok = !PRED || r0 + it * rstep < valid;
    cp_async16_zfill(s0 + it * rstep * 64, ok ? g0 + it * rstep * gld : src, ok);
  }
}
// A token-major global tile (64 tokens x 128 channels, row stride gld) into the MN-major swizzled
// (channel, token) tile (mnmajor_off): the raw k rows.
template <class T>
__device__ __forceinline__ void copy_mnmajor(T* dst, const T* src, int64_t gld, int tid, int valid) {
  constexpr int ppr = 128 / 8, jstep = kThreads / ppr, iters = 64 / jstep;
  static_assert(jstep == 8, "one token atom per pass");
  const int j0 = tid / ppr, d0 = (tid % ppr) * 8;
  T* s0 = dst + mnmajor_off(d0, j0);
  const T* g0 = src + j0 * gld + d0;
#pragma unroll
  for (int it = 0; it < iters; ++it) {
    const bool ok = j0 + it * jstep < valid;
    cp_async16_zfill(s0 + it * 1024, ok ? g0 + it * jstep * gld : src, ok);
  }
}

// A float32 tile (ROWS x COLS, dense rows) into bf16 hi and lo tiles at the same swizzled offsets
// (piece(r, c) + (c & 7)), by the 128 threads of the producer: every load of the tile in flight at
// once (COLS / 4 float4 a row), then the conversions and 8-byte shared stores.
template <int ROWS, int COLS, class Piece>
__device__ __forceinline__ void split_tile(cutlass::bfloat16_t* hi, cutlass::bfloat16_t* lo, const float* src, int tid,
                                           Piece&& piece) {
  constexpr int per_row = COLS / 4, n = ROWS * per_row / kThreads;
  float4 v[n];
#pragma unroll
  for (int j = 0; j < n; ++j) {
    const int e = j * kThreads + tid;
    v[j] = __ldg(reinterpret_cast<const float4*>(src) + e);
  }
#pragma unroll
  for (int j = 0; j < n; ++j) {
    const int e = j * kThreads + tid, r = e / per_row, c = (e % per_row) * 4;
    const float x[4] = {v[j].x, v[j].y, v[j].z, v[j].w};
    uint32_t h[2], l[2];
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      const __nv_bfloat162 hb = __floats2bfloat162_rn(x[2 * m], x[2 * m + 1]);
      const float2 hf = __bfloat1622float2(hb);
      const __nv_bfloat162 lb = __floats2bfloat162_rn(x[2 * m] - hf.x, x[2 * m + 1] - hf.y);
      h[m] = *reinterpret_cast<const uint32_t*>(&hb);
      l[m] = *reinterpret_cast<const uint32_t*>(&lb);
    }
    const int off = piece(r, c) + (c & 7);
    *reinterpret_cast<uint2*>(hi + off) = make_uint2(h[0], h[1]);
    *reinterpret_cast<uint2*>(lo + off) = make_uint2(l[0], l[1]);
  }
}

// A wgmma kernel's launch with its dynamic shared memory: the attribute, then the launch. Smem:
// the kernel's shared-memory struct, + 1024 because the kernel aligns its base to the 128-byte
// swizzle's 1024-byte period (smem_base_1024).
template <class Kernel, class Params>
cudaError_t launch_with_smem(Kernel kernel, int smem, dim3 grid, int threads, const Params& p, cudaStream_t s) {
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (e != cudaSuccess) return e;
  kernel<<<grid, threads, smem, s>>>(p);
  return cudaGetLastError();
}
template <class Smem>
constexpr int smem_bytes_of() { return static_cast<int>(sizeof(Smem)) + 1024; }

// The block coordinate of the chain kernels (the forward's pass, the backward's recompute and
// pass 1): one CTA of two warpgroups per (sequence-map entry n, value head, 64-column V tile),
// warpgroup 0 the producer and warpgroup 1 the consumer; the entry and its chunk count.
struct ChainTile {
  int v0, hv, n, wg, tid;
  SeqInfo si;
  int nch;
  __device__ __forceinline__ static ChainTile get(const SeqInfo* seqs) {
    return get_with([&](int n) { return seqs[n]; });
  }
  // The map by value where it was filled (InlineSeqMap::count > 0), else the workspace's.
  __device__ __forceinline__ static ChainTile get(const InlineSeqMap& inline_seqs, const SeqInfo* seqs) {
    return get_with([&](int n) { return inline_seqs.count > 0 ? inline_seqs.seq[n] : seqs[n]; });
  }

 private:
  // entry(n): the map's entry n, read once the block's coordinates are known
  template <class Entry>
  __device__ __forceinline__ static ChainTile get_with(Entry&& entry) {
    ChainTile c;
    const auto bc = SequentialScheduler<kVT>::block_coord();
    c.v0 = bc.v0;
    c.hv = bc.hv;
    c.n = bc.n;
    c.wg = threadIdx.x / kThreads;
    c.tid = threadIdx.x % kThreads;
    c.si = entry(c.n);
    c.nch = (c.si.len + kC - 1) / kC;
    return c;
  }
};

// The shared-memory base rounded up to the 128-byte swizzle's 1024-byte period; an offset from
// smem_raw (not an integer round trip) keeps the pointer's shared-memory provenance (LDS).
__device__ __forceinline__ unsigned char* smem_base_1024(unsigned char* smem_raw) {
  const unsigned pad = (1024u - (static_cast<unsigned>(__cvta_generic_to_shared(smem_raw)) & 1023u)) & 1023u;
  return smem_raw + pad;
}

// The full / empty mbarriers of a producer / consumer ring of STAGES slots (kThreads arrivals on
// full: one warpgroup; on empty, `empty_arrivals`: a warpgroup, or one thread expecting TMA
// bytes), initialised by thread 0 and published by the block's last __syncthreads (every later
// wait is on these barriers).
template <int STAGES>
__device__ __forceinline__ void init_ring_barriers(uint64_t (&full)[STAGES], uint64_t (&empty)[STAGES],
                                                   int empty_arrivals = kThreads) {
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      cutlass::arch::ClusterBarrier::init(&full[s], kThreads);
      cutlass::arch::ClusterBarrier::init(&empty[s], empty_arrivals);
    }
    cutlass::arch::fence_barrier_init();
  }
  __syncthreads();
}

template <class Acc>
__device__ __forceinline__ void fence_regs(Acc& a) {
  warpgroup_fence_operand(a);
}

// Accumulator element i of an m64nN fragment held by thread (warp, g = lane / 4, t = lane % 4):
// row 16 warp + g + 8 ((i >> 1) & 1), column 8 (i >> 2) + 2 t + (i & 1). A register A operand
// of k-blocks of 16 has the same order (acc_to_a).
__device__ __forceinline__ int acc_row(int warp, int g, int i) { return 16 * warp + g + 8 * ((i >> 1) & 1); }
__device__ __forceinline__ int acc_col(int t, int i) { return 8 * (i >> 2) + 2 * t + (i & 1); }

// Scans along an accumulator row's 8-column block, which a quad holds two columns a lane
// (acc_col): for this lane's pair x0 + x1, `ex` is the sum of the pairs of the lanes before it
// (quad_prefix) or after it (quad_suffix), `tot` the block's sum. Callers carry `tot` from block
// to block for a scan along the whole row.
struct QuadScan {
  float ex, tot;
};
__device__ __forceinline__ QuadScan quad_prefix(float x0, float x1, int t) {
  float incl = x0 + x1;
  float y = __shfl_up_sync(0xffffffffu, incl, 1, 4);
  if (t >= 1) incl += y;
  y = __shfl_up_sync(0xffffffffu, incl, 2, 4);
  if (t >= 2) incl += y;
  float ex = __shfl_up_sync(0xffffffffu, incl, 1, 4);
  if (t == 0) ex = 0.f;
  return {ex, __shfl_sync(0xffffffffu, incl, 3, 4)};
}
__device__ __forceinline__ QuadScan quad_suffix(float x0, float x1, int t) {
  float incl = x0 + x1;
  float y = __shfl_down_sync(0xffffffffu, incl, 1, 4);
  if (t <= 2) incl += y;
  y = __shfl_down_sync(0xffffffffu, incl, 2, 4);
  if (t <= 1) incl += y;
  float ex = __shfl_down_sync(0xffffffffu, incl, 1, 4);
  if (t == 3) ex = 0.f;
  return {ex, __shfl_sync(0xffffffffu, incl, 0, 4)};
}

// s += Σ_e a_e b_e over the eight 16-bit T of two 16-byte pieces, in element order (float32 sums of
// exact 16-bit products). The pieces are taken by value: one 16-byte load each, where a reference
// into shared memory became eight 2-byte loads (seen in the SASS).
template <class T>
__device__ __forceinline__ void piece_dot(uint4 a, uint4 b, float& s) {
  const T* ae = reinterpret_cast<const T*>(&a);
  const T* be = reinterpret_cast<const T*>(&b);
#pragma unroll
  for (int e = 0; e < 8; ++e) s += to_f(ae[e]) * to_f(be[e]);
}

// The 8x8 16-bit matrix a warp holds as (row lane / 4, columns 2 (lane % 4), +1) pairs, transposed:
// the lane then holds the same positions of the transpose (accumulator pairs to row-major stores
// of the transposed tile).
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(x) : "r"(x));
  return x;
}

// Two 4-byte words of one row that movmatrix_trans left in lane t of a quad (x0: columns 2t, 2t + 1
// of an 8-column block, x1: the same of the next block), exchanged across the quad so that lane t
// holds columns 4t .. 4t + 3 of the 16: one 8-byte store a lane and a whole 32-byte sector a quad,
// where the two 4-byte stores half-wrote every sector. (lane t1 t0, word h) -> (lane h t1, word
// t0): swap the word bit with t0, then t0 with t1.
__device__ __forceinline__ uint2 quad_sector_pair(uint32_t x0, uint32_t x1, int t) {
  const uint32_t y = __shfl_xor_sync(0xffffffffu, (t & 1) ? x0 : x1, 1);
  if (t & 1) x0 = y;
  else x1 = y;
  const int src = ((t & 1) << 1) | (t >> 1);
  return make_uint2(__shfl_sync(0xffffffffu, x0, src, 4), __shfl_sync(0xffffffffu, x1, src, 4));
}

// A quad's 4 x 4 transpose of 32-bit words: thread s holds x[n] = M[s][n]; afterwards thread t holds
// x[s] = M[s][t] (two butterfly stages, a shuffle per swapped pair).
__device__ __forceinline__ void quad_transpose4(uint32_t (&x)[4], int t) {
#pragma unroll
  for (int n = 0; n < 4; n += 2) {  // 2 x 2 blocks transposed between threads t and t ^ 1
    const uint32_t y = __shfl_xor_sync(0xffffffffu, (t & 1) ? x[n] : x[n + 1], 1);
    if (t & 1) x[n] = y;
    else x[n + 1] = y;
  }
#pragma unroll
  for (int j = 0; j < 2; ++j) {  // the off-diagonal 2 x 2 blocks swapped between threads t and t ^ 2
    const uint32_t y = __shfl_xor_sync(0xffffffffu, (t & 2) ? x[j] : x[2 + j], 2);
    if (t & 2) x[j] = y;
    else x[2 + j] = y;
  }
}

// An m64nN accumulator's rows as 16-byte pieces: word(i) packs elements i and i + 1 (16-bit), the
// 4-word groups of four 8-column blocks go through quad_transpose4, and put(row, col0, piece) gets
// columns col0 .. col0 + 7 of one row: 64 contiguous bytes a quad, where (row, pair) stores
// half-wrote every sector (N a multiple of 32).
template <int N, class Word, class Put>
__device__ __forceinline__ void acc_row_pieces(Word&& word, int warp, int g, int t, Put&& put) {
  static_assert(N % 32 == 0, "four 8-column blocks a piece group");
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int b = 0; b < N / 32; ++b) {
      uint32_t x[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) x[j] = word(4 * (4 * b + j) + 2 * h);
      quad_transpose4(x, t);
      put(16 * warp + g + 8 * h, 32 * b + 8 * t, make_uint4(x[0], x[1], x[2], x[3]));
    }
}

// An m64nN accumulator's (row, even column) pairs, rounded to 16-bit T and packed, through
// put(row, column, pair): the row-major stores of a result tile.
template <class T, class Acc, class Put>
__device__ __forceinline__ void acc_pairs(const Acc& acc, int warp, int g, int t, Put&& put) {
#pragma unroll
  for (int i = 0; i < size(acc); i += 2) put(acc_row(warp, g, i), acc_col(t, i), pack2<T>(acc(i), acc(i + 1)));
}

// The low halves x - round(x) of acc's elements, as acc_pairs delivers acc (the split form's hi + lo).
template <class T, class Acc, class Put>
__device__ __forceinline__ void acc_lo_pairs(const Acc& acc, int warp, int g, int t, Put&& put) {
#pragma unroll
  for (int i = 0; i < size(acc); i += 2) {
    const float a = acc(i), b = acc(i + 1);
    put(acc_row(warp, g, i), acc_col(t, i), pack2<T>(a - to_f(from_f<T>(a)), b - to_f(from_f<T>(b))));
  }
}

// acc (an m64nN accumulator) into the A-operand registers of an m64 x kN product: the same
// element order (both are the thread's (row, column-pair) values, 8 columns per 4 values).
template <class FragA, class Acc>
__device__ __forceinline__ void acc_to_a(FragA& a, const Acc& acc) {
  using E = typename FragA::value_type;
  static_assert(decltype(size(a))::value == decltype(size(acc))::value, "same element count");
#pragma unroll
  for (int i = 0; i < size(acc); ++i) a(i) = E(acc(i));
}

// k-blocks of 16 over an A fragment (registers or descriptors) and a B descriptor tensor; the
// first overwrites acc when ZERO.
template <bool ZERO, class Mma, class FA, class FB, class Acc>
__device__ __forceinline__ void wg_gemm(Mma& mma, const FA& a, const FB& b, Acc& acc) {
  mma.accumulate_ = ZERO ? GMMA::ScaleOut::Zero : GMMA::ScaleOut::One;
#pragma unroll
  for (int kb = 0; kb < size<2>(a); ++kb) {
    cute::gemm(mma, a(_, _, kb), b(_, _, kb), acc);
    mma.accumulate_ = GMMA::ScaleOut::One;
  }
}

// A barrier over the 128 threads of one warpgroup (named barrier ID; 0 is __syncthreads').
template <int ID>
__device__ __forceinline__ void warpgroup_sync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "n"(kThreads) : "memory");
}

}  // namespace wgmma_recurrence
}  // namespace linattn::cuda::kern

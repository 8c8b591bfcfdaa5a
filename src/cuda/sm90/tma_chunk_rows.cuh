// A chunk's raw q, k and v rows by TMA into the 128-byte-swizzled layouts of wgmma_tiles.cuh,
// unchanged: no operand view moves. A box lands densely, dimension 0 innermost, with each 128-byte
// row's 16-byte pieces permuted by its row index mod 8 — the layouts' atom. So each tensor map
// walks its layout's atoms in order (docs/fused_forward_design.md, session 56):
//   q  (tok, ch) at kmajor_off<64>: dims (64 channels, tokens, 2 H channel blocks), strides
//      (H K, 64) elements; one box (64, 64, 2) at (0, t0, 2 hk).
//   k  (ch, tok) at mnmajor_off (atom = channel block + 2 x token block): the same map, boxes of
//      (64, 8, 2), one a token block of 8, at (0, t0 + 8 b, 2 hk), landing 1024 elements apart.
//      (One 4-d box needs t0 % 8 == 0 to bound-check its token blocks; varlen starts anywhere.)
//   v  (tok, vcol) at kmajor_off<64>: dims (V, tokens, HV), strides (HV V, V); one box (64, 64, 1)
//      at (v0, t0, hv).
// Every dimension is bound-checked, tokens past the tensor's end land as zeros. Rows past the
// sequence's end (the next sequence's tokens, which may be anything) are the reader's to clear.
#pragma once

#include <cuda.h>  // CUtensorMap (the driver's types; the entry point comes through the runtime)

#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cutlass/arch/barrier.h>

#include "cuda/sm90/wgmma_tiles.cuh"

namespace linattn::cuda::kern {
namespace wgmma_recurrence {

// The maps a kernel takes as __grid_constant__ parameters (TMA reads them in place): the inputs,
// and o (v's geometry) for a whole chunk's output tile stored from shared memory.
struct ChunkRowMaps {
  CUtensorMap q, k, v, o;
};

// Bytes one chunk's boxes deliver (bound-checked zeros included): q and k 64 x 128, v 64 x 64.
constexpr uint32_t kChunkRowBytes = (2 * kC * kK + kC * kVT) * 2;

// cuTensorMapEncodeTiled through the runtime's driver entry point (no link to libcuda). The type
// from the declaration: CUTLASS includes cudaTypedefs.h inside its own namespace.
using EncodeTiledFn = decltype(&::cuTensorMapEncodeTiled);
inline EncodeTiledFn tensor_map_encoder() {
  static const EncodeTiledFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      return static_cast<EncodeTiledFn>(nullptr);
    return reinterpret_cast<EncodeTiledFn>(f);
  }();
  return fn;
}

// A rank-3 16-bit map, 128-byte swizzle, zeros out of bounds. `strides`: dimensions 1 and 2, in
// elements.
inline cudaError_t encode_rows_map(CUtensorMap* m, const void* base, const uint64_t (&dims)[3],
                                   const uint64_t (&strides)[2], const uint32_t (&box)[3]) {
  const EncodeTiledFn encode = tensor_map_encoder();
  if (encode == nullptr) return cudaErrorNotSupported;
  const cuuint64_t gdim[3] = {dims[0], dims[1], dims[2]};
  const cuuint64_t gstride[2] = {strides[0] * 2, strides[1] * 2};
  const cuuint32_t bdim[3] = {box[0], box[1], box[2]};
  const cuuint32_t estride[3] = {1, 1, 1};
  const CUresult r = encode(m, CU_TENSOR_MAP_DATA_TYPE_UINT16, 3, const_cast<void*>(base), gdim, gstride, bdim, estride,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// The maps of q, k [tokens][H][128], v and o [tokens][HV][V] (16-bit, contiguous, 16-byte
// aligned, V % 64 == 0: what the wgmma kernels' callers check). `tokens` may be 0 (no box is then
// issued; a map needs a nonzero extent).
inline cudaError_t encode_chunk_row_maps(ChunkRowMaps& m, const void* q, const void* k, const void* v, void* o,
                                         int64_t tokens, int H, int HV, int V) {
  const uint64_t T = tokens > 0 ? static_cast<uint64_t>(tokens) : 1;
  const uint64_t qk_dims[3] = {64, T, 2 * static_cast<uint64_t>(H)};
  const uint64_t qk_strides[2] = {static_cast<uint64_t>(H) * kK, 64};
  cudaError_t e = encode_rows_map(&m.q, q, qk_dims, qk_strides, {64, kC, 2});
  if (e == cudaSuccess) e = encode_rows_map(&m.k, k, qk_dims, qk_strides, {64, 8, 2});
  const uint64_t v_dims[3] = {static_cast<uint64_t>(V), T, static_cast<uint64_t>(HV)};
  const uint64_t v_strides[2] = {static_cast<uint64_t>(HV) * V, static_cast<uint64_t>(V)};
  if (e == cudaSuccess) e = encode_rows_map(&m.v, v, v_dims, v_strides, {kVT, kC, 1});
  if (e == cudaSuccess) e = encode_rows_map(&m.o, o, v_dims, v_strides, {kVT, kC, 1});
  return e;
}

// One thread: chunk (t0)'s q and k rows of key head hk and the v tile (v0, hv) into q, k, v, their
// bytes expected on `bar` (which counts this thread's arrival).
template <class E>
__device__ __forceinline__ void issue_chunk_rows(const ChunkRowMaps& m, uint64_t* bar, E* q, E* k, E* v, int t0, int hk,
                                                 int hv, int v0) {
  constexpr uint64_t hint = static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_NORMAL);
  cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(bar, kChunkRowBytes);
  cute::SM90_TMA_LOAD_3D::copy(&m.q, bar, hint, q, 0, t0, 2 * hk);
#pragma unroll
  for (int b = 0; b < kC / 8; ++b) cute::SM90_TMA_LOAD_3D::copy(&m.k, bar, hint, k + 1024 * b, 0, t0 + 8 * b, 2 * hk);
  cute::SM90_TMA_LOAD_3D::copy(&m.v, bar, hint, v, v0, t0, hv);
}

// One thread: a whole chunk's output tile (64 tokens from t0, value columns v0.., head hv) from
// `tile` (kmajor_off<64>, written by the generic proxy and fenced) to o, as one bulk group. Only
// for a chunk of 64 tokens: a shorter one's box would write the next sequence's rows.
template <class E>
__device__ __forceinline__ void store_chunk_o(const ChunkRowMaps& m, const E* tile, int t0, int hv, int v0) {
  cute::SM90_TMA_STORE_3D::copy(&m.o, tile, v0, t0, hv);
}

// Rows [Lc, 64) of a chunk's q (kmajor_off<64>), k (mnmajor_off) and v (kmajor_off<64>, 64
// columns) set to zero by a warpgroup's threads: past its sequence's end a chunk's boxes hold the
// next sequence's tokens, and a zero row is what the products take for "no token" (an inf there
// would turn Aqk's masked zeros and the state update into NaN).
template <class E>
__device__ __forceinline__ void clear_tail_rows(E* q, E* k, E* v, int Lc, int tid) {
  const uint4 z = make_uint4(0, 0, 0, 0);
  for (int p = tid; p < (kC - Lc) * 16; p += kThreads) {  // 16 pieces of 8 channels a q / k row
    const int r = Lc + p / 16, c = (p % 16) * 8;
    *reinterpret_cast<uint4*>(q + kmajor_off<kC>(r, c)) = z;
    *reinterpret_cast<uint4*>(k + mnmajor_off(c, r)) = z;
  }
  for (int p = tid; p < (kC - Lc) * 8; p += kThreads) {  // 8 a v row
    const int r = Lc + p / 8, c = (p % 8) * 8;
    *reinterpret_cast<uint4*>(v + kmajor_off<kC>(r, c)) = z;
  }
}

}  // namespace wgmma_recurrence
}  // namespace linattn::cuda::kern

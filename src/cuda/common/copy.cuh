// Asynchronous global -> shared copies (cp.async, 16-byte pieces) shared by the sequential
// kernels (chunk_state.cu, chunk_bwd_wy.cu): the next chunk's operands are staged while the
// current one is computed. Rows past a chunk's end are zero-filled without reading global memory.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/common/mma.cuh"  // to_f

namespace linattn::cuda::kern {

// Row padding (elements) of a staged 16-byte-piece tile: consecutive rows start on different banks.
template <class T>
constexpr int pad_of() { return 16 / static_cast<int>(sizeof(T)); }

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
// valid = false zero-fills the 16 bytes and reads nothing (source size 0).
__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// A ROWS x COLS tile (global row stride gld) into smem (stride sld) by NT threads, shapes at
// compile time (shifts, unrolled). PRED: rows at or past `valid` are zero-filled.
template <class T, int ROWS, int COLS, int NT, bool PRED = false>
__device__ __forceinline__ void tile_copy(T* dst, int sld, const T* src, int64_t gld, int tid, int valid = ROWS) {
  constexpr int per = 16 / sizeof(T);
  constexpr int ppr = COLS / per;  // pieces per row
  constexpr int total = ROWS * ppr;
  static_assert(NT % ppr == 0 || total <= NT, "tile shape");
  const int r0 = tid / ppr, cpe = (tid % ppr) * per;
  constexpr int rstep = NT / ppr > 0 ? NT / ppr : 1;
#pragma unroll
  for (int it = 0; it < (total + NT - 1) / NT; ++it) {
    if (total % NT == 0 || it * NT + tid < total) {
      const int r = r0 + it * rstep;
      if constexpr (PRED) {
        const bool ok = r < valid;
        cp_async16_zfill(dst + r * sld + cpe, src + static_cast<int64_t>(ok ? r : 0) * gld + cpe, ok);
      } else {
        cp_async16(dst + r * sld + cpe, src + static_cast<int64_t>(r) * gld + cpe);
      }
    }
  }
}

// The same with runtime shapes: rows x cols, by the block's NT threads.
template <class T, int NT>
__device__ __forceinline__ void tile_copy_rt(T* dst, int sld, const T* src, int64_t gld, int rows, int cols,
                                             int valid) {
  constexpr int per = 16 / sizeof(T);
  const int ppr = cols / per;
  for (int e = threadIdx.x; e < rows * ppr; e += NT) {
    const int r = e / ppr, cpc = (e - r * ppr) * per;
    const bool ok = r < valid;
    cp_async16_zfill(dst + r * sld + cpc, ok ? src + r * gld + cpc : src, ok);
  }
}

// 16 bytes of In at src, converted to float at dst (16 / sizeof(In) elements; dst 16-byte aligned).
template <class In>
__device__ __forceinline__ void store_widened(float* dst, const uint4& u) {
  constexpr int n = 16 / static_cast<int>(sizeof(In));
  const In* e = reinterpret_cast<const In*>(&u);
#pragma unroll
  for (int m = 0; m < n; m += 4)
    *reinterpret_cast<float4*>(dst + m) = make_float4(to_f(e[m]), to_f(e[m + 1]), to_f(e[m + 2]), to_f(e[m + 3]));
}

// tile_copy's shape and predicate, from 16-bit global rows into a float tile (the backward's
// float32 form reads the caller's bf16 / fp16 q, k, v, dO, exact in float32, instead of widened
// copies): plain loads, all of a thread's in flight before its converted stores, so the tile is
// complete at the block's next barrier (no cp.async group to land).
template <class In, int ROWS, int COLS, int NT, bool PRED = false>
__device__ __forceinline__ void tile_widen(float* dst, int sld, const In* src, int64_t gld, int tid,
                                           int valid = ROWS) {
  constexpr int per = 16 / sizeof(In);
  constexpr int ppr = COLS / per;
  constexpr int total = ROWS * ppr;
  constexpr int iters = (total + NT - 1) / NT;
  static_assert(NT % ppr == 0 || total <= NT, "tile shape");
  const int r0 = tid / ppr, cpe = (tid % ppr) * per;
  constexpr int rstep = NT / ppr > 0 ? NT / ppr : 1;
  uint4 u[iters];
#pragma unroll
  for (int it = 0; it < iters; ++it) {
    const int r = r0 + it * rstep;
    const bool ok = (total % NT == 0 || it * NT + tid < total) && (!PRED || r < valid);
    u[it] = ok ? __ldg(reinterpret_cast<const uint4*>(src + static_cast<int64_t>(r) * gld + cpe)) : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int it = 0; it < iters; ++it)
    if (total % NT == 0 || it * NT + tid < total) store_widened<In>(dst + (r0 + it * rstep) * sld + cpe, u[it]);
}

// The same with runtime shapes (tile_copy_rt's), by the block's NT threads.
template <class In, int NT>
__device__ __forceinline__ void tile_widen_rt(float* dst, int sld, const In* src, int64_t gld, int rows, int cols,
                                              int valid) {
  constexpr int per = 16 / sizeof(In);
  const int ppr = cols / per;
  for (int e = threadIdx.x; e < rows * ppr; e += NT) {
    const int r = e / ppr, cpc = (e - r * ppr) * per;
    const uint4 u = r < valid ? __ldg(reinterpret_cast<const uint4*>(src + r * gld + cpc)) : make_uint4(0, 0, 0, 0);
    store_widened<In>(dst + r * sld + cpc, u);
  }
}

}  // namespace linattn::cuda::kern

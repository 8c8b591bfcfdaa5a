// Asynchronous global -> shared copies (cp.async, 16-byte pieces) shared by the sequential
// kernels (chunk_state.cu, chunk_bwd_wy.cu): the next chunk's operands are staged while the
// current one is computed. Rows past a chunk's end are zero-filled without reading global memory.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace linattn::cuda::kern {

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

}  // namespace linattn::cuda::kern

// The K x VT float32 state tile of the 8-warp mma.sync sequential kernels (chunk_state_kernel,
// chunk_fused_kernel: S; dh_kernel: dS): one home for its warp layout, its reads and writes of
// [N][HV][K][V] state tensors (h0, ht, h, dht, dh0), its row decay by exp(γ_C), and its transposed
// 16-bit copy in shared memory (the B operand of the chunk's next products).
//
// The 8 warps form WM x WN; warp w holds MI x NI m16n8 accumulator tiles (mma.cuh's C fragment
// order: acc[mi][ni][e] is row m0 + 16 mi + g (+8 for e >= 2), column n0 + 8 ni + 2 t + (e & 1)).
// The Hopper kernels keep theirs as wgmma accumulators (sm90/recurrence_consumer.cuh); both use
// state_index (mma.cuh) for the tensors. Each member writes its loops out: one element visitor with
// lambdas compiled chunk_fused_kernel and dh_kernel to other SASS (scripts/sass_compare.py).
#pragma once

#include <cstdint>

#include "cuda/common/mma.cuh"

namespace linattn::cuda::kern {

template <int K, int VT>
struct WarpStateTile {
  static constexpr int WM = (K / 16) < 8 ? (K / 16) : 8;  // warps along the K rows
  static constexpr int WN = 8 / WM;                      // warps along the VT columns
  static constexpr int MI = (K / 16) / WM;               // m16 tiles of a warp
  static constexpr int NI = (VT / 8) / WN;               // n8 tiles of a warp
  using Acc = float[MI][NI][4];

  int m0, n0;  // the warp's first row (key channel) and column (within the V tile)
  int g, t;    // lane / 4, lane % 4

  __device__ __forceinline__ WarpStateTile(int warp, int lane)
      : m0((warp % WM) * 16 * MI), n0((warp / WM) * 8 * NI), g(lane >> 2), t(lane & 3) {}

  __device__ __forceinline__ int row(int mi, int e) const { return m0 + 16 * mi + g + (e >= 2 ? 8 : 0); }
  __device__ __forceinline__ int col(int ni, int e) const { return n0 + 8 * ni + 2 * t + (e & 1); }

  // acc = the state tensor's (sequence, head) state at base, columns v0 + the tile's; 0 without one.
  __device__ __forceinline__ void load(Acc& acc, const void* src, int dt, int64_t base, int V, int v_first,
                                       int v0) const {
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int kk = row(mi, e), vv = v0 + col(ni, e);
          acc[mi][ni][e] = src ? load_state(src, dt, base + state_index<K>(V, v_first, kk, vv)) : 0.f;
        }
  }

  // The tile into the state tensor at base (float32, or float64 where dt says so).
  __device__ __forceinline__ void store(const Acc& acc, void* dst, int dt, int64_t base, int V, int v_first,
                                        int v0) const {
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int kk = row(mi, e), vv = v0 + col(ni, e);
          store_state(dst, dt, base + state_index<K>(V, v_first, kk, vv), acc[mi][ni][e]);
        }
  }

  // Row kk scaled by gex[kk] (exp(γ_C) of the chunk: the state's decay across it).
  __device__ __forceinline__ void decay(Acc& acc, const float* gex) const {
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      const float d0 = gex[m0 + 16 * mi + g], d1 = gex[m0 + 16 * mi + g + 8];
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        acc[mi][ni][0] *= d0; acc[mi][ni][1] *= d0;
        acc[mi][ni][2] *= d1; acc[mi][ni][3] *= d1;
      }
    }
  }

  // The tile transposed into shared memory as T: s[column][row], rows ld apart; with split, the
  // rounding's residue as T into lo (the hi + lo halves of the 16-bit split form).
  template <class T>
  __device__ __forceinline__ void stage_transposed(const Acc& acc, T* s, int ld, bool split = false,
                                                   T* lo = nullptr) const {
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int kk = row(mi, e), vv = col(ni, e);
          const T hi = from_f<T>(acc[mi][ni][e]);
          s[vv * ld + kk] = hi;
          if (split) lo[vv * ld + kk] = from_f<T>(acc[mi][ni][e] - to_f(hi));
        }
  }
};

}  // namespace linattn::cuda::kern

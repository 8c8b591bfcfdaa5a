// The chunked kernels' two block decompositions as types (FlashAttention-3's tile schedulers): each
// owns its grid shape (host, the launcher's) and the block coordinate a CTA reads (device), so the
// two cannot disagree. The varlen index math stays in the maps the coordinates index: SeqInfo /
// ChunkInfo (chunk_map_host.hpp), built from cu_seqlens by chunk_map.cu.
//
// SequentialScheduler<VT>: one CTA per (sequence-map entry n, value head hv, VT value columns
//   from v0); the CTA walks entry n's chunks in order with the state on chip (the forward's state
//   passes, the backward's recompute and pass 1, the sequence-split combine). The map holds whole
//   sequences or the segments of the intra-card sequence-parallel pass (docs/sequence_split.md):
//   that pass is this scheduler over a segment map, its transitions a grid of V + K columns.
// ChunkParallelScheduler<VT>: one CTA per (chunk c, value head hv), independent of every other
//   chunk (chunk_prep and the Hopper preps, pass 2); VT > 0 adds VT-column tiles of V, tile
//   fastest along x (the output kernel), VT = 0 the whole V.
// ChunkPartScheduler<PARTS>: one CTA per (part, chunk c, value head hv), the parts of a chunk
//   adjacent along x so that they run together and share the chunk's tiles through L2 (the
//   vector-gate pass 2 on Hopper: a part is a 64-channel half of the key head).
#pragma once

#include <cuda_runtime.h>

namespace linattn::cuda::kern {

template <int VT>
struct SequentialScheduler {
  struct Coord {
    int v0, hv, n;
  };
  // cols: the value columns (V; V + K for the sequence-split pass's transitions), entries: the map's.
  static dim3 grid_shape(int cols, int HV, int entries) { return dim3(cols / VT, HV, entries); }
  __device__ __forceinline__ static Coord block_coord() {
    return Coord{static_cast<int>(blockIdx.x * VT), static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z)};
  }
};

template <int VT = 0>
struct ChunkParallelScheduler {
  struct Coord {
    int c, hv, v0;  // v0 = 0 without V tiles
  };
  static dim3 grid_shape(int num_chunks, int HV, int V = 0) {
    if constexpr (VT == 0) return dim3(num_chunks, HV);
    else return dim3(static_cast<unsigned>(num_chunks) * static_cast<unsigned>(V / VT), HV);
  }
  __device__ __forceinline__ static Coord block_coord(int V = 0) {
    if constexpr (VT == 0) {
      return Coord{static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y), 0};
    } else {
      const int nvt = V / VT, c = blockIdx.x / nvt, v0 = (blockIdx.x - c * nvt) * VT;
      return Coord{c, static_cast<int>(blockIdx.y), v0};
    }
  }
};

template <int PARTS>
struct ChunkPartScheduler {
  struct Coord {
    int c, hv, part;
  };
  static dim3 grid_shape(int num_chunks, int HV) { return dim3(static_cast<unsigned>(num_chunks) * PARTS, HV); }
  __device__ __forceinline__ static Coord block_coord() {
    return Coord{static_cast<int>(blockIdx.x / PARTS), static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.x % PARTS)};
  }
};

}  // namespace linattn::cuda::kern

// Chunk and sequence maps of a call, built on the device from cu_seqlens (or from B, T).
//
// Why on the device: copying host-built maps with cudaMemcpyAsync from pageable memory makes the
// stream wait for its earlier work (a host sync per call) and cannot be captured in a CUDA graph.
// Two small kernels instead: a one-CTA scan of the per-sequence chunk counts (SeqInfo), then one
// thread per chunk finding its sequence by binary search over the chunk offsets (ChunkInfo).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/common/chunk_fwd.hpp"

namespace linattn::cuda::kern {

struct MapParams {
  const void* cu;  // device cu_seqlens [N + 1] (int32 or int64), or null for fixed length
  int cu_int64;    // 1: cu is int64
  int N;           // sequences (fixed length: B)
  int T;           // fixed length: tokens per sequence; with cu: all tokens (bounds cu's values)
  int num_chunks;  // total chunks (host-computed from the validated host copy; bounds the maps)
  SeqInfo* seqs;   // out [N]
  ChunkInfo* chunks;  // out [num_chunks], or null: the sequence map only
};

// Enqueues the map kernels on s. No host synchronisation.
cudaError_t launch_chunk_maps(const MapParams& p, cudaStream_t s);

}  // namespace linattn::cuda::kern

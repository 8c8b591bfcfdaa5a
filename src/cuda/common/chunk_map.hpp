// Chunk and sequence maps of a call, built from the validated HOST offsets (Problem::cu).
//
// The device cu_seqlens is not read: the host copy sized every buffer and grid, so the maps must
// come from it too, or a device copy that disagrees (undetectable without a sync) would break the
// maps' partition of the tokens (issue 19: unwritten workspace rows read by the backward).
// Why by-value kernel parameters: copying host-built maps with cudaMemcpyAsync from pageable
// memory makes the stream wait for its earlier work (a host sync per call) and cannot be captured
// in a CUDA graph; parameters are copied at enqueue (and into a captured graph's node). Kernels:
// seq_map_kernel writes SeqInfo from a parameter block (chunk_map_host.hpp: one launch for
// N <= 128, else one per 1536 sequences), then chunk_map_kernel, one thread per chunk, finds its
// sequence by binary search over the chunk offsets (ChunkInfo).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/common/chunk_map_host.hpp"

namespace linattn::cuda::kern {

struct MapParams {
  const int64_t* cu;  // host: validated offsets [N + 1] (Problem::cu; fixed length: n * T)
  int N;              // sequences
  int num_chunks;     // total chunks (what cu gives)
  SeqInfo* seqs;      // device out [N]
  ChunkInfo* chunks;  // device out [num_chunks], or null: the sequence map only
  // The sequence-split state pass's map (segments of seg_chunks chunks, chunk_map_host.hpp), device
  // out [map_entries(cu, N, seg_chunks)]; null: none.
  SeqInfo* segs = nullptr;
  int seg_chunks = 0;
};

// Enqueues the map kernels on s. No host synchronisation; cu is read before this returns.
cudaError_t launch_chunk_maps(const MapParams& p, cudaStream_t s);

}  // namespace linattn::cuda::kern

// Chunk and sequence maps from the host offsets (see chunk_map.hpp).
#include "cuda/common/chunk_map.hpp"
#include "cuda/config/limits.hpp"

namespace linattn::cuda::kern {
namespace {

constexpr int kSeqThreads = 256;

// One thread per entry of the parameter block (entries computed on the host).
template <int kMax>
__global__ void __launch_bounds__(kSeqThreads) seq_map_kernel(const SeqBatch<kMax> b) {
  const int i = blockIdx.x * kSeqThreads + threadIdx.x;
  if (i < b.count) b.dst[i] = b.seq[i];
}

struct ChunkMapParams {
  const SeqInfo* seqs;
  ChunkInfo* chunks;
  int N, num_chunks;
};

__global__ void chunk_map_kernel(const ChunkMapParams p) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < p.num_chunks) p.chunks[c] = chunk_info(p.seqs, p.N, c);
}

}  // namespace

cudaError_t launch_chunk_maps(const MapParams& p, cudaStream_t s) {
  if (p.N <= 0) return cudaSuccess;
  cudaError_t e = cudaSuccess;
  auto launch = [&](const auto& b) {
    const unsigned blocks = static_cast<unsigned>((b.count + kSeqThreads - 1) / kSeqThreads);
    seq_map_kernel<<<blocks, kSeqThreads, 0, s>>>(b);
    e = cudaGetLastError();
    return e == cudaSuccess;
  };
  for_each_seq_batch(p.cu, p.N, p.seqs, launch);
  if (e == cudaSuccess && p.segs != nullptr) for_each_seq_batch(p.cu, p.N, p.segs, launch, p.seg_chunks);
  if (e != cudaSuccess || p.num_chunks <= 0 || p.chunks == nullptr) return e;
  constexpr int kThreads = 256;
  chunk_map_kernel<<<(p.num_chunks + kThreads - 1) / kThreads, kThreads, 0, s>>>(
      ChunkMapParams{p.seqs, p.chunks, p.N, p.num_chunks});
  return cudaGetLastError();
}

}  // namespace linattn::cuda::kern

// Device-built chunk and sequence maps (see chunk_map.hpp).
#include "cuda/common/chunk_map.hpp"
#include "cuda/config/limits.hpp"

namespace linattn::cuda::kern {
namespace {

constexpr int kC = config::kChunk;
constexpr int kScanThreads = 1024;

__device__ __forceinline__ int64_t cu_at(const MapParams& p, int i) {
  return p.cu_int64 ? static_cast<const int64_t*>(p.cu)[i] : static_cast<const int32_t*>(p.cu)[i];
}

// One CTA: thread i owns a contiguous run of sequences; run totals are scanned in shared memory.
// The host validated its copy of cu_seqlens and sized everything from it; the device copy is read
// here without a sync. Should the two differ, the values are clamped so that no kernel leaves
// its buffers: starts and ends into [0, T], lengths >= 0, and (below) no more chunks than sized.
__global__ void __launch_bounds__(kScanThreads) seq_map_kernel(const MapParams p) {
  __shared__ int run_total[kScanThreads];
  const int per = (p.N + kScanThreads - 1) / kScanThreads;
  const int n0 = threadIdx.x * per, n1 = min(p.N, n0 + per);
  auto cu_clamped = [&](int n) -> int64_t { return min(max(cu_at(p, n), int64_t{0}), static_cast<int64_t>(p.T)); };  // varlen: T = all tokens
  auto seq_t0 = [&](int n) -> int64_t { return p.cu ? cu_clamped(n) : static_cast<int64_t>(n) * p.T; };
  auto seq_len = [&](int n) -> int {
    return p.cu ? static_cast<int>(max(cu_clamped(n + 1) - cu_clamped(n), int64_t{0})) : p.T;
  };
  int local = 0;
  for (int n = n0; n < n1; ++n) local += (seq_len(n) + kC - 1) / kC;
  run_total[threadIdx.x] = local;
  __syncthreads();
  // inclusive Hillis-Steele scan over the run totals
  for (int off = 1; off < kScanThreads; off <<= 1) {
    const int add = threadIdx.x >= off ? run_total[threadIdx.x - off] : 0;
    __syncthreads();
    run_total[threadIdx.x] += add;
    __syncthreads();
  }
  int chunk0 = run_total[threadIdx.x] - local;
  for (int n = n0; n < n1; ++n) {
    int len = seq_len(n), c0 = chunk0;
    if (p.num_chunks > 0) {  // never past the sized chunks (num_chunks 0: sequence map only, no clamp)
      len = min(len, max(p.num_chunks - chunk0, 0) * kC);
      c0 = min(chunk0, p.num_chunks);
    }
    p.seqs[n] = SeqInfo{static_cast<int32_t>(seq_t0(n)), len, c0, 0};
    chunk0 += (len + kC - 1) / kC;
  }
}

__global__ void chunk_map_kernel(const MapParams p) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= p.num_chunks) return;
  // the last sequence whose first chunk is <= c (sequences without chunks never match last)
  int lo = 0, hi = p.N - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (p.seqs[mid].chunk0 <= c) lo = mid;
    else hi = mid - 1;
  }
  const SeqInfo s = p.seqs[lo];
  const int off = (c - s.chunk0) * kC;
  // len <= 0 only for chunks no sequence covers (a device cu_seqlens unlike the host's): empty
  const int tokens = p.cu ? p.T : p.N * p.T;
  p.chunks[c] = ChunkInfo{min(s.t0 + off, tokens), max(0, min(kC, s.len - off))};
}

}  // namespace

cudaError_t launch_chunk_maps(const MapParams& p, cudaStream_t s) {
  if (p.N <= 0) return cudaSuccess;
  seq_map_kernel<<<1, kScanThreads, 0, s>>>(p);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || p.num_chunks <= 0 || p.chunks == nullptr) return e;
  constexpr int kThreads = 256;
  chunk_map_kernel<<<(p.num_chunks + kThreads - 1) / kThreads, kThreads, 0, s>>>(p);
  return cudaGetLastError();
}

}  // namespace linattn::cuda::kern

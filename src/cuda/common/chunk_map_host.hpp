// The chunk and sequence map entries and the map logic that needs no GPU: SeqInfo per sequence from
// the validated host offsets (Problem::cu), grouped into the by-value parameter blocks of
// chunk_map.cu's seq_map_kernel, and the chunk lookup chunk_map_kernel runs. CUDA-free (host and
// device under nvcc), so that the CPU test suite checks it (tests/cpu/test_chunk_map_host.cpp).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/config/limits.hpp"

#ifdef __CUDACC__
#define LINATTN_HOST_DEVICE __host__ __device__
#else
#define LINATTN_HOST_DEVICE
#endif

namespace linattn::cuda::kern {

// Chunk map entries (device, from the workspace).
struct ChunkInfo {
  int32_t t0;   // first flat token of the chunk
  int32_t len;  // valid tokens (1..64)
};
struct SeqInfo {
  int32_t t0;      // first flat token
  int32_t len;     // tokens
  int32_t chunk0;  // first global chunk index
  int32_t pad;
};

// Sequences per launch of seq_map_kernel. Its parameter block carries the entries by value: a
// small block for the usual N (one launch, 2 KiB of parameters) and a large one for big N
// (ceil(N / kSeqBatchLarge) launches of 24 KiB). CUDA 12.1+ allows 32764 bytes of parameters.
constexpr int kSeqBatchSmall = 128;
constexpr int kSeqBatchLarge = 1536;

template <int kMax>
struct SeqBatch {
  SeqInfo* dst;    // device: where seq[0] goes (the map's entry `first`)
  int32_t first;   // index of seq[0] in the map
  int32_t count;   // entries in this launch, 1..kMax
  SeqInfo seq[kMax];
};
static_assert(sizeof(SeqBatch<kSeqBatchSmall>) == 16 + 16 * kSeqBatchSmall, "small block: 2 KiB + 16 B");
static_assert(sizeof(SeqBatch<kSeqBatchLarge>) <= 32764 - 4096,
              "large block well inside CUDA's 32764-byte kernel parameter limit");

// Sequence n of the offsets cu [N + 1] (tokens [cu[n], cu[n+1])), whose first chunk is chunk0.
// The offsets are the host copy checked by validation (non-decreasing, within the 32-bit sizes
// config::can_implement admits).
inline SeqInfo seq_info(const int64_t* cu, int64_t n, int64_t chunk0) {
  return SeqInfo{static_cast<int32_t>(cu[n]), static_cast<int32_t>(cu[n + 1] - cu[n]),
                 static_cast<int32_t>(chunk0), 0};
}

// Chunk c of the map seqs [N] (c below the total chunk count): the last sequence whose first
// chunk is <= c owns it (empty sequences share their successor's chunk0). chunk_map_kernel's body.
LINATTN_HOST_DEVICE inline ChunkInfo chunk_info(const SeqInfo* seqs, int N, int c) {
  int lo = 0, hi = N - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (seqs[mid].chunk0 <= c) lo = mid;
    else hi = mid - 1;
  }
  const SeqInfo s = seqs[lo];
  const int off = (c - s.chunk0) * config::kChunk;
  const int rest = s.len - off;
  return ChunkInfo{s.t0 + off, rest < config::kChunk ? rest : config::kChunk};
}

// Calls launch(batch) for consecutive batches covering sequences [0, N): one SeqBatch<kSeqBatchSmall>
// when N <= kSeqBatchSmall, else SeqBatch<kSeqBatchLarge> blocks. dst is the device map [N].
// Stops at the first launch that returns false and returns false; true when all were launched.
template <class Launch>
bool for_each_seq_batch(const int64_t* cu, int64_t N, SeqInfo* dst, Launch&& launch) {
  int64_t chunk0 = 0;
  auto run = [&](auto& b, int64_t first, int64_t count) {
    b.dst = dst + first;
    b.first = static_cast<int32_t>(first);
    b.count = static_cast<int32_t>(count);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t n = first + i;
      b.seq[i] = seq_info(cu, n, chunk0);
      chunk0 += (cu[n + 1] - cu[n] + config::kChunk - 1) / config::kChunk;
    }
    return launch(static_cast<const std::remove_reference_t<decltype(b)>&>(b));
  };
  if (N <= 0) return true;
  if (N <= kSeqBatchSmall) {
    SeqBatch<kSeqBatchSmall> b{};
    return run(b, 0, N);
  }
  // 24 KiB: reused across the launches (each launch copies its parameters when it is enqueued)
  SeqBatch<kSeqBatchLarge> b{};
  for (int64_t first = 0; first < N; first += kSeqBatchLarge) {
    const int64_t count = N - first < kSeqBatchLarge ? N - first : kSeqBatchLarge;
    if (!run(b, first, count)) return false;
  }
  return true;
}

}  // namespace linattn::cuda::kern

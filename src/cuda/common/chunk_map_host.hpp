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
// An entry of a sequence map: a whole sequence, or (the sequence-split state pass,
// config::seq_split_chunks) one segment of one, whole chunks from the sequence's start. Entries are in
// token order; a sequence's segments are consecutive, its last entry ends it.
struct SeqInfo {
  int32_t t0;      // first flat token
  int32_t len;     // tokens
  int32_t chunk0;  // first global chunk index
  int32_t seq;     // the sequence it belongs to (a whole-sequence map: its own index)
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
                 static_cast<int32_t>(chunk0), static_cast<int32_t>(n)};
}

// The entries of the map of cu [N + 1] with segments of seg_chunks chunks (0: whole sequences), in
// order: emit(SeqInfo). A sequence of more than seg_chunks chunks gives ceil(chunks / seg_chunks)
// segments, the last one shorter; any other sequence (empty ones included) one entry.
template <class Emit>
void for_each_map_entry(const int64_t* cu, int64_t N, int seg_chunks, Emit&& emit) {
  int64_t chunk0 = 0;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t len = cu[n + 1] - cu[n];
    const int64_t nch = (len + config::kChunk - 1) / config::kChunk;
    if (seg_chunks <= 0 || nch <= seg_chunks) {
      emit(seq_info(cu, n, chunk0));
    } else {
      const int64_t seg_len = static_cast<int64_t>(seg_chunks) * config::kChunk;
      for (int64_t off = 0; off < len; off += seg_len)
        emit(SeqInfo{static_cast<int32_t>(cu[n] + off), static_cast<int32_t>(len - off < seg_len ? len - off : seg_len),
                     static_cast<int32_t>(chunk0 + off / config::kChunk), static_cast<int32_t>(n)});
    }
    chunk0 += nch;
  }
}

// How many entries that map has.
inline int64_t map_entries(const int64_t* cu, int64_t N, int seg_chunks) {
  int64_t m = 0;
  for_each_map_entry(cu, N, seg_chunks, [&](const SeqInfo&) { ++m; });
  return m;
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

// A whole-sequence map of at most kSeqBatchSmall entries that goes by value in a kernel's
// parameters, so that no map kernel runs before that kernel (the one-kernel simple GLA forward).
// count 0: not filled; the kernel reads the workspace map instead.
struct InlineSeqMap {
  int32_t count;
  SeqInfo seq[kSeqBatchSmall];
};
static_assert(sizeof(InlineSeqMap) == 4 + 16 * kSeqBatchSmall, "2 KiB + 4 B of parameters");

// The whole-sequence map of cu [N + 1] into m where it fits (N <= kSeqBatchSmall), else m.count = 0.
// Returns whether it was filled.
inline bool fill_inline_seq_map(const int64_t* cu, int64_t N, InlineSeqMap& m) {
  m.count = 0;
  if (N <= 0 || N > kSeqBatchSmall) return false;
  for_each_map_entry(cu, N, 0, [&](const SeqInfo& e) { m.seq[m.count++] = e; });
  return true;
}

// Calls launch(batch) for consecutive batches covering the entries of the map of cu [N + 1] with
// segments of seg_chunks chunks (0: one entry per sequence), in order: one SeqBatch<kSeqBatchSmall>
// when there are at most kSeqBatchSmall entries, else SeqBatch<kSeqBatchLarge> blocks. dst is the
// device map [map_entries(cu, N, seg_chunks)]. Stops at the first launch that returns false and
// returns false; true when all were launched.
template <class Launch>
bool for_each_seq_batch(const int64_t* cu, int64_t N, SeqInfo* dst, Launch&& launch, int seg_chunks = 0) {
  const int64_t M = map_entries(cu, N, seg_chunks);
  auto fill = [&](auto& b) {
    constexpr int64_t kMax = static_cast<int64_t>(sizeof(b.seq) / sizeof(b.seq[0]));
    int64_t first = 0;
    bool ok = true;
    auto flush = [&] {
      if (!ok || b.count == 0) return;
      b.dst = dst + first;
      b.first = static_cast<int32_t>(first);
      ok = launch(static_cast<const std::remove_reference_t<decltype(b)>&>(b));
      first += b.count;
      b.count = 0;
    };
    b.count = 0;
    for_each_map_entry(cu, N, seg_chunks, [&](const SeqInfo& e) {
      if (!ok) return;  // a launch failed: nothing more is launched
      b.seq[b.count++] = e;
      if (b.count == kMax) flush();
    });
    flush();
    return ok;
  };
  if (M <= 0) return true;
  if (M <= kSeqBatchSmall) {
    SeqBatch<kSeqBatchSmall> b{};
    return fill(b);
  }
  // 24 KiB: reused across the launches (each launch copies its parameters when it is enqueued)
  SeqBatch<kSeqBatchLarge> b{};
  return fill(b);
}

}  // namespace linattn::cuda::kern

// The CUDA backend's chunk and sequence maps without a GPU (src/cuda/common/chunk_map_host.hpp):
// the SeqInfo entries built on the host from the validated offsets, their grouping into the
// by-value parameter blocks of seq_map_kernel (one small launch for N <= 128, else one per 1536
// sequences), and chunk_map_kernel's lookup. "dst" here is a host array standing in for the
// device map; each batch is copied into it as the kernel would.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "cuda/common/chunk_map_host.hpp"

namespace linattn::cuda::kern {
namespace {

constexpr int kC = config::kChunk;

struct Built {
  std::vector<SeqInfo> seqs;
  std::vector<int> counts;  // entries per launch
  std::vector<int> kmax;    // parameter block size per launch
};

Built build(const std::vector<int64_t>& cu, int seg_chunks = 0) {
  const int64_t N = static_cast<int64_t>(cu.size()) - 1;
  const int64_t M = map_entries(cu.data(), N, seg_chunks);
  Built r;
  r.seqs.assign(static_cast<std::size_t>(M), SeqInfo{-1, -1, -1, -1});
  int64_t next = 0;  // batches come in order and cover [0, N) without gaps
  const bool ok = for_each_seq_batch(cu.data(), N, r.seqs.data(), [&](const auto& b) {
    constexpr int kMax = static_cast<int>(sizeof(b.seq) / sizeof(b.seq[0]));
    EXPECT_EQ(b.first, next);
    EXPECT_EQ(b.dst, r.seqs.data() + b.first);
    EXPECT_GE(b.count, 1);
    EXPECT_LE(b.count, kMax);
    for (int i = 0; i < b.count; ++i) b.dst[i] = b.seq[i];  // seq_map_kernel
    next += b.count;
    r.counts.push_back(b.count);
    r.kmax.push_back(kMax);
    return true;
  }, seg_chunks);
  EXPECT_TRUE(ok);
  EXPECT_EQ(next, M);
  return r;
}

// Every entry against cu, and the chunk map (chunk_map_kernel's lookup for every chunk) a
// partition of the tokens into chunks of 1..64 tokens, in order, each inside its own sequence.
void expect_maps_match(const std::vector<int64_t>& cu, const Built& r) {
  const int N = static_cast<int>(cu.size()) - 1;
  int64_t chunk0 = 0;
  for (int n = 0; n < N; ++n) {
    SCOPED_TRACE("sequence " + std::to_string(n));
    EXPECT_EQ(r.seqs[n].t0, cu[n]);
    EXPECT_EQ(r.seqs[n].len, cu[n + 1] - cu[n]);
    EXPECT_EQ(r.seqs[n].chunk0, chunk0);
    EXPECT_EQ(r.seqs[n].seq, n);
    chunk0 += (cu[n + 1] - cu[n] + kC - 1) / kC;
  }
  const int num_chunks = static_cast<int>(chunk0);
  int64_t t = 0;
  int seq = 0;
  for (int c = 0; c < num_chunks; ++c) {
    SCOPED_TRACE("chunk " + std::to_string(c));
    const ChunkInfo ci = chunk_info(r.seqs.data(), N, c);
    EXPECT_EQ(ci.t0, t);
    ASSERT_GE(ci.len, 1);
    ASSERT_LE(ci.len, kC);
    while (cu[seq + 1] <= t) ++seq;  // the sequence holding token t
    EXPECT_LE(ci.t0 + ci.len, cu[seq + 1]) << "chunk crosses the end of sequence " << seq;
    EXPECT_EQ(ci.len == kC || ci.t0 + ci.len == cu[seq + 1], true) << "a short chunk not at its sequence's end";
    t += ci.len;
  }
  EXPECT_EQ(t, cu.back()) << "the chunks do not cover every token";
}

TEST(ChunkMapHost, MixedLengthsOneSmallLaunch) {
  // empty first and last, empty in the middle, length 1, multiples of 64 and not
  const std::vector<int64_t> cu = {0, 0, 1, 65, 129, 129, 129, 200, 392, 393, 393};
  const Built r = build(cu);
  ASSERT_EQ(r.counts, std::vector<int>{10});
  EXPECT_EQ(r.kmax, std::vector<int>{kSeqBatchSmall});
  expect_maps_match(cu, r);
  EXPECT_EQ(r.seqs[1].len, 1);
  EXPECT_EQ(r.seqs[9].chunk0, 1 + 1 + 1 + 2 + 3 + 1);  // trailing empty: chunk0 = all chunks
}

TEST(ChunkMapHost, FixedLength) {
  for (int64_t T : {1, 63, 64, 65, 130, 4096}) {
    SCOPED_TRACE("T " + std::to_string(T));
    std::vector<int64_t> cu;
    for (int64_t n = 0; n <= 3; ++n) cu.push_back(n * T);  // what validation stores for B = 3
    const Built r = build(cu);
    EXPECT_EQ(r.counts, std::vector<int>{3});
    expect_maps_match(cu, r);
  }
}

TEST(ChunkMapHost, LaunchCountsAroundTheBlockSizes) {
  struct Case {
    int N;
    std::vector<int> counts;
    int kmax;
  };
  const int L = kSeqBatchLarge;
  for (const Case& k : {Case{1, {1}, kSeqBatchSmall}, Case{kSeqBatchSmall, {kSeqBatchSmall}, kSeqBatchSmall},
                        Case{kSeqBatchSmall + 1, {kSeqBatchSmall + 1}, L}, Case{L, {L}, L},
                        Case{L + 1, {L, 1}, L}, Case{2 * L + 5, {L, L, 5}, L}}) {
    SCOPED_TRACE("N " + std::to_string(k.N));
    std::mt19937 rng(static_cast<unsigned>(k.N));
    std::uniform_int_distribution<int> len(0, 3 * kC);  // about a fifth empty, some multiples of 64
    std::vector<int64_t> cu = {0};
    for (int n = 0; n < k.N; ++n) {
      const int l = len(rng);
      cu.push_back(cu.back() + (l % 7 == 0 ? 0 : l % 5 == 0 ? kC : l));
    }
    const Built r = build(cu);
    EXPECT_EQ(r.counts, k.counts);
    for (int m : r.kmax) EXPECT_EQ(m, k.kmax);
    expect_maps_match(cu, r);
  }
}

TEST(ChunkMapHost, StopsAtAFailedLaunch) {
  std::vector<int64_t> cu(2 * kSeqBatchLarge + 2);
  for (std::size_t i = 0; i < cu.size(); ++i) cu[i] = static_cast<int64_t>(i);
  std::vector<SeqInfo> seqs(cu.size() - 1);
  int launches = 0;
  EXPECT_FALSE(for_each_seq_batch(cu.data(), static_cast<int64_t>(seqs.size()), seqs.data(),
                                  [&](const auto&) { return ++launches < 2; }));
  EXPECT_EQ(launches, 2);
}

// The sequence-split map: each sequence's segments consecutive, in token order, whole chunks of
// seg_chunks from the sequence's start (the last one shorter), chunk0 continuing the sequence's
// chunks; sequences of at most seg_chunks chunks (empty ones included) one entry. Also across the
// parameter-block sizes.
TEST(ChunkMapHost, SegmentsSplitLongSequences) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> len(0, 40 * kC);
  for (int seg_chunks : {1, 3, 8, 64})
    for (int N : {1, 5, 200}) {
      SCOPED_TRACE("seg_chunks " + std::to_string(seg_chunks) + " N " + std::to_string(N));
      std::vector<int64_t> cu = {0};
      for (int n = 0; n < N; ++n) {
        const int l = len(rng);
        cu.push_back(cu.back() + (l % 9 == 0 ? 0 : l % 4 == 0 ? (l / kC) * kC : l));
      }
      const Built r = build(cu, seg_chunks);
      std::size_t e = 0;
      int64_t chunk0 = 0;
      for (int n = 0; n < N; ++n) {
        const int64_t L = cu[n + 1] - cu[n], nch = (L + kC - 1) / kC;
        const int64_t want = nch > seg_chunks ? (nch + seg_chunks - 1) / seg_chunks : 1;
        int64_t t = cu[n];
        for (int64_t s = 0; s < want; ++s, ++e) {
          ASSERT_LT(e, r.seqs.size());
          const SeqInfo& x = r.seqs[e];
          EXPECT_EQ(x.seq, n);
          EXPECT_EQ(x.t0, t);
          EXPECT_EQ(x.chunk0, chunk0 + (t - cu[n]) / kC);
          if (s + 1 < want) EXPECT_EQ(x.len, int64_t{seg_chunks} * kC);
          else EXPECT_EQ(x.t0 + x.len, cu[n + 1]);
          t += x.len;
        }
        EXPECT_EQ(t, cu[n + 1]);
        chunk0 += nch;
      }
      EXPECT_EQ(e, r.seqs.size());
    }
}

// The by-value map of the one-kernel forward: the same entries as the workspace map where it fits
// (N <= kSeqBatchSmall), nothing (count 0) where it does not.
TEST(ChunkMapHost, InlineSeqMapMatchesTheWorkspaceMap) {
  std::mt19937_64 gen(5);
  for (int64_t N : {1, 2, 10, kSeqBatchSmall - 1, kSeqBatchSmall, kSeqBatchSmall + 1, 300}) {
    SCOPED_TRACE("N " + std::to_string(N));
    std::vector<int64_t> cu = {0};
    for (int64_t n = 0; n < N; ++n) cu.push_back(cu.back() + static_cast<int64_t>(gen() % 3 == 0 ? 0 : gen() % 200));
    InlineSeqMap m;
    m.count = -1;
    const bool filled = fill_inline_seq_map(cu.data(), N, m);
    EXPECT_EQ(filled, N <= kSeqBatchSmall);
    if (!filled) {
      EXPECT_EQ(m.count, 0);
      continue;
    }
    ASSERT_EQ(m.count, N);
    const Built r = build(cu);
    for (int64_t n = 0; n < N; ++n) {
      EXPECT_EQ(m.seq[n].t0, r.seqs[n].t0);
      EXPECT_EQ(m.seq[n].len, r.seqs[n].len);
      EXPECT_EQ(m.seq[n].chunk0, r.seqs[n].chunk0);
      EXPECT_EQ(m.seq[n].seq, r.seqs[n].seq);
    }
  }
  InlineSeqMap m;
  const int64_t none[1] = {0};
  EXPECT_FALSE(fill_inline_seq_map(none, 0, m));  // no sequences: nothing to fill
  EXPECT_EQ(m.count, 0);
}

TEST(ChunkMapHost, ParameterBlocksFitCuda) {
  // CUDA 12.1+ on sm_70+: at most 32764 bytes of kernel parameters
  EXPECT_LE(sizeof(SeqBatch<kSeqBatchLarge>), 32764u);
  EXPECT_LE(sizeof(SeqBatch<kSeqBatchSmall>), 4096u);  // the usual launch: small
  EXPECT_LE(sizeof(InlineSeqMap), 4096u);              // beside the one-kernel forward's other parameters
}

}  // namespace
}  // namespace linattn::cuda::kern

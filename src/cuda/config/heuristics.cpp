#include "cuda/config/heuristics.hpp"

#include <algorithm>

#include "common/problem.hpp"
#include "cuda/common/chunk_fwd.hpp"
#include "cuda/config/limits.hpp"

// Declared with its kernel in cuda/common/chunk_bwd.cuh (device code this host file does not include).
namespace linattn::cuda::bwd {
std::size_t dh_smem_bytes(int dtype, int K, int stages, bool split);
}

namespace linattn::cuda::config {

bool raw_rows(const detail::Problem& p) { return !p.vector_gate && p.dtype != DType::kFloat32; }
bool reads_v_rows(const detail::Problem& p, const SmemLimits& lim) {
  // (the warp-owned pass at the largest V tile fits: then at whichever tile fused_tile picks)
  return !p.delta && p.dtype != DType::kFloat32 && (p.K == 64 || p.K == 128) &&
         kern::fused_warp_smem_bytes(static_cast<int>(p.K), 64) <= lim.block;
}
bool reads_v_rows(const detail::Problem& p) { return reads_v_rows(p, smem_limits(p.device.index)); }

PrepSmem prep_smem(int dtype, int K, bool vec_gate, const SmemLimits& lim) {
  const std::size_t with_q = kern::prep_smem_bytes(dtype, K, true, vec_gate);
  const std::size_t without_q = kern::prep_smem_bytes(dtype, K, false, vec_gate);
  // float32 at K = 128: q in shared memory (141 KB) leaves one CTA of 8 warps an SM; without it
  // (105 KB) two fit, and the kernel is latency-bound (ncu: 29% issue-busy at one CTA,
  // bench/logs/2026-11-25-h100-s18-a-ncu-bwd-float32.txt).
  const std::size_t two_per_sm = lim.sm / 2 - 1024;  // each CTA's 1 KB reserved
  if (dtype == kCodeF32 && vec_gate && with_q > two_per_sm && without_q <= two_per_sm) return {without_q, 0, true};
  if (with_q <= 200 * 1024 && with_q <= lim.block) return {with_q, 1, true};
  return {without_q, 0, without_q <= lim.block};
}

FusedTile fused_tile(int dtype, int K, int V, int HV, int N, int sms, bool rows, const SmemLimits& lim) {
  int vt = 32;
  if (kern::recurrence_wgmma_supported(dtype, K, V)) {
    // the wgmma pass (sm_90a): V tile 64 is its M; it beats the mma.sync pass's 32-column tiles
    // at few chains too (bench/NOTES_cuda_forward.md, v17)
    vt = 64;
  } else if (dtype != kCodeF32) {
    const int64_t ctas64 = static_cast<int64_t>(V / 64) * HV * N;
    vt = 2 * ctas64 <= sms ? 32 : 64;
  }
  for (int stages = 2; stages > 0; --stages) {
    const std::size_t b = kern::state_smem_bytes(dtype, K, stages, vt, rows);
    if (b <= lim.block) return {vt, stages, b};
  }
  return {vt, 0, kern::state_smem_bytes(dtype, K, 0, vt, rows)};
}

int seq_split_chunks(const detail::Problem& p, int sms) {
  if (p.has_saved) return 0;  // (disable_recompute's forward runs the backward's front half)
  int64_t nch = 0;  // the longest sequence's chunks
  for (int64_t n = 0; n < p.N; ++n) nch = std::max(nch, (p.seq_len(n) + kChunk - 1) / kChunk);
  return seq_split_chunks(dtype_code(p.dtype), static_cast<int>(p.K), static_cast<int>(p.V), static_cast<int>(p.HV), p.delta,
                          p.N, nch, sms);
}

int seq_split_chunks(int dtype, int K, int V, int HV, bool delta, int64_t N, int64_t nch, int sms) {
  if (N <= 0 || sms <= 0 || !kern::recurrence_wgmma_supported(dtype, K, V)) return 0;
  // A model of the pass's time in chunk steps of one CTA, with every sequence as long as the
  // longest: CTAs run in waves of one an SM (the pass's registers allow no more). The transition
  // kernel runs at ~0.7 of a chunk step (no O products) over V/64 tiles of every segment but the
  // last, plus (delta rule) K/64 tiles of M in every segment but the first and the last; the pass
  // proper V/64 tiles of every segment; the combine costs ~2 chunk steps a segment, the two extra
  // launches ~3. Checked against forced segment counts (H200, B=1 T=16384 H=16,
  // bench/NOTES_cuda_forward.md v20): it picks the measured best, 3 with the delta rule, 4 without.
  constexpr int64_t kMinSegChunks = 8;  // shorter segments: launches and combine dominate
  constexpr int kMaxSegments = 8;
  constexpr double kTransStep = 0.7, kCombineSteps = 2, kLaunchSteps = 3;
  const int64_t chains = N * HV;
  const int64_t tiles = V / 64, m_tiles = delta ? K / 64 : 0;
  auto waves = [&](int64_t ctas) { return static_cast<double>((ctas + sms - 1) / sms); };
  double best = static_cast<double>(nch) * waves(chains * tiles);
  int64_t best_seg = 0;
  for (int P = 2; P <= kMaxSegments; ++P) {
    const int64_t seg = (nch + P - 1) / P;
    if (seg < kMinSegChunks) break;
    const int64_t parts = (nch + seg - 1) / seg;
    const int64_t trans_ctas = chains * (tiles * (parts - 1) + m_tiles * (parts - 2));
    const double t = static_cast<double>(seg) * (kTransStep * waves(trans_ctas) + waves(chains * tiles * parts)) +
                     kCombineSteps * static_cast<double>(parts - 1) + kLaunchSteps;
    if (t < best) {
      best = t;
      best_seg = seg;
    }
  }
  return static_cast<int>(best_seg);
}

Staged state_stages(int dtype, int K, const SmemLimits& lim) {
  for (int stages = 2; stages > 0; --stages) {
    const std::size_t b = kern::state_smem_bytes(dtype, K, stages);
    if (b <= lim.block) return {stages, b};
  }
  return {0, kern::state_smem_bytes(dtype, K, 0)};
}

Staged dh_stages(int dtype, int K, bool split, const SmemLimits& lim) {
  for (int stages = 2; stages > 0; --stages) {
    const std::size_t b = bwd::dh_smem_bytes(dtype, K, stages, split);
    if (b <= lim.block) return {stages, b};
  }
  return {0, bwd::dh_smem_bytes(dtype, K, 0, split)};
}

bool split_fits(const detail::Problem& p, const SmemLimits& lim) {
  return bwd::dh_smem_bytes(dtype_code(p.dtype), static_cast<int>(p.K), 1, true) <= lim.block;
}

void token_v_splits(int NV, int64_t chains, int* splits, int* tiles_per_split) {
  const int64_t ctas = std::max<int64_t>(1, chains);
  const int64_t want = std::max<int64_t>(1, (512 + ctas - 1) / ctas);
  int NS = static_cast<int>(std::min<int64_t>({static_cast<int64_t>(NV), int64_t{4}, want}));
  const int tps = (NV + NS - 1) / NS;
  NS = (NV + tps - 1) / tps;
  *splits = NS;
  *tiles_per_split = tps;
}

}  // namespace linattn::cuda::config

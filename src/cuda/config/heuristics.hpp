// Every tile, stage and split choice of the CUDA backend's host code, in one place: which V tile
// and how many pipeline stages a kernel launches with, whether q stays in shared memory, how many
// V splits the token replay uses, whether the split backward fits. Each choice is a pure function
// of the problem, the SM count and the device's shared memory (SmemLimits, limits.hpp), so the same
// call on the same GPU model always launches the same configuration (the results are bitwise
// reproducible) and a test can ask what a shape will run on any card.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/config/limits.hpp"

namespace linattn::detail {
struct Problem;
}

namespace linattn::cuda::config {

// ---- forward

// The scalar gate (GDN, simple GLA) with 16-bit inputs: the fused state pass reads the raw q / k
// rows and per-row factors instead of Qg and KgT (the decay of a row is one number). Measured on an H200,
// B=2, T=8192, H=16, HV=32, K=V=128 bf16: see bench/NOTES_cuda_forward.md (v9).
bool raw_rows(const detail::Problem& p);
// The forward without the delta rule whose state pass is the warp-owned one (16-bit, K <= 128,
// where its shared memory fits the card): V_new = V is read from the v rows, so neither
// chunk_prep's U nor its workspace exists. The one-argument form asks p's device.
bool reads_v_rows(const detail::Problem& p, const SmemLimits& lim);
bool reads_v_rows(const detail::Problem& p);

// chunk_prep's shared memory: q staged in shared memory unless that needs more than 200 KiB (or
// more than the block may have), or (float32, vector gate) unless leaving it out lets two CTAs
// share an SM. `fits`: false where even the form without q exceeds the block's limit.
struct PrepSmem {
  std::size_t bytes;
  int q_in_smem;  // 0 / 1, PrepParams::q_in_smem
  bool fits;
};
PrepSmem prep_smem(int dtype, int K, bool vec_gate, const SmemLimits& lim);

// The fused state pass's V tile and stages. One CTA per (sequence, value head, V tile) runs the
// whole sequence, one CTA per SM. With tiles of 64 and at most half as many CTAs as SMs (B = 1, few
// heads) the latency-bound pass would leave half the GPU idle, so 16-bit types then take tiles of
// 32 (twice the CTAs); float32 always 32. Stages: 2, else 1, else 0 (operands from global memory),
// the most that fit the block's shared memory. Measured on an H200 (K = V = 128, HV = 32, bf16): B = 1, T = 8192 GDN
// 0.768 -> 0.650 ms, KDA 1.113 -> 0.998; at B = 2 (128 CTAs of 64) tiles of 32 lose (1.033 ->
// 1.285 ms GDN with two stages one CTA per SM, 1.146 single-staged two per SM).
struct FusedTile {
  int vt, stages;
  std::size_t smem;
};
FusedTile fused_tile(int dtype, int K, int V, int HV, int N, int sms, bool raw_rows, const SmemLimits& lim);

// The sequence-split state pass (docs/sequence_split.md): when the chains (sequence, value head,
// V tile) are too few to fill the GPU, each sequence is cut into segments of this many chunks,
// run in parallel from their start states (found from each segment's affine transition). 0: no
// split. Only the wgmma pass (16-bit, K = 128, sm_90a) splits. A pure function of the problem and
// the SM count: the same call on the same GPU model always splits the same way.
int seq_split_chunks(const detail::Problem& p, int sms);
// The same from the shape: N sequences, the longest of max_chunks chunks; delta: the delta rule.
int seq_split_chunks(int dtype, int K, int V, int HV, bool delta, int64_t N, int64_t max_chunks, int sms);

// ---- backward

// A kernel's pipeline depth: the most stages (2, 1, 0) whose shared memory fits the block's limit
// (0 when none does; smem is then stage 0's size, which the caller checks against the limit).
struct Staged {
  int stages;
  std::size_t smem;
};
// The recurrence (chunk_state without the fused output: the backward's front half).
Staged state_stages(int dtype, int K, const SmemLimits& lim);
// Pass 1 of the chunked backward (dh_kernel); split: with the hi + lo operands.
Staged dh_stages(int dtype, int K, bool split, const SmemLimits& lim);

// Pass 1's split form needs KgT's low half staged beside its other operands: at K = 256 that does
// not fit shared memory, and the split forms compute in float32 there instead.
bool split_fits(const detail::Problem& p, const SmemLimits& lim);

// dh_kernel's V tile (its template argument): 64 for 16-bit compute types, 32 for float32.
constexpr int dh_v_tile(int dtype) { return dtype == 2 ? 32 : 64; }

// The token replay's V splits: NV tiles of 16 columns over `chains` = N * HV (sequence, head)
// chains. Enough CTAs to fill the GPU (about 512), at most 4 splits (the partial buffers scale
// with them); *tiles_per_split tiles each, the last split possibly shorter.
void token_v_splits(int NV, int64_t chains, int* splits, int* tiles_per_split);

}  // namespace linattn::cuda::config

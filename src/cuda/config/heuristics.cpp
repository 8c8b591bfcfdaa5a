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
bool reads_v_rows(const detail::Problem& p) {
  return !p.delta && p.dtype != DType::kFloat32 && (p.K == 64 || p.K == 128);
}

PrepSmem prep_smem(int dtype, int K, bool vec_gate) {
  const std::size_t with_q = kern::prep_smem_bytes(dtype, K, true, vec_gate);
  if (with_q <= 200 * 1024) return {with_q, 1};
  return {kern::prep_smem_bytes(dtype, K, false, vec_gate), 0};
}

FusedTile fused_tile(int dtype, int K, int V, int HV, int N, int sms, bool rows) {
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
    if (b <= kMaxSmem) return {vt, stages, b};
  }
  return {vt, 0, kern::state_smem_bytes(dtype, K, 0, vt, rows)};
}

Staged state_stages(int dtype, int K) {
  for (int stages = 2; stages > 0; --stages) {
    const std::size_t b = kern::state_smem_bytes(dtype, K, stages);
    if (b <= kMaxSmem) return {stages, b};
  }
  return {0, kern::state_smem_bytes(dtype, K, 0)};
}

Staged dh_stages(int dtype, int K, bool split) {
  for (int stages = 2; stages > 0; --stages) {
    const std::size_t b = bwd::dh_smem_bytes(dtype, K, stages, split);
    if (b <= kMaxSmem) return {stages, b};
  }
  return {0, bwd::dh_smem_bytes(dtype, K, 0, split)};
}

bool split_fits(const detail::Problem& p) {
  return bwd::dh_smem_bytes(dtype_code(p.dtype), static_cast<int>(p.K), 1, true) <= kMaxSmem;
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

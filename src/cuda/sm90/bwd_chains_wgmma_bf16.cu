// The backward's two chains in one kernel, bfloat16 (bwd_chains_wgmma.cuh).
#include "cuda/sm90/bwd_chains_wgmma.cuh"

namespace linattn::cuda::bwd {
cudaError_t launch_bwd_chains_bf16(const kern::StateParams& sp, const DhParams& dp, cudaStream_t s) {
  return kern::wgmma_recurrence::launch_bwd_chains<__nv_bfloat16>(sp, dp, s);
}
}  // namespace linattn::cuda::bwd

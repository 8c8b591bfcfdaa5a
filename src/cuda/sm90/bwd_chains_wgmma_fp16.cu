// The backward's two chains in one kernel, float16 (bwd_chains_wgmma.cuh).
#include "cuda/sm90/bwd_chains_wgmma.cuh"

namespace linattn::cuda::bwd {
cudaError_t launch_bwd_chains_fp16(const kern::StateParams& sp, const DhParams& dp, cudaStream_t s) {
  return kern::wgmma_recurrence::launch_bwd_chains<__half>(sp, dp, s);
}
}  // namespace linattn::cuda::bwd

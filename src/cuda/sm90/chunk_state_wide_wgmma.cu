// The float32 form's state pass on Hopper with bf16 hi + lo operands (chunk_state_wide_wgmma.cuh).
#include "cuda/sm90/chunk_state_wide_wgmma.cuh"

namespace linattn::cuda::kern {
cudaError_t launch_state_wide_wgmma(const StateParams& p, cudaStream_t s) {
  return p.delta ? wgmma_recurrence::launch_state_wide<true>(p, s) : wgmma_recurrence::launch_state_wide<false>(p, s);
}
}  // namespace linattn::cuda::kern

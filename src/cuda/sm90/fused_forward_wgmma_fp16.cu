// The fused scalar-gate forward's fp16 instantiation (fused_forward_wgmma.cuh): simple GLA.
#include "cuda/sm90/fused_forward_wgmma.cuh"

namespace linattn::cuda::kern {
cudaError_t launch_fused_forward_wgmma_fp16(const FusedForwardParams& p, cudaStream_t s) {
  return wgmma_recurrence::launch_fused<__half, false>(p, s);
}
}  // namespace linattn::cuda::kern

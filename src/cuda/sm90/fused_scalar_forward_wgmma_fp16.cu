// Simple GLA's one-kernel forward on Hopper: its float16 instantiation (fused_scalar_forward_wgmma.cuh).
#include "cuda/sm90/fused_scalar_forward_wgmma.cuh"

namespace linattn::cuda::kern {
cudaError_t launch_fused_scalar_forward_fp16(const PrepParams& pp, const StateParams& sp, cudaStream_t s) {
  return wgmma_recurrence::launch_fused_scalar_forward<__half>(wgmma_recurrence::FusedScalarParams{pp, sp}, s);
}
}  // namespace linattn::cuda::kern

// Simple GLA's one-kernel forward on Hopper: its bfloat16 instantiation (fused_scalar_forward_wgmma.cuh).
#include "cuda/sm90/fused_scalar_forward_wgmma.cuh"

namespace linattn::cuda::kern {
cudaError_t launch_fused_scalar_forward_bf16(const PrepParams& pp, const StateParams& sp, int64_t tokens,
                                             const InlineSeqMap& seqs, cudaStream_t s) {
  return wgmma_recurrence::launch_fused_scalar_forward<__nv_bfloat16>(pp, sp, tokens, seqs, s);
}
}  // namespace linattn::cuda::kern

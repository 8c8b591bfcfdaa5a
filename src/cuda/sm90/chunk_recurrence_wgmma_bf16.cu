// The wgmma recurrence's bfloat16 instantiations (chunk_recurrence_wgmma.cuh).
#include "cuda/sm90/chunk_recurrence_wgmma.cuh"

namespace linattn::cuda::kern {
cudaError_t launch_recurrence_wgmma_bf16(const StateParams& p, cudaStream_t s) {
  return wgmma_recurrence::launch_type<__nv_bfloat16>(p, s);
}
}  // namespace linattn::cuda::kern

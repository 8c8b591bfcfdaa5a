// The Hopper GDN chunk_prep's bf16 instantiation (chunk_prep_wgmma.cuh).
#include "cuda/sm90/chunk_prep_wgmma.cuh"

namespace linattn::cuda::kern {
cudaError_t launch_prep_wgmma_bf16(const PrepParams& p, cudaStream_t s) {
  return wgmma_recurrence::launch_prep_wgmma<__nv_bfloat16>(p, s);
}
}  // namespace linattn::cuda::kern

// The backward's Hopper pass 1, bfloat16 instantiations (chunk_dh_wgmma.cuh).
#include "cuda/sm90/chunk_dh_wgmma.cuh"

namespace linattn::cuda::bwd {
cudaError_t launch_dh_wgmma_bf16(const DhParams& p, cudaStream_t s) {
  return kern::wgmma_recurrence::launch_dh_type<__nv_bfloat16>(p, s);
}
}  // namespace linattn::cuda::bwd

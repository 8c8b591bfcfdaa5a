// The Hopper no-delta vector-gate pass 2's bf16 instantiation (pass2_vector_wgmma.cuh).
#include "cuda/sm90/pass2_vector_wgmma.cuh"

namespace linattn::cuda::bwd {
cudaError_t launch_pass2_vector_wgmma_bf16(const WyParams& p, cudaStream_t s) { return pass2_vector::launch<__nv_bfloat16>(p, s); }
}  // namespace linattn::cuda::bwd

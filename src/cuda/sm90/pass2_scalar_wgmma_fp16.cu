// The Hopper no-delta scalar-gate pass 2's fp16 instantiation (pass2_scalar_wgmma.cuh).
#include "cuda/sm90/pass2_scalar_wgmma.cuh"

namespace linattn::cuda::bwd {
cudaError_t launch_pass2_scalar_wgmma_fp16(const WyParams& p, cudaStream_t s) { return pass2_scalar::launch<__half>(p, s); }
}  // namespace linattn::cuda::bwd

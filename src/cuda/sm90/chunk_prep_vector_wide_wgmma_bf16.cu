// The Hopper vector-gate chunk_prep in its WIDE form (intra_chunk_vector_gate.cuh): the backward's
// float32 form on bf16 inputs, float32 outputs from bf16 hi + lo products; KDA (delta rule) and GLA.
#include "cuda/sm90/intra_chunk_vector_gate.cuh"

namespace linattn::cuda::kern {
cudaError_t launch_prep_vector_wide_wgmma_bf16(const PrepParams& p, cudaStream_t s) {
  return p.delta ? wgmma_recurrence::launch_prep_vector_wgmma<__nv_bfloat16, true, true>(p, s)
                 : wgmma_recurrence::launch_prep_vector_wgmma<__nv_bfloat16, false, true>(p, s);
}
}  // namespace linattn::cuda::kern

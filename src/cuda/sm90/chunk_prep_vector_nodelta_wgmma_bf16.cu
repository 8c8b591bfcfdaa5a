// The Hopper GLA chunk_prep's bf16 instantiation (intra_chunk_vector_gate.cuh without the delta
// rule: Qg, KgT, Aqk and exp(γ_C)).
#include "cuda/sm90/intra_chunk_vector_gate.cuh"

namespace linattn::cuda::kern {
cudaError_t launch_prep_vector_nodelta_wgmma_bf16(const PrepParams& p, cudaStream_t s) {
  return wgmma_recurrence::launch_prep_vector_wgmma<__nv_bfloat16, false>(p, s);
}
}  // namespace linattn::cuda::kern

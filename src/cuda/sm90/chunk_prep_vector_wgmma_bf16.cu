// The Hopper KDA chunk_prep's bf16 instantiation (intra_chunk_vector_gate.cuh). fp16 keeps
// chunk_prep: e^{spread} |k| of the diagonal blocks leaves half precision's range at spreads
// above ~4, so most blocks of realistic gates would take the exact per-element path.
#include "cuda/sm90/intra_chunk_vector_gate.cuh"

namespace linattn::cuda::kern {
cudaError_t launch_prep_vector_wgmma_bf16(const PrepParams& p, cudaStream_t s) {
  return wgmma_recurrence::launch_prep_vector_wgmma<__nv_bfloat16, true>(p, s);
}
}  // namespace linattn::cuda::kern

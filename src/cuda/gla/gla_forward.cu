// GLA forward on CUDA: the chunk-local kernel with a per-channel gate and no delta rule
// (U = V; no K Kᵀ, inverse or W).
#include "cuda/common/chunk_prep.cuh"

namespace linattn::cuda::kern {

cudaError_t launch_prep_gla(int dtype, const PrepParams& p, int smem, cudaStream_t s) {
  return launch_prep_dispatch</*VEC=*/true, /*DELTA=*/false>(dtype, p, smem, s);
}

}  // namespace linattn::cuda::kern

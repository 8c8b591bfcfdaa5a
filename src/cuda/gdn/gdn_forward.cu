// GDN forward on CUDA: the chunk-local kernel with a scalar gate per token and head.
#include "cuda/common/chunk_prep.cuh"

namespace linattn::cuda::kern {

cudaError_t launch_prep_gdn(int dtype, const PrepParams& p, int smem, cudaStream_t s) {
  return launch_prep_dispatch</*VEC=*/false, /*DELTA=*/true>(dtype, p, smem, s);
}

}  // namespace linattn::cuda::kern

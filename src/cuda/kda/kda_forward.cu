// KDA forward on CUDA: the chunk-local kernel with a per-channel gate ([.., K]).
#include "cuda/common/chunk_prep.cuh"

namespace linattn::cuda::kern {

cudaError_t launch_prep_kda(int dtype, const PrepParams& p, int smem, cudaStream_t s) {
  return launch_prep_dispatch</*VEC=*/true, /*DELTA=*/true>(dtype, p, smem, s);
}

std::size_t prep_smem_bytes(int dtype, int K, bool q_in_smem, bool vec_gate) {
  return static_cast<std::size_t>(PrepSmem(K, dtype == 2 ? 4 : 2, q_in_smem, vec_gate).total);
}

}  // namespace linattn::cuda::kern

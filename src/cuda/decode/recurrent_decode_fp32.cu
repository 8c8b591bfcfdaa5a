// Instantiations of the recurrent decode kernel for fp32 q/k/v/o (one dtype per translation unit).
#include "cuda/decode/recurrent_decode.cuh"

namespace linattn::cuda::recurrent {
cudaError_t launch_fp32(const Params& p, int st_bf16, bool v_first, int kb, bool fast, bool wide, cudaStream_t stream) {
  return launch_io<float>(p, st_bf16, v_first, kb, fast, wide, stream);
}
}  // namespace linattn::cuda::recurrent

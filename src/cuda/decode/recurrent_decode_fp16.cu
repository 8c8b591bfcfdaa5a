// Instantiations of the recurrent decode kernel for fp16 q/k/v/o (one dtype per translation unit).
#include "cuda/decode/recurrent_decode.cuh"

namespace linattn::cuda::recurrent {
cudaError_t launch_fp16(const Params& p, int st_bf16, bool v_first, int kb, bool fast, bool wide, cudaStream_t stream) {
  return launch_io<__half>(p, st_bf16, v_first, kb, fast, wide, stream);
}
}  // namespace linattn::cuda::recurrent

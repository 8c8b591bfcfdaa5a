// Instantiations of the recurrent decode kernel for bf16 q/k/v/o (one dtype per translation unit).
#include "cuda/decode/decode_dispatch.cuh"

namespace linattn::cuda::recurrent {
cudaError_t launch_bf16(const Params& p, const Launch& l, cudaStream_t stream) {
  return launch_io<__nv_bfloat16>(p, l, stream);
}
}  // namespace linattn::cuda::recurrent

// Instantiations of the recurrent decode kernel for fp16 q/k/v/o (one dtype per translation unit).
#include "cuda/decode/decode_dispatch.cuh"

namespace linattn::cuda::recurrent {
cudaError_t launch_fp16(const Params& p, const Launch& l, cudaStream_t stream) {
  return launch_io<__half>(p, l, stream);
}
}  // namespace linattn::cuda::recurrent

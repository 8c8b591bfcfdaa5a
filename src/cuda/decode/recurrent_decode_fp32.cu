// Instantiations of the recurrent decode kernel for fp32 q/k/v/o (one dtype per translation unit).
#include "cuda/decode/decode_dispatch.cuh"

namespace linattn::cuda::recurrent {
cudaError_t launch_fp32(const Params& p, const Launch& l, cudaStream_t stream) {
  return launch_io<float>(p, l, stream);
}
}  // namespace linattn::cuda::recurrent

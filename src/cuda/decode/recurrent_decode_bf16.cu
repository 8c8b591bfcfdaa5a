// Instantiations of the recurrent decode kernel for bf16 q/k/v/o (one dtype per translation unit).
#include "cuda/decode/stream_decode.cuh"

namespace linattn::cuda::recurrent {
cudaError_t launch_bf16(const Params& p, int st_bf16, bool v_first, int kb, bool fast, cudaStream_t stream) {
  return launch_io<__nv_bfloat16>(p, st_bf16, v_first, kb, fast, stream);
}
cudaError_t launch_stream_bf16(const Params& p, int st_bf16, int kb, const StreamLaunch& l, cudaStream_t stream) {
  return launch_stream_io<__nv_bfloat16>(p, st_bf16, kb, l, stream);
}
}  // namespace linattn::cuda::recurrent

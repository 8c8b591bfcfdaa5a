// Instantiations of the recurrent decode kernel for fp32 q/k/v/o (one dtype per translation unit).
#include "cuda/decode/recurrent_decode_head.cuh"

namespace linattn::cuda::recurrent {
cudaError_t launch_fp32(const Params& p, int st_bf16, bool v_first, int kb, bool fast, DecodeForm form, cudaStream_t stream) {
  return launch_form<float>(p, st_bf16, v_first, kb, fast, form, stream);
}
}  // namespace linattn::cuda::recurrent

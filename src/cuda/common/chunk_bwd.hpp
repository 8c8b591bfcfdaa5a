// The CUDA backward of the delta-rule families (KDA and GDN).
//
// Entry points the backend (cuda_backend.cu) calls from cuda::backward / backward_workspace_bytes.
// See chunk_bwd.cuh for the kernels and their design.
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

#include "common/problem.hpp"

namespace linattn::cuda {

// Which backward runs: the chunked WY form on tensor cores or the token replay (float32
// throughout, slower). mode 0: chunked, 1: token replay, -1 (default): automatic, i.e. the
// environment variable LINATTN_CUDA_BWD=chunked|token if set, else the chunked form for float32
// inputs and the token replay for bfloat16/float16 inputs (the chunked form's 16-bit
// intermediates miss SPEC's 1e-2 on dβ and the gate-parameter gradients for some inputs; see
// chunk_bwd.cu). The workspace size and the call must be made under the same setting.
void set_token_backward(int mode);

// Workspace bytes of backward_kda_gdn (0 when the problem is not supported by it).
std::size_t backward_kda_gdn_workspace_bytes(const detail::Problem& p);

// Gradients of a KDA or GDN forward: dq, dk, dv and the optional dg, dbeta, dA_log, ddt_bias,
// dh0. Deterministic (no atomics; fixed-order reductions). in.saved is not used (saved_bytes is
// 0 on CUDA). Returns kNotSupported for shapes it does not handle (K or V outside {64, 128, 256},
// float64 q/k/v).
Status backward_kda_gdn(const detail::Problem& p, const BackwardInputs& in, const BackwardOutputs& out,
                        Workspace ws, cudaStream_t stream);

}  // namespace linattn::cuda

// The CUDA backward of the delta-rule families (KDA and GDN).
//
// Entry points the backend (cuda_backend.cu) calls from cuda::backward / backward_workspace_bytes.
// See chunk_bwd.cuh for the kernels and their design.
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

#include "common/problem.hpp"

namespace linattn::cuda {

// Workspace bytes of backward_kda_gdn (0 when the problem is not supported by it).
std::size_t backward_kda_gdn_workspace_bytes(const detail::Problem& p);

// Gradients of a KDA or GDN forward: dq, dk, dv and the optional dg, dbeta, dA_log, ddt_bias,
// dh0. Deterministic (no atomics; fixed-order reductions). in.saved is not used (saved_bytes is
// 0 on CUDA). Returns kNotSupported for shapes it does not handle (K or V outside {64, 128, 256},
// float64 q/k/v).
Status backward_kda_gdn(const detail::Problem& p, const BackwardInputs& in, const BackwardOutputs& out,
                        Workspace ws, cudaStream_t stream);

}  // namespace linattn::cuda

// The CUDA forward with its stages marked on a StageTimer, for bench/cuda_stage_bench.cpp's
// `forward --stages`. The backend's cuda::forward (common/backend.hpp) is this call with no timer:
// one path, the marks are all it adds.
#pragma once

#include <cuda_runtime.h>

#include "common/problem.hpp"

namespace linattn::cuda {

class StageTimer;  // host/stage_timer.hpp

// Stages, in order: "maps" (the chunk and sequence maps; not where the one-kernel simple GLA
// forward takes its sequence map by value), "prep" (chunk_prep), then the state pass
// with the output: "state", or with the intra-card sequence split (docs/sequence_split.md)
// "segments" (each segment's transition), "combine" (the segments' start states) and "state" (the
// pass over the segments). The disable_recompute forward (a saved buffer given) marks nothing.
Status forward(const detail::Problem& p, const ForwardInputs& in, const ForwardOutputs& out, Workspace ws,
               cudaStream_t stream, StageTimer* timer);

}  // namespace linattn::cuda

// The gate parameters of one value head as chunk_prep's kernels read them (PrepParams): the
// HeadGate of gate.cuh with A_log loaded and exp(A_log) formed once per block.
#pragma once

#include "cuda/common/chunk_fwd.hpp"
#include "cuda/common/gate.cuh"
#include "cuda/common/mma.cuh"

namespace linattn::cuda::kern {

// gamma: simple GLA's per-head constant gate (0 for the other families).
__device__ __forceinline__ gate::HeadGate prep_head_gate(const PrepParams& p, int hv, float gamma = 0.f) {
  gate::HeadGate hg;
  hg.kind = p.gate_kind;
  hg.has_alog = p.gate_kind != 0 && p.has_alog;
  hg.alog = hg.has_alog ? load_any(p.A_log, p.alog_dt, hv) : 0.f;
  hg.ea = expf(hg.alog);
  hg.lower_bound = p.lower_bound;
  hg.gamma = gamma;
  return hg;
}

}  // namespace linattn::cuda::kern

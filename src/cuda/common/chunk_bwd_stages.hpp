// The stages of the CUDA backward that chunk_bwd.cu composes from translation units of their own:
// the token replay (chunk_bwd_token.cu: Problem::token_replay, a test oracle) and the finish
// (chunk_bwd_finish.cu: dq, dk from their partials and the l2norm backward, dg and dβ through
// their transforms, the per-head column sums), with what they share: the gate's arguments, the
// partials the finish reads, the sequence maps. Included by those .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/backend.hpp"
#include "common/problem.hpp"

namespace linattn::cuda {
class StageTimer;  // host/stage_timer.hpp
}

namespace linattn::cuda::bwd {

constexpr int kMaxKPerLane = 8;  // channels a lane in the warp-per-row kernels: K <= 256

// A warp's sum, identical in every lane (commutative pairwise sums: bitwise reproducible).
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// The gate transform's arguments (kernel parameters: gate.cuh computes with them).
struct GateArgs {
  int kind;  // 0 identity, 1 softplus, 2 lower bound
  float lower_bound;
  int has_alog, has_dtb;
  const void* A_log;
  int alog_dt;
  const void* dt_bias;
  int dtb_dt;
};
GateArgs gate_args(const detail::Problem& p, const ForwardInputs& f);

// What the finish kernels read: float32 partials [NS][tokens][HV][K] (pb [NS][tokens][HV]) and
// the per-token rows of the column sums; KG = K (vector gate) or 1.
struct Partials {
  float *pq = nullptr, *pk = nullptr, *pg = nullptr, *pb = nullptr, *draw = nullptr, *da = nullptr;
  int NS = 1, KG = 1;
  // floats per pg row: K, or 1 where pass 2 writes the scalar gate's dg_t alone (the token replay
  // writes a scalar gate's per-channel terms, summed by finish_gb)
  int pg_ld = 1;
  // dg / dβ already written by the chunked pass 2 (WyParams::dg_direct, dbeta): finish_gb skips them
  bool dg_written = false, dbeta_written = false;
  // dq, dk already written by the chunked pass 2 (WyParams::dq): finish_qk does not run
  bool dqk_written = false;
  // pq, pk hold bfloat16 (pass 2 on bfloat16 inputs: PartialQK); else float
  bool pqk16 = false;
};

// Blocks of 8 warps for one warp per row.
inline unsigned blocks_for(int64_t rows) { return static_cast<unsigned>((rows + 7) / 8); }

// The sequence map (and, where chunks is not null, the chunk map) from the validated host offsets
// p.cu; the device cu_seqlens is not read (chunk_map.hpp).
cudaError_t build_maps(const detail::Problem& p, unsigned char* seqs, unsigned char* chunks, cudaStream_t st);

// The token replay (chunk_bwd_token.cu): its workspace, and the run that leaves its partials in *parts.
std::size_t token_replay_workspace_bytes(const detail::Problem& p);
Status run_token_replay(const detail::Problem& p, const BackwardInputs& in, const BackwardOutputs& out,
                        unsigned char* base, cudaStream_t st, Partials* parts);

// The finish (chunk_bwd_finish.cu): from the partials of either path to the caller's gradients.
Status run_finish(const detail::Problem& p, const BackwardInputs& in, const BackwardOutputs& out,
                  const Partials& parts, cudaStream_t st, StageTimer* timer = nullptr);

}  // namespace linattn::cuda::bwd

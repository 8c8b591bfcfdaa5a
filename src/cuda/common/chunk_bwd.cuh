// Kernels of the CUDA delta-rule backward (KDA, GDN): parameters, dtype helpers, launchers.
//
// Design (first, correctness-first version; float32 throughout):
//   1. bwd_prep_*     token-parallel: q̂, k̂ (in-kernel l2norm applied), e = exp(g̃) (the gate
//                     after the in-kernel transform) and β̃ (after the sigmoid), as float32.
//   2. bwd_state_fwd  one CTA per (V tile of 16 columns, value head, sequence), one thread per
//                     key channel: replays the token recurrence from S_0 and stores the float32
//                     chunk-boundary states h[c] (the state before chunk c) in the workspace.
//   3. bwd_token      one CTA per (V split, value head, sequence), one thread per key channel,
//                     looping over the split's 16-column V tiles (each tile is an independent
//                     recurrence). For each chunk from last to first: a forward replay from h[c]
//                     computes u_t = v_t - S'ᵀk_t (block reduction over K) and keeps checkpoints
//                     every 16 tokens; then, 4 tokens at a time from the end, the states before
//                     each token are rebuilt elementwise from the nearest checkpoint and u, and
//                     exact reverse mode runs through S' = Diag(e) S, u = v - S'ᵀk,
//                     S = S' + β k uᵀ, o = scale Sᵀq. dS is carried across chunks (dh0 at the
//                     end). dv is final (one V column depends only on its own column);
//                     dq, dk, dg, dβ are per-split partial sums over the split's V columns,
//                     written (first tile) or accumulated (next tiles, same thread) in float32.
//   4. bwd_finish_*   sums the partials over splits and the G value heads in a fixed order and
//                     applies the transforms backwards (l2norm, gate, beta);
//      bwd_colsum     sums dA_log / ddt_bias contributions over tokens in a fixed order.
// No atomics anywhere: gradients are bitwise reproducible for a given problem.
//
// Next step (speed): replace 2-3 with the seeds' chunked form (WY backward on tensor cores,
// dh carried by a chunk-sequential pass, dq/dk/dg chunk-parallel; dg from the final dq, dk).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace linattn::cuda::bwd {

constexpr int kC = 64;   // chunk of the h layout
constexpr int kVT = 16;  // V columns per tile in the token kernels
constexpr int kSub = 4;  // tokens per reverse sub-chunk
constexpr int kCk = 16;  // tokens between checkpoints

struct SeqInfo {
  int32_t t0, len, chunk0, pad;
};

// dtype codes: 0 fp16, 1 bf16, 2 fp32, 3 fp64
__device__ __forceinline__ float ldf(const void* p, int dt, int64_t i) {
  switch (dt) {
    case 0: return __half2float(static_cast<const __half*>(p)[i]);
    case 1: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case 2: return static_cast<const float*>(p)[i];
    default: return static_cast<float>(static_cast<const double*>(p)[i]);
  }
}
__device__ __forceinline__ void stf(void* p, int dt, int64_t i, float x) {
  switch (dt) {
    case 0: static_cast<__half*>(p)[i] = __float2half_rn(x); break;
    case 1: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(x); break;
    case 2: static_cast<float*>(p)[i] = x; break;
    default: static_cast<double*>(p)[i] = static_cast<double>(x); break;
  }
}

struct TokenParams {
  const SeqInfo* seqs;
  const float* qn;   // [tokens][H][K]
  const float* kn;   // [tokens][H][K]
  const float* e;    // [tokens][HV][KG]   KG = K (KDA) or 1 (GDN)
  const float* bt;   // [tokens][HV]
  const void* v;     // [tokens][HV][V], dtype v_dt
  const void* d_o;   // [tokens][HV][V]
  int v_dt;
  const void* h0;    // optional [N][HV][K][V] (or [V][K])
  int h0_dt;
  const void* dht;   // optional
  int dht_dt;
  float* h;          // [NT][HV][K][V] float32 (always K-major)
  void* dv;          // [tokens][HV][V], dtype v_dt
  void* dh0;         // optional
  int dh0_dt;
  float *pq, *pk, *pg, *pb;  // partials [NS][tokens][HV][K] (pb: [NS][tokens][HV])
  int64_t tokens;
  int N, H, HV, G, K, V, KG;
  int NS, tiles_per_split;
  int v_first;
  float scale;
};

cudaError_t launch_state_fwd(const TokenParams& p, cudaStream_t s);
cudaError_t launch_token_bwd(const TokenParams& p, cudaStream_t s);

}  // namespace linattn::cuda::bwd

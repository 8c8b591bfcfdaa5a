// The chunked delta-rule forward on CUDA (KDA and GDN): parameters and launchers.
//
// Two kernels per call:
//   1. chunk_prep   one CTA per (chunk, value head), chunk-parallel: in-kernel gate + chunk-local
//                   cumsum, l2norm, beta transform, the decayed products K Kᵀ and Q Kᵀ (tensor
//                   cores for the off-diagonal 16x16 blocks, exact per-element exps on the
//                   diagonal blocks), the unit-lower-triangular inverse (blocked, float32), and
//                   W = A (exp(γ) ⊙ K), U = A V (tensor cores). Writes W, U, Qg = scale q ⊙ exp(γ),
//                   Kgᵀ = (k ⊙ exp(γ_C - γ))ᵀ, Aqk = scale tril(Q Kᵀ ⊙ decay) and exp(γ_C).
//   2. chunk_state  one CTA per (sequence, value head, V tile), sequential over the sequence's
//                   chunks, state in registers (float32): V_new = U - W S, O = Qg S + Aqk V_new,
//                   S = exp(γ_C) ⊙ S + Kgᵀ V_new, with the next chunk's operands prefetched by
//                   cp.async while the current one is computed.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace linattn::cuda::kern {

// Chunk map entries (device, from the workspace).
struct ChunkInfo {
  int32_t t0;   // first flat token of the chunk
  int32_t len;  // valid tokens (1..64)
};
struct SeqInfo {
  int32_t t0;      // first flat token
  int32_t len;     // tokens
  int32_t chunk0;  // first global chunk index
  int32_t pad;
};

struct PrepParams {
  const void *q, *k, *v, *g, *beta, *A_log, *dt_bias;
  int g_dt, beta_dt, alog_dt, dtb_dt;  // linattn::DType codes
  const ChunkInfo* chunks;
  int num_chunks, H, HV, G, K, V;
  float scale;
  int l2norm;       // 0/1
  int beta_mode;    // 0 identity, 1 sigmoid, 2 2*sigmoid
  int gate_kind;    // 0 identity, 1 softplus, 2 lower bound
  float lower_bound;
  int has_alog, has_dtb;
  int q_in_smem;
  // outputs (workspace), per (chunk, hv) blocks
  void *W, *U, *Qg, *KgT, *Aqk;
  float* gexp;
};

struct StateParams {
  const void* W;
  const void* U;
  const void* Qg;
  const void* KgT;
  const void* Aqk;
  const float* gexp;
  const SeqInfo* seqs;
  const void* h0;
  int h0_dt;
  void* ht;
  int ht_dt;
  void* h;
  int h_dt;
  void* o;
  int N, HV, K, V;
  int v_first;
  int stages;  // 0: operands read from global memory, 1: staged, 2: double-buffered
};

// dtype codes: 0 fp16, 1 bf16, 2 fp32.
std::size_t prep_smem_bytes(int dtype, int K, bool q_in_smem);
cudaError_t launch_prep_kda(int dtype, const PrepParams& p, int smem, cudaStream_t s);
cudaError_t launch_prep_gdn(int dtype, const PrepParams& p, int smem, cudaStream_t s);

int state_v_tile(int dtype);
std::size_t state_smem_bytes(int dtype, int K, int stages);
cudaError_t launch_state(int dtype, const StateParams& p, int smem, cudaStream_t s);

}  // namespace linattn::cuda::kern

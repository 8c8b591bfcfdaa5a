// Kernels of the CUDA backward (KDA, GDN; GLA and simple GLA with `delta = 0`: no β, M⁻¹, W,
// dM or dX, dv = dN): parameters, dtype helpers, launchers.
//
// Two paths (chunk_bwd.hpp). The chunked WY backward on tensor cores (chunk_bwd_wy.cu;
// docs/chunked_backward.md), in the form Options::backward_precision selects: for 16-bit inputs
// in the input type with hi + lo halves where accuracy needs them (split, kAuto's usual choice),
// in float32 when the gate's A_log / dt_bias gradients are asked for or at K = 256 (16-bit q, k,
// v, dO widened in the workspace first), or in the 16-bit type alone (kFast16, opt-in):
//   0. the forward's chunk_prep (W, U, Qg, KgT, Aqk, gexp and M⁻¹) and chunk_state (h: the
//      float32 state before each chunk, V_new; no output) recompute the chunk intermediates, or
//      the backward reads them from the saved buffer a forward filled (disable_recompute);
//   1. dh_kernel (sequential over chunks, like chunk_state): dh = dL/dS after each chunk, dN;
//   2. wy_kernel (one CTA per chunk and value head): dv and per-value-head float32 partials
//      dq, dk (w.r.t. the normalised q, k), dg (seed 001 + reverse cumsum), dβ;
//   3. bwd_finish_* / bwd_colsum below (NS = 1).
// Token replay (Problem::token_replay: a test hook, linattn::testing::token_replay_backward),
// slower, float32 throughout, the tests' independent check of the chunked form:
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
// No atomics anywhere (either path): gradients are bitwise reproducible for a given problem.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cuda/common/chunk_fwd.hpp"
#include "cuda/common/mma.cuh"
#include "cuda/config/limits.hpp"

namespace linattn::cuda::bwd {

constexpr int kC = config::kChunk;   // chunk of the h layout
constexpr int kVT = 16;  // V columns per tile in the token kernels
constexpr int kSub = 4;  // tokens per reverse sub-chunk
constexpr int kCk = 16;  // tokens between checkpoints

using kern::SeqInfo;  // one sequence map (chunk_fwd.hpp), built by chunk_map.cu for both directions

// dtype codes (config/limits.hpp): 0 fp16, 1 bf16, 2 fp32, 3 fp64. Loads: kern::load_any (mma.cuh).
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

// ---------------------------------------------------------------- chunked (WY) backward
// (chunk_bwd_wy.cu). The forward's kernels first recompute W, U, Qg, KgT, Aqk, gexp, M⁻¹
// (chunk_prep, Ainv output) and the chunk-start states h plus V_new (chunk_state, h / vnew
// outputs, O skipped). Then:
//   pass 1  dh_kernel: one CTA per (V tile, value head, sequence), chunks last to first, the
//           dS tile in float32 registers: stores dh[c] = dL/dS after chunk c (compute type) and
//           dN = dL/dV_new (compute type); dh0 at the end.
//   pass 2  wy_kernel: one CTA per (chunk, value head): dv (final) and this value head's
//           float32 partials dq, dk (NS = 1) for the finish kernels, dβ, and dg (or, for an
//           in-kernel gate or g_gamma, its partial for finish_gb): WyParams::dg_direct.

struct DhParams {
  const void *Aqk, *KgT, *Qg, *W;  // compute type, per (chunk, hv) block
  const float* gexp;               // [blocks][K]
  const void* d_o;                 // [tokens][HV][V], the caller's (d_o_dt)
  const SeqInfo* seqs;
  const void* dht;  // optional [N][HV][K][V] (or [V][K])
  int dht_dt;
  void* dh0;        // optional
  int dh0_dt;
  // [blocks][K][V] in the compute type (float32 in the float32 form): pass 2 reads dS⁺ in it as
  // the operand of N dS⁺ᵀ anyway; a 16-bit dh halves pass 1's largest store and pass 2's read
  void* dh;
  void* dN;         // [blocks][64][V], compute type
  int N, HV, K, V, v_first, stages;
  // The delta rule (KDA, GDN). 0 (GLA, simple GLA): V_new = V, no −Wᵀ dN term, W not read.
  int delta = 1;
  // split mode (16-bit compute type; both or neither, stages > 0): KgT's low half (from chunk_prep)
  // in, dN's low half out, so that Kg dS⁺ and the stored dN carry ~16 mantissa bits.
  const void* KgT_lo = nullptr;
  void* dN_lo = nullptr;
  // dO's dtype code when it differs from the compute type: the float32 form on the caller's
  // 16-bit dO (exact in float32; read as such, no float32 copy); -1: the compute type.
  int d_o_dt = -1;
  // Without the delta rule dN is dv itself: the Hopper pass 1 in a 16-bit compute type (the
  // caller's dtype) writes it straight into dv's rows ([tokens][HV][V]) here instead of dN, and
  // pass 2 neither reads dN nor writes dv (WyParams::dv_written). Null: dN as above.
  void* dv = nullptr;
};

struct WyGate {
  const void* g;  // null: no g (simple GLA with g_gamma alone)
  int g_dt;
  // simple GLA: the per-head constant gate [HV] added to every token's gate; null otherwise
  const void* g_gamma = nullptr;
  int gg_dt = 2;
  int kind;  // 0 identity, 1 softplus, 2 lower bound
  float lower_bound;
  int has_alog, has_dtb;
  const void* A_log;
  int alog_dt;
  const void* dt_bias;
  int dtb_dt;
};

struct WyParams {
  const kern::ChunkInfo* chunks;
  const void *q, *k, *v, *d_o;  // the caller's inputs: the compute type, or in_dt's
  int in_dt = -1;               // their dtype code when it differs (float32 form, 16-bit inputs); -1: the compute type
  const void* beta;
  int beta_dt, beta_mode;
  WyGate gate;
  const void* Ainv;  // [blocks][64][64]
  const void* vnew;  // [blocks][64][V]
  const void* h;     // [blocks][K][V] float32 ([V][K] when h_vfirst), or the compute type (h16)
  int h_vfirst;
  int h16;           // h in the compute type, [K][V] (16-bit compute without the delta rule only)
  const void* dh;    // [blocks][K][V], compute type (DhParams::dh)
  const void* dN;    // [blocks][64][V]
  void* dY;          // scratch [blocks][64][V]
  void* dv;          // output [tokens][HV][V]
  int dv_dt;         // dv's dtype code: the compute type's, or 0 / 1 with a float32 compute type
  // partials [tokens][HV][K] of dq̂, dk̂ in PartialQK<input type>: bfloat16 for bfloat16 inputs,
  // float32 for the others
  void *pq, *pk;
  float *pg, *pb;  // partials: pg [tokens][HV][K] ([tokens][HV] with the scalar gate); pb [tokens][HV]
  int num_chunks, H, HV, G, K, V;
  float scale;
  int l2norm;
  // The delta rule (KDA, GDN). 0 (GLA, simple GLA): no β, M⁻¹, dM or dX: dv = dN, A1 = s·Lo(dO Vᵀ)
  // and the products of A1 alone (beta, Ainv and dY are not read or written).
  int delta = 1;
  // split mode (16-bit; both or neither): dN's low half in (dY = Bᵀ (dN_hi + dN_lo)) and dY's low
  // half out to scratch [blocks][64][V]; dX = −(dY_hi + dY_lo) Sᵀ and ⟨dY, v⟩ from the float dY.
  const void* dN_lo = nullptr;
  void* dY_lo = nullptr;
  // split mode: V_new's low half (chunk_state's vnew_lo) in A1, dM and N dS⁺ᵀ
  const void* vnew_lo = nullptr;
  // Gradients written here rather than by finish_gb (run_chunked decides; the finish kernels then
  // skip them). dg_direct: the gate transform is the identity (no in-kernel gate, no g_gamma), so
  // dg is the partial itself (0 on floored tokens, as gate::transform_bwd): written to dg in g's
  // dtype (dg_dt; null: not asked for) and pg is not written. dbeta: dβ through the sigmoid, in β's
  // dtype, instead of pb (null: pb written).
  int dg_direct = 0;
  void* dg = nullptr;
  int dg_dt = 2;
  void* dbeta = nullptr;
  // dq and dk written by pass 2 in the caller's dtype (q's, the kernel's In) where the partial is
  // already the gradient: no l2norm and one value head a key head (G = 1), so finish_qk has nothing
  // to sum or transform and does not run. Null: the float32 partials pq, pk.
  void* dq = nullptr;
  void* dk = nullptr;
  // dv already written by pass 1 (DhParams::dv; no delta rule only): pass 2 reads no dN.
  int dv_written = 0;
};

// Element type of pass 2's dq̂ / dk̂ partials (WyParams::pq, pk) for input type In: bfloat16 for
// bfloat16 inputs, in either form (finish_qk reads them once: half the bytes each way), float32
// otherwise. dq and dk come out in bfloat16 anyway, and one more rounding before the l2norm
// backward moves their error by ~1.2x (tools/precision, site pqk: 2.7e-3 -> 3.1e-3 in the split
// form; SPEC's bar is 1e-2). The float32 form's reason to be, dA_log / ddt_bias, comes through dg,
// which pass 2 forms from its float32 accumulators and never from these partials. float16 keeps
// float32: there the same rounding would cost 5x (3.3e-4 -> 1.7e-3), and dq̂ = dq ‖q‖ can pass
// float16's range where dq does not; float32 inputs keep float32 (their bar is 2e-3).
template <class In>
using PartialQK = std::conditional_t<std::is_same_v<In, __nv_bfloat16>, __nv_bfloat16, float>;
// in_dt: the inputs' dtype code (0 fp16, 1 bf16, 2 float32)
constexpr std::size_t partial_qk_bytes(int in_dt) { return in_dt == 1 ? 2 : 4; }

// dh_kernel's V tile: config::dh_v_tile (config/heuristics.hpp).
std::size_t dh_smem_bytes(int dtype, int K, int stages, bool split);
cudaError_t launch_dh(int dtype, const DhParams& p, int smem, cudaStream_t s);
cudaError_t launch_wy(int dtype, bool vec, const WyParams& p, cudaStream_t s);
// wy_kernel's shared memory (one fixed layout a compute type): 112 KiB in 16 bits, 192 in float32.
std::size_t wy_smem_bytes(int dtype);

// Pass 1 on Hopper (sm90/chunk_dh_wgmma.cuh; sm90/chunk_recurrence_wgmma.cu says where): sm_90a
// builds on a CC 9.0 device, K = 128, V a multiple of 64; a 16-bit compute type (the split form
// with the delta rule only), or the float32 form on bfloat16 inputs (d_o_dt 1). dh_kernel runs
// the rest (float32 and float16 inputs computing in float32, other head sizes, other GPUs).
bool dh_wgmma_applies(int dtype, const DhParams& p);
cudaError_t launch_dh_wgmma(int dtype, const DhParams& p, cudaStream_t s);
// Pass 2 on Hopper without the delta rule, scalar gate (sm90/pass2_scalar_wgmma.cuh): sm_90a builds
// on a CC 9.0 device, 16-bit, K = V = 128, h in the compute type (WyParams::h16), dv from pass 1.
// wy_kernel runs the rest.
bool pass2_scalar_wgmma_applies(int dtype, bool vector_gate, const WyParams& p);
cudaError_t launch_pass2_scalar_wgmma(int dtype, const WyParams& p, cudaStream_t s);
// Pass 2 on Hopper without the delta rule, vector gate (sm90/pass2_vector_wgmma.cuh): as the scalar
// form's conditions, bf16, h in bf16 or float32 (h16 either way), the identity gate transform with dg
// written by pass 2 (dg_direct).
bool pass2_vector_wgmma_applies(int dtype, bool vector_gate, const WyParams& p);
cudaError_t launch_pass2_vector_wgmma(int dtype, const WyParams& p, cudaStream_t s);
// The recompute (state pass reading the v rows, no delta rule, 16-bit) and pass 1 in one kernel,
// interleaved in each CTA (sm90/bwd_chains_wgmma.cuh): where both apply to these parameters.
bool bwd_chains_apply(int dtype, const kern::StateParams& sp, const DhParams& dp);
cudaError_t launch_bwd_chains(int dtype, const kern::StateParams& sp, const DhParams& dp, cudaStream_t s);

}  // namespace linattn::cuda::bwd

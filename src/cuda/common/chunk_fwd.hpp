// The chunked forward on CUDA (KDA, GDN, GLA, simple GLA): parameters and launchers.
//
// One path for the four families. The family enters as two flags set once from the problem
// (detail::Problem::delta and ::vector_gate, set by validation): the gate's shape picks the
// instantiation of chunk_prep (vector gate: KDA, GLA; scalar gate: GDN, simple GLA, whose
// per-head constant g_gamma is added to every token's gate), and `delta = 0` (GLA, simple GLA)
// drops the delta rule: chunk_prep skips K Kᵀ, the inverse and W and writes U = V, and the state
// passes skip W S (V_new = U = V), so that O = Qg S + Aqk V and S = e^{γ_C} S + Kgᵀ V. W is then
// neither written nor read (it may be null).
//
// Three kernels per call:
//   1. chunk_prep   one CTA per (chunk, value head), chunk-parallel: in-kernel gate + chunk-local
//                   cumsum, l2norm, beta transform, the decayed products K Kᵀ and Q Kᵀ (tensor
//                   cores; exact per-element exps on "wide" diagonal blocks of the vector gate),
//                   the unit-lower-triangular inverse (diagonal 16x16 blocks by substitution in
//                   registers, off-diagonal blocks by levels on the TF32 tensor cores), and
//                   W = A (exp(γ) ⊙ K), U = A V (tensor cores). Writes W, U, Qg = scale q ⊙ exp(γ),
//                   Kgᵀ = (k ⊙ exp(γ_C - γ))ᵀ, Aqk = scale tril(Q Kᵀ ⊙ decay) and exp(γ_C)
//                   (scalar gate, 16-bit: the row factors of Qg and Kgᵀ instead of the two matrices).
//   2. chunk_state  one CTA per (sequence, value head, V tile of 32), sequential over the
//                   sequence's chunks, state in registers (float32): V_new = U - W S,
//                   S = exp(γ_C) ⊙ S + Kgᵀ V_new, with the next chunk's operands prefetched by
//                   cp.async while the current one is computed. Writes V_new and the state before
//                   each chunk (hs, compute type) for kernel 3, and h / ht when asked.
//   3. chunk_out    one CTA per (chunk, value head, V tile of 64), chunk-parallel:
//                   O = Qg S_c + Aqk V_new (launched by launch_state when o and hs are given).
//   2'. chunk_fused the forward's default instead of 2 + 3: one CTA per (sequence, value head,
//                   V tile of 64, or 32 when tiles of 64 would leave SMs idle), V_new,
//                   O = Qg S + Aqk V_new and the S update in one sequential pass (half the bytes
//                   of 2 + 3). Scalar gate, 16-bit: reads the raw q / k rows and the row factors
//                   (O = f_q ⊙ (q S) + Aqk V_new, S = e^{γ_C} S + kᵀ (f_k ⊙ V_new)).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "cuda/common/chunk_map_host.hpp"  // ChunkInfo, SeqInfo

namespace linattn::cuda::kern {

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
  // dtype code of q, k, v when it differs from the compute type: the float32 form of the backward
  // reading the caller's 16-bit rows (exact in float32) instead of float32 copies; -1: the
  // compute type.
  int in_dt = -1;
  // The delta rule (KDA, GDN: 1; GLA, simple GLA: 0: no β, K Kᵀ, inverse or W; U = V).
  int delta = 1;
  // simple GLA: the per-head constant gate [HV] (dtype code gg_dt) added to every token's gate
  // before the floor; null for the other families. g itself may then be null (g_gamma alone).
  const void* g_gamma = nullptr;
  int gg_dt = 2;
  // outputs (workspace), per (chunk, hv) blocks
  void *W, *U, *Qg, *KgT, *Aqk;
  float* gexp;
  // [backward] optional: M^-1 = (I + tril(diag(β) K Kᵀ ⊙ decay, -1))^-1 per (chunk, hv), [64][64]
  // row-major in the compute type, zeros above the diagonal; null = not written.
  void* Ainv = nullptr;
  // Scalar gate, 16-bit only: with Qg and KgT null, the per-row factors of the fused state pass's
  // raw-row mode are written instead, per (chunk, hv) [2][64] floats: s r_q,i e^{γ_i} (Qg = that
  // times q_i) and r_k,i e^{γ_C - γ_i} (KgT's column i = that times k_i); 0 past the chunk's end.
  float* rowfac = nullptr;
  // [backward, 16-bit] optional low halves: x − round(x) in the compute type, so that hi + lo
  // carries x to ~16 mantissa bits where the backward's accuracy needs it (docs/chunked_backward.md,
  // "Precision on 16-bit inputs"). U_lo: U = M⁻¹ (β v) with β v itself split into hi + lo operands;
  // KgT_lo: of KgT. Null = not written (the forward).
  void* U_lo = nullptr;
  void* KgT_lo = nullptr;
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
  // The state before each chunk (optional), in state_index's layout: float32 (h_dt 2; float64, 3,
  // for a forward's returned states), or the 16-bit compute type (the backward's Hopper recompute
  // without the delta rule, v_first 0: pass 2 reads it only as a 16-bit operand, half the bytes).
  void* h;
  int h_dt;
  void* o;  // null: O is not computed (the backward's recompute)
  // O's dtype code when the compute type is float32 and O is 16-bit (the output kernel only, below);
  // -1: the compute type.
  int o_dt = -1;
  int N, HV, K, V;
  int v_first;
  int stages;  // 0: operands read from global memory, 1: staged, 2: double-buffered
  // The delta rule: V_new = U - W S. 0 (GLA, simple GLA): V_new = U (= V), W is not read.
  int delta = 1;
  // [backward] optional: V_new = U - W S per (chunk, hv), [64][V] in the compute type; null = not written.
  // May alias U (each element is read before it is overwritten, by the same thread).
  void* vnew = nullptr;
  // [backward, 16-bit, stages > 0] optional: PrepParams::U_lo; V_new = (U + U_lo) − W S, and
  // V_new enters the S update as hi + lo halves. Null = U alone.
  const void* U_lo = nullptr;
  // With U_lo: V_new's low half per (chunk, hv) [64][V]; may alias U_lo (read first, same thread).
  void* vnew_lo = nullptr;
  // Optional: the state before each chunk in the compute type, per (chunk, hv) [V][K] (K contiguous,
  // whatever v_first says); null = not written. With o, launch_state needs hs, vnew, chunks and
  // num_chunks: O = Qg S_c + Aqk V_new runs as a third, chunk-parallel kernel over them.
  void* hs = nullptr;
  const ChunkInfo* chunks = nullptr;
  int num_chunks = 0;
  // The fused kernel's V tile: 64 or 32 for 16-bit types, 32 for float32 (the caller picks it,
  // with the shared memory from state_smem_bytes(.., fused_vt)).
  int fused_vt = 0;
  // Fused kernel, scalar gate, 16-bit, staged (stages > 0): with q_raw / k_raw set it reads the raw
  // q and k rows ([tokens][H][K]) and PrepParams::rowfac instead of Qg and KgT, applying the row
  // factors to O's rows and to V_new (S += kᵀ (f ⊙ V_new)): no Qg / KgT round trip, and the value
  // heads of one key head read the same rows (GVA). Qg and KgT may then be null.
  const void* q_raw = nullptr;
  const void* k_raw = nullptr;
  const float* rowfac = nullptr;
  int H = 0, G = 1;
  // Without the delta rule (delta = 0), warp-owned pass (fused_warp_applies): V_new = V read straight
  // from the token-major v rows ([tokens][HV][V]) instead of U, so chunk_prep writes no U (its copy
  // of V) and the workspace holds none (config::reads_v_rows). Null: U.
  const void* v_raw = nullptr;
  // The sequence-split pass's first kernel (wgmma pass only; docs/sequence_split.md): seqs is the
  // segment map (N entries), h0 the caller's (per sequence), and every entry but a sequence's last
  // writes its transition S_end = M S_start + C here, float32 [N][HV][K][V + K] (C in columns
  // [0, V), M in [V, V + K); a first segment's C starts from h0 and its M is not formed; without
  // the delta rule [N][HV][K][V], C alone). o is not written. Null: the pass proper (O, the final
  // state of each sequence's last entry).
  float* trans = nullptr;
  // Context parallelism's state map (the wgmma pass over the sequence map, delta rule): with map_o
  // set the pass also carries K columns from the identity with U = 0 (tiles V/64 .. (V + K)/64 - 1),
  // so that S_t = M_t S_in + C_t: their outputs Q~_t = scale M_t^T q_t go to map_o ([tokens][HV][K],
  // o's type) and their final states M to map_ht (float32 [N][HV][K][K], the layout v_first names).
  void* map_o = nullptr;
  float* map_ht = nullptr;
  // The backward's recompute in the float32 form (dtype 2) on 16-bit inputs: on Hopper the state
  // pass may carry its operands as bf16 hi + lo (sm90/chunk_state_wide_wgmma.cuh, ~16 bits a
  // product); 0 keeps 3xTF32 (float32 inputs).
  int wide16 = 0;
};

// The sequence-split pass's combine (segment_combine.cu): per (sequence, value head), in order over
// its segments e, the start states hseg[e + 1] = M_e hseg[e] + C_e, with hseg[first] = h0 (or 0)
// and hseg[first + 1] = C_first; without the delta rule M_e = diag(Π exp(γ_C)) over e's chunks:
// float32 [entries][HV] states in the layout v_first names, read back as the pass's h0.
struct CombineParams {
  const SeqInfo* segs;  // the segment map [M]
  int M, N;             // entries, sequences
  const float* trans;   // StateParams::trans
  const float* gexp;    // without the delta rule: exp(γ_C) per (chunk, hv) [K]; null with it
  const void* h0;       // the caller's initial states [N][HV] or null
  int h0_dt;
  float* hseg;          // out [M][HV][K][V] (or [V][K])
  int HV, K, V, v_first;
};
cudaError_t launch_segment_combine(const CombineParams& p, cudaStream_t s);

// dtype codes: config::DtypeCode (config/limits.hpp): 0 fp16, 1 bf16, 2 fp32.
// vec_gate = false: the scalar-gate (GDN) layout, smaller; the vector-gate size also fits GDN.
std::size_t prep_smem_bytes(int dtype, int K, bool q_in_smem, bool vec_gate = true);
// chunk_prep per family (kda/, gdn/, gla/, simple_gla/ *_forward.cu): the gate's shape and the
// delta rule are its template arguments. launch_prep picks by p.delta and the gate's shape.
cudaError_t launch_prep_kda(int dtype, const PrepParams& p, int smem, cudaStream_t s);
cudaError_t launch_prep_gdn(int dtype, const PrepParams& p, int smem, cudaStream_t s);
cudaError_t launch_prep_gla(int dtype, const PrepParams& p, int smem, cudaStream_t s);
cudaError_t launch_prep_simple_gla(int dtype, const PrepParams& p, int smem, cudaStream_t s);
inline cudaError_t launch_prep(int dtype, bool vec_gate, const PrepParams& p, int smem, cudaStream_t s) {
  if (p.delta) return vec_gate ? launch_prep_kda(dtype, p, smem, s) : launch_prep_gdn(dtype, p, smem, s);
  return vec_gate ? launch_prep_gla(dtype, p, smem, s) : launch_prep_simple_gla(dtype, p, smem, s);
}

int state_v_tile(int dtype);
// fused_vt > 0: the size for the fused kernel with that V tile (o set, hs null; raw_rows: q_raw
// set); 0: the recurrence's.
std::size_t state_smem_bytes(int dtype, int K, int stages, int fused_vt = 0, bool raw_rows = false);
// o null: the recurrence alone (kernel 2). o and hs set: the recurrence, then the output kernel
// (kernel 3). o set, hs null: the fused kernel 2' (V_new, O and the S update in one pass; the
// forward's default, faster at the reference shape; smem from state_smem_bytes(.., fused_vt)).
cudaError_t launch_state(int dtype, const StateParams& p, int smem, cudaStream_t s);

// The fused pass with the state owned by warps (chunk_fused_warp.cu): 16-bit, K in {64, 128}, o set,
// hs / vnew / U_lo null, V a multiple of fused_vt. launch_state runs it where it applies.
bool fused_warp_applies(int dtype, const StateParams& p);
// Its shared memory at head size K and V tile vt (16-bit types; a fixed two-stage layout): on a
// card that offers less (config::smem_limits) it does not apply, and the forward prepares U for
// the staged pass instead (config::reads_v_rows).
std::size_t fused_warp_smem_bytes(int K, int vt);
cudaError_t launch_fused_warp(int dtype, const StateParams& p, cudaStream_t s);

// The same pass on Hopper warpgroup MMAs with the state transposed in registers
// (sm90/chunk_recurrence_wgmma.cu): sm_90a builds on a compute capability 9.0 device, 16-bit,
// K = 128: the forward's fused pass (fused_vt = 64, o set, h / hs / vnew / U_lo null), or the
// backward's recompute (h float32 and vnew set, vnew_lo with U_lo; without the delta rule and
// without o, vnew may be null), with o and vnew (hs null) also the O of a forward that fills a
// saved buffer (a plain forward returning its chunk states, o and h without vnew, is not this); the float32 form's recompute (dtype 2, bf16 inputs) takes hs
// with o instead, and launch_state runs the output kernel after it. launch_state prefers it where
// it applies; supported: the build, the device and the shape allow it (config::fused_tile then
// picks V tile 64). saved_forward_o_in_pass: a saving forward computing in dtype computes O in the
// recompute's pass (no hs in its workspace).
bool recurrence_wgmma_supported(int dtype, int K, int V);
// Whether this build holds the sm_90a kernels (LINATTN_CUDA_ARCHS has 90a).
bool sm90a_built();
bool recurrence_wgmma_applies(int dtype, const StateParams& p);
bool saved_forward_o_in_pass(int dtype, int K, int V);
cudaError_t launch_recurrence_wgmma(int dtype, const StateParams& p, cudaStream_t s);

// Simple GLA's forward in one kernel on Hopper (sm90/fused_scalar_forward_wgmma.cuh): the
// chunk-local work in two producer warpgroups of the state pass, no chunk_prep and none of its
// workspace read. Applies to the scalar gate without the delta rule, 16-bit, K = 128, where the
// wgmma pass is supported; the caller checks the pass's side: the plain forward over the sequence
// map (sp: o set, no sequence split, state map, saved or returned states; U null, V from the v rows).
bool fused_scalar_forward_applies(int dtype, bool vector_gate, const PrepParams& pp);
// seqs: the sequence map by value where it fits (fill_inline_seq_map; then no map kernel needs to
// run first), else count 0 and sp.seqs.
cudaError_t launch_fused_scalar_forward(int dtype, const PrepParams& pp, const StateParams& sp, int64_t tokens,
                                        const InlineSeqMap& seqs, cudaStream_t s);

// chunk_prep on Hopper warpgroup MMAs, where recurrence_wgmma_supported holds (and V is 64 or 128
// where the prep writes U or reads the vector gate): the scalar gate (GDN; simple GLA without W and
// U; sm90/chunk_prep_wgmma.cuh) with the raw-row outputs (W, U, Aqk, rowfac, gexp), 16-bit; the
// vector gate (KDA, GLA: sm90/intra_chunk_vector_gate.cuh) with Qg, KgT, Aqk, gexp and the delta
// rule's W, U, bf16 — for KDA also the backward's exports (Ainv, and U_lo with KgT_lo or neither);
// dtype 2 (the backward's float32 form on bf16 inputs, in_dt 1): the vector gate's WIDE form, every
// output float32 from bf16 hi + lo products.
bool prep_wgmma_applies(int dtype, bool vector_gate, const PrepParams& p);
cudaError_t launch_prep_wgmma(int dtype, bool vector_gate, const PrepParams& p, cudaStream_t s);

}  // namespace linattn::cuda::kern

// The CUDA backward of the delta-rule families (KDA and GDN).
//
// Entry points the backend (cuda_backend.cu) calls from cuda::backward / backward_workspace_bytes.
// See chunk_bwd.cuh for the kernels and their design.
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

#include "common/problem.hpp"

namespace linattn::cuda {

// Which backward runs (set_backward_mode). The workspace size and the call must be made under the
// same setting.
enum BackwardMode : int {
  // Default: LINATTN_CUDA_BWD if set (chunked | chunked16 | chunked32 | token; any other value
  // makes the backward fail with kInvalidArgument and write nothing), else kBackwardChunked.
  kBackwardFromEnv = -1,
  // The chunked WY form on tensor cores (LINATTN_CUDA_BWD=chunked, the automatic choice). For
  // bf16/fp16 inputs it computes in the input type and keeps the few operands whose rounding
  // matters (U, Kg, V_new, dS⁺ in dN, dN, dY) as hi + lo halves (kBackwardSplit). It computes in
  // float32 instead (kBackwardChunked32) when the in-kernel gate has A_log or dt_bias (their
  // gradients are per-head sums over all tokens that 16-bit intermediates cannot resolve to
  // SPEC's 1e-2), and at K = 256 (pass 1's split operands do not fit shared memory).
  kBackwardChunked = 0,
  // The token replay, float32 throughout, slower (LINATTN_CUDA_BWD=token).
  kBackwardToken = 1,
  // The chunked form computed in the 16-bit input type alone: faster and a smaller workspace, but
  // dβ and the gate-parameter gradients can miss SPEC's 1e-2 (docs/chunked_backward.md, "Precision
  // on 16-bit inputs"); opt-in (LINATTN_CUDA_BWD=chunked16). Same as kBackwardChunked for float32.
  kBackwardChunked16 = 2,
  // The chunked form computed in float32 for every input dtype: 16-bit q, k, v, dO are widened to
  // float32 in the workspace, the gradients written in the caller's dtypes. About twice the time
  // and more workspace; the most accurate (LINATTN_CUDA_BWD=chunked32).
  kBackwardChunked32 = 3,
  // The split form (above) whatever the gate (LINATTN_CUDA_BWD=split): dA_log and ddt_bias can
  // then miss SPEC's 1e-2 (0.2 measured on a one-head varlen case); float32 at K = 256.
  kBackwardSplit = 4,
};
void set_backward_mode(int mode);  // a BackwardMode; values outside it select kBackwardFromEnv
// The earlier name (then -1 automatic, 0 chunked, 1 token replay): the same values as
// set_backward_mode.
void set_token_backward(int mode);

// Workspace bytes of backward_kda_gdn (0 when the problem is not supported by it, or when
// LINATTN_CUDA_BWD holds an unknown value: the call then returns its error).
std::size_t backward_kda_gdn_workspace_bytes(const detail::Problem& p);

// Gradients of a KDA or GDN forward: dq, dk, dv and the optional dg, dbeta, dA_log, ddt_bias,
// dh0. Deterministic (no atomics; fixed-order reductions). With in.saved (a buffer
// forward_saved_kda_gdn filled) the chunked path reads the forward's intermediates instead of
// recomputing them, bitwise the same gradients; its header is checked first (one small read that
// waits for the stream, skipped while the stream captures a graph). The token replay ignores
// saved. Returns kNotSupported for shapes it does not handle (K or V outside {64, 128, 256},
// float64 q/k/v) and for tensors that do not start 16-byte aligned, kInvalidArgument for an unknown LINATTN_CUDA_BWD or a saved buffer written for
// another problem or backward form.
Status backward_kda_gdn(const detail::Problem& p, const BackwardInputs& in, const BackwardOutputs& out,
                        Workspace ws, cudaStream_t stream);

// disable_recompute. Bytes of the saved buffer (0 when unsupported), and of the workspace of a
// forward that fills one. Both depend on the backward form the current setting selects (the
// saved buffer is in its compute type), as the backward's workspace does.
std::size_t saved_kda_gdn_bytes(const detail::Problem& p);
std::size_t forward_saved_workspace_bytes(const detail::Problem& p);
// The forward of a KDA or GDN problem that also fills out.saved: the backward's front half
// (chunk_prep in its backward form, the state pass keeping h and V_new) with O from the
// chunk-start states, then the header. o equals the default forward's within rounding (not
// bitwise: O is formed from the backward form's operands).
Status forward_saved_kda_gdn(const detail::Problem& p, const ForwardInputs& in, const ForwardOutputs& out,
                             Workspace ws, cudaStream_t stream);

}  // namespace linattn::cuda

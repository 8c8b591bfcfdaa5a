// The CUDA backward of the four families: KDA and GDN, and GLA / simple GLA as the same kernels
// without the delta rule (Problem::delta = false; see docs/cuda_architecture.md). The names keep
// "kda_gdn" from when only the delta-rule families ran here.
//
// Entry points the backend (cuda_backend.cu) calls from cuda::backward / backward_workspace_bytes.
// See chunk_bwd.cuh for the kernels and their design.
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

#include "common/problem.hpp"

namespace linattn::cuda {

class StageTimer;  // host/stage_timer.hpp

// Which backward runs: the chunked (WY) form in the compute form Options::backward_precision
// selects (linattn.hpp documents the values), or, when Problem::token_replay is set (a test hook,
// common/testing.hpp), the float32 token replay kept as the tests' oracle. The workspace query and
// the call must see the same problem.

// Workspace bytes of backward_kda_gdn (0 when the problem is not supported by it).
std::size_t backward_kda_gdn_workspace_bytes(const detail::Problem& p);

// Gradients of a forward of any family: dq, dk, dv and the optional dg, dg_gamma (simple GLA),
// dbeta, dA_log, ddt_bias, dh0. Deterministic (no atomics; fixed-order reductions). With in.saved (a buffer
// forward_saved_kda_gdn filled) the chunked path reads the forward's intermediates instead of
// recomputing them, bitwise the same gradients; its header is checked first (one small read that
// waits for the stream, skipped while the stream captures a graph). The token replay ignores
// saved. Returns kNotSupported for shapes it does not handle (K or V outside {64, 128, 256},
// float64 q/k/v), for the token replay of a family without the delta rule, and for tensors that
// do not start 16-byte aligned, kInvalidArgument for a saved
// buffer written for another problem or backward form. timer (benchmarks): the chunked path marks
// its stages on it (see StageTimer); null in the product.
Status backward_kda_gdn(const detail::Problem& p, const BackwardInputs& in, const BackwardOutputs& out,
                        Workspace ws, cudaStream_t stream, StageTimer* timer = nullptr);

// disable_recompute. Bytes of the saved buffer (0 when unsupported), and of the workspace of a
// forward that fills one. Both depend on the compute form Options::backward_precision selects
// (the saved buffer is in its compute type), as the backward's workspace does.
std::size_t saved_kda_gdn_bytes(const detail::Problem& p);
std::size_t forward_saved_workspace_bytes(const detail::Problem& p);
// The forward of a KDA or GDN problem that also fills out.saved: the backward's front half
// (chunk_prep in its backward form, the state pass keeping h and V_new) with O from the
// chunk-start states, then the header. o equals the default forward's within rounding (not
// bitwise: O is formed from the backward form's operands).
Status forward_saved_kda_gdn(const detail::Problem& p, const ForwardInputs& in, const ForwardOutputs& out,
                             Workspace ws, cudaStream_t stream);

// Options::keep_chunk_local applies to p: GLA or simple GLA (no delta rule) with 16-bit inputs,
// computed in the 16-bit type, where the backward's state pass reads the v rows (the Hopper wgmma
// recurrence, K = 128). There the forward's chunk_prep writes exactly the Qg, KgT, Aqk and gexp
// the backward's would (the same kernel on the same inputs; simple GLA's forward then runs it in
// that form instead of its raw-row one), and its state pass the states the backward's recompute
// would (the same pass, PassOut::kSaved), so it writes them into the saved buffer (SavedLayout's
// chunk-local form; saved_kda_gdn_bytes gives its size, 0 where this is false) and the backward
// skips chunk_prep and the recompute: pass 1 runs alone.
bool chunk_local_saved_applies(const detail::Problem& p);

}  // namespace linattn::cuda

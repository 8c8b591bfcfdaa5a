// The saved buffer of disable_recompute on CUDA: its layout, its header, and the check that a
// backward reads a buffer written for its own problem and compute form.
//
// A forward given `saved` runs the backward's front half (chunk_prep in its backward form, then
// the state pass, then O from the chunk-start states) and keeps in `saved` everything the backward
// reads after that half; a backward given `saved` skips it. Layout: a header (what the buffer was
// written for) in the first kSavedHeaderBytes, then per (chunk, value head) blocks of W, Qg, KgT
// [64][K], Aqk and M⁻¹ [64][64], V_new [64][V] in the compute type (with the split form's KgT and
// V_new low halves), e^{γ_C} [K] and the chunk-start states h [K][V] (float32). Options::
// keep_chunk_local (GLA) keeps a subset from its plain forward instead (SavedLayout).
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

#include "common/problem.hpp"
#include "cuda/config/backward_form.hpp"

namespace linattn::cuda::host {

constexpr std::size_t kSavedHeaderBytes = 256;

// Byte offsets of the front half's buffers (chunk_prep's and the state pass's outputs) inside one
// region: the backward's workspace, or a saved buffer. kNone: absent.
struct FrontOffsets {
  static constexpr std::size_t kNone = ~std::size_t{0};
  std::size_t W = kNone, U = kNone, Qg = kNone, KgT = kNone, Aqk = kNone, Ainv = kNone, gexp = kNone, h = kNone,
              vnew = kNone, U_lo = kNone, KgT_lo = kNone, vnew_lo = kNone;
  int h_dt = 2;  // h's element type: float32, or the compute type's code (the backward's own, ChunkPlan)
};

// h's element type (a dtype code) in the backward's buffers, the recompute's and a chunk-local
// saved buffer's alike: the compute type where the Hopper state pass writes it for pass 2 (no delta
// rule, 16-bit compute, K-major h: pass 2 reads it only as its 16-bit S operand), float32 otherwise.
int state_dtype_code(const detail::Problem& p, config::Compute compute);

// The saved buffer's layout for problem p in compute form `compute` (total: saved_bytes()). With
// Options::keep_chunk_local Qg, KgT, Aqk and gexp, where GLA's plain forward's chunk_prep writes
// them, and the chunk-start states h (state_dtype_code), which its state pass writes beside O.
struct SavedLayout {
  FrontOffsets front;  // U and its low half where V_new and its low half go
  std::size_t total = 0;
  SavedLayout(const detail::Problem& p, config::Compute compute);
};

// Enqueues the header's write into saved (the forward's last step).
Status write_saved_header(const detail::Problem& p, config::Compute compute, void* saved, cudaStream_t st);

// The backward refuses a saved buffer another problem (or another compute form) wrote. That needs
// its header on the host: one 128-byte read, which waits for the stream. A stream that is capturing
// a graph cannot wait: there the header is not checked (the graph's shapes are fixed).
Status check_saved_header(const detail::Problem& p, config::Compute compute, const void* saved, cudaStream_t st);

}  // namespace linattn::cuda::host

// The inter-chunk state pass: the chunked forward over one (sequence, value head).
#pragma once

#include <cstdint>

#include "common/problem.hpp"
#include "cpu/common/scratch.hpp"

namespace linattn::cpu {

// Runs the chunked forward of SPEC.md over sequence n, value head hv, starting from the initial
// state (or 0). With `out`, writes o (when want_o), h, saved and final_state where present.
// With `hstore`, keeps the state before chunk c at hstore + c*K*V (compute type), for the
// backward. One compiled function serves forward and recomputation, so the recomputed states
// are bitwise identical to the ones the forward saves.
template <class T>
void sequence_forward(const FamilyTraits& tr, const detail::Problem& p, const ForwardInputs& in,
                      const ForwardOutputs* out, bool want_o, int64_t n, int64_t hv, const FwdScratch<T>& s, T* hstore);

// Byte offset of chunk state (global chunk index, value head) inside the saved buffer.
// The disable_recompute buffer: a header naming the problem it was written for, then the
// chunk-start states [num_chunks, HV, K, V].
constexpr std::size_t kSavedHeaderBytes = 128;

inline std::size_t saved_offset(const detail::Problem& p, int64_t chunk, int64_t hv,
                                std::size_t elem) {
  return kSavedHeaderBytes + static_cast<std::size_t>((chunk * p.HV + hv) * p.K * p.V) * elem;
}

}  // namespace linattn::cpu

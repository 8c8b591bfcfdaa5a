// Forward and backward drivers of the CPU backend: OpenMP over (sequence x head) tasks, each
// composing the common blocks according to the family's traits. Families call these.
#pragma once

#include <cstddef>

#include "common/problem.hpp"
#include "cpu/common/scratch.hpp"

namespace linattn::cpu {

std::size_t forward_workspace(const detail::Problem& p);
std::size_t backward_workspace(const detail::Problem& p);
// num_chunks * HV * K * V states in the compute type (float32, float64 for float64 inputs).
std::size_t saved_state_bytes(const detail::Problem& p);

// The backward runs the chunked WY backward (chunk_bwd.hpp), or the token replay inside each chunk
// (token.hpp) when Problem::token_replay is set: the tests' independent check of the former,
// reached through linattn::testing::token_replay_backward (common/testing.hpp).

Status run_forward(const FamilyTraits& tr, const detail::Problem& p, const ForwardInputs& in,
                   const ForwardOutputs& out, Workspace ws);
Status run_backward(const FamilyTraits& tr, const detail::Problem& p, const BackwardInputs& in,
                    const BackwardOutputs& out, Workspace ws);

}  // namespace linattn::cpu

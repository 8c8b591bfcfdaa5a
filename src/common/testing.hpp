// Internal test hooks: reachable from the test suites (which include src/), never part of the
// public API (include/linattn/). Nothing here is a product path.
#pragma once

#include <cstddef>

#include "linattn/linattn.hpp"

namespace linattn::testing {

// The token-replay backward of either backend (the CPU's per-chunk token replay, the CUDA
// backend's float32 token recurrence): an algorithm independent of the chunked (WY) backward,
// kept as the tests' oracle for it. Same contract as linattn::backward_workspace_size /
// linattn::backward, including validation. The CUDA replay ignores a saved buffer; the CPU's
// reads its states.
Status token_replay_backward_workspace_size(Family family, const BackwardInputs& in, const Options& opt,
                                            std::size_t* bytes);
Status token_replay_backward(Family family, const BackwardInputs& in, const BackwardOutputs& out,
                             const Options& opt, Workspace ws = {}, Stream stream = nullptr);

}  // namespace linattn::testing

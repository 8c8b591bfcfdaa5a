// The interface each backend (cpu/, cuda/, reference/) implements. api.cpp validates a call
// into a Problem, checks workspace sizes, then calls exactly one backend.
#pragma once

#include <cstddef>

#include "common/problem.hpp"

// Declares the backend entry points inside namespace NS.
#define LINATTN_DECLARE_BACKEND(NS)                                                              \
  namespace linattn::NS {                                                                        \
  std::size_t forward_workspace_bytes(const detail::Problem& p);                                 \
  std::size_t backward_workspace_bytes(const detail::Problem& p);                                \
  /* Bytes of the disable_recompute buffer (0: nothing worth keeping). */                        \
  std::size_t saved_bytes(const detail::Problem& p);                                             \
  Status forward(const detail::Problem& p, const ForwardInputs& in, const ForwardOutputs& out,   \
                 Workspace ws, Stream stream);                                                   \
  Status backward(const detail::Problem& p, const BackwardInputs& in, const BackwardOutputs& out,\
                  Workspace ws, Stream stream);                                                  \
  }

LINATTN_DECLARE_BACKEND(cpu)
LINATTN_DECLARE_BACKEND(cuda)

namespace linattn::reference {
// float64 token-by-token recurrence; allocates its own scratch (a test oracle, not a fast path).
Status forward(const detail::Problem& p, const ForwardInputs& in, const ForwardOutputs& out);
Status backward(const detail::Problem& p, const BackwardInputs& in, const BackwardOutputs& out);
}  // namespace linattn::reference

namespace linattn::cuda {
bool available();  // built with CUDA and a device is present
}  // namespace linattn::cuda

// TEMPORARY stub, replaced by the CPU backend.
#include "common/backend.hpp"
namespace linattn::cpu {
std::size_t forward_workspace_bytes(const detail::Problem&) { return 0; }
std::size_t backward_workspace_bytes(const detail::Problem&) { return 0; }
std::size_t saved_bytes(const detail::Problem&) { return 0; }
Status forward(const detail::Problem&, const ForwardInputs&, const ForwardOutputs&, Workspace, Stream) {
  return Status::Unsupported("cpu backend not built yet");
}
Status backward(const detail::Problem&, const BackwardInputs&, const BackwardOutputs&, Workspace, Stream) {
  return Status::Unsupported("cpu backend not built yet");
}
}  // namespace linattn::cpu

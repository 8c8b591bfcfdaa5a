// Builds without CUDA: the CUDA backend's entry points refuse every call.
#include "common/backend.hpp"
#include "common/decode.hpp"

namespace linattn::cuda {
namespace {
Status no_cuda() { return Status::Unsupported("this build of linattn has no CUDA backend"); }
}  // namespace
bool available() { return false; }
std::size_t forward_workspace_bytes(const detail::Problem&) { return 0; }
std::size_t backward_workspace_bytes(const detail::Problem&) { return 0; }
std::size_t saved_bytes(const detail::Problem&) { return 0; }
Status forward(const detail::Problem&, const ForwardInputs&, const ForwardOutputs&, Workspace, Stream) {
  return no_cuda();
}
Status backward(const detail::Problem&, const BackwardInputs&, const BackwardOutputs&, Workspace, Stream) {
  return no_cuda();
}
Status decode(const detail::DecodeProblem&, const DecodeInputs&, const DecodeOutputs&, Stream) { return no_cuda(); }
}  // namespace linattn::cuda

// Internal test hooks (common/testing.hpp): the public entry points' validation and dispatch with
// the Problem's test-only switches set.
#include "common/testing.hpp"

#include <string>

#include "common/backend.hpp"
#include "common/problem.hpp"

namespace linattn::testing {
namespace {

bool on_cuda(const detail::Problem& p) { return p.device.type == DeviceType::kCUDA; }

std::size_t workspace_bytes(const detail::Problem& p) {
  return on_cuda(p) ? cuda::backward_workspace_bytes(p) : cpu::backward_workspace_bytes(p);
}

}  // namespace

Status token_replay_backward_workspace_size(Family family, const BackwardInputs& in, const Options& opt,
                                            std::size_t* bytes) {
  detail::Problem p;
  Status s = detail::resolve_inputs(family, in.fwd, opt, &p);
  if (!s.ok()) return s;
  p.has_saved = in.saved.present();
  p.token_replay = true;
  *bytes = workspace_bytes(p);
  return Status::Ok();
}

Status token_replay_backward(Family family, const BackwardInputs& in, const BackwardOutputs& out,
                             const Options& opt, Workspace ws, Stream stream) {
  detail::Problem p;
  Status s = detail::resolve_backward(family, in, out, opt, &p);
  if (!s.ok()) return s;
  p.token_replay = true;
  if (on_cuda(p) && !cuda::available()) return Status::Unsupported("no CUDA backend or device");
  const std::size_t need = workspace_bytes(p);
  if (ws.bytes < need || (need > 0 && ws.data == nullptr))
    return {StatusCode::kWorkspaceTooSmall, "workspace has " + std::to_string(ws.bytes) + " bytes, the token "
                                            "replay needs " + std::to_string(need)};
  return on_cuda(p) ? cuda::backward(p, in, out, ws, stream) : cpu::backward(p, in, out, ws, stream);
}

}  // namespace linattn::testing

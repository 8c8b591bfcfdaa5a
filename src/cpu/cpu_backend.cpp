// CPU backend entry points (common/backend.hpp): dispatch on the family.
#include "common/backend.hpp"
#include "cpu/common/driver.hpp"
#include "cpu/families.hpp"

namespace linattn::cpu {

std::size_t forward_workspace_bytes(const detail::Problem& p) { return forward_workspace(p); }
std::size_t backward_workspace_bytes(const detail::Problem& p) { return backward_workspace(p); }
// keep_chunk_local (a CUDA layout of GLA's chunk-local intermediates): nothing kept here
std::size_t saved_bytes(const detail::Problem& p) { return p.opt.keep_chunk_local ? 0 : saved_state_bytes(p); }

Status forward(const detail::Problem& p, const ForwardInputs& in, const ForwardOutputs& out,
               Workspace ws, Stream) {
  switch (p.family) {
    case Family::kKDA: return kda::forward(p, in, out, ws);
    case Family::kGDN: return gdn::forward(p, in, out, ws);
    case Family::kGLA: return gla::forward(p, in, out, ws);
    case Family::kSimpleGLA: return simple_gla::forward(p, in, out, ws);
  }
  return Status::Invalid("unknown family");
}

Status backward(const detail::Problem& p, const BackwardInputs& in, const BackwardOutputs& out,
                Workspace ws, Stream) {
  switch (p.family) {
    case Family::kKDA: return kda::backward(p, in, out, ws);
    case Family::kGDN: return gdn::backward(p, in, out, ws);
    case Family::kGLA: return gla::backward(p, in, out, ws);
    case Family::kSimpleGLA: return simple_gla::backward(p, in, out, ws);
  }
  return Status::Invalid("unknown family");
}

}  // namespace linattn::cpu

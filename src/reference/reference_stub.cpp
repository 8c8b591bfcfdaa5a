// TEMPORARY stub, replaced by the float64 reference.
#include "common/backend.hpp"
namespace linattn::reference {
Status forward(const detail::Problem&, const ForwardInputs&, const ForwardOutputs&) {
  return Status::Unsupported("reference not built yet");
}
Status backward(const detail::Problem&, const BackwardInputs&, const BackwardOutputs&) {
  return Status::Unsupported("reference not built yet");
}
}  // namespace linattn::reference

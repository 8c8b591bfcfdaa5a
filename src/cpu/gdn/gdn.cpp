// GDN (gated delta rule) on CPU: delta rule with a scalar gate per token and head.
#include "cpu/common/driver.hpp"
#include "cpu/families.hpp"

namespace linattn::cpu::gdn {

const FamilyTraits kTraits{/*delta=*/true, /*vector_gate=*/false};

Status forward(const detail::Problem& p, const ForwardInputs& in, const ForwardOutputs& out,
               Workspace ws) {
  return run_forward(kTraits, p, in, out, ws);
}

Status backward(const detail::Problem& p, const BackwardInputs& in, const BackwardOutputs& out,
                Workspace ws) {
  return run_backward(kTraits, p, in, out, ws);
}

}  // namespace linattn::cpu::gdn

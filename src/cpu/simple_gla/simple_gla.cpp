// Simple GLA on CPU: scalar gate g and/or per-head constant g_gamma, no delta rule.
#include "cpu/common/driver.hpp"
#include "cpu/families.hpp"

namespace linattn::cpu::simple_gla {

const FamilyTraits kTraits{/*delta=*/false, /*vector_gate=*/false};

Status forward(const detail::Problem& p, const ForwardInputs& in, const ForwardOutputs& out,
               Workspace ws) {
  return run_forward(kTraits, p, in, out, ws);
}

Status backward(const detail::Problem& p, const BackwardInputs& in, const BackwardOutputs& out,
                Workspace ws) {
  return run_backward(kTraits, p, in, out, ws);
}

}  // namespace linattn::cpu::simple_gla

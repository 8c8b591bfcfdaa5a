// KDA (Kimi delta attention) on CPU: delta rule with a per-channel gate [.., K].
#include "cpu/common/driver.hpp"
#include "cpu/families.hpp"

namespace linattn::cpu::kda {

const FamilyTraits kTraits{/*delta=*/true, /*vector_gate=*/true};

Status forward(const detail::Problem& p, const ForwardInputs& in, const ForwardOutputs& out,
               Workspace ws) {
  return run_forward(kTraits, p, in, out, ws);
}

Status backward(const detail::Problem& p, const BackwardInputs& in, const BackwardOutputs& out,
                Workspace ws) {
  return run_backward(kTraits, p, in, out, ws);
}

}  // namespace linattn::cpu::kda

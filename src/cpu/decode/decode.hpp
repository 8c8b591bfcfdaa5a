// CPU decode (the recurrent serving path): see decode.cpp.
#pragma once

#include "common/decode.hpp"

namespace linattn::cpu {
// Checks index values on the host first (an out-of-range index is an error here; the CUDA
// kernels flag it instead), then runs every (sequence, head). The status output is untouched.
Status decode(const detail::DecodeProblem& d, const DecodeInputs& in, const DecodeOutputs& out);
}  // namespace linattn::cpu

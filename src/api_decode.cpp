// Public decode entry point: validate, then one backend (CPU decode or the CUDA recurrent kernels).
#include "common/backend.hpp"
#include "common/decode.hpp"
#include "cpu/decode/decode.hpp"
#include "linattn/linattn.hpp"

namespace linattn {

Status decode(Family family, const DecodeInputs& in, const DecodeOutputs& out, const Options& opt,
              Stream stream) {
  detail::DecodeProblem d;
  Status s = detail::resolve_decode(family, in, out, opt, &d);
  if (!s.ok()) return s;
  if (d.p.device.type == DeviceType::kCUDA) {
    if (!cuda::available()) {
      return Status::Unsupported("CUDA tensors were given but this build of linattn has no CUDA backend "
                                 "or no CUDA device is present");
    }
    return cuda::decode(d, in, out, stream);
  }
  return cpu::decode(d, in, out);
}

}  // namespace linattn

// Which code of this build runs on a device: a build holds device code for the architectures of
// LINATTN_CUDA_ARCHS only (the default 80;90a: sm_80 SASS, compute_80 PTX, sm_90a SASS), so a GPU
// below compute capability 8.0, or any GPU other than Hopper under a 90a-only build, has none.
// DeviceGuard::enter (host_util.hpp) refuses such a device before anything runs, naming the fix;
// the decode also asks which virtual architecture it got (its sm_90+ forms). CUDA-free here, so
// that the CPU suite checks the message (tests/cpu/test_device_code.cpp).
#pragma once

#include <string>

namespace linattn::cuda::config {

// The virtual architecture (80, 90, ...) of the code the runtime loads for `device` (the current
// device): a kernel's `__CUDA_ARCH__ >= 900` body exists there only where this is >= 90. The
// compute capability alone does not say it: an sm_80 build runs on an H100 through its compute_80
// PTX, JIT-compiled, without those bodies. Cached per device once known. `*arch` is 0 unless the
// result is cudaSuccess (an int: this header stays CUDA-free); a failed query leaves no CUDA error
// behind. (code_arch.cu)
int query_device_code_arch(int device, int* arch);
// The same, 0 when the query fails.
int device_code_arch(int device);
// The build's LINATTN_CUDA_ARCHS, comma-separated ("80,90a").
const char* build_archs();
// The query's result that means "this build has no code for the device"
// (cudaErrorNoKernelImageForDevice, or cudaErrorInvalidDeviceFunction from older runtimes).
bool no_device_code(int query_result);

// The refusal's text for `device` with compute capability `cc` (10 major + minor; 0: unknown),
// `archs` the build's LINATTN_CUDA_ARCHS (comma-separated).
inline std::string no_device_code_message(int device, int cc, const std::string& archs) {
  const std::string ccs = cc > 0 ? std::to_string(cc / 10) + "." + std::to_string(cc % 10) : std::string("unknown");
  std::string m = "CUDA: this build of linattn has no code that runs on device " + std::to_string(device) +
                  " (compute capability " + ccs + "); it was built for the CUDA architectures " + archs + ". ";
  if (cc > 0 && cc < 80) {
    m += "linattn's CUDA kernels need compute capability 8.0 or newer (bfloat16 tensor-core MMA, cp.async); "
         "run this GPU's problems on the CPU backend.";
  } else {
    m += "Rebuild with -DLINATTN_CUDA_ARCHS=\"80;90a\" (the default; pip: "
         "-Ccmake.define.LINATTN_CUDA_ARCHS=\"80;90a\"), which runs on compute capability 8.0 and newer.";
  }
  return m;
}

}  // namespace linattn::cuda::config

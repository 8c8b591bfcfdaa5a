#include <atomic>

#include <cuda_runtime.h>

#include "cuda/config/device_code.hpp"

namespace linattn::cuda::config {

namespace {
// An empty kernel: its attributes say which code the runtime loads for the current device, and
// every translation unit is compiled for the same architectures (CUB finds its PTX version so).
__global__ void arch_probe_kernel() {}
}  // namespace

int query_device_code_arch(int device, int* arch) {
  static std::atomic<int> cached[64] = {};
  *arch = 0;
  if (device < 0 || device >= 64) return static_cast<int>(cudaErrorInvalidDevice);
  int v = cached[device].load(std::memory_order_relaxed);
  if (v == 0) {
    cudaFuncAttributes a{};
    // the first call may come inside a stream capture (a graph of decode steps or of forwards): the
    // query runs in relaxed capture mode, where a lazily loaded module cannot invalidate the capture
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    const cudaError_t e = cudaFuncGetAttributes(&a, arch_probe_kernel);
    cudaThreadExchangeStreamCaptureMode(&mode);  // the caller's mode back
    if (e != cudaSuccess) {
      cudaGetLastError();  // no error left for the next launch to report
      return static_cast<int>(e);
    }
    v = a.ptxVersion;
    cached[device].store(v, std::memory_order_relaxed);
  }
  *arch = v;
  return static_cast<int>(cudaSuccess);
}

int device_code_arch(int device) {
  int arch = 0;
  return query_device_code_arch(device, &arch) == static_cast<int>(cudaSuccess) ? arch : 0;
}

const char* build_archs() {
#ifdef LINATTN_CUDA_ARCHS_STRING
  return LINATTN_CUDA_ARCHS_STRING;
#else
  return "unknown";
#endif
}

bool no_device_code(int query_result) {
  return query_result == static_cast<int>(cudaErrorNoKernelImageForDevice) ||
         query_result == static_cast<int>(cudaErrorInvalidDeviceFunction);
}

}  // namespace linattn::cuda::config

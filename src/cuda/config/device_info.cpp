#include "cuda/config/device_info.hpp"

#include <mutex>

#include <cuda_runtime.h>

namespace linattn::cuda::config {

namespace {
constexpr int kMaxDevices = 64;
constexpr DeviceInfo kUnknownDevice{132, kHopperSmem, 0};

DeviceInfo query(int device) {
  DeviceInfo d = kUnknownDevice;
  int n = 0, block = 0, sm = 0, major = 0, minor = 0;
  const bool ok = cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) == cudaSuccess &&
                  cudaDeviceGetAttribute(&block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess &&
                  cudaDeviceGetAttribute(&sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device) == cudaSuccess &&
                  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess;
  if (!ok) {
    cudaGetLastError();  // the failed query's error, not left for the next launch to report
    return d;
  }
  if (n > 0) d.sm_count = n;
  if (block > 0 && sm > 0) d.smem = {static_cast<std::size_t>(block), static_cast<std::size_t>(sm)};
  if (major > 0) d.cc = 10 * major + minor;
  return d;
}
}  // namespace

const DeviceInfo& device_info(int device) {
  if (device < 0 || device >= kMaxDevices) return kUnknownDevice;
  static std::once_flag once[kMaxDevices];
  static DeviceInfo info[kMaxDevices];
  std::call_once(once[device], [device] { info[device] = query(device); });
  return info[device];
}

const DeviceInfo& current_device_info() {
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return kUnknownDevice;
  }
  return device_info(dev);
}

}  // namespace linattn::cuda::config

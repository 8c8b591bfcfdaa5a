// What the host code asks of a device, asked once per device and kept: its multiprocessors, its
// shared memory and its compute capability. One home for these queries (sm_count, smem_limits and
// the Hopper kernels' sm_90 check read it); thread-safe, as an inference engine may call from
// several threads. The decode's device_code_arch (decode_launch.cu) is not here: it asks which
// code of this build the runtime loaded, through a kernel's attributes, not the device.
#pragma once

#include "cuda/config/limits.hpp"

namespace linattn::cuda::config {

struct DeviceInfo {
  int sm_count;     // cudaDevAttrMultiProcessorCount; 132 when the query fails
  SmemLimits smem;  // kHopperSmem when the query fails
  int cc;           // compute capability as 10 * major + minor (90 for an H100 / H200); 0 when unknown
};

// `device`'s info (queried on the first call for that device; devices outside [0, 64) and failed
// queries get the defaults above). A failed query leaves no CUDA error behind.
const DeviceInfo& device_info(int device);

// The current device's info (the defaults when cudaGetDevice fails).
const DeviceInfo& current_device_info();

}  // namespace linattn::cuda::config

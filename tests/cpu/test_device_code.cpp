// The refusal of a GPU this build has no code for (src/cuda/config/device_code.hpp): the text names
// the device, its compute capability and the build's architectures, and says what to do: below
// compute capability 8.0 that linattn's CUDA kernels need 8.0 (and the CPU backend), otherwise
// the rebuild that covers the card. CUDA-free, so it runs on every CI machine.
#include <gtest/gtest.h>

#include <string>

#include "cuda/config/device_code.hpp"

namespace linattn::cuda::config {
namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(DeviceCode, OlderThanAmpereIsToldTheMinimum) {
  const std::string m = no_device_code_message(1, 75, "80,90a");  // a T4
  EXPECT_TRUE(has(m, "device 1")) << m;
  EXPECT_TRUE(has(m, "compute capability 7.5")) << m;
  EXPECT_TRUE(has(m, "80,90a")) << m;
  EXPECT_TRUE(has(m, "8.0 or newer")) << m;
  EXPECT_TRUE(has(m, "CPU backend")) << m;
  EXPECT_FALSE(has(m, "Rebuild")) << m;  // no build would run there
}

TEST(DeviceCode, ANewerCardUnderANarrowBuildIsToldTheRebuild) {
  const std::string m = no_device_code_message(0, 80, "90a");  // an A100 under a Hopper-only build
  EXPECT_TRUE(has(m, "device 0")) << m;
  EXPECT_TRUE(has(m, "compute capability 8.0")) << m;
  EXPECT_TRUE(has(m, "architectures 90a")) << m;
  EXPECT_TRUE(has(m, "LINATTN_CUDA_ARCHS=\"80;90a\"")) << m;
  EXPECT_TRUE(has(m, "-Ccmake.define.")) << m;  // the pip form too
  const std::string b = no_device_code_message(0, 100, "90a");  // a B200
  EXPECT_TRUE(has(b, "compute capability 10.0")) << b;
  EXPECT_TRUE(has(b, "Rebuild")) << b;
  EXPECT_TRUE(has(no_device_code_message(2, 0, "80,90a"), "compute capability unknown"));
}

}  // namespace
}  // namespace linattn::cuda::config

// Device discovery's reasons: an old driver is told apart from a missing one, with both versions.
#include <gtest/gtest.h>

#include <string>

#include "src/backends/cuda/cuda_devices.h"

namespace attn {
namespace {

TEST(CudaDevices, InsufficientDriverNamesBothVersions) {
  const std::string none = insufficient_driver_reason(0, 13000);
  EXPECT_NE(none.find("no NVIDIA driver is loaded"), std::string::npos) << none;
  const std::string old = insufficient_driver_reason(12020, 13000);
  EXPECT_NE(old.find("driver supports CUDA 12.2"), std::string::npos) << old;
  EXPECT_NE(old.find("runtime is 13.0"), std::string::npos) << old;
  EXPECT_NE(old.find("update the driver"), std::string::npos) << old;
  EXPECT_EQ(old.find("no NVIDIA driver"), std::string::npos) << old;
}

} // namespace
} // namespace attn

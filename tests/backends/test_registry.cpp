// Tests of the device registry: device slugs, the file-name-safe device names that published
// tables are named after.
#include <gtest/gtest.h>

#include "src/backends/registry.h"

namespace attn {
namespace {

TEST(Registry, SlugsDevices) {
  DeviceInfo g;
  g.backend = "cuda";
  g.name = "NVIDIA H200";
  EXPECT_EQ(device_slug(g), "nvidia-h200");
  DeviceInfo c;
  c.backend = "cpu";
  c.name = "Intel(R) Xeon(R) Platinum 8480+";
  EXPECT_EQ(device_slug(c), "cpu-intel-r-xeon-r-platinum-8480");
}

} // namespace
} // namespace attn

// Tests of the device registry: device specs from the command line, and device slugs (the
// file-name-safe device names that published tables are named after).
#include <gtest/gtest.h>

#include <string>

#include "src/backends/registry.h"
#include "src/model/errors.h"

namespace attn {
namespace {

TEST(BackendFactory, ParsesDeviceSpecs) {
  auto cpu = make_backend("cpu", {.threads = 1, .kernels = ""});
  EXPECT_EQ(cpu->info().backend, "cpu");
  EXPECT_EQ(cpu->info().threads, 1);
  EXPECT_THROW((void)make_backend("gpu0", {}), InputError);
  EXPECT_THROW((void)make_backend("cuda:", {}), InputError);
  EXPECT_THROW((void)make_backend("cuda:x", {}), InputError);
  EXPECT_THROW((void)make_backend("", {}), InputError);
#ifndef ATTN_HAVE_CUDA
  try {
    (void)make_backend("cuda:0", {});
    ADD_FAILURE() << "a build without the CUDA backend returned a GPU backend";
  } catch (const DeviceUnavailable& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA backend"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)make_backend("0", {}), DeviceUnavailable);
#endif
}

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

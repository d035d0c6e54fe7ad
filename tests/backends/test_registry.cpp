// Tests of the device registry: device specs from the command line, and device slugs (the
// file-name-safe device names that published tables are named after).
#include <gtest/gtest.h>

#include <string>

#include "src/backends/kernel_decl.h"
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

// A declared space is built without repeats, in time linear in its configurations (64k values
// of one parameter took 36 s through a search for repeats among the configurations made).
TEST(KernelDecl, ConfigurationSpacesAreBuiltInLinearTimeWithoutRepeats) {
  FamilyDecl f;
  f.family = Family::decode_v2;
  f.params = {{"partition", {512, 256, 512, 1024, 256}}, {"threads", {64, 64, 128}}};
  const std::vector<KernelConfig> cs = declared_configs(f);
  ASSERT_EQ(cs.size(), 6u);
  EXPECT_EQ(cs[0].params.at("partition"), 512);
  EXPECT_EQ(cs[0].params.at("threads"), 64);
  EXPECT_EQ(cs[5].params.at("partition"), 1024);
  EXPECT_EQ(cs[5].params.at("threads"), 128);
  std::vector<int> wide(65'536);
  for (std::size_t i = 0; i < wide.size(); ++i) {
    wide[i] = int(i % 32'768);
  }
  f.params = {{"split", wide}};
  EXPECT_EQ(declared_configs(f).size(), 32'768u);
}

} // namespace
} // namespace attn

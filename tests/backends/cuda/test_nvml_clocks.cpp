// Tests of the NVML clock unit: the reason bits decoded to names, which of them count as
// throttling, how a measurement's samples combine, and that a missing NVML (or device) is
// reported, never thrown. Runs without a GPU.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "src/backends/cuda/nvml_clocks.h"

using namespace attn;
using namespace attn::cuda;

namespace {

using Names = std::vector<std::string>;

TEST(NvmlClocks, ReasonBitsDecodeToNames) {
  EXPECT_EQ(throttle_reason_names(0), Names{});
  EXPECT_EQ(throttle_reason_names(0x1), Names{"gpu_idle"});
  EXPECT_EQ(throttle_reason_names(0x2), Names{"applications_clocks_setting"});
  EXPECT_EQ(throttle_reason_names(0x4), Names{"sw_power_cap"});
  EXPECT_EQ(throttle_reason_names(0x8), Names{"hw_slowdown"});
  EXPECT_EQ(throttle_reason_names(0x10), Names{"sync_boost"});
  EXPECT_EQ(throttle_reason_names(0x20), Names{"sw_thermal_slowdown"});
  EXPECT_EQ(throttle_reason_names(0x40), Names{"hw_thermal_slowdown"});
  EXPECT_EQ(throttle_reason_names(0x80), Names{"hw_power_brake_slowdown"});
  EXPECT_EQ(throttle_reason_names(0x100), Names{"display_clocks_setting"});
  // Several bits in bit order; bits NVML may add later are named by value, not dropped.
  EXPECT_EQ(throttle_reason_names(0x4 | 0x40 | 0x1),
            (Names{"gpu_idle", "sw_power_cap", "hw_thermal_slowdown"}));
  EXPECT_EQ(throttle_reason_names(0x200 | 0x8), (Names{"hw_slowdown", "unknown_0x200"}));
  EXPECT_EQ(throttle_reason_names(uint64_t(1) << 63), Names{"unknown_0x8000000000000000"});
}

TEST(NvmlClocks, OnlyLoadReasonsCountAsThrottling) {
  for (uint64_t bit : {0x4ull, 0x8ull, 0x10ull, 0x20ull, 0x40ull, 0x80ull}) {
    EXPECT_TRUE(is_throttling(bit)) << std::hex << bit;
    EXPECT_TRUE(is_throttling(bit | 0x1)) << std::hex << bit;
  }
  // Idle, application-clock and display-clock settings are not throttling, nor is nothing.
  EXPECT_FALSE(is_throttling(0));
  EXPECT_FALSE(is_throttling(0x1));
  EXPECT_FALSE(is_throttling(0x2));
  EXPECT_FALSE(is_throttling(0x100));
  EXPECT_FALSE(is_throttling(0x1 | 0x2 | 0x100));
  EXPECT_FALSE(is_throttling(0x200)); // unknown bits are named but not judged
}

TEST(NvmlClocks, SamplesCombineIntoOneReading) {
  const ClockReading r = clock_reading({{1980, 1980, 0x0}, {1710, 1980, 0x4}, {1980, 1980, 0x1}},
                                       "unused when there are samples");
  EXPECT_TRUE(r.available());
  EXPECT_EQ(r.source, "nvml");
  EXPECT_EQ(r.sm_clock_mhz, 1710); // the lowest
  EXPECT_EQ(r.sm_clock_max_mhz, 1980);
  EXPECT_EQ(r.throttle_reasons, (Names{"gpu_idle", "sw_power_cap"}));
  EXPECT_TRUE(r.throttled);
  const ClockReading calm = clock_reading({{1980, 1980, 0x1}}, "");
  EXPECT_FALSE(calm.throttled);
  EXPECT_EQ(calm.throttle_reasons, Names{"gpu_idle"});
  const ClockReading none = clock_reading({}, "nvml unavailable: libnvidia-ml.so.1 not found");
  EXPECT_FALSE(none.available());
  EXPECT_EQ(none.source, "nvml unavailable: libnvidia-ml.so.1 not found");
  EXPECT_EQ(clock_reading({}, "").source, "nvml unavailable: no sample was read");
}

TEST(NvmlClocks, NoSuchDeviceIsReportedNotThrown) {
  // Here either libnvidia-ml.so.1 is missing (no driver) or it has no device with this UUID.
  std::optional<NvmlClocks> clocks;
  ASSERT_NO_THROW(clocks.emplace("GPU-00000000-0000-0000-0000-000000000000"));
  EXPECT_FALSE(clocks->available());
  EXPECT_EQ(clocks->why_unavailable().rfind("nvml unavailable: ", 0), 0u)
      << clocks->why_unavailable();
  EXPECT_FALSE(clocks->sample().has_value());
}

} // namespace

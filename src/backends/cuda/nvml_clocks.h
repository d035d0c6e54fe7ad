// The GPU's SM clock and the reasons it is held below its maximum, read through NVML loaded at
// run time (dlopen): no build or binary depends on libnvidia-ml, and without it nothing fails.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/backends/timing.h"

namespace attn::cuda {

// NVML's clock-event ("throttle") reason bits (nvmlClocksEventReason*), as names:
// "gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
// "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
// "display_clocks_setting"; an unknown bit is "unknown_0x<hex>".
[[nodiscard]] std::vector<std::string> throttle_reason_names(uint64_t mask);

// Whether `mask` holds a reason that slows a loaded GPU: power cap, hardware slowdown, sync
// boost, thermal or power-brake slowdown. Idle and clock settings (application or display
// clocks) are choices, not throttling.
[[nodiscard]] bool is_throttling(uint64_t mask);

// One reading of a device's clocks.
struct ClockSample {
  int sm_clock_mhz = 0;
  int sm_clock_max_mhz = 0;
  uint64_t reasons = 0; // clock-event reason bits
};

// The reading a measurement records from the samples taken during it: the lowest SM clock, every
// reason seen, throttled when any sample was; "nvml unavailable: ..." (`why`) when there are none.
[[nodiscard]] ClockReading clock_reading(const std::vector<ClockSample>& samples,
                                         const std::string& why);

// NVML for the device with `uuid` ("GPU-xxxxxxxx-...", as DeviceInfo::uuid): loaded and
// initialised once at construction, shut down at destruction. Never throws.
class NvmlClocks {
public:
  explicit NvmlClocks(const std::string& uuid);
  NvmlClocks(const NvmlClocks&) = delete;
  NvmlClocks& operator=(const NvmlClocks&) = delete;
  ~NvmlClocks();

  [[nodiscard]] bool available() const { return device_ != nullptr; }
  // "nvml unavailable: libnvidia-ml.so.1 not found", ...; empty when available.
  [[nodiscard]] const std::string& why_unavailable() const { return why_; }
  // The device's clocks now; nullopt when NVML is unavailable or a query fails.
  [[nodiscard]] std::optional<ClockSample> sample() const;

private:
  struct Api;
  void* lib_ = nullptr;
  void* device_ = nullptr; // nvmlDevice_t
  std::unique_ptr<Api> api_;
  bool initialised_ = false;
  std::string why_;
};

} // namespace attn::cuda

// NVML through dlopen (see nvml_clocks.h). The few types and prototypes are declared here, as
// in nvml.h (NVML's ABI is stable across driver releases), because the toolkit image may lack
// that header and the project must not link against the driver's libraries.
#include "src/backends/cuda/nvml_clocks.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>

namespace attn::cuda {

namespace {

// nvml.h: nvmlReturn_t is an enum (NVML_SUCCESS = 0), nvmlDevice_t an opaque pointer,
// NVML_CLOCK_SM = 1.
using NvmlReturn = int;
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;

struct ReasonBit {
  uint64_t bit;
  const char* name;
  bool throttling;
};
// nvmlClocksEventReason* (formerly nvmlClocksThrottleReason*) in nvml.h.
constexpr ReasonBit kReasons[] = {
    {0x1, "gpu_idle", false},
    {0x2, "applications_clocks_setting", false},
    {0x4, "sw_power_cap", true},
    {0x8, "hw_slowdown", true},
    {0x10, "sync_boost", true},
    {0x20, "sw_thermal_slowdown", true},
    {0x40, "hw_thermal_slowdown", true},
    {0x80, "hw_power_brake_slowdown", true},
    {0x100, "display_clocks_setting", false},
};

} // namespace

std::vector<std::string> throttle_reason_names(uint64_t mask) {
  std::vector<std::string> out;
  for (const auto& r : kReasons) {
    if (mask & r.bit) {
      out.emplace_back(r.name);
      mask &= ~r.bit;
    }
  }
  for (int b = 0; b < 64; ++b) {
    if (mask & (uint64_t(1) << b)) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "unknown_0x%llx", (unsigned long long)(uint64_t(1) << b));
      out.emplace_back(buf);
    }
  }
  return out;
}

bool is_throttling(uint64_t mask) {
  for (const auto& r : kReasons) {
    if (r.throttling && (mask & r.bit)) {
      return true;
    }
  }
  return false;
}

ClockReading clock_reading(const std::vector<ClockSample>& samples, const std::string& why) {
  ClockReading r;
  if (samples.empty()) {
    r.source = why.empty() ? "nvml unavailable: no sample was read" : why;
    return r;
  }
  r.source = "nvml";
  uint64_t seen = 0;
  r.sm_clock_mhz = samples.front().sm_clock_mhz;
  for (const auto& s : samples) {
    r.sm_clock_mhz = std::min(r.sm_clock_mhz, s.sm_clock_mhz);
    r.sm_clock_max_mhz = std::max(r.sm_clock_max_mhz, s.sm_clock_max_mhz);
    seen |= s.reasons;
  }
  r.throttle_reasons = throttle_reason_names(seen);
  r.throttled = is_throttling(seen);
  return r;
}

struct NvmlClocks::Api {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*handle_by_uuid)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*clock_info)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*max_clock_info)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*reasons)(NvmlDevice, unsigned long long*) = nullptr;
};

NvmlClocks::NvmlClocks(const std::string& uuid) {
  lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib_ == nullptr) {
    why_ = "nvml unavailable: libnvidia-ml.so.1 not found";
    return;
  }
  api_ = std::make_unique<Api>();
  auto sym = [this](const char* name) { return dlsym(lib_, name); };
  api_->init = reinterpret_cast<NvmlReturn (*)()>(sym("nvmlInit_v2"));
  api_->shutdown = reinterpret_cast<NvmlReturn (*)()>(sym("nvmlShutdown"));
  api_->error_string = reinterpret_cast<const char* (*)(NvmlReturn)>(sym("nvmlErrorString"));
  api_->handle_by_uuid =
      reinterpret_cast<NvmlReturn (*)(const char*, NvmlDevice*)>(sym("nvmlDeviceGetHandleByUUID"));
  api_->clock_info =
      reinterpret_cast<NvmlReturn (*)(NvmlDevice, int, unsigned*)>(sym("nvmlDeviceGetClockInfo"));
  api_->max_clock_info = reinterpret_cast<NvmlReturn (*)(NvmlDevice, int, unsigned*)>(
      sym("nvmlDeviceGetMaxClockInfo"));
  // Renamed "clocks event reasons" in NVML 12.2; older drivers only have the throttle name.
  void* reasons = sym("nvmlDeviceGetCurrentClocksEventReasons");
  if (reasons == nullptr) {
    reasons = sym("nvmlDeviceGetCurrentClocksThrottleReasons");
  }
  api_->reasons = reinterpret_cast<NvmlReturn (*)(NvmlDevice, unsigned long long*)>(reasons);
  if (!api_->init || !api_->shutdown || !api_->handle_by_uuid || !api_->clock_info ||
      !api_->max_clock_info || !api_->reasons) {
    why_ = "nvml unavailable: libnvidia-ml.so.1 lacks the clock queries";
    return;
  }
  auto error = [this](NvmlReturn rc) {
    const char* s = api_->error_string ? api_->error_string(rc) : nullptr;
    return s ? std::string(s) : "NVML error " + std::to_string(rc);
  };
  if (const NvmlReturn rc = api_->init(); rc != kNvmlSuccess) {
    why_ = "nvml unavailable: nvmlInit failed: " + error(rc);
    return;
  }
  initialised_ = true;
  NvmlDevice dev = nullptr;
  if (const NvmlReturn rc = api_->handle_by_uuid(uuid.c_str(), &dev); rc != kNvmlSuccess) {
    why_ = "nvml unavailable: no NVML device with UUID " + uuid + ": " + error(rc);
    return;
  }
  device_ = dev;
}

NvmlClocks::~NvmlClocks() {
  if (initialised_) {
    api_->shutdown();
  }
  if (lib_ != nullptr) {
    dlclose(lib_);
  }
}

std::optional<ClockSample> NvmlClocks::sample() const {
  if (device_ == nullptr) {
    return std::nullopt;
  }
  unsigned sm = 0;
  unsigned max_sm = 0;
  unsigned long long reasons = 0;
  if (api_->clock_info(device_, kNvmlClockSm, &sm) != kNvmlSuccess ||
      api_->max_clock_info(device_, kNvmlClockSm, &max_sm) != kNvmlSuccess ||
      api_->reasons(device_, &reasons) != kNvmlSuccess) {
    return std::nullopt;
  }
  return ClockSample{int(sm), int(max_sm), uint64_t(reasons)};
}

} // namespace attn::cuda

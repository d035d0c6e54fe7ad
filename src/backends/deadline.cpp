#include "src/backends/deadline.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "src/model/errors.h"

namespace attn {

namespace {
// Floors, not estimates: the CPU backend reaches 2.5 GFLOP/s even on its slowest path (a
// 2-core AVX2 machine), and a GPU reaches hundreds of GB/s.
constexpr double kCpuFlops = 0.25e9;
constexpr double kCpuBytes = 0.5e9;
constexpr double kGpuFlops = 50e9;
constexpr double kGpuBytes = 20e9;
// A device run negates its inputs on the host: each buffer copied back and forth through pageable
// memory.
constexpr double kGpuCopyBytes = 1e9;
// Startup the launch count does not cover: allocation and upload, a module load, the check.
constexpr double kCpuBase = 10.0;
constexpr double kGpuBase = 30.0;
} // namespace

double seconds_from_env(const char* var, double fallback) {
  const char* env = std::getenv(var);
  if (env == nullptr || *env == '\0') {
    return fallback;
  }
  char* end = nullptr;
  const double s = std::strtod(env, &end);
  if (end == env || *end != '\0' || !std::isfinite(s) || s <= 0.0) {
    throw InputError(std::string(var) + "='" + env + "' is not a number of seconds above 0");
  }
  return s;
}

double unit_grace_s(const DeviceInfo& dev) {
  return seconds_from_env("ATTN_TUNE_UNIT_GRACE", dev.backend == "cuda" ? kGpuBase : kCpuBase);
}

double pessimistic_launch_s(const Problem& pr, const DeviceInfo& dev) {
  const bool gpu = dev.backend == "cuda";
  const double flops = 4.0 * double(pr.visible_pairs()) * pr.params.head_dim;
  const double bytes = double(pr.kv_bytes_touched());
  return std::max(flops / (gpu ? kGpuFlops : kCpuFlops), bytes / (gpu ? kGpuBytes : kCpuBytes));
}

double unit_deadline_s(const Problem& pr, const DeviceInfo& dev, const TimingOptions* timing,
                       bool rewritten_call) {
  const double one = pessimistic_launch_s(pr, dev);
  const bool gpu = dev.backend == "cuda";
  double base = unit_grace_s(dev);
  if (rewritten_call) { // the second launch, and the inputs negated and back (twice each way)
    const auto inputs = double(pr.input_bytes());
    base += 2 * one + (gpu ? 4 * inputs / kGpuCopyBytes : 2 * inputs / kCpuBytes);
  }
  if (timing == nullptr) {
    return base + 4 * one; // upload, one checked launch
  }
  // Timing stops after max_seconds of measured launches once min_reps are in, so its length is
  // bounded by the larger of the two, plus the warm-up (a count and a duration).
  const double launches = double(timing->warmup + timing->min_reps + 4);
  return base + 2 * (timing->max_seconds + timing->warmup_seconds) + launches * one;
}

} // namespace attn

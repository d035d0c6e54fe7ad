// How every backend times a kernel: warm-up for a duration, repeat until the relative noise is
// small or the time budget is spent, keep the median and the spread (nvbench's measure_cold).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace attn {

// How a GPU rep is launched: the kernels enqueued one by one between two events, or one
// cudaGraphLaunch of the call captured once (as inference engines replay decode). The CPU backend
// has only the first.
enum class TimingMode { events, graph };
[[nodiscard]] const char* timing_mode_name(TimingMode m); // "events", "graph"
[[nodiscard]] std::optional<TimingMode> parse_timing_mode(std::string_view s);

struct TimingOptions {
  int warmup = 3;               // at least this many warm-up calls...
  double warmup_seconds = 0.05; // ...and at least this long: an idle GPU clocks down
  int min_reps = 10;            // at least this many measured launches
  int max_reps = 1000;          // at most this many
  double max_seconds = 0.5;     // stop measuring after this much measured time
  double target_noise = 0.02;   // stop when (p75 - p25) / median falls below this
  bool flush_cache = true;      // flush the last-level cache (or rotate inputs) before each launch
  TimingMode mode = TimingMode::events;
};

// The GPU's SM clock and clock-limiting reasons over one measurement, as NVML reported them.
struct ClockReading {
  std::string source;                        // "nvml", or "nvml unavailable: <why>"
  int sm_clock_mhz = 0;                      // the lowest SM clock sampled during the reps
  int sm_clock_max_mhz = 0;                  // the device's maximum SM clock
  std::vector<std::string> throttle_reasons; // every reason seen in any sample
  bool throttled = false;                    // a reason that lowers the clock under load was seen
  [[nodiscard]] bool available() const { return source == "nvml"; }
};

struct TimingResult {
  double median_s = 0.0;
  double min_s = 0.0;
  double max_s = 0.0;
  double p25_s = 0.0;
  double p75_s = 0.0;
  double rel_noise = 0.0; // (p75 - p25) / median
  int reps = 0;
  bool converged = false; // noise target reached before the budget ran out
  int warmup_calls = 0;   // warm_one calls made before the first measured rep
  double warmup_s = 0.0;  // how long they took
  std::string method;     // "cuda-events, L2 flushed", "steady_clock, inputs rotated", ...
  std::optional<ClockReading> clocks; // absent where the backend reads no clocks (CPU)
  // Host timings: the seconds the process's threads spent ready to run but waiting for a CPU
  // during the measurement (warm-up and reps), over its wall time (Linux schedstat); absent where
  // that is not known (GPU timings, no /proc). Above kCpuWaitLimit, other processes (or more
  // threads than cores) took the CPUs from the call: its times include the waits.
  std::optional<double> cpu_wait_share;
  int attempts = 1; // measurements made: more than 1 where earlier ones waited above the limit
};

// A host measurement whose threads waited for a CPU for more than this share of its wall time is
// made again, up to kCpuWaitRetries more times, and the one that waited least is kept.
inline constexpr double kCpuWaitLimit = 0.25;
inline constexpr int kCpuWaitRetries = 2;
// What the timings' cpu_wait_share say together, for a table's provenance: the measurements that
// recorded one, those still above the limit, those made again, and the largest share; empty
// where none recorded one.
[[nodiscard]] nlohmann::json cpu_wait_summary(const std::vector<nlohmann::json>& timings);

// A byte count as a timing method states it: "3.2 MiB", "48 KiB", "512 B" (one decimal from
// 10 MiB down, so a small flush is not rounded up to a whole MiB).
[[nodiscard]] std::string mib_text(uint64_t bytes);

// Runs `warm_one` until both `opt.warmup` calls and `opt.warmup_seconds` have passed, then
// `one_rep` (which returns the seconds of one measured launch, excluding any flush it does
// before the timed region) under `opt`, and summarises. `now` is the clock the warm-up is
// measured with, in seconds (a steady clock unless a test passes its own).
[[nodiscard]] TimingResult measure(const std::function<double()>& one_rep,
                                   const std::function<void()>& warm_one, const TimingOptions& opt,
                                   std::string method);
[[nodiscard]] TimingResult measure(const std::function<double()>& one_rep,
                                   const std::function<void()>& warm_one, const TimingOptions& opt,
                                   std::string method, const std::function<double()>& now);

// Whether a GPU call must be timed without holding its stream. A GPU rep holds the stream with a
// spinning kernel while the call is enqueued, so that the call's launches run back to back; a
// call that synchronises the host while it is enqueued (a plugin's cudaFree or
// cudaStreamSynchronize, a Python module's .item()) waits for that kernel, which gives up only
// after its timeout, so every held rep would take the timeout and fail.
// `held_call_timed_out(timeout_ns)` runs the call once behind a hold that gives up after
// timeout_ns and says whether it gave up. A probe with `probe_ns` decides for most calls; a
// timeout there may be a slow host, so a second probe with `full_ns` (the reps' own timeout)
// decides: a call that outlasts it too synchronises (or could never be timed held anyway).
[[nodiscard]] bool synchronises_while_enqueued(
    const std::function<bool(unsigned long long timeout_ns)>& held_call_timed_out,
    unsigned long long probe_ns, unsigned long long full_ns);

// The method of a GPU timing: `what` ("cuda-events", "cuda-graph replay"), whether the stream was
// held while a rep was enqueued, then the cache: flush_mib is the clean read's size, nullopt
// when the L2 stays warm. "cuda-events, stream held, L2 flushed (100 MiB clean read)".
[[nodiscard]] std::string gpu_timing_method(const std::string& what, bool stream_held,
                                            std::optional<long long> flush_mib);

// The result as a measurement's "timing" object; a ClockReading adds sm_clock_mhz,
// sm_clock_max_mhz, throttle_reasons and throttled (or "clocks": why NVML was unavailable).
[[nodiscard]] nlohmann::json to_json(const TimingResult& t);

// What the "timing" objects of a sweep's measurements say about clocks, for the table's
// provenance: how many were taken while throttled, the SM clock range and the reasons seen; a
// string where no measurement read clocks ("nvml unavailable: ...", "not recorded").
[[nodiscard]] nlohmann::json clock_summary(const std::vector<nlohmann::json>& timings);

} // namespace attn

// How every backend times a kernel: warm-up, repeat until the relative noise is small or the
// time budget is spent, keep the median and the spread (nvbench's measure_cold, in spirit).
#pragma once
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace attn {

struct TimingOptions {
  int warmup = 3;             // launches before measuring
  int min_reps = 10;          // at least this many measured launches
  int max_reps = 1000;        // at most this many
  double max_seconds = 0.5;   // stop measuring after this much measured time
  double target_noise = 0.02; // stop when (p75 - p25) / median falls below this
  bool flush_cache = true;    // flush the last-level cache (or rotate inputs) before each launch
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
  std::string method;     // "cuda-events, L2 flushed", "steady_clock, inputs rotated", ...
};

// Runs `one_rep` (which returns the seconds of one measured launch, excluding any flush it does
// before the timed region) under `opt`, and summarises.
[[nodiscard]] TimingResult measure(const std::function<double()>& one_rep,
                                   const std::function<void()>& warm_one, const TimingOptions& opt,
                                   std::string method);

[[nodiscard]] nlohmann::json to_json(const TimingResult& t);

} // namespace attn

// One decode workload's measurements as the crossover, the rule fit and the regret evaluation see
// them, and the slowdown against the measured best that all of them count as regret.
#pragma once
#include <limits>
#include <map>
#include <string>

namespace attn {

// The time of what was not measured: never the fastest, never a crossover.
inline constexpr double kInf = std::numeric_limits<double>::infinity();

struct DecodePoint {
  int batch = 1;
  int num_heads = 1;
  int num_kv_heads = 1;
  int context_len = 1;
  double best_s = kInf;
  double v1_s = kInf;                      // best decode_v1 time
  std::map<int, double> v2_by_partition;   // best decode_v2 time per partition size
  std::map<std::string, double> by_config; // every timed configuration by key
  // The larger interquartile range of the best v1 and best v2 times over the faster of the two:
  // a choice slower than the best by no more than this is within the measured noise.
  double noise = 0.0;
  [[nodiscard]] bool usable() const { return v1_s < kInf && !v2_by_partition.empty(); }
  // Time of v2 at `partition`, or at the nearest measured partition (log2 distance, ties to the
  // smaller) when that one was not measured here.
  [[nodiscard]] double v2_time(int partition) const;
};

// chosen / best - 1; 0 when the best is unknown, so a point without a best adds no regret.
[[nodiscard]] double slowdown(double chosen, double best);

} // namespace attn

// One decode workload's measurements as the crossover, the rule fit and the regret evaluation see
// them, and the slowdown against the measured best that all of them count as regret.
#pragma once
#include <limits>
#include <map>
#include <string>

#include "src/model/kernel_config.h"

namespace attn {

// The time of what was not measured: never the fastest, never a crossover.
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// The partition of a decode_v2 that declares none: the kernel chooses its own splits (a
// scheduler per batch, as vLLM's CPU attention). A key like a partition size, never one.
inline constexpr int kKernelSplits = 0;
// The partition a decode_v2 configuration launches with, kKernelSplits when it has none.
[[nodiscard]] int v2_partition(const KernelConfig& c);
// "partition 512", or "the kernel chooses its splits" for kKernelSplits.
[[nodiscard]] std::string partition_words(int partition);
// "v2 partition 512", or "v2, the kernel chooses its splits".
[[nodiscard]] std::string v2_words(int partition);

struct DecodePoint {
  int batch = 1;
  int num_heads = 1;
  int num_kv_heads = 1;
  int context_len = 1;
  double best_s = kInf;
  double v1_s = kInf;                      // best decode_v1 time
  std::map<int, double> v2_by_partition;   // best decode_v2 time per partition (or kKernelSplits)
  std::map<std::string, double> by_config; // every timed configuration by key
  // The larger interquartile range of the best v1 and best v2 times over the faster of the two:
  // a choice slower than the best by no more than this is within the measured noise.
  double noise = 0.0;
  [[nodiscard]] bool usable() const { return v1_s < kInf && !v2_by_partition.empty(); }
  // Time of v2 at `partition` where it was measured here. Otherwise: a fixed partition is charged
  // the nearest measured one (log2 distance, ties to the smaller), or the kernel's own splits
  // where only those were measured; the kernel's own splits (a rule that leaves the splits to
  // the kernel) are credited with the fastest measured v2, so that such a rule is charged for
  // its v1/v2 decision alone.
  [[nodiscard]] double v2_time(int partition) const;
};

// chosen / best - 1; 0 when the best is unknown, so a point without a best adds no regret.
[[nodiscard]] double slowdown(double chosen, double best);

} // namespace attn

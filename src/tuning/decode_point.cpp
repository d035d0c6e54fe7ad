// One decode workload's measurements: v2's time at a partition that may not have been measured,
// and the slowdown that rule fitting and regret both count.
#include "src/tuning/decode_point.h"

#include <algorithm>
#include <cmath>

namespace attn {

int v2_partition(const KernelConfig& c) { return c.get("partition", kKernelSplits); }

std::string partition_words(int partition) {
  return partition == kKernelSplits ? "the kernel chooses its splits"
                                    : "partition " + std::to_string(partition);
}

std::string v2_words(int partition) {
  return (partition == kKernelSplits ? "v2, " : "v2 ") + partition_words(partition);
}

double DecodePoint::v2_time(int partition) const {
  auto it = v2_by_partition.find(partition);
  if (it != v2_by_partition.end()) {
    return it->second;
  }
  double fastest = kInf;
  double best_d = kInf;
  double nearest = kInf;
  for (const auto& [p, s] : v2_by_partition) { // ascending, so ties keep the smaller partition
    fastest = std::min(fastest, s);
    if (p == kKernelSplits || partition == kKernelSplits) {
      continue;
    }
    const double d = std::fabs(std::log2(double(p)) - std::log2(double(partition)));
    if (d < best_d - 1e-12) {
      best_d = d;
      nearest = s;
    }
  }
  if (partition == kKernelSplits) {
    return fastest;
  }
  // No fixed partition measured: the kernel's own splits are the only v2 there is.
  return nearest < kInf ? nearest : fastest;
}

double slowdown(double chosen, double best) {
  if (!(best > 0) || best == kInf) {
    return 0.0;
  }
  return chosen / best - 1.0;
}

} // namespace attn

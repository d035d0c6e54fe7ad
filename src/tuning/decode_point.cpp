// One decode workload's measurements: v2's time at a partition that may not have been measured,
// and the slowdown that rule fitting and regret both count.
#include "src/tuning/decode_point.h"

#include <algorithm>
#include <cmath>

namespace attn {

double DecodePoint::v2_time(int partition) const {
  auto it = v2_by_partition.find(partition);
  if (it != v2_by_partition.end()) {
    return it->second;
  }
  double best_d = kInf;
  double t = kInf;
  for (const auto& [p, s] : v2_by_partition) { // ascending, so ties keep the smaller partition
    const double d = std::fabs(std::log2(double(std::max(p, 1))) - std::log2(double(partition)));
    if (d < best_d - 1e-12) {
      best_d = d;
      t = s;
    }
  }
  return t;
}

double slowdown(double chosen, double best) {
  if (!(best > 0) || best == kInf) {
    return 0.0;
  }
  return chosen / best - 1.0;
}

} // namespace attn

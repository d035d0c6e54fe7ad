// Batch rules: a least-regret tree over a batch's features, grown greedily, and the
// traffic-weighted regret of any rule over measured batches.
#include "src/tuning/batch_rules.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "src/tuning/regret.h"

namespace attn {

using nlohmann::json;

namespace {

using Samples = std::vector<const BatchSample*>;

// The configuration with the least weighted slowdown over `s` (the first listed on a tie), and
// that slowdown.
std::pair<std::size_t, double> best_leaf(const Samples& s, const std::vector<KernelConfig>& cands) {
  std::size_t best = 0;
  double best_cost = kInf;
  for (std::size_t c = 0; c < cands.size(); ++c) {
    double cost = 0.0;
    for (const BatchSample* b : s) {
      cost += b->weight * slowdown(config_time(b->point, cands[c]), b->point.best_s);
    }
    if (cost < best_cost) {
      best = c;
      best_cost = cost;
    }
  }
  return {best, best_cost};
}

double weight_of(const Samples& s) {
  double w = 0.0;
  for (const BatchSample* b : s) {
    w += b->weight;
  }
  return w;
}

json leaf_json(const Samples& s, const std::vector<KernelConfig>& cands) {
  const auto [c, cost] = best_leaf(s, cands);
  json cfg = cands[c].to_json();
  cfg["key"] = cands[c].key();
  const double w = weight_of(s);
  return {{"family", family_name(cands[c].family)},
          {"config", cfg},
          {"batches", int(s.size())},
          {"weight", w},
          {"mean_slowdown", w > 0 ? cost / w : 0.0}};
}

json grow(const Samples& s, const std::vector<KernelConfig>& cands, int depth) {
  const double here = best_leaf(s, cands).second;
  const double w = weight_of(s);
  struct Split {
    const char* feature = nullptr;
    double threshold = 0.0;
    double cost = kInf;
  } best;
  if (depth < kBatchTreeDepth && s.size() >= 4) {
    for (const char* f : kBatchFeatures) {
      Samples sorted = s;
      std::stable_sort(sorted.begin(), sorted.end(), [f](const BatchSample* a, const BatchSample* b) {
        return a->features.get(f) < b->features.get(f);
      });
      for (std::size_t i = 2; i + 2 <= sorted.size(); ++i) {
        const double lo = sorted[i - 1]->features.get(f);
        const double hi = sorted[i]->features.get(f);
        if (!(hi > lo)) {
          continue; // the same value on both sides: no threshold between them
        }
        const Samples left(sorted.begin(), sorted.begin() + std::ptrdiff_t(i));
        const Samples right(sorted.begin() + std::ptrdiff_t(i), sorted.end());
        const double cost = best_leaf(left, cands).second + best_leaf(right, cands).second;
        if (cost < best.cost) {
          best = {f, std::sqrt(lo * hi), cost};
        }
      }
    }
  }
  if (best.feature == nullptr || here - best.cost < kBatchSplitGain * w) {
    return leaf_json(s, cands);
  }
  Samples below;
  Samples above;
  for (const BatchSample* b : s) {
    (b->features.get(best.feature) < best.threshold ? below : above).push_back(b);
  }
  return {{"feature", best.feature},
          {"threshold", best.threshold},
          {"below", grow(below, cands, depth + 1)},
          {"at_or_above", grow(above, cands, depth + 1)}};
}

} // namespace

json fit_batch_tree(const std::vector<BatchSample>& samples) {
  Samples usable;
  std::vector<KernelConfig> cands;
  for (const BatchSample& b : samples) {
    if (!b.point.usable()) {
      continue;
    }
    usable.push_back(&b);
    for (const KernelConfig& c : b.timed) {
      if (std::find(cands.begin(), cands.end(), c) == cands.end()) {
        cands.push_back(c);
      }
    }
  }
  if (usable.empty() || cands.empty()) {
    return nullptr;
  }
  return grow(usable, cands, 0);
}

json TrafficRegret::to_json() const {
  return {{"regret", regret()}, {"total_s", total_s}, {"best_s", best_s}, {"mean", mean},
          {"p90", p90},         {"worst", worst},     {"batches", batches}, {"weight", weight}};
}

TrafficRegret traffic_regret(const std::vector<BatchSample>& samples, const BatchTime& time) {
  TrafficRegret r;
  std::vector<std::pair<double, double>> slow; // (slowdown, weight)
  for (const BatchSample& b : samples) {
    if (!b.point.usable()) {
      continue;
    }
    const double t = time(b);
    const double s = slowdown(t, b.point.best_s);
    r.total_s += b.weight * t;
    r.best_s += b.weight * b.point.best_s;
    r.mean += b.weight * s;
    r.weight += b.weight;
    r.worst = std::max(r.worst, s);
    ++r.batches;
    slow.emplace_back(s, b.weight);
  }
  if (r.weight > 0) {
    r.mean /= r.weight;
    std::sort(slow.begin(), slow.end());
    double acc = 0.0;
    for (const auto& [s, w] : slow) {
      acc += w;
      if (acc >= 0.9 * r.weight - 1e-12) {
        r.p90 = s;
        break;
      }
    }
  }
  return r;
}

} // namespace attn

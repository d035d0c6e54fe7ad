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

// The fit's view of the samples: a cost (weighted slowdown) per sample and candidate, where the
// candidates are the uniform lookup (first, so that it wins ties) when every sample has it, then
// the configurations timed anywhere.
struct Fit {
  std::vector<const BatchSample*> samples;
  std::vector<KernelConfig> configs;
  bool with_lookup = false;
  std::vector<std::vector<double>> cost; // [sample][candidate]
  // Whether a sample is scored out of sample: the batches of mixed lengths. Grid points (batches
  // of one length) always stay in the training side: the decode points were built on them, so
  // the lookup's cost there is no test of it.
  std::vector<char> scored;
  [[nodiscard]] std::size_t candidates() const { return configs.size() + (with_lookup ? 1 : 0); }
  [[nodiscard]] bool is_lookup(std::size_t c) const { return with_lookup && c == 0; }
  [[nodiscard]] const KernelConfig& config(std::size_t c) const {
    return configs[c - (with_lookup ? 1 : 0)];
  }
  [[nodiscard]] double feature(int i, const char* f) const {
    return samples[std::size_t(i)]->features.get(f);
  }
};

using Idx = std::vector<int>;

double weight_of(const Fit& fit, const Idx& s) {
  double w = 0.0;
  for (int i : s) {
    w += fit.samples[std::size_t(i)]->weight;
  }
  return w;
}

double cost_of(const Fit& fit, const Idx& s, std::size_t c) {
  double cost = 0.0;
  for (int i : s) {
    cost += fit.cost[std::size_t(i)][c];
  }
  return cost;
}

// The candidate with the least cost over `s` (the first listed on a tie), and that cost.
std::pair<std::size_t, double> cheapest(const Fit& fit, const Idx& s) {
  std::size_t best = 0;
  double best_cost = kInf;
  for (std::size_t c = 0; c < fit.candidates(); ++c) {
    const double cost = cost_of(fit, s, c);
    if (cost < best_cost) {
      best = c;
      best_cost = cost;
    }
  }
  return {best, best_cost};
}

struct Split {
  const char* feature = nullptr;
  double threshold = 0.0;
  double cost = kInf;
  std::size_t below = 0; // the cheapest candidate on each side
  std::size_t above = 0;
  [[nodiscard]] bool found() const { return feature != nullptr; }
  [[nodiscard]] std::size_t leaf_for(const Fit& fit, int i) const {
    return fit.feature(i, feature) < threshold ? below : above;
  }
};

// The split of `s` that cuts its cost most, two samples on each side at least. Costs on each side
// come from running sums over the samples sorted by the feature, one pass from each end.
Split best_split(const Fit& fit, const Idx& s) {
  Split best;
  const std::size_t n = s.size();
  const std::size_t nc = fit.candidates();
  if (n < 4) {
    return best;
  }
  std::vector<double> run(nc);
  std::vector<std::pair<double, std::size_t>> below_min(n + 1); // over the first k samples
  std::vector<std::pair<double, std::size_t>> above_min(n + 1); // over samples k..n-1
  auto cheapest_run = [&] {
    std::pair<double, std::size_t> m{kInf, 0};
    for (std::size_t c = 0; c < nc; ++c) {
      if (run[c] < m.first) {
        m = {run[c], c};
      }
    }
    return m;
  };
  for (const char* f : kBatchFeatures) {
    Idx sorted = s;
    std::stable_sort(sorted.begin(), sorted.end(),
                     [&](int a, int b) { return fit.feature(a, f) < fit.feature(b, f); });
    std::fill(run.begin(), run.end(), 0.0);
    for (std::size_t k = 1; k <= n; ++k) {
      for (std::size_t c = 0; c < nc; ++c) {
        run[c] += fit.cost[std::size_t(sorted[k - 1])][c];
      }
      below_min[k] = cheapest_run();
    }
    std::fill(run.begin(), run.end(), 0.0);
    for (std::size_t k = n; k-- > 0;) {
      for (std::size_t c = 0; c < nc; ++c) {
        run[c] += fit.cost[std::size_t(sorted[k])][c];
      }
      above_min[k] = cheapest_run();
    }
    for (std::size_t k = 2; k + 2 <= n; ++k) {
      const double lo = fit.feature(sorted[k - 1], f);
      const double hi = fit.feature(sorted[k], f);
      if (!(hi > lo)) {
        continue; // the same value on both sides: no threshold between them
      }
      const double cost = below_min[k].first + above_min[k].first;
      if (cost < best.cost) {
        best = {f, std::sqrt(lo * hi), cost, below_min[k].second, above_min[k].second};
      }
    }
  }
  return best;
}

// The scored samples of `s`.
Idx scored_of(const Fit& fit, const Idx& s) {
  Idx out;
  for (int i : s) {
    if (fit.scored[std::size_t(i)] != 0) {
      out.push_back(i);
    }
  }
  return out;
}

// The folds of `s`'s scored samples: one sample each for small nodes, else every
// kBatchFolds-th sample.
std::vector<Idx> folds_of(const Fit& fit, const Idx& s) {
  const Idx scored = scored_of(fit, s);
  const std::size_t k = scored.size() <= std::size_t(kBatchLeaveOneOutMax)
                            ? scored.size()
                            : std::size_t(kBatchFolds);
  std::vector<Idx> folds(k);
  for (std::size_t p = 0; p < scored.size(); ++p) {
    folds[p % k].push_back(scored[p]);
  }
  return folds;
}

Idx without(const Idx& s, const Idx& fold) {
  Idx rest;
  for (int i : s) {
    if (std::find(fold.begin(), fold.end(), i) == fold.end()) {
      rest.push_back(i);
    }
  }
  return rest;
}

// Cross-validated cost over `s`'s scored samples of choosing the cheapest candidate (split =
// false) or the best split and its cheapest sides (split = true, the cheapest candidate where
// the rest has none).
double cross_validated(const Fit& fit, const Idx& s, bool split) {
  double total = 0.0;
  for (const Idx& fold : folds_of(fit, s)) {
    const Idx rest = without(s, fold);
    const Split sp = split ? best_split(fit, rest) : Split{};
    const std::size_t leaf = cheapest(fit, rest).first;
    for (int i : fold) {
      total += fit.cost[std::size_t(i)][sp.found() ? sp.leaf_for(fit, i) : leaf];
    }
  }
  return total;
}

// The leaf for `s` and what it is expected to cost on its scored samples when not fitted on
// them: the cheapest candidate, unless that is a configuration whose cross-validated cost does
// not beat the lookup's there by kBatchHeldGain of their weight.
std::pair<std::size_t, double> choose_leaf(const Fit& fit, const Idx& s) {
  const auto [c, cost] = cheapest(fit, s);
  const Idx scored = scored_of(fit, s);
  if (fit.is_lookup(c)) {
    return {c, cost_of(fit, scored, c)};
  }
  const double cv = cross_validated(fit, s, false);
  if (fit.with_lookup) {
    const double lookup = cost_of(fit, scored, 0);
    if (lookup <= cv + kBatchHeldGain * weight_of(fit, scored)) {
      return {0, lookup};
    }
  }
  return {c, cv};
}

json leaf_json(const Fit& fit, const Idx& s, std::size_t c) {
  const double w = weight_of(fit, s);
  const double cost = cost_of(fit, s, c);
  json leaf;
  if (fit.is_lookup(c)) {
    leaf = {{"lookup", "points"}};
  } else {
    json cfg = fit.config(c).to_json();
    cfg["key"] = fit.config(c).key();
    leaf = {{"family", family_name(fit.config(c).family)}, {"config", cfg}};
  }
  leaf["batches"] = int(s.size());
  leaf["weight"] = w;
  leaf["mean_slowdown"] = w > 0 ? cost / w : 0.0;
  return leaf;
}

json grow(const Fit& fit, const Idx& s, int depth) {
  const auto [leaf, leaf_cost] = choose_leaf(fit, s);
  const double margin = kBatchSplitGain * weight_of(fit, s);
  const double held_margin = kBatchHeldGain * weight_of(fit, scored_of(fit, s));
  const Split sp = depth < kBatchTreeDepth ? best_split(fit, s) : Split{};
  if (!sp.found() || cost_of(fit, s, cheapest(fit, s).first) - sp.cost < margin ||
      leaf_cost - cross_validated(fit, s, true) <= held_margin) { // (no batches: no split)
    return leaf_json(fit, s, leaf);
  }
  Idx below;
  Idx above;
  for (int i : s) {
    (fit.feature(i, sp.feature) < sp.threshold ? below : above).push_back(i);
  }
  return {{"feature", sp.feature},
          {"threshold", sp.threshold},
          {"below", grow(fit, below, depth + 1)},
          {"at_or_above", grow(fit, above, depth + 1)}};
}

} // namespace

json fit_batch_tree(const std::vector<BatchSample>& samples) {
  Fit fit;
  fit.with_lookup = true;
  for (const BatchSample& b : samples) {
    if (!b.point.usable()) {
      continue;
    }
    fit.samples.push_back(&b);
    fit.with_lookup = fit.with_lookup && b.lookup_s < kInf;
    for (const KernelConfig& c : b.timed) {
      if (std::find(fit.configs.begin(), fit.configs.end(), c) == fit.configs.end()) {
        fit.configs.push_back(c);
      }
    }
  }
  if (fit.samples.empty() || fit.configs.empty()) {
    return nullptr;
  }
  Idx all;
  for (const BatchSample* b : fit.samples) {
    all.push_back(int(fit.cost.size()));
    std::vector<double> row;
    if (fit.with_lookup) {
      row.push_back(b->weight * slowdown(b->lookup_s, b->point.best_s));
    }
    for (const KernelConfig& c : fit.configs) {
      row.push_back(b->weight * slowdown(config_time(b->point, c), b->point.best_s));
    }
    fit.cost.push_back(std::move(row));
    fit.scored.push_back(b->grid ? 0 : 1);
  }
  return grow(fit, all, 0);
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

// The noise-aware v1/v2 crossover of one shape point: per-length comparisons against the larger
// interquartile range, decisions that do not flip on noise, and the intervals they make.
#include "src/tuning/crossover.h"

#include <algorithm>
#include <cmath>

namespace attn {

Comparison compare(const ContextTiming& t) {
  Comparison c;
  const bool has1 = t.v1_s < kInf;
  const bool has2 = t.v2_s < kInf;
  c.measured = has1 || has2;
  c.both = has1 && has2;
  if (!c.both) {
    c.v2_faster = has2;
    return c;
  }
  const double fast = std::min(t.v1_s, t.v2_s);
  const double slow = std::max(t.v1_s, t.v2_s);
  const double iqr = std::max({t.v1_iqr_s, t.v2_iqr_s, 0.0});
  c.v2_faster = t.v2_s < t.v1_s;
  // An exact tie with no recorded spread is within noise too: neither family wins it.
  c.within_noise = slow - fast <= iqr;
  c.margin = fast > 0 ? slow / fast - 1.0 : 0.0;
  c.noise = fast > 0 ? iqr / fast : 0.0;
  return c;
}

bool Crossover::uses_v2(int context_len) const {
  return std::any_of(v2.begin(), v2.end(), [context_len](const V2Interval& iv) {
    return context_len >= iv.from && (!iv.to || context_len < *iv.to);
  });
}

nlohmann::json Crossover::intervals_json() const {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& iv : v2) {
    out.push_back({iv.from, iv.to ? nlohmann::json(*iv.to) : nlohmann::json(nullptr)});
  }
  return out;
}

std::optional<nlohmann::json> Crossover::v2_from_json() const {
  if (v2.empty()) {
    return nlohmann::json("never");
  }
  if (v2.size() > 1 || v2.front().to) {
    return std::nullopt;
  }
  return v2.front().from == 1 ? nlohmann::json("always") : nlohmann::json(v2.front().from);
}

Crossover find_crossover(const std::vector<ContextTiming>& sorted) {
  Crossover c;
  std::vector<std::size_t> measured; // indices with at least one family timed
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    c.comparisons.push_back(compare(sorted[i]));
    if (c.comparisons.back().measured) {
      measured.push_back(i);
    }
  }
  // Leading lengths within noise follow the first length beyond noise; v1 when there is none.
  bool previous = false;
  for (std::size_t i : measured) {
    if (!c.comparisons[i].within_noise) {
      previous = c.comparisons[i].v2_faster;
      break;
    }
  }
  std::optional<int> open_from; // start of the v2 run being built
  for (std::size_t k = 0; k < measured.size(); ++k) {
    const Comparison& cmp = c.comparisons[measured[k]];
    const bool v2 = cmp.within_noise ? previous : cmp.v2_faster;
    const int ctx = sorted[measured[k]].context_len;
    if (v2 && !open_from) {
      open_from = k == 0 ? 1 : ctx;
    } else if (!v2 && open_from) {
      c.v2.push_back({*open_from, ctx});
      open_from.reset();
    }
    previous = v2;
  }
  if (open_from) {
    c.v2.push_back({*open_from, std::nullopt});
  }
  return c;
}

} // namespace attn

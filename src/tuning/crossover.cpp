// The noise-aware v1/v2 crossover of one shape point: per-length comparisons against the larger
// interquartile range, decisions that do not flip on noise, the intervals they make, and the
// decisions that rest on timings within noise.
#include "src/tuning/crossover.h"

#include <algorithm>
#include <cmath>

namespace attn {

int switch_between(const ContextTiming& a, const ContextTiming& b) {
  const int lo = a.context_len + 1;
  const int hi = b.context_len;
  if (!(a.v1_s < kInf && a.v2_s < kInf && b.v1_s < kInf && b.v2_s < kInf) || lo >= hi ||
      a.context_len <= 0) {
    return hi;
  }
  // log(v2 / v1) at both ends, interpolated linearly in log context length to its zero.
  const double ra = std::log(a.v2_s / a.v1_s);
  const double rb = std::log(b.v2_s / b.v1_s);
  if (!(std::isfinite(ra) && std::isfinite(rb)) || ra == rb) {
    return hi;
  }
  const double t = std::clamp(ra / (ra - rb), 0.0, 1.0);
  const double x = double(a.context_len) * std::pow(double(b.context_len) / a.context_len, t);
  // Rounded up, less a hair of rounding error: a crossing computed as 1024.0000000001 is 1024.
  return int(std::clamp(std::ceil(x * (1.0 - 1e-12)), double(lo), double(hi)));
}

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

namespace {

// The decisions of find_crossover that rest on timings within noise in a way that can change
// the table's answer: a within-noise length (its decision carried from another length) whose run
// of within-noise lengths borders a switch (the switch could lie anywhere in the run), or whose
// run holds two or more lengths and at every one of them the faster median is the other family
// (a switch the noise may hide). Within-noise lengths where neither holds are ties the table
// settles one way or the other at a cost below the noise; they are not listed. `measured`
// indexes `sorted`; `decision` is per measured length.
std::vector<NoisyDecision> noisy_decisions(const std::vector<ContextTiming>& sorted,
                                           const std::vector<Comparison>& cmp,
                                           const std::vector<std::size_t>& measured,
                                           const std::vector<bool>& decision) {
  std::vector<NoisyDecision> out;
  const auto beyond = [&](std::size_t k) { return !cmp[measured[k]].within_noise; };
  const auto ctx = [&](std::size_t k) { return sorted[measured[k]].context_len; };
  std::optional<std::size_t> last_beyond; // the latest beyond-noise length before k
  std::size_t k = 0;
  while (k < measured.size()) {
    if (beyond(k)) {
      last_beyond = k;
      ++k;
      continue;
    }
    // The run of within-noise lengths [k, end) and the beyond-noise length after it.
    std::size_t end = k;
    while (end < measured.size() && !beyond(end)) {
      ++end;
    }
    const std::optional<std::size_t> next_beyond =
        end < measured.size() ? std::optional<std::size_t>(end) : std::nullopt;
    bool all_against = end - k >= 2;
    for (std::size_t j = k; j < end; ++j) {
      all_against = all_against && cmp[measured[j]].v2_faster != decision[j];
    }
    for (std::size_t j = k; j < end; ++j) {
      const Comparison& c = cmp[measured[j]];
      NoisyDecision n;
      n.context_len = ctx(j);
      n.v2 = decision[j];
      n.v2_faster = c.v2_faster;
      n.margin = c.margin;
      n.noise = c.noise;
      if (const auto from = last_beyond ? last_beyond : next_beyond) {
        n.carried_from = ctx(*from);
      }
      // Within-noise lengths keep their decision up to the next beyond-noise one: a different
      // decision there is a switch this run borders.
      if (next_beyond && decision[*next_beyond] != decision[j]) {
        n.switch_at = ctx(*next_beyond);
      }
      n.hides_switch = all_against;
      if (n.switch_at || n.hides_switch) {
        out.push_back(n);
      }
    }
    k = end;
  }
  return out;
}

} // namespace

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
  int open_from = 0;          // start of the v2 run being built; 0: none (lengths start at 1)
  std::vector<bool> decision; // per measured length
  for (std::size_t k = 0; k < measured.size(); ++k) {
    const Comparison& cmp = c.comparisons[measured[k]];
    const bool v2 = cmp.within_noise ? previous : cmp.v2_faster;
    if (v2 && open_from == 0) {
      open_from = k == 0 ? 1 : switch_between(sorted[measured[k - 1]], sorted[measured[k]]);
    } else if (!v2 && open_from != 0) {
      c.v2.push_back({open_from, switch_between(sorted[measured[k - 1]], sorted[measured[k]])});
      open_from = 0;
    }
    previous = v2;
    decision.push_back(v2);
  }
  if (open_from != 0) {
    c.v2.push_back({open_from, std::nullopt});
  }
  c.noisy = noisy_decisions(sorted, c.comparisons, measured, decision);
  return c;
}

} // namespace attn

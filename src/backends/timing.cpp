#include "src/backends/timing.h"

#include <algorithm>
#include <vector>

namespace attn {

namespace {
double quantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) {
    return 0.0;
  }
  const double pos = q * double(sorted.size() - 1);
  const auto lo = std::size_t(pos);
  const auto hi = std::min(lo + 1, sorted.size() - 1);
  const double f = pos - double(lo);
  return sorted[lo] * (1 - f) + sorted[hi] * f;
}
} // namespace

TimingResult measure(const std::function<double()>& one_rep, const std::function<void()>& warm_one,
                     const TimingOptions& opt, std::string method) {
  for (int i = 0; i < opt.warmup; ++i) {
    warm_one();
  }
  std::vector<double> samples;
  double total = 0.0;
  TimingResult r;
  r.method = std::move(method);
  while (int(samples.size()) < opt.max_reps) {
    const double t = one_rep();
    samples.push_back(t);
    total += t;
    if (int(samples.size()) >= opt.min_reps) {
      std::vector<double> s = samples;
      std::sort(s.begin(), s.end());
      const double med = quantile(s, 0.5);
      const double noise = med > 0 ? (quantile(s, 0.75) - quantile(s, 0.25)) / med : 0.0;
      if (noise <= opt.target_noise) {
        r.converged = true;
        break;
      }
      if (total >= opt.max_seconds) {
        break;
      }
    }
  }
  std::sort(samples.begin(), samples.end());
  r.reps = int(samples.size());
  r.median_s = quantile(samples, 0.5);
  r.min_s = samples.empty() ? 0.0 : samples.front();
  r.max_s = samples.empty() ? 0.0 : samples.back();
  r.p25_s = quantile(samples, 0.25);
  r.p75_s = quantile(samples, 0.75);
  r.rel_noise = r.median_s > 0 ? (r.p75_s - r.p25_s) / r.median_s : 0.0;
  return r;
}

nlohmann::json to_json(const TimingResult& t) {
  return {{"median_s", t.median_s}, {"min_s", t.min_s},         {"max_s", t.max_s},
          {"p25_s", t.p25_s},       {"p75_s", t.p75_s},         {"rel_noise", t.rel_noise},
          {"reps", t.reps},         {"converged", t.converged}, {"method", t.method}};
}

} // namespace attn

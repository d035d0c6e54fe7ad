// The prefill view's numbers: each prefill configuration's achieved rate per shape, from the
// query-key pairs the mask lets through and the measured time.
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "src/model/problem.h"
#include "src/report/model_views.h"

namespace attn::report {

using nlohmann::json;

namespace {

std::string prefill_key(const Shape& s, int q_len, int k_len) {
  return map_key(s) + " b=" + std::to_string(s.batch) + " q=" + std::to_string(q_len) +
         " k=" + std::to_string(k_len);
}

// The problem's query-key pairs that the mask lets through, as Problem::visible_pairs counts
// them (bottom-right aligned causal mask and windows, SPEC.md), for a uniform batch.
double visible_pairs(const Shape& s, int q_len, int k_len) {
  const attn_math::Mask m{s.causal ? 1 : 0, s.window_left, s.window_right};
  return double(attn::visible_pairs(m, q_len, k_len)) * s.batch * s.num_heads;
}

} // namespace

void add_prefill(ReportModel& m, const ReportSource& src) {
  // Every configuration's time per prefill shape, from the results.
  std::map<std::string, std::vector<std::pair<std::string, double>>> timed;
  for (const auto& r : src.records) {
    if (r.workload.phase == Phase::prefill && r.status == "ok" && r.median_s > 0) {
      timed[prefill_key(shape_of(r.workload), r.workload.q_len, r.workload.k_len)].emplace_back(
          r.config.key(), r.median_s);
    }
  }
  for (const auto& p : src.table.value("prefill", json::array())) {
    const Shape s = shape_of(p);
    const int q = p.at("q_len").get<int>();
    const int k = p.at("k_len").get<int>();
    PrefillShape ps;
    ps.held_out = p.value("held_out", false);
    ps.title = "b=" + std::to_string(s.batch) + " q=" + std::to_string(q) +
               " k=" + std::to_string(k) + " h=" + std::to_string(s.num_heads) +
               " kvh=" + std::to_string(s.num_kv_heads) + " d=" + std::to_string(s.head_dim) + " " +
               s.dtype + (s.causal ? " causal" : "") + mask_words(s); // it says non-causal
    const double flops = 4.0 * s.head_dim * visible_pairs(s, q, k);
    const std::string best = p.at("best").at("config").at("key").get<std::string>();
    auto it = timed.find(prefill_key(s, q, k));
    if (it != timed.end()) {
      for (const auto& [cfg, t] : it->second) {
        ps.bars.push_back({cfg, t, flops / t, cfg == best});
      }
    } else {
      const double t = p["best"].at("median_s").get<double>();
      ps.bars.push_back({best, t, flops / t, true});
    }
    std::sort(ps.bars.begin(), ps.bars.end(),
              [](const PrefillBar& a, const PrefillBar& b) { return a.median_s < b.median_s; });
    m.prefill.push_back(std::move(ps));
  }
}

} // namespace attn::report

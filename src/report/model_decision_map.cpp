// The decision maps' numbers: per shape, the measured winner at each (batch, context length)
// with its margin, the table's decisions that rest on timings within noise, and where each rule
// that picks v1 or v2 (engine_rules()) switches.
#include <algorithm>
#include <cmath>
#include <functional>

#include "src/report/model_views.h"
#include "src/tuning/regret.h"

namespace attn::report {

using nlohmann::json;

namespace {

// The first context length in (a, b] where `uses` differs from uses(a), by bisection.
int first_change(const std::function<bool(int)>& uses, int a, int b) {
  const bool at_a = uses(a);
  while (b - a > 1) {
    const int mid = a + (b - a) / 2;
    (uses(mid) == at_a ? a : b) = mid;
  }
  return b;
}

std::vector<RuleSwitch> switches_of(const Rule& rule, DecodePoint p, int lo, int hi) {
  const auto uses = [&](int ctx) {
    p.context_len = ctx;
    return rule(p).v2;
  };
  std::vector<RuleSwitch> out;
  constexpr int kSamples = 256;
  int prev = lo;
  bool prev_v2 = uses(lo);
  for (int i = 1; i <= kSamples; ++i) {
    const int ctx =
        std::max(prev, int(std::lround(lo * std::pow(double(hi) / lo, double(i) / kSamples))));
    if (ctx == prev) {
      continue;
    }
    const bool v2 = uses(ctx);
    if (v2 != prev_v2) {
      out.push_back({first_change(uses, prev, ctx), v2});
    }
    prev = ctx;
    prev_v2 = v2;
  }
  return out;
}

// The point's decisions that rest on timings within noise, marked on its cells and listed.
void add_noisy(ReportModel& m, DecisionMap& dm, const json& p, const Shape& s) {
  if (!p.contains("noisy_decisions")) {
    return;
  }
  m.noisy_listed = true;
  for (const auto& n : p.at("noisy_decisions")) {
    NoisyMark k;
    k.shape_key = dm.shape_key;
    k.batch = s.batch;
    k.context_len = n.at("context_len").get<int>();
    k.where = point_words(s, k.context_len);
    k.decision = n.at("decision").get<std::string>();
    k.faster = n.at("faster").get<std::string>();
    k.margin = n.at("margin").get<double>();
    k.noise = n.at("noise").get<double>();
    k.carried_from = n.at("carried_from").is_null() ? 0 : n["carried_from"].get<int>();
    k.switch_at = n.at("switch_at").is_null() ? 0 : n["switch_at"].get<int>();
    k.remeasured = n.value("remeasured", false);
    if (auto cell = dm.cells.find({s.batch, k.context_len}); cell != dm.cells.end()) {
      cell->second.noisy_decision = true;
    }
    m.noisy.push_back(std::move(k));
  }
}

} // namespace

void add_maps(ReportModel& m, const ReportSource& src) {
  std::map<std::string, std::size_t> index;
  for (const auto& p : src.table.at("decode")) {
    const Shape s = shape_of(p);
    const std::string key = map_key(s);
    auto [it, fresh] = index.try_emplace(key, m.maps.size());
    if (fresh) {
      DecisionMap dm;
      dm.shape_key = key;
      dm.title = map_title(s);
      dm.num_heads = s.num_heads;
      dm.num_kv_heads = s.num_kv_heads;
      m.maps.push_back(std::move(dm));
    }
    DecisionMap& dm = m.maps[it->second];
    dm.batches.push_back(s.batch);
    for (const auto& e : p.at("measured")) {
      const int ctx = e.at("context_len").get<int>();
      dm.contexts.push_back(ctx);
      DecisionCell c;
      const json& best = e.at("best").at("config");
      c.config = best.at("key").get<std::string>();
      c.v2 = best.at("family").get<std::string>() == "decode_v2";
      c.partition = c.v2 ? partition_of(best) : 0;
      c.both = has_time(e, "v1") && has_time(e, "v2");
      c.within_noise = e.value("within_noise", false);
      if (e.contains("margin")) {
        c.margin = e["margin"].get<double>();
      } else if (c.both) {
        const double a = e["v1"]["median_s"].get<double>();
        const double b = e["v2"]["median_s"].get<double>();
        c.margin = std::max(a, b) / std::min(a, b) - 1.0;
      }
      dm.cells[{s.batch, ctx}] = c;
    }
    add_noisy(m, dm, p, s);
  }
  const Rule fitted = fitted_rule_of(src.table);
  for (auto& dm : m.maps) {
    std::sort(dm.batches.begin(), dm.batches.end());
    dm.batches.erase(std::unique(dm.batches.begin(), dm.batches.end()), dm.batches.end());
    std::sort(dm.contexts.begin(), dm.contexts.end());
    dm.contexts.erase(std::unique(dm.contexts.begin(), dm.contexts.end()), dm.contexts.end());
    // The axis runs half a column past the first and last measured lengths (log scale).
    const auto& cx = dm.contexts;
    const double lo_step = cx.size() > 1 ? std::sqrt(double(cx[1]) / cx[0]) : 2.0;
    const double hi_step = cx.size() > 1 ? std::sqrt(double(cx.back()) / cx[cx.size() - 2]) : 2.0;
    dm.ctx_lo = std::max(1, int(std::floor(cx.front() / lo_step)));
    dm.ctx_hi = std::max(dm.ctx_lo + 1, int(std::ceil(cx.back() * hi_step)));
    dm.too_large = dm.batches.size() * dm.contexts.size() > kMaxMapCells;
    for (const EngineRule& r : dm.too_large ? std::vector<EngineRule>{} : engine_rules()) {
      const Rule rule = family_rule(r, fitted);
      if (!rule) {
        continue; // the table lookup, or a table without a fitted rule
      }
      for (int b : dm.batches) {
        DecodePoint p;
        p.batch = b;
        p.num_heads = dm.num_heads;
        p.num_kv_heads = dm.num_kv_heads;
        dm.switches[r.id][b] = switches_of(rule, p, dm.ctx_lo, dm.ctx_hi);
        for (int ctx : dm.contexts) {
          p.context_len = ctx;
          dm.rule_v2[r.id][{b, ctx}] = rule(p).v2;
        }
      }
    }
  }
}

} // namespace attn::report

// The regret view's numbers: how much slower than the measured best each rule's choice is at
// every decode point of the sweep and the held-out set (engine_rules(), the table lookup
// through the reader engines use).
#include <string>

#include "include/attn_tune/threshold_table_reader.hpp"
#include "src/model/kernel_config.h"
#include "src/report/model_views.h"
#include "src/tuning/regret.h"

namespace attn::report {

using nlohmann::json;

namespace {

std::string best_key(const DecodePoint& p) {
  std::string key;
  double t = kInf;
  for (const auto& [k, s] : p.by_config) {
    if (s < t) {
      t = s;
      key = k;
    }
  }
  return key;
}

std::string rule_words(const RuleChoice& c) { return c.v2 ? v2_words(c.partition) : "v1"; }

} // namespace

void add_regret(ReportModel& m, const ReportSource& src, const std::vector<RegretInput>& in) {
  const attn_tune::ThresholdTableReader reader(src.table);
  const Rule fitted = fitted_rule_of(src.table);
  m.regret.stored = src.table.value("regret", json::object());
  for (const EngineRule& rule : engine_rules()) {
    m.regret.points[rule.id]; // every rule has a row, points or not
  }
  for (const auto& r : in) {
    if (!r.pt.usable()) {
      continue;
    }
    const std::string set = r.held_out ? "held_out" : "sweep";
    const std::string where = point_words(r.shape, r.pt.context_len);
    const std::string best = best_key(r.pt);
    const auto add = [&](const std::string& rule, double t, const std::string& chose) {
      const double s = slowdown(t, r.pt.best_s);
      m.regret.points[rule].push_back({set, where, s, beyond_noise(r.pt, s), chose, best});
    };
    for (const EngineRule& rule : engine_rules()) {
      if (rule.kind == RuleKind::table_lookup) {
        const KernelConfig pick =
            KernelConfig::from_json(reader.lookup(query_of(r.shape, r.pt.context_len)).config);
        add(rule.id, config_time(r.pt, pick), pick.key());
      } else if (const Rule choose = family_rule(rule, fitted)) {
        const RuleChoice c = choose(r.pt);
        add(rule.id, rule_time(r.pt, c), rule_words(c));
      }
    }
  }
}

// Decode points from the table alone: the best v1 and the best v2 (at its partition) per point.
std::vector<RegretInput> regret_inputs_from_table(const json& table) {
  std::vector<RegretInput> out;
  const auto add = [&out](const Shape& s, const json& e, bool held_out) {
    RegretInput r;
    r.shape = s;
    r.held_out = held_out;
    r.pt.batch = s.batch;
    r.pt.num_heads = s.num_heads;
    r.pt.num_kv_heads = s.num_kv_heads;
    r.pt.context_len = e.at("context_len").get<int>();
    r.pt.best_s = e.at("best").at("median_s").get<double>();
    r.pt.by_config[e["best"]["config"].at("key").get<std::string>()] = r.pt.best_s;
    if (has_time(e, "v1")) {
      r.pt.v1_s = e["v1"].at("median_s").get<double>();
      r.pt.by_config[e["v1"]["config"].at("key").get<std::string>()] = r.pt.v1_s;
    }
    if (has_time(e, "v2")) {
      const double t = e["v2"].at("median_s").get<double>();
      r.pt.v2_by_partition[partition_of(e["v2"]["config"])] = t; // kKernelSplits without one
      r.pt.by_config[e["v2"]["config"].at("key").get<std::string>()] = t;
    }
    r.pt.noise = e.value("noise", 0.0);
    out.push_back(std::move(r));
  };
  for (const auto& p : table.at("decode")) {
    for (const auto& e : p.at("measured")) {
      add(shape_of(p), e, false);
    }
  }
  for (const auto& h : table.value("held_out", json::array())) {
    add(shape_of(h), h, true);
  }
  return out;
}

} // namespace attn::report

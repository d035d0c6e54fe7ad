// The traffic view: what each rule's choices cost over a table's batches of mixed lengths, as the
// table priced them, and batch by batch (most uneven first) against each batch's fastest.
#include <algorithm>
#include <map>

#include "include/attn_tune/threshold_table_reader.hpp"
#include "src/report/model_views.h"
#include "src/tuning/regret.h"
#include "src/tuning/threshold_table.h"

namespace attn::report {

using nlohmann::json;

namespace {

// A decode point from a table's batch entry: its best, best v1 and best v2 times, as the
// engines' rules and the table's lookups are charged (another configuration of a family is
// charged that family's best, as in the regret without results.jsonl).
DecodePoint batch_point(const json& b) {
  DecodePoint p;
  p.batch = b.at("batch").get<int>();
  p.num_heads = b.at("num_heads").get<int>();
  p.num_kv_heads = b.at("num_kv_heads").get<int>();
  p.context_len = b.at("context_len").get<int>();
  p.best_s = b.at("best").at("median_s").get<double>();
  p.by_config[b.at("best").at("config").at("key").get<std::string>()] = p.best_s;
  if (!b.at("v1").is_null()) {
    p.v1_s = b.at("v1").at("median_s").get<double>();
    p.by_config[b.at("v1").at("config").at("key").get<std::string>()] = p.v1_s;
  }
  if (!b.at("v2").is_null()) {
    const KernelConfig c = KernelConfig::from_json(b.at("v2").at("config"));
    p.v2_by_partition[v2_partition(c)] = b.at("v2").at("median_s").get<double>();
    p.by_config[c.key()] = b.at("v2").at("median_s").get<double>();
  }
  return p;
}

attn_tune::Query batch_query(const json& b, bool with_lengths) {
  attn_tune::Query q;
  q.batch = b.at("batch").get<int>();
  q.context_len = b.at("context_len").get<int>();
  q.num_heads = b.at("num_heads").get<int>();
  q.num_kv_heads = b.at("num_kv_heads").get<int>();
  q.head_dim = b.at("head_dim").get<int>();
  q.block_size = b.at("block_size").get<int>();
  q.dtype = b.at("dtype").get<std::string>();
  q.kv_dtype = b.contains("kv_dtype") ? b["kv_dtype"].get<std::string>() : "auto";
  q.causal = b.at("causal").get<bool>();
  q.window_left = b.at("window_left").get<int>();
  q.window_right = b.at("window_right").get<int>();
  q.softcap = b.at("softcap").get<double>();
  if (with_lengths) {
    q.seq_lens = b.at("seq_lens").get<std::vector<int>>();
  }
  return q;
}

} // namespace

void add_traffic(ReportModel& m, const ReportSource& src) {
  const json& t = src.table;
  if (!t.contains("batches") || !t.at("regret").contains("traffic")) {
    return;
  }
  TrafficView& v = m.traffic;
  v.present = true;
  v.totals = t.at("regret").at("traffic");
  v.rules.push_back({"batch_rules", "batch rules (whole batch)"});
  for (const EngineRule* r : rules_listed(m.own_rule)) {
    v.rules.push_back({r->id, r->kind == RuleKind::table_lookup
                                  ? "table lookup (grid points, longest length)"
                                  : rule_label(*r, m.own_rule)});
  }
  const attn_tune::ThresholdTableReader reader(t);
  const bool has_points = !t.at("decode").empty();
  const Rule fitted = fitted_rule_of(t);
  // With results.jsonl, each batch's every timed configuration: a rule's choice is charged its
  // own time, not its family's best (the table keeps only those).
  std::map<std::pair<std::string, std::vector<int>>, DecodePoint> measured;
  for (const WorkloadPoint& wp : decode_batch_points(src.records)) {
    measured[{decode_point_key(shape_of(wp.workload)), wp.workload.context_lens}] = wp.point;
  }
  v.exact = !measured.empty();
  for (const json& b : t.at("batches")) {
    TrafficBatch tb;
    tb.sequences = b.at("batch").get<int>();
    tb.max_len = b.at("max_len").get<int>();
    tb.mean_len = b.at("mean_len").get<double>();
    tb.sum_len = b.at("sum_len").get<double>();
    tb.weight = b.at("weight").get<double>();
    tb.held_out = b.at("held_out").get<bool>();
    tb.fastest = b.at("best").at("config").at("key").get<std::string>();
    DecodePoint p = batch_point(b);
    const auto found =
        measured.find({decode_point_key(shape_of(b)), b.at("seq_lens").get<std::vector<int>>()});
    if (found != measured.end()) {
      p = found->second;
    } else {
      v.exact = false;
    }
    for (const TrafficRule& r : v.rules) {
      double s = -1.0;
      if (r.id == "batch_rules" || (r.id == "table_lookup" && has_points)) {
        const attn_tune::Choice c = reader.lookup(batch_query(b, r.id == "batch_rules"));
        if (r.id == "batch_rules") {
          tb.batch_rule = c.config_key;
          tb.batch_path = c.batch_path;
        }
        if (p.usable()) {
          s = slowdown(config_time(p, KernelConfig::from_json(c.config)), p.best_s);
        }
      } else if (p.usable()) {
        for (const EngineRule& e : engine_rules()) {
          if (e.id == r.id && e.picks_family()) {
            const Rule rule = family_rule(e, fitted);
            if (rule) {
              s = slowdown(rule_time(p, rule(p)), p.best_s);
            }
          }
        }
      }
      tb.slowdown.push_back(s);
    }
    v.batches.push_back(std::move(tb));
  }
  auto skew = [](const TrafficBatch& b) { return b.max_len / std::max(1.0, b.mean_len); };
  std::stable_sort(v.batches.begin(), v.batches.end(),
                   [&](const TrafficBatch& a, const TrafficBatch& b) { return skew(a) > skew(b); });
}

} // namespace attn::report

// The numbers behind each view as plain tables: the page prints them under the figures and
// `--format csv` writes one file per table (docs/report.md "CSV files").
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "src/report/report_model.h"
#include "src/report/svg_plot.h"

namespace attn::report {

namespace {

// Numbers in the tables are plain (no units, no thousands separators) so that they paste and
// parse: 6 significant digits.
std::string num(double v) {
  if (!std::isfinite(v)) {
    return "";
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string yes_no(bool b) { return b ? "yes" : "no"; }

} // namespace

double quantile(std::vector<double> v, double q) {
  if (v.empty()) {
    return 0.0;
  }
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const auto i = std::size_t(std::floor(pos));
  const std::size_t j = std::min(i + 1, v.size() - 1);
  return v[i] + (v[j] - v[i]) * (pos - double(i));
}

std::vector<DataTable> model_tables(const ReportModel& m) {
  std::vector<DataTable> out;

  DataTable prov{"provenance", "Provenance", {"field", "value"}, {}};
  for (const auto& [k, v] : m.provenance) {
    prov.rows.push_back({k, v});
  }
  out.push_back(std::move(prov));

  DataTable counts{"measurements",
                   "Measurement counts and configurations without a time",
                   {"status", "count", "workload", "config", "reason"},
                   {}};
  for (const auto& [status, n] : m.counts.items()) {
    counts.rows.push_back({status, n.dump(), "", "", ""});
  }
  for (const auto& i : m.issues) {
    counts.rows.push_back({i.status, "1", i.workload, i.config, i.reason});
  }
  for (const auto& [reason, n] : m.skipped) {
    counts.rows.push_back({"skipped", std::to_string(n), "", "", reason});
  }
  out.push_back(std::move(counts));

  DataTable lat{"decode_latency",
                "Decode latency per point and context length",
                {"shape", "batch", "context_len", "series", "median_us", "p25_us", "p75_us",
                 "within_noise", "table_chooses"},
                {}};
  for (const auto& c : m.latency) {
    for (const auto& s : c.series) {
      for (const auto& [ctx, t] : s.by_context) {
        bool v2 = false;
        for (const auto& [from, to] : c.v2) {
          v2 = v2 || (ctx >= from && (to == 0 || ctx < to));
        }
        const bool noise =
            std::find(c.within_noise.begin(), c.within_noise.end(), ctx) != c.within_noise.end();
        lat.rows.push_back({c.shape_key, std::to_string(c.batch), std::to_string(ctx), s.name,
                            num(t.median_s * 1e6), t.has_spread ? num(t.p25_s * 1e6) : "",
                            t.has_spread ? num(t.p75_s * 1e6) : "", yes_no(noise),
                            v2 ? "v2" : "v1"});
      }
    }
  }
  out.push_back(std::move(lat));

  DataTable map{"decision_map",
                "Decision map cells: the measured winner per batch and context length",
                {"shape", "batch", "context_len", "winner", "family", "partition", "margin_pct",
                 "within_noise", "noisy_decision"},
                {}};
  for (const EngineRule& r : engine_rules()) {
    if (r.picks_family()) {
      map.columns.push_back(r.id); // its choice at each cell
    }
  }
  DataTable sw{"rule_switches",
               "Where each rule switches between v1 and v2 (first context length of the new "
               "decision)",
               {"shape", "batch", "rule", "context_len", "switches_to"},
               {}};
  for (const auto& dm : m.maps) {
    for (const auto& [bc, c] : dm.cells) {
      map.rows.push_back({dm.shape_key, std::to_string(bc.first), std::to_string(bc.second),
                          c.config, c.v2 ? "decode_v2" : "decode_v1",
                          !c.v2                          ? ""
                          : c.partition == kKernelSplits ? "kernel-chosen"
                                                         : std::to_string(c.partition),
                          c.both ? num(c.margin * 100) : "", yes_no(c.within_noise),
                          m.noisy_listed ? yes_no(c.noisy_decision) : ""});
      for (const EngineRule& rule : engine_rules()) {
        if (rule.picks_family()) {
          const auto r = dm.rule_v2.find(rule.id);
          map.rows.back().push_back(r == dm.rule_v2.end() ? "" : r->second.at(bc) ? "v2" : "v1");
        }
      }
    }
    for (const auto& [rule, rows] : dm.switches) {
      for (const auto& [b, list] : rows) {
        for (const auto& s : list) {
          sw.rows.push_back({dm.shape_key, std::to_string(b), rule, std::to_string(s.context_len),
                             s.to_v2 ? "v2" : "v1"});
        }
      }
    }
  }
  out.push_back(std::move(map));
  out.push_back(std::move(sw));

  DataTable sum{"regret_summary",
                m.regret.exact ? "Regret of each rule (from results.jsonl)"
                               : "Regret of each rule (from the table's best v1 and v2 only)",
                {"rule", "set", "points", "mean_pct", "median_pct", "p90_pct", "worst_pct",
                 "beyond_noise", "table_mean_pct", "table_worst_pct", "kernel_set_rule"},
                {}};
  DataTable reg{"regret",
                "Slowdown of each rule's choice against the measured best, point by point",
                {"rule", "set", "point", "slowdown_pct", "beyond_noise", "chose", "best"},
                {}};
  for (const EngineRule* rule : rules_listed(m.own_rule)) {
    const std::string& id = rule->id;
    const auto& pts = m.regret.points.at(id);
    for (const char* set : {"sweep", "held_out"}) {
      std::vector<double> v;
      int beyond = 0;
      for (const auto& p : pts) {
        if (p.set == set) {
          v.push_back(p.slowdown);
          beyond += p.beyond_noise ? 1 : 0;
          reg.rows.push_back(
              {id, set, p.where, num(p.slowdown * 100), yes_no(p.beyond_noise), p.chose, p.best});
        }
      }
      double mean = 0.0;
      for (double x : v) {
        mean += x / double(v.size());
      }
      const nlohmann::json stored_set = m.regret.stored.value(set, nlohmann::json::object());
      const nlohmann::json* stored = stored_regret(stored_set, *rule);
      sum.rows.push_back(
          {id, set, std::to_string(v.size()), v.empty() ? "" : num(mean * 100),
           v.empty() ? "" : num(quantile(v, 0.5) * 100),
           v.empty() ? "" : num(quantile(v, 0.9) * 100),
           v.empty() ? "" : num(*std::max_element(v.begin(), v.end()) * 100),
           std::to_string(beyond), stored ? num(stored->value("mean", 0.0) * 100) : "",
           stored ? num(stored->value("worst", 0.0) * 100) : "", yes_no(rule == m.own_rule)});
    }
  }
  out.push_back(std::move(sum));
  out.push_back(std::move(reg));

  // Only for tables with batches of mixed lengths; the same columns whatever the kernel set's own
  // rule, so that two models' rows share one header.
  DataTable tr{"traffic_regret",
               "Traffic-weighted regret of each rule over the batches of mixed lengths",
               {"rule", "set", "regret_pct", "mean_pct", "p90_pct", "worst_pct", "batches",
                "weight", "kernel_set_rule"},
               {}};
  DataTable tb{"traffic_batches",
               "Each batch of mixed lengths, most uneven first, with each rule's slowdown there",
               {"sequences", "max_len", "mean_len", "sum_len", "count", "held_out", "fastest",
                "batch_rule_choice", "batch_rule_path"},
               {}};
  const TrafficView& v = m.traffic;
  std::vector<std::string> ids = {"batch_rules"};
  for (const EngineRule& r : engine_rules()) {
    ids.push_back(r.id);
  }
  for (const std::string& id : ids) {
    tb.columns.push_back(id + "_slowdown_pct");
  }
  for (const TrafficRule& r : v.rules) {
    for (const char* set : {"sweep", "held_out"}) {
      if (!v.totals.at(set).contains(r.id)) {
        continue;
      }
      const nlohmann::json& x = v.totals.at(set).at(r.id);
      tr.rows.push_back({r.id, set, num(x.at("regret").get<double>() * 100),
                         num(x.at("mean").get<double>() * 100), num(x.at("p90").get<double>() * 100),
                         num(x.at("worst").get<double>() * 100),
                         std::to_string(x.at("batches").get<int>()), num(x.at("weight").get<double>()),
                         yes_no(m.own_rule != nullptr && r.id == m.own_rule->id)});
    }
  }
  for (const TrafficBatch& b : v.batches) {
    std::vector<std::string> row = {std::to_string(b.sequences), std::to_string(b.max_len),
                                    num(b.mean_len),  num(b.sum_len), num(b.weight),
                                    yes_no(b.held_out), b.fastest, b.batch_rule, b.batch_path};
    for (const std::string& id : ids) {
      double s = -1.0;
      for (std::size_t i = 0; i < v.rules.size(); ++i) {
        if (v.rules[i].id == id) {
          s = b.slowdown[i];
        }
      }
      row.push_back(s < 0 ? "" : num(s * 100));
    }
    tb.rows.push_back(std::move(row));
  }
  if (v.present) {
    out.push_back(std::move(tr));
    out.push_back(std::move(tb));
  }

  DataTable pre{"prefill",
                std::string("Prefill achieved ") + (m.cpu ? "GFLOP/s" : "TFLOP/s") +
                    " per configuration and shape",
                {"shape", "held_out", "config", "median_us", m.cpu ? "gflops" : "tflops", "best"},
                {}};
  for (const auto& ps : m.prefill) {
    for (const auto& b : ps.bars) {
      pre.rows.push_back({ps.title, yes_no(ps.held_out), b.config, num(b.median_s * 1e6),
                          num(b.flops_per_s * (m.cpu ? 1e-9 : 1e-12)), yes_no(b.best)});
    }
  }
  out.push_back(std::move(pre));
  return out;
}

DataTable diff_table(const std::vector<DecisionDiff>& diffs) {
  DataTable t{"decision_diff",
              "Decode calls whose decision differs between the two tables",
              {"call", "a", "b", "family_differs"},
              {}};
  for (const auto& d : diffs) {
    t.rows.push_back({d.call, d.a, d.b, yes_no(d.family_differs)});
  }
  return t;
}

} // namespace attn::report

// The report's views computed from a table and its results: latency over context, the decision
// maps with the rules' switch lines, the regret of each rule point by point, prefill rates.
#include "src/report/report_model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <set>

#include "include/attn_tune/threshold_table_reader.hpp"
#include "src/model/errors.h"
#include "src/model/kernel_config.h"
#include "src/model/problem.h"
#include "src/report/svg_plot.h"
#include "src/tuning/regret.h"
#include "src/tuning/rule_fit.h"
#include "src/tuning/table_schema.h"
#include "src/tuning/threshold_table.h"

namespace attn::report {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

json read_table(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    throw InputError("cannot read threshold table '" + path + "'");
  }
  json j;
  try {
    j = json::parse(f);
  } catch (const json::parse_error&) {
    throw InputError("'" + path + "' is not valid JSON");
  }
  if (!j.is_object() || j.value("schema", "") != attn_tune::kTableSchemaName) {
    throw InputError("'" + path + "' is not an attn-tune threshold table (schema is not \"" +
                     std::string(attn_tune::kTableSchemaName) + "\")");
  }
  try {
    validate_table(j);
  } catch (const InputError& e) {
    throw InputError("'" + path + "': " + e.what());
  }
  return j;
}

// The mask and shape fields a table point, a held-out point and a workload share.
struct Shape {
  std::string dtype;
  int head_dim = 0;
  int block_size = 0;
  int num_kv_heads = 1;
  int gqa = 1;
  int num_heads = 1;
  int batch = 1;
  bool causal = true;
  int window_left = -1;
  int window_right = -1;
  double softcap = 0.0;
};

Shape shape_of(const json& p) {
  Shape s;
  s.dtype = p.at("dtype").get<std::string>();
  s.head_dim = p.at("head_dim").get<int>();
  s.block_size = p.at("block_size").get<int>();
  s.num_kv_heads = p.at("num_kv_heads").get<int>();
  s.gqa = p.at("gqa_ratio").get<int>();
  s.num_heads = p.value("num_heads", s.num_kv_heads * s.gqa);
  s.batch = p.at("batch").get<int>();
  s.causal = p.at("causal").get<bool>();
  s.window_left = p.at("window_left").get<int>();
  s.window_right = p.at("window_right").get<int>();
  s.softcap = p.at("softcap").get<double>();
  return s;
}

Shape shape_of(const Workload& w) {
  Shape s;
  s.dtype = std::string(dtype_name(w.params.dtype));
  s.head_dim = w.params.head_dim;
  s.block_size = w.params.block_size;
  s.num_kv_heads = w.params.num_kv_heads;
  s.gqa = w.params.group_size();
  s.num_heads = w.params.num_heads;
  s.batch = w.batch;
  s.causal = w.params.causal;
  s.window_left = w.params.window_left;
  s.window_right = w.params.window_right;
  s.softcap = w.params.softcap;
  return s;
}

std::string mask_words(const Shape& s) {
  std::string m;
  if (!s.causal) {
    m += " · non-causal";
  }
  if (s.window_left >= 0 || s.window_right >= 0) {
    m += " · window " + std::to_string(s.window_left) + "/" + std::to_string(s.window_right);
  }
  if (s.softcap != 0.0) {
    m += " · softcap " + format_sig(s.softcap);
  }
  return m;
}

// What a decision map is drawn for: everything but the batch and the context length.
std::string map_key(const Shape& s) {
  return s.dtype + " d=" + std::to_string(s.head_dim) + " bs=" + std::to_string(s.block_size) +
         " kvh=" + std::to_string(s.num_kv_heads) + " gqa=" + std::to_string(s.gqa) +
         (s.causal ? " causal" : " noncausal") + " wl=" + std::to_string(s.window_left) +
         " wr=" + std::to_string(s.window_right) + " cap=" + format_sig(s.softcap);
}

std::string map_title(const Shape& s) {
  return s.dtype + " · head_dim " + std::to_string(s.head_dim) + " · block " +
         std::to_string(s.block_size) + " · " + std::to_string(s.num_kv_heads) +
         (s.num_kv_heads == 1 ? " KV head" : " KV heads") + " · GQA " + std::to_string(s.gqa) +
         mask_words(s);
}

std::string point_words(const Shape& s, int context_len) {
  return "b=" + std::to_string(s.batch) + " ctx=" + std::to_string(context_len) +
         " kvh=" + std::to_string(s.num_kv_heads) + " gqa=" + std::to_string(s.gqa) +
         " d=" + std::to_string(s.head_dim) + " bs=" + std::to_string(s.block_size) + " " +
         s.dtype + mask_words(s);
}

std::string prefill_key(const Shape& s, int q_len, int k_len) {
  return map_key(s) + " b=" + std::to_string(s.batch) + " q=" + std::to_string(q_len) +
         " k=" + std::to_string(k_len);
}

attn_tune::Query query_of(const Shape& s, int context_len) {
  attn_tune::Query q;
  q.batch = s.batch;
  q.context_len = context_len;
  q.num_heads = s.num_heads;
  q.num_kv_heads = s.num_kv_heads;
  q.head_dim = s.head_dim;
  q.block_size = s.block_size;
  q.dtype = s.dtype;
  q.causal = s.causal;
  q.window_left = s.window_left;
  q.window_right = s.window_right;
  q.softcap = s.softcap;
  return q;
}

Timed timed_of(const json& t) {
  Timed r;
  r.median_s = t.at("median_s").get<double>();
  r.has_spread = t.contains("p25_s") && t.contains("p75_s");
  r.p25_s = t.value("p25_s", r.median_s);
  r.p75_s = t.value("p75_s", r.median_s);
  return r;
}

bool has_time(const json& entry, const char* slot) {
  return entry.contains(slot) && entry[slot].is_object();
}

// The table's v2 intervals of a point, [from, to) with to 0 for no end, in either version.
std::vector<std::pair<int, int>> v2_intervals(const json& p) {
  std::vector<std::pair<int, int>> out;
  if (p.contains("v2_intervals")) {
    for (const auto& iv : p["v2_intervals"]) {
      out.emplace_back(iv.at(0).get<int>(), iv.at(1).is_null() ? 0 : iv.at(1).get<int>());
    }
    return out;
  }
  const json& from = p.at("v2_from");
  if (from.is_string()) {
    if (from.get<std::string>() == "always") {
      out.emplace_back(1, 0);
    }
  } else {
    out.emplace_back(from.get<int>(), 0);
  }
  return out;
}

int partition_of(const json& config) {
  const json& params = config.value("params", json::object());
  return params.value("partition", 0);
}

// The problem's query-key pairs that the mask lets through, as Problem::visible_pairs counts
// them (bottom-right aligned causal mask and windows, SPEC.md), for a uniform batch.
double visible_pairs(const Shape& s, int q_len, int k_len) {
  const attn_math::Mask m{s.causal ? 1 : 0, s.window_left, s.window_right};
  return double(attn::visible_pairs(m, q_len, k_len)) * s.batch * s.num_heads;
}

void add_provenance(ReportModel& m, const ReportSource& src) {
  const json& pv = src.table.at("provenance");
  auto& out = m.provenance;
  const json dev = pv.value("device", json::object());
  m.cpu = dev.value("backend", "") == "cpu";
  m.device = dev.value("name", "unknown device") + " (" + dev.value("id", "?") + ")";
  std::string dev_words = m.device;
  if (dev.contains("threads")) {
    dev_words += ", " + std::to_string(dev["threads"].get<int>()) + " threads";
  }
  if (dev.contains("sm_count")) {
    dev_words += ", " + std::to_string(dev["sm_count"].get<int>()) + " SMs";
  }
  if (dev.contains("memory_bytes")) {
    dev_words += ", " + format_sig(dev["memory_bytes"].get<double>() / double(1 << 30)) + " GiB";
  }
  out.emplace_back("device", dev_words);
  out.emplace_back("kernels", pv.contains("kernels") ? kernels_label(pv["kernels"])
                                                     : "the built-in attn-tune kernels");
  if (pv.contains("kernel_sources_sha256")) {
    out.emplace_back("kernel sources sha256", pv["kernel_sources_sha256"].get<std::string>());
  }
  const json tool = pv.value("tool", json::object());
  out.emplace_back("tool", tool.value("name", "attn-tune") + " " + tool.value("version", "?") +
                               " (" + tool.value("git_hash", "?") + ")");
  const json prof = pv.value("profile", json::object());
  out.emplace_back("profile", prof.value("name", "?") + " (hash " + prof.value("hash", "?") + ")");
  out.emplace_back("timing mode", pv.value("timing_mode", "events"));
  out.emplace_back("timing method", pv.value("timing_method", "?"));
  if (pv.contains("timing_options")) {
    out.emplace_back("timing options", pv["timing_options"].dump());
  }
  if (pv.contains("clocks") && !pv["clocks"].is_null()) {
    out.emplace_back("clocks", pv["clocks"].dump());
  }
  out.emplace_back("date", pv.value("created_utc", "?"));
  if (pv.contains("seed")) {
    out.emplace_back("seed", pv["seed"].dump());
  }
  out.emplace_back("table", src.table_path + " (schema version " +
                                std::to_string(src.table.at("version").get<int>()) + ")");
  out.emplace_back("results", src.results_path.empty() ? "none: the views show what the table holds"
                                                       : src.results_path);
}

void add_issues(ReportModel& m, const ReportSource& src) {
  // The last line of each (workload, configuration) counts, as in the table.
  std::map<std::string, const json*> last;
  std::vector<std::string> order;
  for (const auto& l : src.lines) {
    const std::string k = l.value("workload_key", "") + " | " + l.value("config_key", "");
    if (last.emplace(k, &l).second) {
      order.push_back(k);
    } else {
      last[k] = &l;
    }
  }
  for (const auto& k : order) {
    const json& l = *last[k];
    const std::string status = l.value("status", "");
    if (status == "skipped") {
      ++m.skipped[l.value("reason", "no reason given")];
    } else if (status == "failed" || status == "fault" || status == "error") {
      m.issues.push_back({l.value("workload_key", "?"), l.value("config_key", "?"), status,
                          l.value("reason", "")});
    }
  }
}

// The measured time of every v2 partition at each context of each decode point, from results.
using PartitionTimes = std::map<std::string, std::map<int, std::map<int, double>>>;

std::string decode_point_key(const Shape& s) {
  return map_key(s) + " b=" + std::to_string(s.batch);
}

void add_latency(ReportModel& m, const ReportSource& src, const PartitionTimes& parts) {
  for (const auto& p : src.table.at("decode")) {
    const Shape s = shape_of(p);
    LatencyChart c;
    c.shape_key = map_key(s);
    c.batch = s.batch;
    c.title = "batch " + std::to_string(s.batch) + " · " + map_title(s);
    LatencySeries v1{"best v1", "v1", 0, {}};
    LatencySeries v2{"best v2", "v2", 0, {}};
    for (const auto& e : p.at("measured")) {
      const int ctx = e.at("context_len").get<int>();
      if (has_time(e, "v1")) {
        v1.by_context[ctx] = timed_of(e["v1"]);
      }
      if (has_time(e, "v2")) {
        v2.by_context[ctx] = timed_of(e["v2"]);
      }
      if (e.value("within_noise", false)) {
        c.within_noise.push_back(ctx);
      }
    }
    c.series.push_back(std::move(v1));
    c.series.push_back(std::move(v2));
    auto it = parts.find(decode_point_key(s));
    if (it != parts.end() && it->second.size() > 1) {
      for (const auto& [part, times] : it->second) {
        LatencySeries ps{"v2 partition " + std::to_string(part), "partition", part, {}};
        for (const auto& [ctx, t] : times) {
          ps.by_context[ctx] = Timed{t, t, t, false};
        }
        c.series.push_back(std::move(ps));
      }
    }
    c.v2 = v2_intervals(p);
    m.latency.push_back(std::move(c));
  }
}

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
  }
  std::optional<RuleFit> fit;
  if (src.table.contains("rule") && src.table["rule"].contains("tiles")) {
    fit = RuleFit::from_json(src.table["rule"]);
  }
  const Rule fitted = fit ? fitted_rule(*fit) : Rule();
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
    for (const EngineRule& r : engine_rules()) {
      const Rule rule = family_rule(r, fitted);
      if (!rule) {
        continue; // the table lookup, or a table without a fitted rule
      }
      const std::string& name = r.id;
      for (int b : dm.batches) {
        DecodePoint p;
        p.batch = b;
        p.num_heads = dm.num_heads;
        p.num_kv_heads = dm.num_kv_heads;
        dm.switches[name][b] = switches_of(rule, p, dm.ctx_lo, dm.ctx_hi);
        for (int ctx : dm.contexts) {
          p.context_len = ctx;
          dm.rule_v2[name][{b, ctx}] = rule(p).v2;
        }
      }
    }
  }
}

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

std::string rule_words(const RuleChoice& c) {
  return c.v2 ? "v2 partition " + std::to_string(c.partition) : "v1";
}

// One decode point with what the regret needs: the point, its shape and its set.
struct RegretInput {
  DecodePoint pt;
  Shape shape;
  bool held_out = false;
};

void add_regret(ReportModel& m, const ReportSource& src, const std::vector<RegretInput>& in) {
  const attn_tune::ThresholdTableReader reader(src.table);
  std::optional<RuleFit> fit;
  if (src.table.contains("rule") && src.table["rule"].contains("tiles")) {
    fit = RuleFit::from_json(src.table["rule"]);
  }
  const Rule fitted = fit ? fitted_rule(*fit) : Rule();
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
      r.pt.v2_by_partition[partition_of(e["v2"]["config"])] = t;
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
               s.dtype + (s.causal ? " causal" : " non-causal") + mask_words(s);
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

} // namespace

ReportSource load_report_source(const std::string& dir_or_table) {
  ReportSource src;
  src.given = dir_or_table;
  std::error_code ec;
  const fs::path given(dir_or_table);
  if (!fs::exists(given, ec)) {
    throw InputError("'" + dir_or_table + "' does not exist");
  }
  if (fs::is_directory(given, ec)) {
    src.table_path = (given / "threshold_table.json").string();
    if (!fs::exists(src.table_path, ec)) {
      throw InputError("'" + dir_or_table +
                       "' has no threshold_table.json (give a sweep's --out folder or a table)");
    }
    const fs::path results = given / "results.jsonl";
    if (fs::exists(results, ec)) {
      src.results_path = results.string();
    }
  } else {
    src.table_path = dir_or_table;
  }
  src.table = read_table(src.table_path);
  if (!src.results_path.empty()) {
    const ResultsFile rf = read_results(src.results_path);
    const std::string want =
        src.table["provenance"].value("profile", json::object()).value("hash", "");
    const std::string have = rf.header.is_object() ? rf.header.value("profile_hash", "") : "";
    if (!want.empty() && !have.empty() && want != have) {
      throw InputError("'" + src.results_path + "' is from profile hash " + have +
                       ", but the table beside it from " + want +
                       "; rebuild the table with "
                       "`attn-tune sweep --resume`");
    }
    try {
      src.records = to_records(rf.lines);
    } catch (const std::exception& e) {
      throw InputError("'" + src.results_path + "': " + e.what());
    }
    src.lines = rf.lines;
  }
  return src;
}

ReportModel build_report_model(const ReportSource& src) {
  ReportModel m;
  m.label = src.given;
  m.has_results = !src.results_path.empty();
  add_provenance(m, src);
  m.counts = src.table.at("measurement_counts");
  add_issues(m, src);

  PartitionTimes parts;
  std::vector<RegretInput> inputs;
  if (m.has_results) {
    for (const auto& wp : decode_workload_points(src.records)) {
      const Shape s = shape_of(wp.workload);
      for (const auto& [part, t] : wp.point.v2_by_partition) {
        parts[decode_point_key(s)][part][wp.workload.context_len] = t;
      }
      inputs.push_back({wp.point, s, wp.workload.held_out});
    }
    m.regret.exact = true;
  } else {
    inputs = regret_inputs_from_table(src.table);
  }
  add_latency(m, src, parts);
  add_maps(m, src);
  add_regret(m, src, inputs);
  add_prefill(m, src);
  return m;
}

std::vector<DecisionDiff> decision_diffs(const json& a, const json& b) {
  const attn_tune::ThresholdTableReader ra(a);
  const attn_tune::ThresholdTableReader rb(b);
  std::set<std::string> seen;
  std::vector<DecisionDiff> out;
  const auto check = [&](const Shape& s, int ctx) {
    const std::string call = point_words(s, ctx);
    if (!seen.insert(call).second) {
      return;
    }
    const attn_tune::Query q = query_of(s, ctx);
    // A table without decode points answers nothing; say so in its column.
    const auto choose = [&q](const attn_tune::ThresholdTableReader& r) {
      if (!r.json().at("decode").empty()) {
        return r.lookup(q);
      }
      attn_tune::Choice none;
      none.config_key = "(no decode points)";
      return none;
    };
    const attn_tune::Choice ca = choose(ra);
    const attn_tune::Choice cb = choose(rb);
    if (ca.config_key != cb.config_key) {
      out.push_back({call, ca.config_key, cb.config_key, ca.family != cb.family});
    }
  };
  for (const json* t : {&a, &b}) {
    for (const auto& p : t->at("decode")) {
      for (const auto& e : p.at("measured")) {
        check(shape_of(p), e.at("context_len").get<int>());
      }
    }
    for (const auto& h : t->value("held_out", json::array())) {
      check(shape_of(h), h.at("context_len").get<int>());
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const DecisionDiff& x, const DecisionDiff& y) {
    return x.family_differs > y.family_differs;
  });
  return out;
}

} // namespace attn::report

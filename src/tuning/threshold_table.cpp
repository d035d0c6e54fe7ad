// The threshold table: crossover detection, best configurations, rule fitting and regret, and
// the JSON document that readers (include/attn_tune, python/) consume.
#include "src/tuning/threshold_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fcntl.h>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <unistd.h>

#include "include/attn_tune/threshold_table_reader.hpp"
#include "src/model/errors.h"

namespace attn {

using nlohmann::json;

nlohmann::json Crossover::to_json() const {
  if (kind == threshold) {
    return from;
  }
  return kind == always ? "always" : "never";
}

Crossover find_crossover(const std::vector<ContextTiming>& sorted) {
  // Scan from the longest context down: the final run of v2 wins decides the threshold.
  int last_loss = -1;
  int n = 0;
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i].v1_s == kInf && sorted[i].v2_s == kInf) {
      continue;
    }
    ++n;
    if (!(sorted[i].v2_s < sorted[i].v1_s)) {
      last_loss = int(i);
    }
  }
  Crossover c;
  if (n == 0) {
    c.kind = Crossover::never;
    return c;
  }
  if (last_loss < 0) {
    c.kind = Crossover::always;
    return c;
  }
  // The next measured entry after the last loss, if any.
  for (std::size_t i = std::size_t(last_loss) + 1; i < sorted.size(); ++i) {
    if (sorted[i].v1_s < kInf || sorted[i].v2_s < kInf) {
      c.kind = Crossover::threshold;
      c.from = sorted[i].context_len;
      return c;
    }
  }
  c.kind = Crossover::never;
  return c;
}

double DecodePoint::v2_time(int partition) const {
  auto it = v2_by_partition.find(partition);
  if (it != v2_by_partition.end()) {
    return it->second;
  }
  double best_d = kInf;
  double t = kInf;
  for (const auto& [p, s] : v2_by_partition) { // ascending, so ties keep the smaller partition
    const double d = std::fabs(std::log2(double(std::max(p, 1))) - std::log2(double(partition)));
    if (d < best_d - 1e-12) {
      best_d = d;
      t = s;
    }
  }
  return t;
}

const char* tiles_name(TilesDef d) {
  switch (d) {
  case TilesDef::batch_heads_parts:
    return "batch*num_heads*partitions";
  case TilesDef::kv_heads_parts:
    return "num_kv_heads*partitions";
  case TilesDef::heads_parts:
    return "num_heads*partitions";
  default:
    return "batch*num_kv_heads*partitions";
  }
}

double count_tiles(TilesDef d, const DecodePoint& p, int partition) {
  const double parts = std::ceil(double(p.context_len) / double(std::max(partition, 1)));
  switch (d) {
  case TilesDef::batch_heads_parts:
    return double(p.batch) * p.num_heads * parts;
  case TilesDef::kv_heads_parts:
    return double(p.num_kv_heads) * parts;
  case TilesDef::heads_parts:
    return double(p.num_heads) * parts;
  default:
    return double(p.batch) * p.num_kv_heads * parts;
  }
}

nlohmann::json RuleFit::to_json() const {
  return {{"form", "v2 when tiles > k * sm_count"},
          {"tiles", tiles_name(tiles)},
          {"k", k},
          {"partition", partition},
          {"sm_count", sm_count},
          {"total_regret", total_regret},
          {"points", points}};
}

namespace {
double slowdown(double chosen, double best) {
  if (!(best > 0) || best == kInf) {
    return 0.0;
  }
  return chosen / best - 1.0;
}
} // namespace

RuleFit fit_rule(const std::vector<DecodePoint>& pts_in, int sm_count, std::vector<RuleFit>* all) {
  std::vector<const DecodePoint*> pts;
  std::set<int> partitions;
  for (const auto& p : pts_in) {
    if (p.usable()) {
      pts.push_back(&p);
      for (const auto& [part, t] : p.v2_by_partition) {
        partitions.insert(part);
      }
    }
  }
  RuleFit best;
  best.sm_count = std::max(sm_count, 1);
  best.total_regret = kInf;
  if (pts.empty()) {
    best.total_regret = 0.0;
    return best;
  }
  for (TilesDef def : {TilesDef::batch_kv_heads_parts, TilesDef::batch_heads_parts,
                       TilesDef::kv_heads_parts, TilesDef::heads_parts}) {
    for (int part : partitions) {
      // Regret of each point under v1 and under v2 at this partition.
      struct Row {
        double x, r1, r2;
      };
      std::vector<Row> rows;
      for (const auto* p : pts) {
        rows.push_back({count_tiles(def, *p, part) / best.sm_count, slowdown(p->v1_s, p->best_s),
                        slowdown(p->v2_time(part), p->best_s)});
      }
      std::vector<double> xs;
      for (const auto& r : rows) {
        xs.push_back(r.x);
      }
      std::sort(xs.begin(), xs.end());
      xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
      // Candidate k: below every point (all v2), between neighbours (geometric mean), at the top.
      std::vector<double> ks = {xs.front() / 2};
      for (std::size_t i = 0; i + 1 < xs.size(); ++i) {
        ks.push_back(std::sqrt(xs[i] * xs[i + 1]));
      }
      ks.push_back(xs.back());
      RuleFit f;
      f.tiles = def;
      f.partition = part;
      f.sm_count = best.sm_count;
      f.points = int(rows.size());
      f.total_regret = kInf;
      for (double k : ks) {
        double total = 0.0;
        for (const auto& r : rows) {
          total += r.x > k ? r.r2 : r.r1;
        }
        if (total < f.total_regret - 1e-12) {
          f.total_regret = total;
          f.k = k;
        }
      }
      if (all) {
        all->push_back(f);
      }
      if (f.total_regret < best.total_regret - 1e-12) {
        best = f;
      }
    }
  }
  return best;
}

RuleChoice vllm_rule(const DecodePoint& p) {
  const int parts = (p.context_len + 511) / 512;
  const bool use_v1 = p.context_len <= 8192 && (parts == 1 || p.batch * p.num_heads > 512);
  return {!use_v1, 512};
}

RuleChoice seed_engine_rule(const DecodePoint& p) {
  const int parts = (p.context_len + 511) / 512;
  return {p.num_kv_heads * parts > 2 * 16, 512};
}

nlohmann::json Regret::to_json() const {
  return {{"mean", mean}, {"worst", worst}, {"points", points}};
}

Regret regret_of(const std::vector<DecodePoint>& pts, const Rule& rule) {
  Regret r;
  double sum = 0.0;
  for (const auto& p : pts) {
    if (!p.usable()) {
      continue;
    }
    const RuleChoice c = rule(p);
    const double s = slowdown(c.v2 ? p.v2_time(c.partition) : p.v1_s, p.best_s);
    sum += s;
    r.worst = std::max(r.worst, s);
    ++r.points;
  }
  r.mean = r.points ? sum / r.points : 0.0;
  return r;
}

Regret regret_of_configs(const std::vector<DecodePoint>& pts,
                         const std::function<KernelConfig(std::size_t)>& pick) {
  Regret r;
  double sum = 0.0;
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const DecodePoint& p = pts[i];
    if (!p.usable()) {
      continue;
    }
    const KernelConfig c = pick(i);
    double t = kInf;
    auto it = p.by_config.find(c.key());
    if (it != p.by_config.end()) {
      t = it->second;
    } else if (c.family == Family::decode_v2) {
      t = p.v2_time(c.get("partition", 512));
    } else {
      t = p.v1_s;
    }
    const double s = slowdown(t, p.best_s);
    sum += s;
    r.worst = std::max(r.worst, s);
    ++r.points;
  }
  r.mean = r.points ? sum / r.points : 0.0;
  return r;
}

namespace {

json config_json(const KernelConfig& c) {
  json j = c.to_json();
  j["key"] = c.key();
  return j;
}

json timed(const KernelConfig& c, double s) {
  return {{"config", config_json(c)}, {"median_s", s}};
}

// Everything measured on one decode workload.
struct WorkloadBest {
  Workload w;
  DecodePoint pt;
  KernelConfig best, best_v1, best_v2;
  double best_v1_s = kInf, best_v2_s = kInf;
};

json shape_json(const Workload& w) {
  return {{"dtype", std::string(dtype_name(w.params.dtype))},
          {"head_dim", w.params.head_dim},
          {"block_size", w.params.block_size},
          {"num_kv_heads", w.params.num_kv_heads},
          {"gqa_ratio", w.params.group_size()},
          {"num_heads", w.params.num_heads},
          {"batch", w.batch},
          {"causal", w.params.causal},
          {"window_left", w.params.window_left},
          {"window_right", w.params.window_right},
          {"softcap", w.params.softcap}};
}

json measured_entry(const WorkloadBest& b) {
  json m = {{"context_len", b.w.context_len},
            {"best", timed(b.best, b.pt.best_s)},
            {"v1", b.best_v1_s < kInf ? timed(b.best_v1, b.best_v1_s) : json(nullptr)},
            {"v2", b.best_v2_s < kInf ? timed(b.best_v2, b.best_v2_s) : json(nullptr)}};
  return m;
}

attn_tune::Query query_of(const Workload& w) {
  attn_tune::Query q;
  q.batch = w.batch;
  q.context_len = w.context_len;
  q.num_heads = w.params.num_heads;
  q.num_kv_heads = w.params.num_kv_heads;
  q.head_dim = w.params.head_dim;
  q.block_size = w.params.block_size;
  q.dtype = std::string(dtype_name(w.params.dtype));
  q.causal = w.params.causal;
  q.window_left = w.params.window_left;
  q.window_right = w.params.window_right;
  q.softcap = w.params.softcap;
  return q;
}

} // namespace

nlohmann::json build_threshold_table(const std::vector<MeasurementRecord>& records,
                                     const nlohmann::json& provenance, int sm_count) {
  // Best timings per workload, in first-seen order so the table is deterministic.
  std::vector<std::string> order;
  std::map<std::string, WorkloadBest> decode;
  std::map<std::string, std::pair<Workload, std::pair<KernelConfig, double>>> prefill;
  std::vector<std::string> prefill_order;
  json counts = {{"ok", 0}, {"failed", 0}, {"skipped", 0}, {"error", 0}};
  for (const auto& r : records) {
    if (counts.contains(r.status)) {
      counts[r.status] = counts[r.status].get<int>() + 1;
    }
    if (r.status != "ok" || !(r.median_s > 0)) {
      continue;
    }
    const std::string key = r.workload.key();
    if (r.workload.phase == Phase::prefill) {
      auto [it, fresh] = prefill.try_emplace(key, r.workload, std::make_pair(r.config, r.median_s));
      if (fresh) {
        prefill_order.push_back(key);
      } else if (r.median_s < it->second.second.second) {
        it->second.second = {r.config, r.median_s};
      }
      continue;
    }
    auto [it, fresh] = decode.try_emplace(key);
    WorkloadBest& b = it->second;
    if (fresh) {
      order.push_back(key);
      b.w = r.workload;
      b.pt.batch = r.workload.batch;
      b.pt.num_heads = r.workload.params.num_heads;
      b.pt.num_kv_heads = r.workload.params.num_kv_heads;
      b.pt.context_len = r.workload.context_len;
    }
    b.pt.by_config[r.config.key()] = r.median_s;
    if (r.median_s < b.pt.best_s) {
      b.pt.best_s = r.median_s;
      b.best = r.config;
    }
    if (r.config.family == Family::decode_v1) {
      if (r.median_s < b.best_v1_s) {
        b.best_v1_s = r.median_s;
        b.best_v1 = r.config;
      }
      b.pt.v1_s = std::min(b.pt.v1_s, r.median_s);
    } else if (r.config.family == Family::decode_v2) {
      if (r.median_s < b.best_v2_s) {
        b.best_v2_s = r.median_s;
        b.best_v2 = r.config;
      }
      const int part = r.config.get("partition", 512);
      auto [pit, pfresh] = b.pt.v2_by_partition.try_emplace(part, r.median_s);
      if (!pfresh) {
        pit->second = std::min(pit->second, r.median_s);
      }
    }
  }

  // Shape points of the sweep (held-out workloads stay out of them and out of the fit).
  using ShapeKey = std::tuple<int, int, int, int, int, int, bool, int, int, double>;
  std::map<ShapeKey, std::vector<const WorkloadBest*>> shapes;
  std::vector<DecodePoint> sweep_pts, held_pts;
  std::vector<const WorkloadBest*> sweep_w, held_w;
  for (const auto& key : order) {
    const WorkloadBest& b = decode.at(key);
    const AttnParams& a = b.w.params;
    if (b.w.held_out) {
      held_pts.push_back(b.pt);
      held_w.push_back(&b);
      continue;
    }
    sweep_pts.push_back(b.pt);
    sweep_w.push_back(&b);
    shapes[{int(a.dtype), a.head_dim, a.block_size, a.num_kv_heads, a.group_size(), b.w.batch,
            a.causal, a.window_left, a.window_right, a.softcap}]
        .push_back(&b);
  }
  json points = json::array();
  for (auto& [sk, list] : shapes) {
    std::sort(list.begin(), list.end(), [](const WorkloadBest* x, const WorkloadBest* y) {
      return x->w.context_len < y->w.context_len;
    });
    std::vector<ContextTiming> ct;
    json measured = json::array();
    for (const auto* b : list) {
      ct.push_back({b->w.context_len, b->best_v1_s, b->best_v2_s});
      measured.push_back(measured_entry(*b));
    }
    json pj = shape_json(list.front()->w);
    pj["v2_from"] = find_crossover(ct).to_json();
    pj["measured"] = measured;
    points.push_back(pj);
  }
  json prefill_j = json::array();
  for (const auto& key : prefill_order) {
    const auto& [w, best] = prefill.at(key);
    json pj = shape_json(w);
    pj["q_len"] = w.q_len;
    pj["k_len"] = w.k_len;
    pj["held_out"] = w.held_out;
    pj["best"] = timed(best.first, best.second);
    prefill_j.push_back(pj);
  }
  json held_j = json::array();
  for (const auto* b : held_w) {
    json hj = shape_json(b->w);
    hj.update(measured_entry(*b));
    held_j.push_back(hj);
  }

  std::vector<RuleFit> candidates;
  const RuleFit fit = fit_rule(sweep_pts, sm_count, &candidates);
  json cand_j = json::array();
  for (const auto& c : candidates) {
    cand_j.push_back(c.to_json());
  }

  json table = {{"schema", attn_tune::kTableSchemaName},
                {"version", attn_tune::kTableSchemaVersion},
                {"provenance", provenance},
                {"measurement_counts", counts},
                {"decode", points},
                {"prefill", prefill_j},
                {"held_out", held_j}};
  json rule = fit.to_json();
  rule["candidates"] = cand_j;
  table["rule"] = rule;

  // Regret of each rule on the sweep's points and on the held-out points.
  const attn_tune::ThresholdTableReader reader(table);
  auto table_pick = [&reader](const std::vector<const WorkloadBest*>* ws) {
    return [&reader, ws](std::size_t i) {
      return KernelConfig::from_json(reader.lookup(query_of((*ws)[i]->w)).config);
    };
  };
  const Rule fitted = [&fit](const DecodePoint& p) {
    return RuleChoice{fit.uses_v2(p), fit.partition};
  };
  json regret;
  for (const auto& [name, pts, ws] :
       {std::tuple{"sweep", &sweep_pts, &sweep_w}, std::tuple{"held_out", &held_pts, &held_w}}) {
    int unusable = 0;
    for (const auto& p : *pts) {
      unusable += p.usable() ? 0 : 1;
    }
    regret[name] = {{"fitted_rule", regret_of(*pts, fitted).to_json()},
                    {"table_lookup", regret_of_configs(*pts, table_pick(ws)).to_json()},
                    {"vllm", regret_of(*pts, vllm_rule).to_json()},
                    {"seed_engine", regret_of(*pts, seed_engine_rule).to_json()},
                    {"points_without_both_families", unusable}};
  }
  table["regret"] = regret;
  return table;
}

namespace {

// Field checks with the path of the field in the error.
struct SchemaCheck {
  [[noreturn]] static void fail(const std::string& path, const std::string& what) {
    throw InputError("threshold table: " + path + ": " + what);
  }
  static const json& field(const json& obj, const std::string& path, const char* key) {
    if (!obj.is_object() || !obj.contains(key)) {
      fail(path.empty() ? key : path + "." + key, "missing");
    }
    return obj[key];
  }
  static std::string sub(const std::string& path, const char* key) {
    return path.empty() ? key : path + "." + key;
  }
  static void str(const json& obj, const std::string& path, const char* key) {
    if (!field(obj, path, key).is_string()) {
      fail(sub(path, key), "expected a string");
    }
  }
  static void integer(const json& obj, const std::string& path, const char* key) {
    if (!field(obj, path, key).is_number_integer()) {
      fail(sub(path, key), "expected an integer");
    }
  }
  static void number(const json& obj, const std::string& path, const char* key) {
    if (!field(obj, path, key).is_number()) {
      fail(sub(path, key), "expected a number");
    }
  }
  static void boolean(const json& obj, const std::string& path, const char* key) {
    if (!field(obj, path, key).is_boolean()) {
      fail(sub(path, key), "expected true or false");
    }
  }
  static const json& object(const json& obj, const std::string& path, const char* key) {
    const json& v = field(obj, path, key);
    if (!v.is_object()) {
      fail(sub(path, key), "expected an object");
    }
    return v;
  }
  static const json& array(const json& obj, const std::string& path, const char* key) {
    const json& v = field(obj, path, key);
    if (!v.is_array()) {
      fail(sub(path, key), "expected a list");
    }
    return v;
  }
  static void shape(const json& p, const std::string& path) {
    str(p, path, "dtype");
    for (const char* k : {"head_dim", "block_size", "num_kv_heads", "gqa_ratio", "num_heads",
                          "batch", "window_left", "window_right"}) {
      integer(p, path, k);
    }
    boolean(p, path, "causal");
    number(p, path, "softcap");
  }
  static void timed(const json& t, const std::string& path) {
    if (!t.is_object()) {
      fail(path, "expected an object with config and median_s");
    }
    const json& c = object(t, path, "config");
    str(c, path + ".config", "family");
    object(c, path + ".config", "params");
    str(c, path + ".config", "key");
    number(t, path, "median_s");
  }
  static void entry(const json& m, const std::string& path) {
    integer(m, path, "context_len");
    timed(field(m, path, "best"), path + ".best");
    for (const char* slot : {"v1", "v2"}) {
      const json& v = field(m, path, slot);
      if (!v.is_null()) {
        timed(v, sub(path, slot));
      }
    }
  }
};

} // namespace

void validate_table(const nlohmann::json& t) {
  using S = SchemaCheck;
  if (!t.is_object()) {
    S::fail("(top level)", "expected an object");
  }
  if (t.value("schema", "") != attn_tune::kTableSchemaName) {
    S::fail("schema", std::string("expected \"") + attn_tune::kTableSchemaName + "\"");
  }
  if (!t.contains("version") || t["version"] != attn_tune::kTableSchemaVersion) {
    S::fail("version", "expected " + std::to_string(attn_tune::kTableSchemaVersion));
  }
  const json& pv = S::object(t, "", "provenance");
  const json& dev = S::object(pv, "provenance", "device");
  S::str(dev, "provenance.device", "name");
  const json& tool = S::object(pv, "provenance", "tool");
  S::str(tool, "provenance.tool", "version");
  S::str(tool, "provenance.tool", "git_hash");
  S::str(pv, "provenance", "kernel_sources_sha256");
  const json& prof = S::object(pv, "provenance", "profile");
  S::str(prof, "provenance.profile", "name");
  S::str(prof, "provenance.profile", "hash");
  S::str(pv, "provenance", "created_utc");
  S::str(pv, "provenance", "timing_method");
  const json& counts = S::object(t, "", "measurement_counts");
  for (const char* k : {"ok", "failed", "skipped", "error"}) {
    S::integer(counts, "measurement_counts", k);
  }
  const json& decode = S::array(t, "", "decode");
  for (std::size_t i = 0; i < decode.size(); ++i) {
    const std::string path = "decode[" + std::to_string(i) + "]";
    const json& p = decode[i];
    S::shape(p, path);
    const json& f = S::field(p, path, "v2_from");
    if (!(f.is_number_integer() || f == "always" || f == "never")) {
      S::fail(path + ".v2_from", "expected a context length, \"always\" or \"never\"");
    }
    const json& measured = S::array(p, path, "measured");
    if (measured.empty()) {
      S::fail(path + ".measured", "expected at least one measured context length");
    }
    for (std::size_t k = 0; k < measured.size(); ++k) {
      S::entry(measured[k], path + ".measured[" + std::to_string(k) + "]");
    }
  }
  const json& prefill = S::array(t, "", "prefill");
  for (std::size_t i = 0; i < prefill.size(); ++i) {
    const std::string path = "prefill[" + std::to_string(i) + "]";
    S::shape(prefill[i], path);
    S::integer(prefill[i], path, "q_len");
    S::integer(prefill[i], path, "k_len");
    S::timed(S::field(prefill[i], path, "best"), path + ".best");
  }
  const json& held = S::array(t, "", "held_out");
  for (std::size_t i = 0; i < held.size(); ++i) {
    const std::string path = "held_out[" + std::to_string(i) + "]";
    S::shape(held[i], path);
    S::entry(held[i], path);
  }
  const json& rule = S::object(t, "", "rule");
  S::str(rule, "rule", "tiles");
  S::number(rule, "rule", "k");
  S::integer(rule, "rule", "partition");
  S::integer(rule, "rule", "sm_count");
  S::integer(rule, "rule", "points");
  const json& regret = S::object(t, "", "regret");
  for (const char* set : {"sweep", "held_out"}) {
    const json& r = S::object(regret, "regret", set);
    for (const char* rn : {"fitted_rule", "table_lookup", "vllm", "seed_engine"}) {
      const std::string path = std::string("regret.") + set;
      const json& x = S::object(r, path, rn);
      S::number(x, path + "." + rn, "mean");
      S::number(x, path + "." + rn, "worst");
      S::integer(x, path + "." + rn, "points");
    }
  }
}

namespace {
std::string fmt_us(const json& t) {
  if (t.is_null()) {
    return "-";
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", t.at("median_s").get<double>() * 1e6);
  return buf;
}
std::string pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", x * 100.0);
  return buf;
}
} // namespace

std::string describe_table(const nlohmann::json& t) {
  std::ostringstream s;
  const json& pv = t.at("provenance");
  const json& dev = pv.at("device");
  s << "attn-tune threshold table (schema " << t.at("schema").get<std::string>() << " v"
    << t.at("version").get<int>() << ")\n";
  s << "device:   " << dev.value("name", "?") << " (" << dev.value("id", "?") << ")";
  if (dev.contains("sm_count")) {
    s << ", " << dev["sm_count"].get<int>() << " SMs, cc " << dev.value("compute_capability", "?");
  } else if (dev.contains("threads")) {
    s << ", " << dev["threads"].get<int>() << " threads";
  }
  s << "\n";
  s << "profile:  " << pv.at("profile").value("name", "?") << " (hash "
    << pv.at("profile").value("hash", "?") << ")\n";
  s << "tool:     attn-tune " << pv.at("tool").value("version", "?") << " ("
    << pv.at("tool").value("git_hash", "?") << "), kernels sha256 "
    << pv.value("kernel_sources_sha256", "?").substr(0, 16) << "\n";
  s << "made:     " << pv.value("created_utc", "?")
    << ", timing: " << pv.value("timing_method", "?") << "\n";
  const json& c = t.at("measurement_counts");
  s << "measured: " << c.value("ok", 0) << " timed, " << c.value("failed", 0)
    << " failed validation, " << c.value("skipped", 0) << " skipped (cannot run), "
    << c.value("error", 0) << " errors\n\n";

  const json& rule = t.at("rule");
  char kbuf[64];
  std::snprintf(kbuf, sizeof kbuf, "%.4g", rule.at("k").get<double>());
  s << "fitted rule: use v2 (partition " << rule.at("partition").get<int>() << ") when "
    << rule.at("tiles").get<std::string>() << " > " << kbuf << " * sm_count (sm_count "
    << rule.at("sm_count").get<int>() << "; fitted on " << rule.at("points").get<int>()
    << " points)\n\n";

  s << "regret (slowdown vs the measured best; mean / worst over points):\n";
  for (const char* set : {"sweep", "held_out"}) {
    const json& r = t.at("regret").at(set);
    s << "  " << (std::string(set) == "sweep" ? "sweep points   " : "held-out points") << " ";
    for (const char* rn : {"fitted_rule", "table_lookup", "vllm", "seed_engine"}) {
      const json& x = r.at(rn);
      s << " " << rn << " " << pct(x.at("mean").get<double>()) << "/"
        << pct(x.at("worst").get<double>());
    }
    s << "  (" << r.at("fitted_rule").at("points").get<int>() << " points)\n";
  }
  s << "\ndecode points: where v2 (best partition) becomes faster than v1 and stays faster\n";
  for (const auto& p : t.at("decode")) {
    s << "  " << p.at("dtype").get<std::string>() << " d=" << p.at("head_dim").get<int>()
      << " bs=" << p.at("block_size").get<int>() << " kvh=" << p.at("num_kv_heads").get<int>()
      << " gqa=" << p.at("gqa_ratio").get<int>() << " batch=" << p.at("batch").get<int>();
    if (p.at("window_left").get<int>() >= 0 || p.at("window_right").get<int>() >= 0) {
      s << " window=" << p.at("window_left").get<int>() << "," << p.at("window_right").get<int>();
    }
    if (p.at("softcap").get<double>() > 0) {
      s << " softcap=" << p.at("softcap").get<double>();
    }
    if (!p.at("causal").get<bool>()) {
      s << " non-causal";
    }
    const json& f = p.at("v2_from");
    s << ": v2 "
      << (f.is_string() ? f.get<std::string>() : "from ctx " + std::to_string(f.get<int>()))
      << "\n";
    for (const auto& m : p.at("measured")) {
      s << "      ctx " << m.at("context_len").get<int>() << ": v1 " << fmt_us(m.at("v1"))
        << " us, v2 " << fmt_us(m.at("v2")) << " us, best "
        << m.at("best").at("config").at("key").get<std::string>() << "\n";
    }
  }
  if (!t.at("prefill").empty()) {
    s << "\nprefill points: best configuration\n";
    for (const auto& p : t.at("prefill")) {
      s << "  " << p.at("dtype").get<std::string>() << " d=" << p.at("head_dim").get<int>()
        << " h=" << p.at("num_heads").get<int>() << " kvh=" << p.at("num_kv_heads").get<int>()
        << " batch=" << p.at("batch").get<int>() << " q=" << p.at("q_len").get<int>()
        << " k=" << p.at("k_len").get<int>() << ": " << fmt_us(p.at("best")) << " us "
        << p.at("best").at("config").at("key").get<std::string>() << "\n";
    }
  }
  return s.str();
}

} // namespace attn

// Table assembly: the best timings per workload, the decode shape points with their crossover,
// the prefill and held-out points, the fitted rule, and the regret of every rule.
#include "src/tuning/threshold_table.h"

#include <algorithm>
#include <compare>
#include <map>
#include <set>
#include <string>

#include "include/attn_tune/threshold_table_reader.hpp"
#include "src/tuning/batch_rules.h"

namespace attn {

using nlohmann::json;

namespace {

// A configuration, its median time (kInf until one is measured) and its interquartile range.
struct TimedConfig {
  KernelConfig config;
  double median_s = kInf;
  double p25_s = 0.0;
  double p75_s = 0.0;
  bool remeasured = false; // timed by `sweep --remeasure-noisy`
  [[nodiscard]] double iqr_s() const { return std::max(0.0, p75_s - p25_s); }
};

TimedConfig timed_config(const MeasurementRecord& r) {
  return {r.config, r.median_s, r.p25_s, r.p75_s, r.remeasured};
}

// Everything measured on one decode workload.
struct WorkloadBest {
  Workload w;
  DecodePoint pt;                  // what the crossover, the rule fit and the regret see
  TimedConfig best;                // the fastest configuration; its time is pt.best_s
  TimedConfig v1;                  // the fastest decode_v1 configuration
  TimedConfig v2;                  // the fastest decode_v2 configuration, any partition
  std::vector<KernelConfig> timed; // every configuration with a time, in record order
  std::vector<int> search_grid;    // an adaptive search's: the lengths of this shape point
};

// The fastest configuration measured on one prefill workload.
struct PrefillBest {
  Workload w;
  TimedConfig best;
};

// Counts by status and the best timings per workload, each phase in first-seen order so that
// the table is deterministic.
struct BestTimings {
  json counts = {{"ok", 0}, {"failed", 0}, {"skipped", 0}, {"error", 0}, {"fault", 0}};
  std::vector<std::string> decode_order;
  std::map<std::string, WorkloadBest> decode;
  std::vector<std::string> prefill_order;
  std::map<std::string, PrefillBest> prefill;
};

// Decode points and the workloads they came from, index for index.
struct DecodeSet {
  std::vector<DecodePoint> pts;
  std::vector<const WorkloadBest*> workloads;
  void add(const WorkloadBest& b) {
    pts.push_back(b.pt);
    workloads.push_back(&b);
  }
};

// Held-out workloads stay out of the shape points and out of the fit; they only test the rules.
// Batches given sequence by sequence (Workload::mixed) are neither: they make the batch rules
// and the traffic regret.
struct DecodeSets {
  DecodeSet sweep;
  DecodeSet held_out;
  std::vector<const WorkloadBest*> batches; // in first-seen order, held-out ones flagged
};

// What the workloads of one shape point share; they differ only in context length.
struct ShapeKey {
  int dtype;
  int cache_dtype;
  int head_dim;
  int block_size;
  int num_kv_heads;
  int gqa_ratio;
  int batch;
  bool causal;
  int window_left;
  int window_right;
  double softcap;
  auto operator<=>(const ShapeKey&) const = default;
};

ShapeKey shape_key_of(const Workload& w) {
  const AttnParams& a = w.params;
  return {int(a.dtype),  int(a.cache_dtype()), a.head_dim,    a.block_size,
          a.num_kv_heads, a.group_size(),      w.batch,       a.causal,
          a.window_left,  a.window_right,      a.softcap};
}

DecodePoint point_of(const Workload& w) {
  DecodePoint p;
  p.batch = w.batch;
  p.num_heads = w.params.num_heads;
  p.num_kv_heads = w.params.num_kv_heads;
  p.context_len = w.context_len;
  return p;
}

} // namespace

attn_tune::Query decode_query(const Workload& w) {
  attn_tune::Query q;
  q.batch = w.batch;
  q.context_len = w.context_len;
  q.num_heads = w.params.num_heads;
  q.num_kv_heads = w.params.num_kv_heads;
  q.head_dim = w.params.head_dim;
  q.block_size = w.params.block_size;
  q.dtype = std::string(dtype_name(w.params.dtype));
  q.kv_dtype = std::string(dtype_name(w.params.cache_dtype()));
  q.causal = w.params.causal;
  q.window_left = w.params.window_left;
  q.window_right = w.params.window_right;
  q.softcap = w.params.softcap;
  return q;
}

namespace {

ContextTiming context_timing(const WorkloadBest& b) {
  return {b.w.context_len, b.v1.median_s, b.v2.median_s, b.v1.iqr_s(), b.v2.iqr_s()};
}

void keep_faster(TimedConfig& t, const MeasurementRecord& r) {
  if (r.median_s < t.median_s) {
    t = timed_config(r);
  }
}

void add_prefill(BestTimings& t, const std::string& key, const MeasurementRecord& r) {
  auto [it, fresh] = t.prefill.try_emplace(key, PrefillBest{r.workload, timed_config(r)});
  if (fresh) {
    t.prefill_order.push_back(key);
  } else {
    keep_faster(it->second.best, r);
  }
}

void add_decode(BestTimings& t, const std::string& key, const MeasurementRecord& r) {
  auto [it, fresh] = t.decode.try_emplace(key);
  WorkloadBest& b = it->second;
  if (fresh) {
    t.decode_order.push_back(key);
    b.w = r.workload;
    b.pt = point_of(r.workload);
  }
  b.pt.by_config[r.config.key()] = r.median_s;
  b.timed.push_back(r.config);
  if (!r.search_grid.empty()) {
    b.search_grid = r.search_grid;
  }
  if (r.median_s < b.pt.best_s) {
    b.pt.best_s = r.median_s;
    b.best = timed_config(r);
  }
  if (r.config.family == Family::decode_v1) {
    keep_faster(b.v1, r);
    b.pt.v1_s = std::min(b.pt.v1_s, r.median_s);
  } else if (r.config.family == Family::decode_v2) {
    keep_faster(b.v2, r);
    const int part = v2_partition(r.config); // kKernelSplits where the kernel chooses its splits
    auto [pit, pfresh] = b.pt.v2_by_partition.try_emplace(part, r.median_s);
    if (!pfresh) {
      pit->second = std::min(pit->second, r.median_s);
    }
  }
}

BestTimings best_timings(const std::vector<MeasurementRecord>& records) {
  BestTimings t;
  for (const auto& r : records) {
    if (t.counts.contains(r.status)) {
      t.counts[r.status] = t.counts[r.status].get<int>() + 1;
    }
    if (r.status != "ok" || !(r.median_s > 0) || r.brief) {
      continue; // a configuration that lost an adaptive search's race is not chosen
    }
    const std::string key = r.workload.key();
    if (r.workload.phase == Phase::prefill) {
      add_prefill(t, key, r);
    } else {
      add_decode(t, key, r);
    }
  }
  for (auto& [key, b] : t.decode) {
    const Comparison c = compare(context_timing(b));
    b.pt.noise = c.both ? c.noise : 0.0;
  }
  return t;
}

DecodeSets split_held_out(const BestTimings& t) {
  DecodeSets s;
  for (const auto& key : t.decode_order) {
    const WorkloadBest& b = t.decode.at(key);
    if (b.w.mixed()) {
      s.batches.push_back(&b);
    } else {
      (b.w.held_out ? s.held_out : s.sweep).add(b);
    }
  }
  return s;
}

json config_json(const KernelConfig& c) {
  json j = c.to_json();
  j["key"] = c.key();
  return j;
}

// The interquartile range goes along where it was recorded, so the noise calls can be checked.
json timed(const TimedConfig& t) {
  json j = {{"config", config_json(t.config)}, {"median_s", t.median_s}};
  if (t.p75_s > 0) {
    j["p25_s"] = t.p25_s;
    j["p75_s"] = t.p75_s;
  }
  return j;
}

json timed_or_null(const TimedConfig& t) { return t.median_s < kInf ? timed(t) : json(nullptr); }

json shape_json(const Workload& w) {
  json j = {{"dtype", std::string(dtype_name(w.params.dtype))},
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
  if (w.params.fp8_cache()) { // absent: the cache has the query's dtype (tables before 5)
    j["kv_dtype"] = std::string(dtype_name(w.params.cache_dtype()));
  }
  return j;
}

json measured_entry(const WorkloadBest& b) {
  json j = {{"context_len", b.w.context_len},
            {"best", timed(b.best)},
            {"v1", timed_or_null(b.v1)},
            {"v2", timed_or_null(b.v2)}};
  const Comparison c = compare(context_timing(b));
  j["within_noise"] = c.within_noise;
  if (c.both) {
    j["margin"] = c.margin;
    j["noise"] = c.noise;
  }
  return j;
}

// One shape point: its workloads by ascending context length and the crossover they make.
struct ShapePoint {
  std::vector<const WorkloadBest*> by_context;
  Crossover cross;
  [[nodiscard]] const WorkloadBest& at(int context_len) const {
    return **std::find_if(by_context.begin(), by_context.end(),
                          [&](const WorkloadBest* b) { return b->w.context_len == context_len; });
  }
};

// The sweep's decode workloads grouped into shape points, in ShapeKey order.
std::vector<ShapePoint> shape_points(const std::vector<const WorkloadBest*>& sweep) {
  std::map<ShapeKey, std::vector<const WorkloadBest*>> shapes;
  for (const auto* b : sweep) {
    shapes[shape_key_of(b->w)].push_back(b);
  }
  std::vector<ShapePoint> out;
  for (auto& [shape, list] : shapes) {
    std::sort(list.begin(), list.end(), [](const WorkloadBest* x, const WorkloadBest* y) {
      return x->w.context_len < y->w.context_len;
    });
    std::vector<ContextTiming> ct;
    for (const auto* b : list) {
      ct.push_back(context_timing(*b));
    }
    out.push_back({list, find_crossover(ct)});
  }
  return out;
}

const char* family_word(bool v2) { return v2 ? "v2" : "v1"; }

json optional_int(const std::optional<int>& v) { return v ? json(*v) : json(nullptr); }

// The point's decisions that rest on timings within noise (docs/threshold-table.md).
json noisy_json(const ShapePoint& sp) {
  json out = json::array();
  for (const NoisyDecision& n : sp.cross.noisy) {
    const WorkloadBest& b = sp.at(n.context_len);
    json j = {{"context_len", n.context_len},
              {"decision", family_word(n.v2)},
              {"faster", family_word(n.v2_faster)},
              {"margin", n.margin},
              {"noise", n.noise},
              {"carried_from", optional_int(n.carried_from)},
              {"switch_at", optional_int(n.switch_at)},
              {"hides_switch", n.hides_switch}};
    // Both compared timings already come from `--remeasure-noisy`: more repetitions did not
    // settle it.
    j["remeasured"] = b.v1.remeasured && b.v2.remeasured;
    out.push_back(j);
  }
  return out;
}

// One entry per shape point: its measured context lengths in order, where v2 is chosen, and
// which of those decisions rest on timings within noise.
json decode_points_json(const std::vector<ShapePoint>& shapes) {
  json points = json::array();
  for (const ShapePoint& sp : shapes) {
    json measured = json::array();
    for (const auto* b : sp.by_context) {
      measured.push_back(measured_entry(*b));
    }
    json pj = shape_json(sp.by_context.front()->w);
    pj["v2_intervals"] = sp.cross.intervals_json();
    if (const auto from = sp.cross.v2_from_json()) {
      pj["v2_from"] = *from;
    }
    pj["measured"] = measured;
    pj["noisy_decisions"] = noisy_json(sp);
    // An adaptive search's point: its grid, and the lengths whose decision the bisection inferred
    // from the measured lengths around them.
    std::vector<int> grid;
    std::set<int> seen;
    for (const auto* b : sp.by_context) {
      seen.insert(b->w.context_len);
      if (!b->search_grid.empty()) {
        grid = b->search_grid;
      }
    }
    if (!grid.empty()) {
      json inferred = json::array();
      for (int c : grid) {
        if (!seen.count(c)) {
          inferred.push_back(c);
        }
      }
      pj["search"] = {{"grid", grid}, {"inferred", inferred}};
    }
    points.push_back(pj);
  }
  return points;
}

json prefill_points_json(const BestTimings& t) {
  json points = json::array();
  for (const auto& key : t.prefill_order) {
    const PrefillBest& p = t.prefill.at(key);
    json pj = shape_json(p.w);
    pj["q_len"] = p.w.q_len;
    pj["k_len"] = p.w.k_len;
    pj["held_out"] = p.w.held_out;
    pj["best"] = timed(p.best);
    points.push_back(pj);
  }
  return points;
}

json held_out_points_json(const DecodeSet& held_out) {
  json points = json::array();
  for (const auto* b : held_out.workloads) {
    json hj = shape_json(b->w);
    hj.update(measured_entry(*b));
    points.push_back(hj);
  }
  return points;
}

json rule_json(const RuleFit& fit, const std::vector<RuleFit>& candidates) {
  json cand_j = json::array();
  for (const auto& c : candidates) {
    cand_j.push_back(c.to_json());
  }
  json rule = fit.to_json();
  rule["candidates"] = cand_j;
  return rule;
}

// The table lookup is charged through the reader engines use, so it sees what they would.
json set_regret_json(const DecodeSet& set, const attn_tune::ThresholdTableReader& reader,
                     const Rule& fitted, bool has_points) {
  int unusable = 0;
  for (const auto& p : set.pts) {
    unusable += p.usable() ? 0 : 1;
  }
  const auto table_pick = [&reader, &set](std::size_t i) {
    return KernelConfig::from_json(reader.lookup(decode_query(set.workloads[i]->w)).config);
  };
  json out = json::object();
  for (const EngineRule& r : engine_rules()) {
    if (!r.picks_family() && !has_points) {
      // A table without decode points (a shard that drew only held-out ones) looks nothing up.
      out[r.id] = Regret{}.to_json();
      continue;
    }
    out[r.id] = (r.picks_family() ? regret_of(set.pts, family_rule(r, fitted))
                                  : regret_of_configs(set.pts, table_pick))
                    .to_json();
  }
  out["points_without_both_families"] = unusable;
  return out;
}

// Regret of each rule on the sweep's points and on the held-out points; `table` must already
// hold its points and rule, since the table lookup reads them.
json regret_json(const json& table, const DecodeSets& sets, const RuleFit& fit) {
  const attn_tune::ThresholdTableReader reader(table);
  const Rule fitted = fitted_rule(fit);
  json regret;
  const bool has_points = table.contains("decode") && !table["decode"].empty();
  regret["sweep"] = set_regret_json(sets.sweep, reader, fitted, has_points);
  regret["held_out"] = set_regret_json(sets.held_out, reader, fitted, has_points);
  return regret;
}

attn_tune::BatchFeatures features_of(const Workload& w) {
  return attn_tune::BatchFeatures::of(w.decode_lens());
}

BatchSample sample_of(const WorkloadBest& b) {
  return {features_of(b.w), b.pt, b.w.weight, b.timed};
}

json batches_json(const std::vector<const WorkloadBest*>& batches) {
  json out = json::array();
  for (const WorkloadBest* b : batches) {
    const attn_tune::BatchFeatures f = features_of(b->w);
    json j = shape_json(b->w);
    j["seq_lens"] = b->w.context_lens;
    j["max_len"] = int(f.max_len);
    j["sum_len"] = f.sum_len;
    j["mean_len"] = f.mean_len;
    j["weight"] = b->w.weight;
    j["held_out"] = b->w.held_out;
    j.update(measured_entry(*b));
    out.push_back(j);
  }
  return out;
}

// A batch rule's shape: a ShapeKey without the batch.
ShapeKey rule_key_of(const Workload& w) {
  ShapeKey k = shape_key_of(w);
  k.batch = 0;
  return k;
}

// One rule per shape that has batches, fitted on its sweep batches and its uniform sweep points
// alike (a grid point is a batch whose sequences share one length); `table` must already hold
// its decode points, which a leaf may defer to.
json batch_rules_json(const json& table, const DecodeSets& sets) {
  const attn_tune::ThresholdTableReader reader(table);
  const bool has_points = !table.at("decode").empty();
  auto sample = [&](const WorkloadBest& b) {
    BatchSample s = sample_of(b);
    if (has_points) {
      s.lookup_s =
          config_time(b.pt, KernelConfig::from_json(reader.lookup(decode_query(b.w)).config));
    }
    return s;
  };
  std::map<ShapeKey, std::vector<const WorkloadBest*>> batches;
  std::vector<ShapeKey> order;
  for (const WorkloadBest* b : sets.batches) {
    if (b->w.held_out) {
      continue;
    }
    auto [it, fresh] = batches.try_emplace(rule_key_of(b->w));
    if (fresh) {
      order.push_back(it->first);
    }
    it->second.push_back(b);
  }
  json out = json::array();
  for (const ShapeKey& k : order) {
    std::vector<BatchSample> samples;
    double weight = 0.0;
    for (const WorkloadBest* b : batches.at(k)) {
      samples.push_back(sample(*b));
      weight += b->w.weight;
    }
    int points = 0;
    for (const WorkloadBest* b : sets.sweep.workloads) {
      if (rule_key_of(b->w) == k) {
        samples.push_back(sample(*b));
        samples.back().grid = true;
        ++points;
      }
    }
    json tree = fit_batch_tree(samples);
    if (tree.is_null()) {
      continue; // no batch of this shape had both families measured
    }
    json rj = shape_json(batches.at(k).front()->w);
    rj.erase("batch");
    rj["batches"] = int(batches.at(k).size());
    rj["points"] = points;
    rj["weight"] = weight;
    rj["tree"] = std::move(tree);
    out.push_back(std::move(rj));
  }
  return out;
}

// Traffic-weighted regret of every rule over the batches (sweep and held out): the engines'
// rules and the fitted rule decide from the batch's size and longest length, the table lookup
// reads the uniform points the same way, and `batch_rules` reads the whole batch.
json traffic_regret_json(const json& table, const DecodeSets& sets, const RuleFit& fit) {
  const attn_tune::ThresholdTableReader reader(table);
  const Rule fitted = fitted_rule(fit);
  json out;
  for (const bool held : {false, true}) {
    std::vector<BatchSample> samples;
    std::vector<const WorkloadBest*> from;
    for (const WorkloadBest* b : sets.batches) {
      if (b->w.held_out == held) {
        samples.push_back(sample_of(*b));
        from.push_back(b);
      }
    }
    auto index_of = [&](const BatchSample& s) { return std::size_t(&s - samples.data()); };
    json set = json::object();
    for (const EngineRule& r : engine_rules()) {
      if (r.picks_family()) {
        const Rule rule = family_rule(r, fitted);
        set[r.id] = traffic_regret(samples, [&](const BatchSample& s) {
                      return rule_time(s.point, rule(s.point));
                    }).to_json();
      } else if (!table.at("decode").empty()) {
        set[r.id] = traffic_regret(samples, [&](const BatchSample& s) {
                      const attn_tune::Choice c = reader.lookup(decode_query(from[index_of(s)]->w));
                      return config_time(s.point, KernelConfig::from_json(c.config));
                    }).to_json();
      }
    }
    if (reader.has_batch_rules()) {
      set["batch_rules"] = traffic_regret(samples, [&](const BatchSample& s) {
                             attn_tune::Query q = decode_query(from[index_of(s)]->w);
                             q.seq_lens = from[index_of(s)]->w.decode_lens();
                             const attn_tune::Choice c = reader.lookup(q);
                             return config_time(s.point, KernelConfig::from_json(c.config));
                           }).to_json();
    }
    out[held ? "held_out" : "sweep"] = set;
  }
  return out;
}

} // namespace

namespace {

std::vector<WorkloadPoint> decode_points(const std::vector<MeasurementRecord>& records,
                                         bool mixed) {
  const BestTimings best = best_timings(records);
  std::vector<WorkloadPoint> out;
  for (const auto& key : best.decode_order) {
    const WorkloadBest& b = best.decode.at(key);
    if (b.w.mixed() == mixed) {
      out.push_back({b.w, b.pt});
    }
  }
  return out;
}

} // namespace

std::vector<WorkloadPoint> decode_workload_points(const std::vector<MeasurementRecord>& records) {
  return decode_points(records, false);
}

std::vector<WorkloadPoint> decode_batch_points(const std::vector<MeasurementRecord>& records) {
  return decode_points(records, true);
}

std::vector<NoisyPoint> noisy_decision_points(const std::vector<MeasurementRecord>& records) {
  const BestTimings best = best_timings(records);
  std::vector<NoisyPoint> out;
  for (const ShapePoint& sp : shape_points(split_held_out(best).sweep.workloads)) {
    for (const NoisyDecision& n : sp.cross.noisy) {
      const WorkloadBest& b = sp.at(n.context_len);
      out.push_back({b.w, n, b.timed});
    }
  }
  return out;
}

nlohmann::json build_threshold_table(const std::vector<MeasurementRecord>& records,
                                     const nlohmann::json& provenance, int sm_count) {
  const BestTimings best = best_timings(records);
  const DecodeSets sets = split_held_out(best);
  std::vector<RuleFit> candidates;
  const RuleFit fit = fit_rule(sets.sweep.pts, sm_count, &candidates);
  json table = {{"schema", attn_tune::kTableSchemaName},
                {"version", attn_tune::kTableSchemaVersion},
                {"provenance", provenance},
                {"measurement_counts", best.counts},
                {"decode", decode_points_json(shape_points(sets.sweep.workloads))},
                {"prefill", prefill_points_json(best)},
                {"held_out", held_out_points_json(sets.held_out)}};
  table["rule"] = rule_json(fit, candidates);
  table["regret"] = regret_json(table, sets, fit);
  if (!sets.batches.empty()) {
    table["batches"] = batches_json(sets.batches);
    table["batch_rules"] = batch_rules_json(table, sets);
    table["regret"]["traffic"] = traffic_regret_json(table, sets, fit);
  }
  return table;
}

} // namespace attn

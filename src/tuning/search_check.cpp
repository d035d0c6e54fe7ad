// Judging a table on an exhaustive sweep's measurements, and replaying the adaptive search on
// them.
#include "src/tuning/search_check.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "src/tuning/adaptive_search.h"
#include "src/tuning/provenance.h"
#include "src/tuning/regret.h"
#include "src/tuning/threshold_table.h"

namespace attn {

using nlohmann::json;

void TableJudgement::Regret::add(double r, const std::string& point) {
  if (points == 0 || r > worst) {
    worst = r;
    worst_point = point;
  }
  ++points;
  mean += r;
}

void TableJudgement::Regret::finish() {
  if (points > 0) {
    mean /= points;
  }
}

json TableJudgement::Regret::to_json() const {
  return {{"points", points}, {"mean", mean}, {"worst", worst}, {"worst_point", worst_point}};
}

json TableJudgement::Point::to_json() const {
  return {{"workload_key", workload_key},
          {"held_out", held_out},
          {"basis", basis},
          {"own_timings", own_timings.empty() ? json(nullptr) : json(own_timings)},
          {"config_key", config_key},
          {"regret", regret},
          {"exhaustive_config_key", exhaustive_config_key},
          {"exhaustive_regret", exhaustive_regret},
          {"noise", noise}};
}

std::vector<TableJudgement::Point> TableJudgement::above(double limit) const {
  std::vector<Point> out;
  for (const Point& p : each) {
    if (p.regret > limit) {
      out.push_back(p);
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Point& a, const Point& b) { return a.regret > b.regret; });
  return out;
}

json TableJudgement::to_json() const {
  json points_json = json::array();
  for (const Point& p : each) {
    points_json.push_back(p.to_json());
  }
  return {{"grid", grid.to_json()},
          {"held_out", held_out.to_json()},
          {"beyond_exhaustive_table", added.to_json()},
          {"points", points},
          {"family_agreement", points > 0 ? double(family_agree) / points : 0.0},
          {"config_agreement", points > 0 ? double(config_agree) / points : 0.0},
          {"mean_regret", mean_regret},
          {"worst_regret", worst_regret},
          {"mean_regret_beyond_noise", mean_regret_beyond_noise},
          {"worst_regret_beyond_noise", worst_regret_beyond_noise},
          {"worst_point", worst_point},
          {"each_point", points_json}};
}

TableJudgement judge_table(const std::vector<MeasurementRecord>& exhaustive,
                           const json& exhaustive_table, const json& table,
                           const std::vector<MeasurementRecord>* judged_sweep) {
  const attn_tune::ThresholdTableReader ref(exhaustive_table);
  const attn_tune::ThresholdTableReader judged(table);
  // The workloads, and the (workload, configuration) pairs, the judged sweep timed in full (a
  // brief race timing decides nothing).
  std::set<std::string> timed;
  std::map<std::string, double> timed_pairs; // their median times
  if (judged_sweep != nullptr) {
    for (const MeasurementRecord& r : *judged_sweep) {
      if (r.status == "ok" && !r.brief) {
        timed.insert(r.workload.key());
        timed_pairs[record_key(r.workload.key(), r.config.key())] = r.median_s;
      }
    }
  }
  TableJudgement j;
  TableJudgement::Regret all;
  TableJudgement::Regret beyond_noise;
  for (const WorkloadPoint& wp : decode_workload_points(exhaustive)) {
    if (!wp.point.usable()) {
      continue;
    }
    const attn_tune::Query q = decode_query(wp.workload);
    const attn_tune::Choice want = ref.lookup(q);
    const attn_tune::Choice got = judged.lookup(q);
    ++j.points;
    j.family_agree += want.family == got.family ? 1 : 0;
    j.config_agree += want.config_key == got.config_key ? 1 : 0;
    const double s =
        slowdown(config_time(wp.point, KernelConfig::from_json(got.config)), wp.point.best_s);
    const double s_ref =
        slowdown(config_time(wp.point, KernelConfig::from_json(want.config)), wp.point.best_s);
    const std::string key = wp.workload.key();
    TableJudgement::Point pj;
    pj.workload_key = key;
    pj.held_out = wp.workload.held_out;
    // The configuration fastest here in the exhaustive timings (the first of equals).
    std::string best_key;
    double best_t = kInf;
    for (const auto& [k, t] : wp.point.by_config) {
      if (t < best_t) {
        best_key = k;
        best_t = t;
      }
    }
    if (wp.workload.held_out) {
      pj.basis = "held_out";
    } else if (judged_sweep == nullptr) {
      pj.basis = "measured";
    } else if (timed.count(key) == 0) {
      pj.basis = "inferred";
    } else {
      const auto best_there = timed_pairs.find(record_key(key, best_key));
      const auto chosen_there = timed_pairs.find(record_key(key, got.config_key));
      pj.basis = best_there != timed_pairs.end() ? "measured" : "best_untimed";
      if (best_there != timed_pairs.end() && chosen_there != timed_pairs.end() &&
          got.config_key != best_key) {
        pj.own_timings = chosen_there->second <= best_there->second ? "choice_ahead" : "best_ahead";
      }
    }
    pj.config_key = got.config_key;
    pj.regret = s;
    pj.exhaustive_config_key = want.config_key;
    pj.exhaustive_regret = s_ref;
    pj.noise = wp.point.noise;
    j.each.push_back(std::move(pj));
    (wp.workload.held_out ? j.held_out : j.grid).add(s, wp.workload.key());
    j.added.add(std::max(0.0, s - s_ref), wp.workload.key());
    all.add(s, wp.workload.key());
    beyond_noise.add(std::max(0.0, s - wp.point.noise), wp.workload.key());
  }
  all.finish();
  beyond_noise.finish();
  j.mean_regret = all.mean;
  j.worst_regret = all.worst;
  j.worst_point = all.worst_point;
  j.mean_regret_beyond_noise = beyond_noise.mean;
  j.worst_regret_beyond_noise = beyond_noise.worst;
  j.grid.finish();
  j.held_out.finish();
  j.added.finish();
  return j;
}

KernelCalls kernel_calls(const std::vector<json>& lines) {
  KernelCalls k;
  for (const json& l : lines) {
    const auto t = l.find("timing");
    if (t != l.end() && t->is_object()) {
      k.timed += t->value("reps", 0LL);
      k.warmup += t->value("warmup_calls", 0LL);
    }
  }
  return k;
}

json SweepDrift::to_json() const {
  json far = json::array();
  for (const DriftOutlier& o : farthest) {
    far.push_back(
        {{"workload_key", o.workload_key}, {"config_key", o.config_key}, {"ratio", o.ratio}});
  }
  return {{"pairs", pairs},
          {"median", median},
          {"p10", p10},
          {"p90", p90},
          {"outlier_ratio", kDriftOutlier},
          {"outliers", outliers},
          {"farthest", far}};
}

SweepDrift sweep_drift(const std::vector<MeasurementRecord>& a,
                       const std::vector<MeasurementRecord>& b) {
  std::map<std::string, double> at;
  for (const MeasurementRecord& r : a) {
    if (r.status == "ok" && !r.brief && r.median_s > 0) {
      at[record_key(r.workload.key(), r.config.key())] = r.median_s;
    }
  }
  std::vector<double> ratios;
  SweepDrift d;
  for (const MeasurementRecord& r : b) {
    const auto it = at.find(record_key(r.workload.key(), r.config.key()));
    if (r.status == "ok" && !r.brief && r.median_s > 0 && it != at.end()) {
      const double ratio = r.median_s / it->second;
      ratios.push_back(ratio);
      if (ratio >= kDriftOutlier || ratio <= 1.0 / kDriftOutlier) {
        ++d.outliers;
        d.farthest.push_back({r.workload.key(), r.config.key(), ratio});
      }
    }
  }
  const auto apart = [](const DriftOutlier& o) { return std::fabs(std::log(o.ratio)); };
  std::stable_sort(
      d.farthest.begin(), d.farthest.end(),
      [&](const DriftOutlier& x, const DriftOutlier& y) { return apart(x) > apart(y); });
  if (d.farthest.size() > 3) {
    d.farthest.resize(3);
  }
  d.pairs = int(ratios.size());
  if (ratios.empty()) {
    return d;
  }
  std::sort(ratios.begin(), ratios.end());
  // Linear interpolation between the order statistics.
  const auto quantile = [&](double q) {
    const double x = q * double(ratios.size() - 1);
    const std::size_t i = std::size_t(x);
    const std::size_t j = std::min(i + 1, ratios.size() - 1);
    return ratios[i] + (ratios[j] - ratios[i]) * (x - double(i));
  };
  d.median = quantile(0.5);
  d.p10 = quantile(0.1);
  d.p90 = quantile(0.9);
  return d;
}

json table_of_results(const json& header, const std::vector<json>& lines) {
  const auto records = to_records(lines);
  const json& dev = header.value("device", json::object());
  return build_threshold_table(records, table_provenance(header, records, lines),
                               dev.value("sm_count", dev.value("threads", 0)));
}

ReplayedSearch replay_on(const json& exhaustive_header, const std::vector<json>& exhaustive_lines) {
  // The plan as the exhaustive sweep ran it: its workloads in order, each with its configurations.
  std::vector<SearchPoint> points;
  std::map<std::string, std::size_t> at;
  std::map<std::string, json> measured;
  for (const MeasurementRecord& r : to_records(exhaustive_lines)) {
    const std::string wk = r.workload.key();
    auto [it, fresh] = at.try_emplace(wk, points.size());
    if (fresh) {
      points.push_back({r.workload, {}});
    }
    points[it->second].configs.push_back(r.config);
  }
  for (const json& l : exhaustive_lines) {
    measured[record_key(l.value("workload_key", ""), l.value("config_key", ""))] = l;
  }
  const AdaptiveSearch search(std::move(points));
  ReplayedSearch out;
  out.lines = replay_search(search, measured);
  out.header = exhaustive_header;
  out.header.erase("merged"); // its counts are the exhaustive sweeps', not these lines'
  out.header["search"] = search_header(SearchMode::adaptive, nullptr);
  out.header["search"]["replayed"] = true; // answered with the exhaustive sweep's timings
  out.table = table_of_results(out.header, out.lines);
  return out;
}

std::vector<json> pool_faster(const std::vector<json>& a, const std::vector<json>& b) {
  const auto timed_ok = [](const json& l) {
    return l.is_object() && l.value("type", "") == "measurement" && l.value("status", "") == "ok" &&
           l.contains("timing") && l["timing"].is_object() && l["timing"].contains("median_s") &&
           l["timing"]["median_s"].is_number();
  };
  std::map<std::string, const json*> in_b;
  for (const json& l : b) {
    if (timed_ok(l)) {
      in_b[record_key(l.value("workload_key", ""), l.value("config_key", ""))] = &l;
    }
  }
  std::vector<json> out;
  out.reserve(a.size());
  for (const json& l : a) {
    const json* pick = &l;
    if (timed_ok(l)) {
      const auto it = in_b.find(record_key(l.value("workload_key", ""), l.value("config_key", "")));
      if (it != in_b.end() && (*it->second)["timing"]["median_s"].get<double>() <
                                  l["timing"]["median_s"].get<double>()) {
        pick = it->second;
      }
    }
    out.push_back(*pick);
  }
  return out;
}

json PooledReplay::to_json() const {
  return {{"measurements", measurements},
          {"measurement_ratio", plan > 0 ? double(measurements) / plan : 0.0},
          {"table", replayed.to_json()},
          {"exhaustive_table", self.to_json()}};
}

PooledReplay replay_pooled(const json& header, const std::vector<json>& a,
                           const std::vector<json>& b) {
  const std::vector<json> lines = pool_faster(a, b);
  const std::vector<MeasurementRecord> records = to_records(lines);
  const json table = table_of_results(header, lines);
  const ReplayedSearch replay = replay_on(header, lines);
  const std::vector<MeasurementRecord> replay_records = to_records(replay.lines);
  PooledReplay p;
  p.plan = int(records.size());
  p.measurements = replay.table.at("provenance").at("search").value("measurements", 0);
  p.replayed = judge_table(records, table, replay.table, &replay_records);
  p.self = judge_table(records, table, table, &records);
  return p;
}

ControlJudgement judge_control(const std::string& folder, const std::vector<MeasurementRecord>& ex,
                               const nlohmann::json& ex_table,
                               const std::vector<MeasurementRecord>& ctl,
                               const nlohmann::json& ctl_table,
                               const std::vector<MeasurementRecord>* ad,
                               const nlohmann::json* ad_table) {
  ControlJudgement c;
  c.folder = folder;
  c.measurements = int(ctl.size());
  c.drift = sweep_drift(ex, ctl);
  c.control = judge_table(ex, ex_table, ctl_table, &ctl);
  c.first = judge_table(ctl, ctl_table, ex_table, &ex);
  if (ad != nullptr && ad_table != nullptr) {
    c.adaptive = judge_table(ctl, ctl_table, *ad_table, ad);
  }
  return c;
}

nlohmann::json ControlJudgement::to_json() const {
  nlohmann::json j = {{"folder", folder},
                      {"measurements", measurements},
                      {"drift", drift.to_json()},
                      {"control_table", control.to_json()},
                      {"exhaustive_table_on_control", first.to_json()},
                      {"floor",
                       {{"mean_regret", floor_mean()},
                        {"worst_regret", floor_worst()},
                        {"meets_regret_goals", floor_meets_goals()}}}};
  if (adaptive) {
    j["adaptive_table_on_control"] = adaptive->to_json();
  }
  if (adaptive_on_first) {
    j["floor"]["adaptive_within_floor"] = adaptive_within_floor();
  }
  if (pooled) {
    j["pooled_replay"] = pooled->to_json();
  }
  return j;
}

} // namespace attn

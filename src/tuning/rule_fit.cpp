// The rule fit: for each tiles definition and partition, the k with the least total regret
// among thresholds that fall between the points' tile counts.
#include "src/tuning/rule_fit.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "src/model/errors.h"

namespace attn {

std::string tiles_name(TilesDef d, int partition) {
  const char* heads = "batch*num_kv_heads*";
  switch (d) {
  case TilesDef::batch_heads_parts:
    heads = "batch*num_heads*";
    break;
  case TilesDef::kv_heads_parts:
    heads = "num_kv_heads*";
    break;
  case TilesDef::heads_parts:
    heads = "num_heads*";
    break;
  default:
    break;
  }
  return std::string(heads) + (partition == kKernelSplits ? "context_len" : "partitions");
}

double count_tiles(TilesDef d, const DecodePoint& p, int partition) {
  const double parts = partition == kKernelSplits
                           ? double(p.context_len)
                           : std::ceil(double(p.context_len) / double(std::max(partition, 1)));
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
          {"tiles", tiles_name(tiles, partition)},
          {"k", k},
          {"partition",
           partition == kKernelSplits ? nlohmann::json(nullptr) : nlohmann::json(partition)},
          {"sm_count", sm_count},
          {"total_regret", total_regret},
          {"points", points}};
}

RuleFit RuleFit::from_json(const nlohmann::json& j) {
  RuleFit f;
  const nlohmann::json& part = j.at("partition");
  f.partition = part.is_null() ? kKernelSplits : part.get<int>();
  const std::string tiles = j.at("tiles").get<std::string>();
  bool known = false;
  for (TilesDef d : {TilesDef::batch_kv_heads_parts, TilesDef::batch_heads_parts,
                     TilesDef::kv_heads_parts, TilesDef::heads_parts}) {
    if (tiles == tiles_name(d, f.partition)) {
      f.tiles = d;
      known = true;
    }
  }
  if (!known) {
    throw InputError("rule.tiles: unknown tiles definition \"" + tiles + "\"" +
                     (f.partition == kKernelSplits ? " for a rule without a partition"
                                                   : " for a rule with a partition"));
  }
  f.k = j.at("k").get<double>();
  f.sm_count = j.at("sm_count").get<int>();
  f.total_regret = j.value("total_regret", 0.0);
  f.points = j.value("points", 0);
  return f;
}

namespace {

// One point seen by a candidate rule: its tiles per SM, and its regret under v1 and under v2.
struct TileRegret {
  double x, r1, r2;
};

// Candidate k: below every point (all v2), between neighbours (geometric mean), at the top.
std::vector<double> candidate_ks(const std::vector<TileRegret>& rows) {
  std::vector<double> xs;
  for (const auto& r : rows) {
    xs.push_back(r.x);
  }
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  std::vector<double> ks = {xs.front() / 2};
  for (std::size_t i = 0; i + 1 < xs.size(); ++i) {
    ks.push_back(std::sqrt(xs[i] * xs[i + 1]));
  }
  ks.push_back(xs.back());
  return ks;
}

// The best k for one tiles definition and partition (`pts` not empty).
RuleFit fit_k(TilesDef def, int part, const std::vector<const DecodePoint*>& pts, int sm_count) {
  std::vector<TileRegret> rows;
  for (const auto* p : pts) {
    rows.push_back({count_tiles(def, *p, part) / sm_count, slowdown(p->v1_s, p->best_s),
                    slowdown(p->v2_time(part), p->best_s)});
  }
  RuleFit f;
  f.tiles = def;
  f.partition = part;
  f.sm_count = sm_count;
  f.points = int(rows.size());
  f.total_regret = kInf;
  for (double k : candidate_ks(rows)) {
    double total = 0.0;
    for (const auto& r : rows) {
      total += r.x > k ? r.r2 : r.r1;
    }
    if (total < f.total_regret - 1e-12) {
      f.total_regret = total;
      f.k = k;
    }
  }
  return f;
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
      const RuleFit f = fit_k(def, part, pts, best.sm_count);
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

} // namespace attn

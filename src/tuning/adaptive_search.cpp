// The adaptive search: decode shapes and the other points built once from the plan; the racing,
// bisection and reuse rules evaluated afresh on every call from the observations alone.
#include "src/tuning/adaptive_search.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "src/model/dtype.h"
#include "src/model/errors.h"
#include "src/tuning/crossover.h"
#include "src/tuning/decode_point.h"
#include "src/tuning/provenance.h"
#include "src/tuning/results_file.h"

namespace attn {

using nlohmann::json;

const char* search_mode_name(SearchMode m) {
  return m == SearchMode::adaptive ? "adaptive" : "exhaustive";
}

SearchMode parse_search_mode(const std::string& s) {
  if (s == "adaptive") {
    return SearchMode::adaptive;
  }
  if (s == "exhaustive") {
    return SearchMode::exhaustive;
  }
  throw InputError("--search '" + s + "': expected exhaustive or adaptive");
}

const char* search_stage_name(SearchStage s) { return s == SearchStage::race ? "race" : "full"; }

TimingOptions race_timing(TimingOptions t) {
  t.min_reps = std::max(3, t.min_reps / 3);
  t.max_reps = std::max(t.min_reps, t.max_reps / kRaceShare);
  t.max_seconds /= kRaceShare;
  t.warmup_seconds /= kRaceShare;
  t.warmup = 1; // the point's earlier runs have warmed the device already
  return t;
}

json search_header(SearchMode m, const TimingOptions* timing) {
  json h = {{"mode", search_mode_name(m)}};
  if (m == SearchMode::adaptive) {
    h["race_margin"] = kRaceMargin;
    h["direct_candidates"] = kDirectCandidates;
    h["race_survivors"] = kRaceSurvivors;
    h["hopeless_margin"] = kHopelessMargin;
    if (timing != nullptr) {
      h["race_timing"] = timing_options_json(race_timing(*timing));
    }
  }
  return h;
}

double SearchObservation::noise() const {
  return median_s > 0 ? std::max(0.0, p75_s - p25_s) / median_s : 0.0;
}

namespace {
// Whether `o` is slower than `best` by more than `margin` plus both relative interquartile
// ranges: beyond the noise of either timing (the race, hopeless and crossing rules).
bool slower_beyond(const SearchObservation& o, const SearchObservation& best, double margin) {
  return o.median_s / best.median_s - 1.0 > margin + o.noise() + best.noise();
}
} // namespace

SearchStage line_stage(const json& line) {
  return is_race_line(line) ? SearchStage::race : SearchStage::full;
}

void observe(SearchObservations& obs, const json& line) {
  SearchObservation o;
  o.status = line.value("status", "");
  o.stage = line_stage(line);
  if (line.contains("timing") && line["timing"].is_object()) {
    o.median_s = line["timing"].value("median_s", 0.0);
    o.p25_s = line["timing"].value("p25_s", o.median_s);
    o.p75_s = line["timing"].value("p75_s", o.median_s);
  }
  obs[record_key(line.value("workload_key", ""), line.value("config_key", ""))] = o;
}

SearchObservations search_observations(const std::vector<json>& lines) {
  SearchObservations obs;
  for (const json& l : lines) {
    observe(obs, l);
  }
  return obs;
}

namespace {

// The points searched together, in plan order: a phase with its dtypes, head size, block size and
// mask. The batch, heads and lengths vary inside a scope.
std::string scope_key(const Workload& w) {
  const AttnParams& a = w.params;
  return std::string(w.phase == Phase::decode ? "decode " : "prefill ") +
         std::string(dtype_name(a.dtype)) + "/" + std::string(dtype_name(a.cache_dtype())) +
         " d=" + std::to_string(a.head_dim) + " bs=" + std::to_string(a.block_size) +
         (a.causal ? " causal" : "") + " wl=" + std::to_string(a.window_left) +
         " wr=" + std::to_string(a.window_right) + " cap=" + std::to_string(a.softcap);
}

bool on_grid(const Workload& w) { return w.phase == Phase::decode && !w.held_out && !w.mixed(); }

// A point's group: its heads and everything in its scope, over every batch and length (held-out
// and mixed batches with their grid's group). A grid point's shape group; the points whose race
// survivors a point's candidates come from.
std::string pool_key(const Workload& w) {
  Workload g = w;
  g.batch = 1;
  g.context_lens.clear();
  g.held_out = false;
  g.weight = 1.0;
  g.context_len = w.phase == Phase::decode ? 1 : 0;
  g.q_len = w.phase == Phase::prefill ? 1 : 0;
  g.k_len = w.phase == Phase::prefill ? 1 : 0;
  return g.key();
}

std::string ctx_words(int ctx) { return "ctx " + std::to_string(ctx); }

} // namespace

AdaptiveSearch::AdaptiveSearch(std::vector<SearchPoint> points) : points_(std::move(points)) {
  std::map<std::string, std::size_t> scope_at;
  std::map<std::string, std::size_t> pool_at;
  // Per scope: group key -> batch -> points.
  std::vector<std::vector<std::string>> group_order;
  std::vector<std::map<std::string, std::map<int, std::vector<std::size_t>>>> grid;
  for (std::size_t i = 0; i < points_.size(); ++i) {
    const Workload& w = points_[i].workload;
    keys_.push_back(w.key());
    auto [pit, pfresh] = pool_at.try_emplace(pool_key(w), pool_members_.size());
    if (pfresh) {
      pool_members_.emplace_back();
    }
    pool_members_[pit->second].push_back(i);
    pool_of_.push_back(pit->second);
    auto [it, fresh] = scope_at.try_emplace(scope_key(w), scopes_.size());
    if (fresh) {
      scopes_.emplace_back();
      group_order.emplace_back();
      grid.emplace_back();
    }
    const std::size_t s = it->second;
    scope_of_.push_back(s);
    if (on_grid(w)) {
      const std::string g = pool_key(w);
      if (!grid[s].count(g)) {
        group_order[s].push_back(g);
      }
      grid[s][g][w.batch].push_back(i);
    } else {
      scopes_[s].others.push_back(i);
    }
  }
  for (std::size_t s = 0; s < scopes_.size(); ++s) {
    Scope& sc = scopes_[s];
    for (const std::string& g : group_order[s]) {
      std::vector<Shape> shapes;
      for (auto& [batch, list] : grid[s][g]) { // batches ascending
        std::stable_sort(list.begin(), list.end(), [&](std::size_t a, std::size_t b) {
          return points_[a].workload.context_len < points_[b].workload.context_len;
        });
        std::vector<int> ctx;
        for (std::size_t i : list) {
          ctx.push_back(points_[i].workload.context_len);
          grid_shape_[i] = shape_grids_.size();
        }
        shape_grids_.push_back(ctx);
        shapes.push_back({batch, list});
      }
      sc.groups.push_back(std::move(shapes));
    }
  }
}

std::vector<int> AdaptiveSearch::shape_grid(std::size_t i) const {
  const auto it = grid_shape_.find(i);
  return it == grid_shape_.end() ? std::vector<int>{} : shape_grids_[it->second];
}

const SearchObservation* AdaptiveSearch::seen(std::size_t i, const KernelConfig& c,
                                              const SearchObservations& obs) const {
  const auto it = obs.find(record_key(keys_[i], c.key()));
  return it == obs.end() ? nullptr : &it->second;
}

bool AdaptiveSearch::measured(std::size_t i, const SearchObservations& obs) const {
  for (const KernelConfig& c : points_[i].configs) {
    const SearchObservation* o = seen(i, c, obs);
    if (o != nullptr && o->ok() && o->stage == SearchStage::full) {
      return true;
    }
  }
  return false;
}

// Per family: the fastest kRaceSurvivors configurations whose medians are within kRaceMargin plus
// both relative interquartile ranges of the family's best, from whatever timing each has.
std::vector<KernelConfig> AdaptiveSearch::contenders(std::size_t i,
                                                     const SearchObservations& obs) const {
  std::map<Family, const SearchObservation*> best;
  for (const KernelConfig& c : points_[i].configs) {
    const SearchObservation* o = seen(i, c, obs);
    if (o != nullptr && o->ok()) {
      const SearchObservation*& b = best[c.family];
      if (b == nullptr || o->median_s < b->median_s) {
        b = o;
      }
    }
  }
  std::vector<std::pair<double, const KernelConfig*>> within;
  for (const KernelConfig& c : points_[i].configs) {
    const SearchObservation* o = seen(i, c, obs);
    if (o == nullptr || !o->ok()) {
      continue;
    }
    const SearchObservation* b = best.at(c.family);
    if (!slower_beyond(*o, *b, kRaceMargin)) {
      within.emplace_back(o->median_s, &c);
    }
  }
  // The fastest kRaceSurvivors of each family, in the plan's order.
  std::stable_sort(within.begin(), within.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::map<Family, int> kept;
  std::set<std::string> keep;
  for (const auto& [t, c] : within) {
    if (++kept[c->family] <= kRaceSurvivors) {
      keep.insert(c->key());
    }
  }
  std::vector<KernelConfig> out;
  for (const KernelConfig& c : points_[i].configs) {
    if (keep.count(c.key())) {
      out.push_back(c);
    }
  }
  return out;
}

double AdaptiveSearch::distance(std::size_t a, std::size_t b) const {
  const Workload& x = points_[a].workload;
  const Workload& y = points_[b].workload;
  const auto gap = [](double u, double v) {
    return u > 0 && v > 0 ? std::fabs(std::log2(u) - std::log2(v)) : 0.0;
  };
  return x.phase == Phase::decode ? gap(x.context_len, y.context_len)
                                  : gap(x.q_len, y.q_len) + gap(x.k_len, y.k_len);
}

AdaptiveSearch::Pools AdaptiveSearch::pools(const SearchObservations& obs) const {
  Pools p;
  p.measured.resize(points_.size(), 0);
  p.contenders.resize(points_.size());
  for (std::size_t j = 0; j < points_.size(); ++j) {
    if (measured(j, obs)) {
      p.measured[j] = 1;
      for (const KernelConfig& c : contenders(j, obs)) {
        p.contenders[j].push_back(c.key());
      }
    }
  }
  return p;
}

bool AdaptiveSearch::hopeless(std::size_t i, const KernelConfig& c,
                              const SearchObservations& obs) const {
  const auto length = [&](std::size_t k) {
    const Workload& w = points_[k].workload;
    return w.phase == Phase::decode ? double(w.context_len) : double(w.q_len) * w.k_len;
  };
  bool below = false;
  bool above = false;
  for (const std::size_t j : pool_members_[pool_of_[i]]) {
    const SearchObservation* o = j == i ? nullptr : seen(j, c, obs);
    if (o == nullptr || !o->ok()) {
      continue;
    }
    const SearchObservation* best = o;
    for (const KernelConfig& d : points_[j].configs) {
      const SearchObservation* od = seen(j, d, obs);
      if (d.family == c.family && od != nullptr && od->ok() && od->median_s < best->median_s) {
        best = od;
      }
    }
    if (!slower_beyond(*o, *best, kHopelessMargin)) {
      return false;
    }
    below = below || length(j) <= length(i);
    above = above || length(j) >= length(i);
  }
  // Timed on one side only, a configuration may still win here: on a 2-core Zen 5,
  // decode_v2[partition=256] lost by 37% at 16384 tokens and won 512.
  return below && above;
}

std::vector<std::size_t> AdaptiveSearch::neighbours(std::size_t i, const Pools& pools) const {
  const Workload& w = points_[i].workload;
  std::vector<std::size_t> out;
  if (!on_grid(w)) {
    return out;
  }
  // Per direction (shorter, longer, smaller batch, larger batch): the nearest measured point.
  std::optional<std::size_t> near[4];
  const auto gap = [&](std::size_t k) {
    const Workload& v = points_[k].workload;
    return std::abs(v.context_len - w.context_len) + std::abs(v.batch - w.batch);
  };
  for (const std::size_t j : pool_members_[pool_of_[i]]) {
    const Workload& v = points_[j].workload;
    if (j == i || pools.measured[j] == 0 || !on_grid(v)) {
      continue;
    }
    std::optional<std::size_t>* slot = nullptr;
    if (v.batch == w.batch && v.context_len != w.context_len) {
      slot = &near[v.context_len < w.context_len ? 0 : 1];
    } else if (v.context_len == w.context_len && v.batch != w.batch) {
      slot = &near[v.batch < w.batch ? 2 : 3];
    }
    if (slot != nullptr && (!*slot || gap(j) < gap(**slot))) {
      *slot = j;
    }
  }
  for (const auto& n : near) {
    if (n) {
      out.push_back(*n);
    }
  }
  return out;
}

// The first point of a group: every configuration. One farther than kRaceReach from every
// measured point of it: every configuration but the hopeless ones. Elsewhere: the configurations
// that survived (contenders()) at the nearest measured point of the group, every configuration of
// a family none survived in there, and the fastest of each family at its measured neighbours.
std::vector<KernelConfig>
AdaptiveSearch::candidates(std::size_t i, const Pools& pools, const SearchObservations& obs,
                           std::string& why,
                           std::map<std::string, std::string>& neighbour_why) const {
  const std::vector<KernelConfig>& all = points_[i].configs;
  // The nearest measured point of the group: by lengths, then batch, then plan order.
  const auto batch_gap = [&](std::size_t j) {
    return std::fabs(std::log2(double(points_[i].workload.batch)) -
                     std::log2(double(points_[j].workload.batch)));
  };
  std::optional<std::size_t> nearest;
  for (const std::size_t j : pool_members_[pool_of_[i]]) {
    if (j == i || pools.measured[j] == 0) {
      continue;
    }
    if (!nearest || distance(i, j) < distance(i, *nearest) ||
        (distance(i, j) == distance(i, *nearest) && batch_gap(j) < batch_gap(*nearest))) {
      nearest = j;
    }
  }
  if (!nearest) {
    why = "the first point of its group: every configuration";
    return all;
  }
  if (distance(i, *nearest) > kRaceReach) {
    std::vector<KernelConfig> out;
    for (const KernelConfig& c : all) {
      if (!hopeless(i, c, obs)) {
        out.push_back(c);
      }
    }
    why = "no measured point of its group within " + std::to_string(int(kRaceReach)) +
          " doublings: every configuration";
    if (out.size() < all.size()) {
      why += " but the " + std::to_string(all.size() - out.size()) + " that lost by more than " +
             std::to_string(int(kHopelessMargin * 100)) +
             "% wherever its group timed them, on both sides of it";
    }
    return out;
  }
  const std::set<std::string> pooled(pools.contenders[*nearest].begin(),
                                     pools.contenders[*nearest].end());
  std::vector<KernelConfig> out;
  std::set<Family> families;
  for (const KernelConfig& c : all) {
    if (pooled.count(c.key())) {
      out.push_back(c);
      families.insert(c.family);
    }
  }
  why = "the configurations that survived at " + keys_[*nearest];
  bool added = false;
  for (const KernelConfig& c : all) {
    if (!families.count(c.family)) {
      out.push_back(c);
      added = true;
    }
  }
  if (added) {
    why += ", and every configuration of a family with no survivor there";
  }
  // A configuration that won its family at a neighbour is worth a timing here, unless it has one
  // here already (a race it lost is an answer): on a 2-core Zen 5, v2's best partition changed at
  // every grid step from 512 to 2048 tokens, and between batches 4 and 16 at 512 tokens
  // (docs/adaptive-search.md).
  for (const std::size_t j : neighbours(i, pools)) {
    for (const Family f : {Family::decode_v1, Family::decode_v2, Family::prefill}) {
      const KernelConfig* w = best_of(j, f, obs);
      if (w == nullptr) {
        continue;
      }
      for (const KernelConfig& c : all) {
        if (c == *w && seen(i, c, obs) == nullptr &&
            std::none_of(out.begin(), out.end(), [&](const KernelConfig& o) { return o == c; })) {
          out.push_back(c);
          neighbour_why[c.key()] = "the fastest " + std::string(family_name(c.family)) +
                                   " configuration at its measured neighbour " + keys_[j];
        }
      }
    }
  }
  return out;
}

std::vector<SearchRun> AdaptiveSearch::runs_at(std::size_t i, const SearchObservations& obs) const {
  return runs_with(i, obs, pools(obs));
}

std::vector<SearchRun> AdaptiveSearch::runs_with(std::size_t i, const SearchObservations& obs,
                                                 const Pools& pools) const {
  std::string why;
  std::map<std::string, std::string> neighbour_why;
  const std::vector<KernelConfig> cands = candidates(i, pools, obs, why, neighbour_why);
  const auto why_of = [&](const KernelConfig& c) {
    const auto it = neighbour_why.find(c.key());
    return it != neighbour_why.end() ? it->second : why;
  };
  std::vector<SearchRun> runs;
  if (int(cands.size()) <= kDirectCandidates) {
    // A point that raced before (its candidates have changed since: a nearer point measured, a
    // neighbour's fastest) times in full what it never timed, and what its race left in front.
    bool raced = false;
    for (const KernelConfig& c : points_[i].configs) {
      const SearchObservation* o = seen(i, c, obs);
      raced = raced || (o != nullptr && o->stage == SearchStage::race);
    }
    for (const KernelConfig& c : cands) {
      if (seen(i, c, obs) == nullptr) {
        runs.push_back(
            {c, SearchStage::full,
             why_of(c) + (raced ? ", in full" : ", in full (few enough to skip a race)")});
      }
    }
    // Then what the race left in front, by every timing the point has, is timed in full whether
    // or not it is a candidate still: a configuration added as a neighbour's fastest is one only
    // until it has a timing here, so a race it won would otherwise leave its family without a
    // full timing at the point, and the table chooses from full timings only.
    if (raced && runs.empty()) {
      for (const KernelConfig& c : contenders(i, obs)) {
        const SearchObservation* o = seen(i, c, obs);
        if (o != nullptr && o->ok() && o->stage == SearchStage::race) {
          runs.push_back({c, SearchStage::full, why_of(c) + ": a contender after its race"});
        }
      }
    }
    return runs;
  }
  for (const KernelConfig& c : cands) {
    if (seen(i, c, obs) == nullptr) {
      runs.push_back({c, SearchStage::race, why_of(c) + ": a race"});
    }
  }
  if (!runs.empty()) {
    return runs;
  }
  for (const KernelConfig& c : contenders(i, obs)) {
    if (seen(i, c, obs)->stage == SearchStage::race) {
      runs.push_back({c, SearchStage::full, why + ": a contender after the race"});
    }
  }
  return runs;
}

const KernelConfig* AdaptiveSearch::best_of(std::size_t i, Family f,
                                            const SearchObservations& obs) const {
  const KernelConfig* best = nullptr;
  double best_s = kInf;
  for (const KernelConfig& c : points_[i].configs) {
    const SearchObservation* o = seen(i, c, obs);
    if (c.family == f && o != nullptr && o->ok() && o->stage == SearchStage::full &&
        o->median_s < best_s) {
      best = &c;
      best_s = o->median_s;
    }
  }
  return best;
}

ContextTiming AdaptiveSearch::timing_at(std::size_t i, const SearchObservations& obs) const {
  ContextTiming t;
  t.context_len = points_[i].workload.context_len;
  for (const KernelConfig& c : points_[i].configs) {
    const SearchObservation* o = seen(i, c, obs);
    if (o == nullptr || !o->ok() || o->stage != SearchStage::full) {
      continue;
    }
    double& best = c.family == Family::decode_v1 ? t.v1_s : t.v2_s;
    double& iqr = c.family == Family::decode_v1 ? t.v1_iqr_s : t.v2_iqr_s;
    if (o->median_s < best) {
      best = o->median_s;
      iqr = std::max(0.0, o->p75_s - o->p25_s);
    }
  }
  return t;
}

AdaptiveSearch::Winner AdaptiveSearch::winner(std::size_t i, const SearchObservations& obs) const {
  const Comparison cmp = compare(timing_at(i, obs));
  if (!cmp.measured) {
    return Winner::none;
  }
  if (cmp.within_noise) {
    return Winner::tie;
  }
  return cmp.v2_faster ? Winner::v2 : Winner::v1;
}

std::vector<std::pair<std::size_t, std::string>>
AdaptiveSearch::wanted(const std::vector<Shape>& group, std::size_t s,
                       const SearchObservations& obs, const Pools& pools, bool& complete) const {
  const std::vector<std::size_t>& axis = group[s].by_context;
  const int n = int(axis.size());
  const auto ctx = [&](int k) { return points_[axis[k]].workload.context_len; };
  const auto done = [&](int k) { return runs_with(axis[k], obs, pools).empty(); };
  const auto word = [](Winner w) {
    return w == Winner::v1 ? "v1" : w == Winner::v2 ? "v2" : w == Winner::tie ? "a tie" : "none";
  };
  std::map<int, std::string> want; // axis index -> why
  // Which family wins below the shortest length wanted and above the longest, as far as anything
  // says: the previous batch's winners at its shortest and longest measured lengths, else v1
  // below and v2 above (v1's one pass wins short contexts, v2's partitions long ones, on most
  // devices). The other order is real (v2 at short contexts, where partitions fill the SMs, v1
  // at long ones): a search that took v1 below for granted carried a batch's v1 to the short end
  // where v2 won by 2.2x (an outside audit's plugin, 2026-12-06).
  Winner below = Winner::v1;
  Winner above = Winner::v2;
  // Reuse: the lengths where the previous batch switched winner (each switch it had: one
  // search that took the first alone missed a v1 island between two v2 stretches), when both
  // of a switch's lengths are on this axis.
  if (s > 0) {
    const std::vector<std::size_t>& prev = group[s - 1].by_context;
    std::vector<std::size_t> seen_prev;
    for (std::size_t j : prev) {
      if (pools.measured[j] != 0) {
        seen_prev.push_back(j);
      }
    }
    if (!seen_prev.empty()) {
      const Winner first = winner(seen_prev.front(), obs);
      const Winner last = winner(seen_prev.back(), obs);
      below = first == Winner::v1 || first == Winner::v2 ? first : below;
      above = last == Winner::v1 || last == Winner::v2 ? last : above;
    }
    for (std::size_t k = 0; k + 1 < seen_prev.size(); ++k) {
      const Winner a = winner(seen_prev[k], obs);
      const Winner b = winner(seen_prev[k + 1], obs);
      if (a == b || a == Winner::none || b == Winner::none) {
        continue;
      }
      const int lo = points_[seen_prev[k]].workload.context_len;
      const int hi = points_[seen_prev[k + 1]].workload.context_len;
      std::map<int, std::string> pair;
      for (int q = 0; q < n; ++q) {
        if (ctx(q) == lo || ctx(q) == hi) {
          pair[q] = "batch " + std::to_string(group[s - 1].batch) + " switched from " + word(a) +
                    " to " + word(b) + " between " + ctx_words(lo) + " and " + ctx_words(hi);
        }
      }
      if (pair.size() == 2) { // else this axis lacks one of those lengths
        want.insert(pair.begin(), pair.end());
      }
    }
    // Past the switch, the previous batch's best configuration may have changed along its axis
    // (on a 2-core Zen 5, v2's best partition went from 256 keys at 512 to 1024 keys from 2048
    // on): an end of the axis where the previous batch's best differs from its best at the
    // nearer switch length is measured too, and the rules below look between.
    if (!want.empty() && !seen_prev.empty()) {
      const auto best_key = [&](std::size_t j) {
        const Winner w = winner(j, obs);
        const KernelConfig* c =
            w == Winner::v1 || w == Winner::v2
                ? best_of(j, w == Winner::v1 ? Family::decode_v1 : Family::decode_v2, obs)
                : nullptr;
        return c != nullptr ? c->key() : std::string();
      };
      // The previous batch's best at its measured length `length` ("" where it has none).
      const auto best_at = [&](int length) {
        for (std::size_t j : seen_prev) {
          if (points_[j].workload.context_len == length) {
            return best_key(j);
          }
        }
        return std::string();
      };
      // Axis end `end` is wanted when the previous batch's best there differs from its best at
      // the switch length `near`.
      const auto end_differs = [&](int end, int near) {
        const std::string there = best_at(ctx(end));
        return !there.empty() && there != best_at(ctx(near));
      };
      const int lo_k = want.begin()->first;
      const int hi_k = want.rbegin()->first;
      if (hi_k < n - 1 && end_differs(n - 1, hi_k)) {
        want[n - 1] = "batch " + std::to_string(group[s - 1].batch) + "'s best configuration at " +
                      ctx_words(ctx(n - 1)) + " is not its best at " + ctx_words(ctx(hi_k));
      }
      if (lo_k > 0 && end_differs(0, lo_k)) {
        want[0] = "batch " + std::to_string(group[s - 1].batch) + "'s best configuration at " +
                  ctx_words(ctx(0)) + " is not its best at " + ctx_words(ctx(lo_k));
      }
    }
  }
  if (want.empty()) {
    want[0] = "an end of the context axis";
    want[n - 1] = "an end of the context axis";
  }
  for (;;) {
    // Longest first: a shape's first point is its long end, where the kernels do the most work
    // per launch and a race ranks them with the least noise.
    std::vector<std::pair<std::size_t, std::string>> due;
    for (auto it = want.rbegin(); it != want.rend(); ++it) {
      if (!done(it->first)) {
        due.emplace_back(axis[it->first], it->second);
      }
    }
    if (!due.empty()) {
      complete = false;
      return due;
    }
    std::map<int, std::string> more;
    const std::vector<int> ks = [&] {
      std::vector<int> v;
      for (const auto& [k, why] : want) {
        v.push_back(k);
      }
      return v;
    }();
    // The decisions the table would make from what is measured now (ties carry, as there).
    std::vector<ContextTiming> timings;
    for (const int k : ks) {
      timings.push_back(timing_at(axis[k], obs));
    }
    const Crossover cross = find_crossover(timings);
    for (std::size_t m = 0; m + 1 < ks.size(); ++m) {
      const int a = ks[m];
      const int b = ks[m + 1];
      const Winner wa = winner(axis[a], obs);
      const Winner wb = winner(axis[b], obs);
      // Settled when the medians at both ends favour the family the table carries across them
      // (a win beyond noise, or a tie leaning that way): any switch between them would have
      // to switch back unseen. A win for the other family, or a tie leaning to it, may mark a
      // switch (or one the noise hides) between them.
      const Comparison& ka = cross.comparisons[m];
      const Comparison& kb = cross.comparisons[m + 1];
      const bool carried = cross.uses_v2(ctx(a));
      const bool settled = ka.both && kb.both && ka.v2_faster == carried && kb.v2_faster == carried;
      if (b > a + 1 && !settled) {
        more[(a + b) / 2] = "bisection: " + ctx_words(ctx(a)) + " had " + word(wa) + ", " +
                            ctx_words(ctx(b)) + " " + word(wb);
      } else if (b - a > kAgreeSpan && wa != Winner::tie) {
        more[(a + b) / 2] = ctx_words(ctx(a)) + " and " + ctx_words(ctx(b)) + " agree (" +
                            word(wa) + "), but " + std::to_string(b - a) +
                            " grid steps apart: a look between them";
      } else if (b > a + 1) {
        // The lengths between take the configuration of the nearer end: when each end's best
        // configuration of the family carried across was not even timed at the other, the
        // configurations changed somewhere between, and the middle tells where.
        const Family f = cross.uses_v2(ctx(a)) ? Family::decode_v2 : Family::decode_v1;
        const KernelConfig* ca = best_of(axis[a], f, obs);
        const KernelConfig* cb = best_of(axis[b], f, obs);
        const auto timed_at = [&](int k, const KernelConfig* c) {
          const SearchObservation* o = seen(axis[k], *c, obs);
          return o != nullptr && o->ok() && o->stage == SearchStage::full;
        };
        // Whether at k configuration `w` beats `l` beyond the race margin and both noises.
        const auto beats = [&](int k, const KernelConfig* w, const KernelConfig* l) {
          const SearchObservation* ow = seen(axis[k], *w, obs);
          const SearchObservation* ol = seen(axis[k], *l, obs);
          return ow != nullptr && ol != nullptr && ow->ok() && ol->ok() &&
                 slower_beyond(*ol, *ow, kRaceMargin);
        };
        if (ca != nullptr && cb != nullptr && ca->key() != cb->key()) {
          if (!timed_at(b, ca) || !timed_at(a, cb)) {
            const bool at_b = !timed_at(b, ca);
            const KernelConfig* c = at_b ? ca : cb;
            more[(a + b) / 2] = "the best " + std::string(family_name(f)) + " configuration at " +
                                ctx_words(ctx(at_b ? a : b)) + " (" + c->key() +
                                ") was not timed in full at " + ctx_words(ctx(at_b ? b : a)) +
                                ": a look between them";
          } else if (beats(a, ca, cb) && beats(b, cb, ca)) {
            more[(a + b) / 2] = "the best " + std::string(family_name(f)) + " configuration at " +
                                ctx_words(ctx(a)) + " (" + ca->key() + ") loses beyond noise at " +
                                ctx_words(ctx(b)) + " to " + cb->key() +
                                ": they cross between them";
          }
        }
      }
    }
    if (ks.front() > 0 && winner(axis[ks.front()], obs) != below) {
      more[0] = ctx_words(ctx(ks.front())) + " had " + word(winner(axis[ks.front()], obs)) +
                ", not " + word(below) + ": a switch may lie below it";
    }
    if (ks.back() < n - 1 && winner(axis[ks.back()], obs) != above) {
      more[n - 1] = ctx_words(ctx(ks.back())) + " had " + word(winner(axis[ks.back()], obs)) +
                    ", not " + word(above) + ": a switch may lie above it";
    }
    bool added = false;
    for (auto& [k, why] : more) {
      added = want.try_emplace(k, std::move(why)).second || added;
    }
    if (!added) {
      complete = true;
      return {};
    }
  }
}

std::optional<AdaptiveSearch::Due> AdaptiveSearch::next_point(const SearchObservations& obs) const {
  const Pools p = pools(obs);
  for (const Scope& sc : scopes_) {
    for (const std::vector<Shape>& group : sc.groups) {
      for (std::size_t s = 0; s < group.size(); ++s) {
        bool complete = false;
        auto due = wanted(group, s, obs, p, complete);
        if (!due.empty()) {
          return Due{due.front().first, std::move(due.front().second)};
        }
      }
    }
    for (std::size_t i : sc.others) {
      if (!runs_with(i, obs, p).empty()) {
        const Workload& w = points_[i].workload;
        return Due{i, w.phase == Phase::prefill
                          ? (w.held_out ? "a held-out prefill workload" : "a prefill workload")
                      : w.held_out ? "a held-out point"
                                   : "a batch given sequence by sequence"};
      }
    }
  }
  return std::nullopt;
}

std::vector<json> replay_search(const AdaptiveSearch& search,
                                const std::map<std::string, json>& measured) {
  std::vector<json> lines;
  SearchObservations obs;
  std::size_t guard = 0;
  while (const auto due = search.next_point(obs)) {
    const std::size_t i = due->index;
    for (;;) {
      const std::vector<SearchRun> runs = search.runs_at(i, obs);
      if (runs.empty()) {
        break;
      }
      for (const SearchRun& r : runs) {
        const Workload& w = search.point(i).workload;
        const std::string key = record_key(w.key(), r.config.key());
        json line;
        if (const auto it = measured.find(key); it != measured.end()) {
          line = it->second;
        } else {
          line = {{"type", "measurement"},
                  {"workload_key", w.key()},
                  {"config_key", r.config.key()},
                  {"workload", w.to_json()},
                  {"config", r.config.to_json()},
                  {"status", "error"},
                  {"reason", "not in the measurements replayed"}};
        }
        line["search"] = {{"stage", search_stage_name(r.stage)}, {"why", due->why + "; " + r.why}};
        if (const std::vector<int> grid = search.shape_grid(i); !grid.empty()) {
          line["search"]["grid"] = grid;
        }
        observe(obs, line);
        lines.push_back(std::move(line));
        if (++guard > 64 * (search.size() + 1) * 64) {
          throw std::logic_error("the adaptive search did not settle");
        }
      }
    }
  }
  return lines;
}

} // namespace attn
